"""The per-call log: one line per page request and response, action start and end, error.

Each call (each application instance) gets a text file in its application's
media file namespace, named in the page requests' ``log_filename``. A line is

    2026-11-21T10:15:02.114Z +3.260 page_request POST http://app/next (get_number)

wall-clock time (UTC, ms), seconds since the call started on the call's media
time (the clock of its events and of its actions' timers: a line of what an
action does on an event is stamped at the event's time), a kind, and the
details. Lines are flushed as written, so the log survives a crash. A line
the disk refuses (full) is kept in memory, at most :data:`HELD_MAX` of them,
and written before the next line once it can be: the call goes on either way.
The call's start and end and every warning and error also go to the server
log (``logging``, ``callhook.call``, with the application instance id); the
other lines do too at DEBUG (``callhook -v``). Listeners (the terminal phone)
get every line.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from callhook.clock import Clock
from callhook.events import (
    CallCallee,
    CalleeAnswered,
    CalleeEnded,
    CalleeRinging,
    DigitReceived,
    DropCallee,
    FarEndClassified,
    GreetingEnded,
    JoinCallee,
    MediaCommand,
    MediaEvent,
    PlayDigits,
    PlayFile,
    PlayTone,
    PlayUrl,
    PromptFinished,
    PromptNote,
    RecordCall,
    Refer,
    ReferAnswered,
    ReferNotified,
    SayText,
    SpeechRecognised,
    SpeechRejected,
    SpeechStarted,
    SpeechUnavailable,
    StartPrompt,
    StartRecognition,
    StartRecording,
    StopPrompt,
    StopRecognition,
    StopRecording,
    VoiceActivity,
)
from callhook.redact import redact

logger = logging.getLogger("callhook.call")

#: How a call-log line goes to the server log (``callhook.call``): instance id, kind, text.
#: The terminal phone recognises its records by it (devtools/terminal.py).
SERVER_LINE = "[%s] %s %s"

#: The kinds of line the server log shows at INFO (all are in the call's own log).
SERVER_KINDS = frozenset({"call_start", "call_end", "error", "invalid_response", "aborted"})

#: (kind, text) of each line, for whoever wants to watch a call as it runs.
Listener = Callable[[str, str], None]

#: The most lines a call keeps in memory while its log file cannot be written.
HELD_MAX = 2000


def wall_stamp(ns: int) -> str:
    """``ns`` (nanoseconds since the epoch, ``time.time_ns()``) as a line's UTC time,
    down to the millisecond (``2026-11-28T07:46:38.228Z``: ISO 8601, what
    ``datetime.now(UTC).isoformat(timespec="milliseconds")`` says, with ``Z``)."""
    global _stamp
    second, ms = divmod(ns // 1_000_000, 1000)  # rounded down, as datetime.now is
    # A call writes some forty lines: the date and time of day are formatted once a
    # second (one tuple, replaced whole: a reader on another thread sees a pair).
    stamp = _stamp
    if stamp[0] != second:
        stamp = _stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{stamp[1]}.{ms:03d}Z"


_stamp: tuple[int, str] = (-1, "")  # the second last formatted, and its text


class CallLog:
    """Writes one call's log lines to ``path`` (if given), the server log and listeners."""

    def __init__(self, instance_id: str, clock: Clock, path: Path | None = None) -> None:
        self.instance_id = instance_id
        self._clock = clock
        self._start = clock.now()
        self._file: BinaryIO | None = None
        self.path = path
        # Bytes the disk refused (full), written before the next line once it takes them.
        self._held = bytearray()
        self._held_lines = 0
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                # Unbuffered: a write that fails is known at once and never half-repeated.
                self._file = path.open("ab", buffering=0)
            except OSError as exc:
                logger.error("[%s] call log %s cannot be opened: %s", instance_id, path, exc)
        self.listeners: list[Listener] = []
        self.lines: list[str] = []
        #: While set, the media time lines are stamped with (:meth:`acting`).
        self._acting: float | None = None

    def since(self, t: float) -> float:
        """Media time ``t`` as seconds since the call started (the lines' ``+`` column)."""
        return t - self._start

    @contextlib.contextmanager
    def acting(self, at: float) -> Iterator[None]:
        """Stamp the lines written meanwhile at media time ``at``: the time of the event
        (or deadline) the call's action acts on, which the runner may reach later, after
        other calls' media (the lines of a key press, and of the timers it starts, then
        say when it was pressed)."""
        self._acting = at
        try:
            yield
        finally:
            self._acting = None

    def write(self, kind: str, text: str = "", *, level: int = logging.INFO) -> None:
        """Add a line of ``kind`` (page_request, action_start, error, ...) with ``text``
        (a password in a URL is written as ``***``)."""
        text = redact(text)
        if not text.isascii():
            # A caller's text that was not UTF-8 (kept as surrogates by the SIP parser)
            # is written escaped: the line is kept, and the file stays UTF-8.
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        wall = wall_stamp(time.time_ns())
        at = self._clock.now() if self._acting is None else self._acting
        line = f"{wall} +{at - self._start:.3f} {kind} {text}".rstrip()
        self.lines.append(line)
        if self._file is not None:
            self._append((line + "\n").encode())
        # The server log gets the call's start and end, and every warning or error;
        # the rest is in the call's own log file (writing it twice costs CPU at scale).
        if level > logging.INFO or kind in SERVER_KINDS:
            logger.log(level, SERVER_LINE, self.instance_id, kind, text)
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug(SERVER_LINE, self.instance_id, kind, text)
        for listener in self.listeners:
            listener(kind, text)

    def _append(self, data: bytes) -> None:
        assert self._file is not None
        was_held = bool(self._held)
        if self._held_lines < HELD_MAX:
            self._held += data
            self._held_lines += 1
        try:
            while self._held:
                written = self._file.write(self._held) or 0
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                del self._held[:written]
        except OSError as exc:
            if not was_held:  # once per outage, with the cause
                logger.error(
                    "[%s] call log %s cannot be written (%s): lines held until it can",
                    self.instance_id,
                    self.path,
                    exc,
                )
            return
        self._held_lines = 0
        if was_held:
            logger.warning("[%s] call log %s is written again", self.instance_id, self.path)

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                while self._held and (written := self._file.write(self._held) or 0) > 0:
                    del self._held[:written]
            if self._held:
                logger.error(
                    "[%s] call log %s: %d byte(s) could not be written before the call ended",
                    self.instance_id,
                    self.path,
                    len(self._held),
                )
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


# --- what the log says of a call's media events and commands ------------------------------


class Line(NamedTuple):
    """A line the log is to get: its kind, its text, its level for the server log."""

    kind: str
    text: str = ""
    level: int = logging.INFO


def event_line(event: MediaEvent) -> Line | None:
    """The log line (kind, text[, level]) of a media event an action sees, if it has one."""
    if isinstance(event, DigitReceived):
        return Line("digit", event.digit)
    if isinstance(event, SpeechRecognised):
        if event.phrase.typed:
            best = event.phrase.alternatives[0].text if event.phrase.alternatives else ""
            return Line("speech", f"{best!r} (typed)")
        if not event.phrase.alternatives:
            return Line("speech", "''")
        top = event.phrase.alternatives[0]
        return Line("speech", f"{top.text!r} (confidence {top.confidence:.2f})")
    if isinstance(event, VoiceActivity):
        # The voice-activity detector's edges, while an action listens: the picture's spans.
        return Line("voice", "on" if event.active else "off")
    if isinstance(event, PromptFinished):
        return Line("prompt_end", f"#{event.prompt_id}{' (not played)' if event.error else ''}")
    if isinstance(event, SpeechStarted):
        # Voice activity began: an utterance goes to the recogniser when it ends.
        return Line("speech_detected")
    if isinstance(event, SpeechRejected):
        if event.unsure is not None:
            # An answer under [speech] min_confidence: not understood, asked again.
            top = event.unsure.alternatives[0]
            return Line("speech_unsure", f"{top.text!r} (confidence {top.confidence:.2f})")
        if event.cause:
            # The recogniser failed (issue 14): the utterance counts as nothing recognised.
            return Line("speech_failed", event.cause, logging.WARNING)
        return Line("speech_unrecognised", "speech detected, nothing recognised")
    if isinstance(event, SpeechUnavailable):
        return Line("speech_unavailable", event.cause, logging.ERROR)
    if isinstance(event, PromptNote):
        return Line("prompt_note", event.note, logging.WARNING)
    if isinstance(event, CalleeRinging):  # a connect's far legs: both legs in one log
        return Line("callee_ringing", f"#{event.attempt}")
    if isinstance(event, CalleeAnswered):
        return Line("callee_answered", f"#{event.attempt} {event.info.get('call_id', '')}")
    if isinstance(event, CalleeEnded):
        return Line("callee_ended", f"#{event.attempt} {event.cause} ({event.raw_cause})")
    if isinstance(event, ReferAnswered):
        return Line("refer_answered", str(event.status))
    if isinstance(event, ReferNotified):
        return Line("refer_notify", f"{event.status}{' (final)' if event.final else ''}")
    if isinstance(event, FarEndClassified):
        who = "" if event.attempt is None else f"#{event.attempt} "
        text = f"{who}{event.far_end_type} ({event.reason}) at {event.seconds:.2f} s"
        return Line("far_end", text)
    if isinstance(event, GreetingEnded):
        who = "" if event.attempt is None else f"#{event.attempt} "
        beep = ""
        if event.beep_start is not None and event.beep_end is not None:
            tones = "+".join(f"{hz:g}" for hz in event.beep_hz)
            beep = f", beep {event.beep_start:.3f}..{event.beep_end:.3f} s ({tones} Hz)"
        return Line("greeting_end", f"{who}{event.how} at {event.seconds:.2f} s{beep}")
    return None


def command_line(c: MediaCommand, detected: int = 0) -> Line | None:
    """The log line (kind, text) of a command an action gives, if it has one.

    ``detected``: utterances the recognition stream a ``StopRecognition`` ends detected,
    so its line tells a caller who was never heard from one who was not understood.
    """
    if isinstance(c, StartPrompt):
        return Line("prompt_start", f"#{c.prompt_id} {_describe_items(c)}")
    if isinstance(c, StopPrompt):
        return Line("prompt_stop", f"#{c.prompt_id}")
    if isinstance(c, StartRecognition):
        return Line("recognition_start", c.options.language)
    if isinstance(c, StopRecognition):
        if not detected:
            return Line("recognition_stop", "nothing detected (no voice activity while listening)")
        plural = "s" if detected > 1 else ""
        return Line("recognition_stop", f"{detected} utterance{plural} detected")
    if isinstance(c, StartRecording):
        return Line("recording_start", c.filename)
    if isinstance(c, RecordCall):
        return Line("recording_start", f"{c.filename} (the call, {c.mode})")
    if isinstance(c, StopRecording):
        return Line("recording_stop", c.filename)
    if isinstance(c, CallCallee):
        return Line("callee_call", f"#{c.attempt} {c.destination}")
    if isinstance(c, DropCallee):
        return Line("callee_drop", f"#{c.attempt}")
    if isinstance(c, JoinCallee):
        return Line("bridge", f"#{c.attempt}{' (early media)' if c.early else ''}")
    if isinstance(c, Refer):
        return Line("refer", c.destination)
    return None


def _describe_items(command: StartPrompt) -> str:
    parts = []
    for item in command.items:
        if isinstance(item, SayText):
            parts.append("say <private text>" if item.private else f"say {item.text!r}")
        elif isinstance(item, PlayFile):
            parts.append(f"file {item.name}")
        elif isinstance(item, PlayTone):
            also = f" + {item.and_hz:g}" if item.and_hz else ""
            parts.append(f"tone {item.frequency_hz:g}{also} Hz {item.seconds:g} s")
        elif isinstance(item, PlayDigits):
            parts.append(f"digits {item.digits}")
        elif isinstance(item, PlayUrl):
            parts.append(f"file {item.url}")
    return ", ".join(parts)
