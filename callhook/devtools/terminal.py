"""The terminal phone: try an application with no SIP phone (``callhook call``).

Prompts are printed as they play (and take the time they would take to
say); keys typed at the keyboard are key presses; a line ``say <words>`` is
speech: the words are spoken by the default TTS voice and heard by the
speech recogniser through the same path a caller's audio takes (G.711, the
voice-activity detector, the utterance cutter, the recogniser with the
action's word hints), so the application gets what the recogniser made of
them, as on a real call. Without speech engines the typed words are handed
over as they are, marked as typed. ``hangup`` hangs up. Every page request,
response and action is printed as it happens.

On a terminal, digit keys (``0-9 * #``) are sent the moment they are
pressed; any other key starts a command line, ended by Enter (``say ...``,
``hangup``, ``keys ABCD`` for the A-D keys, ``noise 2`` for two seconds of
sound that is not speech). When standard input is not a terminal it is read
line by line: a line of digits presses them, any other line is a command;
the end of input hangs up.

The terminal has no microphone: a recording holds silence for its length
(typed speech counts as sound for the record action's timing).

Each error is printed once: while the keyboard is attached to the call, the call-log
lines the terminal shows are not repeated by the server log on standard error
(:class:`ShownOnTerminal`), and an invalid page's problems are listed once, not again
in the error line that follows them (:func:`log_printer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
import termios
import tty
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TextIO

from callhook.calls.calllog import SERVER_LINE
from callhook.clock import Clock, MonotonicClock
from callhook.edge.speechworkers import SpeechService
from callhook.events import (
    Alternative,
    CallEnded,
    MediaCommand,
    MediaEvent,
    PlayDigits,
    PlayTone,
    PlayUrl,
    PromptItem,
    RecognitionOptions,
    SayText,
    StartPrompt,
    StartRecognition,
    StartRecording,
)
from callhook.media.simulated import PromptTimer, SavedRecordings, SimulatedMedia
from callhook.ports import CallInfo

DIGIT_KEYS = set("0123456789*#")
#: How long typed speech takes to say: 0.4 s a word.
SECONDS_PER_WORD = 0.4

#: How the terminal shows each kind of call-log line (the rest are not shown).
SHOWN = {
    "page_request": "→ {}",
    "page_response": "← {}",
    "action_start": "▶ {}",
    "action_end": "■ {}",
    "digit": "  key {}",
    "speech": "  heard {}",
    "speech_unrecognised": "  ({})",
    "recording_start": "  ● recording {}",
    "recording_stop": "  ○ recording saved: {}",
    "caller_hung_up": "(you hung up) {}",
    "error": "!! {}",
    "invalid_response": "!! {}",
    "call_end": "call over: {}",
}


class ShownOnTerminal(logging.Filter):
    """Keeps the call-log lines the terminal shows (:data:`SHOWN`) out of the server log
    (``callhook.call``, on standard error): the terminal prints them once. Its other
    records (a log file that cannot be written, a crash's traceback) go through."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # A call-log line: calllog.SERVER_LINE, with instance id, kind and text.
        if record.msg != SERVER_LINE or not isinstance(args, tuple) or len(args) != 3:
            return True
        return args[1] not in SHOWN


class TerminalLeg:
    """A call whose caller is the person at the terminal."""

    def __init__(
        self,
        out: TextIO,
        *,
        info: CallInfo,
        timer: PromptTimer,
        save_recording: Callable[[StartRecording, float], float],
        clock: Clock | None = None,
        speech: SpeechService | None = None,
    ) -> None:
        self.info = info
        self.speech = speech
        self._options = RecognitionOptions()  # of the last recognition stream started
        self._tasks: set[asyncio.Task[None]] = set()
        self.out = out
        self.clock = clock or MonotonicClock()
        self.media = SimulatedMedia(timer)
        self._recordings = SavedRecordings(self.media, save_recording)
        self._queue: deque[MediaEvent] = deque()
        self._wake = asyncio.Event()
        self._ended: asyncio.Future[CallEnded] = asyncio.get_running_loop().create_future()
        self.answered = False
        self._t0 = self.clock.now()

    # --- output -----------------------------------------------------------------------

    def say_line(self, text: str) -> None:
        self.out.write(f"[{self.clock.now() - self._t0:6.1f}] {text}\n")
        self.out.flush()

    # --- input from the person ------------------------------------------------------------

    def key(self, digit: str) -> None:
        self.media.press(digit, self.clock.now())
        self._wake.set()

    def command(self, line: str) -> None:
        """Carry out one typed command line."""
        line = line.strip()
        if not line:
            return
        if re.fullmatch(r"[0-9A-D*#]+", line):
            for digit in line:
                self.key(digit)
            return
        verb, _, rest = line.partition(" ")
        verb = verb.lower()
        now = self.clock.now()
        if verb == "say" and rest.strip():
            words = rest.strip()
            if self.speech is not None and self.speech.can_hear:
                task = asyncio.get_running_loop().create_task(self._speak(words))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return
            seconds = SECONDS_PER_WORD * len(words.split())
            self.media.speak((Alternative(words, 1.0),), now, seconds, typed=True)
            self.say_line(f"you say (typed, not recognised): {words!r}")
        elif verb == "keys" and re.fullmatch(r"[0-9A-D*#]+", rest.strip().upper()):
            for digit in rest.strip().upper():
                self.key(digit)
        elif verb == "noise":
            try:
                seconds = float(rest or "1")
            except ValueError:
                seconds = 1.0
            self.media.speak((), now, seconds)
            self.say_line(f"you make {seconds:g} s of noise")
        elif verb in ("hangup", "hang_up", "bye", "quit", "exit"):
            self.hang_up_now()
        else:
            self.say_line(f"? unknown command {line!r}: say <words> | keys <digits> | hangup")
        self._wake.set()

    async def _speak(self, words: str) -> None:
        assert self.speech is not None
        self.say_line(f"you say {words!r} (spoken by the default voice, to the recogniser)")
        try:
            seconds, alternatives = await self.speech.hear(words, self._options)
        except Exception as exc:  # an engine failure must not end the call
            self.say_line(f"!! speech failed: {type(exc).__name__}: {exc}")
            return
        if alternatives:
            best = alternatives[0]
            self.say_line(f"  recognised {best.text!r} (confidence {best.confidence:.2f})")
        else:
            self.say_line("  not recognised")
        self.media.speak(alternatives, self.clock.now(), seconds)
        self._wake.set()

    def hang_up_now(self) -> None:
        if self._ended.done():
            return
        ended = CallEnded("hung_up", "BYE")
        self.media.hang_up(self.clock.now())
        self._ended.set_result(ended)
        self._wake.set()

    # --- the Leg interface ----------------------------------------------------------------

    def send(self, commands: Sequence[MediaCommand]) -> None:
        now = self.clock.now()
        for command in commands:
            self.media.command(command, now)
            self._recordings.command(command, now)
            if isinstance(command, StartRecognition):
                self._options = command.options
            if isinstance(command, StartPrompt):
                for item in command.items:
                    self.say_line(self._describe(item))
        self._wake.set()

    def _describe(self, item: PromptItem) -> str:
        if isinstance(item, PlayDigits):
            return f"  ♪ (sends DTMF {item.digits})"
        if isinstance(item, PlayUrl):
            return f"  ♪ (file {item.url})"
        if isinstance(item, SayText):
            text = "(private text)" if item.private else item.text
            return f"  ♪ {text}"
        if isinstance(item, PlayTone):
            return f"  ♪ (beep {item.frequency_hz:g} Hz)"
        try:
            seconds = f", {self.media.timer.seconds(item):.1f} s"
        except (FileNotFoundError, ValueError):
            seconds = ", missing"
        return f"  ♪ (file {item.name}{seconds})"

    def now(self) -> float:
        return self.clock.now()

    def media_time(self) -> float:
        return self.clock.now()

    async def next_event(self, deadline: float | None) -> tuple[MediaEvent | None, float]:
        while not self._queue:
            now = self.clock.now()
            self._queue.extend(self.media.pop_due(now))
            if self._queue:
                break
            if deadline is not None and now >= deadline:
                return None, deadline
            wake = [t for t in (self.media.next_time(), deadline) if t is not None]
            timeout = max(0.0, min(wake) - now) if wake else None
            self._wake.clear()
            # asyncio.timeout, not wait_for (which, in Python 3.11, can swallow a cancellation).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        return self._queue.popleft(), self.clock.now()

    def take_pending(self) -> list[MediaEvent]:
        self._queue.extend(self.media.pop_due(self.clock.now()))
        events = list(self._queue)
        self._queue.clear()
        return events

    async def answer(self) -> None:
        if not self.answered:
            self.answered = True
            self.say_line("(the call is answered)")

    async def hang_up(self) -> str:
        self.say_line("(callhook hangs up)")
        return "200" if self.answered else "603"

    async def wait_ended(self) -> CallEnded:
        return await asyncio.shield(self._ended)

    def recorded_seconds(self, filename: str) -> float | None:
        return self._recordings.seconds(filename)


class Keyboard:
    """Feeds a :class:`TerminalLeg` from stdin (raw keys on a terminal, lines otherwise)."""

    def __init__(self, leg: TerminalLeg, stream: TextIO | None = None) -> None:
        self.leg = leg
        self.stream = stream or sys.stdin
        self.fd = self.stream.fileno()
        self.is_tty = os.isatty(self.fd)
        self._line = ""
        self._pending = b""

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        """The keyboard feeds the call, and the terminal shows it: the lines it shows are
        kept out of the server log meanwhile (:class:`ShownOnTerminal`)."""
        loop = asyncio.get_running_loop()
        saved = None
        if self.is_tty:
            saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        loop.add_reader(self.fd, self._readable)
        calls = logging.getLogger("callhook.call")
        shown = ShownOnTerminal()
        calls.addFilter(shown)
        try:
            yield
        finally:
            calls.removeFilter(shown)
            loop.remove_reader(self.fd)
            if saved is not None:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 4096)
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.fd)
            if self._line.strip():
                self.leg.command(self._line)
            self.leg.say_line("(end of input: hanging up)")
            self.leg.hang_up_now()
            return
        text = (self._pending + data).decode("utf-8", "replace")
        self._pending = b""
        if self.is_tty:
            self._keys(text)
        else:
            self._line += text
            *lines, self._line = self._line.split("\n")
            for line in lines:
                self.leg.command(line)

    def _keys(self, text: str) -> None:
        out = self.leg.out
        for ch in text:
            if not self._line and ch in DIGIT_KEYS:
                self.leg.key(ch)  # shown by the call log as "key <digit>"
            elif ch in ("\n", "\r"):
                out.write("\n")
                line, self._line = self._line, ""
                self.leg.command(line)
            elif ch in ("\x7f", "\b"):
                if self._line:
                    self._line = self._line[:-1]
                    out.write("\b \b")
            elif ch == "\x04":  # Ctrl-D
                self.leg.hang_up_now()
            elif ch.isprintable():
                self._line += ch
                out.write(ch)
            out.flush()


def log_printer(leg: TerminalLeg) -> Callable[[str, str], None]:
    """A call-log listener that shows the call's progress on the terminal.

    An invalid page's answer is logged as a line per problem (``invalid_response``), then
    as the error they make (``error invalid: URL: every problem``): the problems are
    shown once, and the error says that they were the page's."""
    listed: set[str] = set()  # pages whose problems were just shown

    def show(kind: str, text: str) -> None:
        if kind == "invalid_response":
            listed.add(text.partition(": ")[0])
        elif kind == "error" and text.startswith("invalid: "):
            url = text.removeprefix("invalid: ").partition(": ")[0]
            if url in listed:
                listed.discard(url)
                leg.say_line(f"!! the page {url} answered no valid action list (above)")
                return
        if kind in SHOWN:
            leg.say_line(SHOWN[kind].format(text))
        elif kind == "recognition_start":
            leg.say_line("  (listening for speech: type  say <words>)")

    return show
