"""Media for a call that has no audio: the terminal phone and the scripted test caller.

Prompts take the time they would take to play (:class:`PromptTimer`); the
caller is a list of things done at given times (keys, speech, noise,
hanging up). :class:`SimulatedMedia` turns those, and the media commands of
the actions, into exactly the media events a real call produces, in time
order, including the subtle ones: speech is only recognised while the
recognition stream runs, a stopped prompt never reports finishing, a
recording spans from its start (minus pre-roll) to its stop.

Sans-IO: it is told the time; ``next_time()`` says when something happens
next and ``pop_due(now)`` returns the events due by ``now``. The adapter
that owns the clock (virtual in tests, real in the terminal) drives it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from callhook.events import (
    Alternative,
    CallEnded,
    DigitReceived,
    MediaCommand,
    MediaEvent,
    Phrase,
    PlayDigits,
    PlayFile,
    PlayTone,
    PlayUrl,
    PromptFinished,
    PromptItem,
    RecognitionOptions,
    SayText,
    SpeechRecognised,
    SpeechRejected,
    SpeechStarted,
    StartPrompt,
    StartRecognition,
    StartRecording,
    StopPrompt,
    StopRecognition,
    StopRecording,
    VoiceActivity,
)
from callhook.media.dtmfsend import DIGIT_SECONDS

#: Seconds per character of text-to-speech: about 15 characters a second.
SECONDS_PER_CHARACTER = 0.065


class PromptTimer:
    """How long prompt items play. Files not listed take ``default_file_seconds``.

    ``files`` may map a name to None: that file does not exist. Digits take
    their real time (``DIGIT_SECONDS`` each, as on a SIP call). A remote file
    (``PlayUrl``) is timed like a file, listed in ``files`` under its URL; it
    is not fetched here (``file_seconds`` reads the media file store only).
    """

    def __init__(
        self,
        texts: dict[str, float] | None = None,
        files: dict[str, float | None] | None = None,
        default_file_seconds: float = 1.0,
        file_seconds: Callable[[PlayFile], float] | None = None,
    ) -> None:
        self.texts = texts or {}
        self.files = files or {}
        self.default_file_seconds = default_file_seconds
        self.file_seconds = file_seconds

    def seconds(self, item: PromptItem) -> float:
        """The playing time of ``item``; raises FileNotFoundError for a missing file."""
        if isinstance(item, SayText):
            return self.texts.get(item.text, max(0.3, len(item.text) * SECONDS_PER_CHARACTER))
        if isinstance(item, PlayTone):
            return item.seconds
        if isinstance(item, PlayDigits):
            return len(item.digits) * DIGIT_SECONDS
        name = item.url if isinstance(item, PlayUrl) else item.name
        if name in self.files:
            value = self.files[name]
            if value is None:
                raise FileNotFoundError(name)
            return value
        if self.file_seconds is not None and isinstance(item, PlayFile):
            return self.file_seconds(item)
        return self.default_file_seconds


@dataclass
class Utterance:
    """Something the caller says (or a noise, when ``alternatives`` is empty)."""

    alternatives: tuple[Alternative, ...]
    typed: bool = False
    heard: bool = False  # SpeechStarted was reported for it


@dataclass
class Recording:
    """The span of one recording, in media time."""

    filename: str
    start: float
    stop: float | None = None


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    kind: str = field(compare=False)
    data: object = field(compare=False, default=None)


class SimulatedMedia:
    """The media events of a call with a scripted (or typed) caller and timed prompts."""

    def __init__(self, timer: PromptTimer | None = None) -> None:
        self.timer = timer or PromptTimer()
        self._heap: list[_Due] = []
        self._seq = itertools.count()
        self._prompts: set[int] = set()
        self.recognising = False
        self.options = RecognitionOptions()
        self.recordings: dict[str, Recording] = {}
        self.ended = False

    # --- the caller -----------------------------------------------------------------

    def _at(self, at: float, kind: str, data: object = None) -> None:
        heapq.heappush(self._heap, _Due(at, next(self._seq), kind, data))

    def press(self, digit: str, at: float) -> None:
        self._at(at, "digit", digit)

    def speak(
        self,
        alternatives: tuple[Alternative, ...],
        at: float,
        seconds: float,
        typed: bool = False,
    ) -> None:
        """The caller speaks from ``at`` for ``seconds`` (no alternatives: a noise)."""
        utterance = Utterance(alternatives, typed)
        self._at(at, "speech_start", utterance)
        self._at(at + seconds, "speech_end", utterance)

    def hang_up(self, at: float, cause: str = "hung_up", raw_cause: str = "BYE") -> None:
        self._at(at, "hangup", CallEnded(cause, raw_cause))

    def inject(self, event: MediaEvent, at: float) -> None:
        """Deliver ``event`` as it is at ``at`` (faults: a recorder failure, ...)."""
        self._at(at, "event", event)

    # --- commands from the actions ------------------------------------------------------

    def command(self, command: MediaCommand, now: float) -> None:
        if isinstance(command, StartPrompt):
            # Items play in order; a file that cannot be played ends the prompt there.
            seconds, error = 0.0, None
            for item in command.items:
                try:
                    seconds += self.timer.seconds(item)
                except FileNotFoundError as exc:
                    error = f"file not found: {exc}"
                    break
            self._prompts.add(command.prompt_id)
            self._at(now + seconds, "prompt_end", PromptFinished(command.prompt_id, error))
        elif isinstance(command, StopPrompt):
            self._prompts.discard(command.prompt_id)
        elif isinstance(command, StartRecognition):
            self.recognising = True
            self.options = command.options
        elif isinstance(command, StopRecognition):
            self.recognising = False
        elif isinstance(command, StartRecording):
            self.recordings[command.filename] = Recording(command.filename, now - command.preroll)
        elif isinstance(command, StopRecording):
            recording = self.recordings.get(command.filename)
            if recording is not None and recording.stop is None:
                recording.stop = now

    def playing(self, prompt_id: int) -> bool:
        """Whether prompt ``prompt_id`` has started and neither ended nor been stopped."""
        return prompt_id in self._prompts

    # --- events ---------------------------------------------------------------------

    def next_time(self) -> float | None:
        """When the next thing happens, or None if nothing is scheduled."""
        return self._heap[0].at if self._heap else None

    def pop_due(self, now: float) -> list[MediaEvent]:
        """The events of everything scheduled at or before ``now``, in order."""
        events: list[MediaEvent] = []
        while self._heap and self._heap[0].at <= now and not self.ended:
            events += self._happen(heapq.heappop(self._heap))
        return events

    def _happen(self, due: _Due) -> list[MediaEvent]:
        kind = due.kind
        if kind == "digit":
            assert isinstance(due.data, str)
            return [DigitReceived(due.data)]
        if kind == "event":
            assert not isinstance(due.data, (str, Utterance)) and due.data is not None
            return [due.data]  # type: ignore[list-item]
        if kind == "prompt_end":
            assert isinstance(due.data, PromptFinished)
            if due.data.prompt_id in self._prompts:
                self._prompts.discard(due.data.prompt_id)
                return [due.data]
            return []
        if kind == "hangup":
            assert isinstance(due.data, CallEnded)
            self.ended = True
            self._stop_recordings(due.at)
            return [due.data]
        utterance = due.data
        assert isinstance(utterance, Utterance)
        if kind == "speech_start":
            events: list[MediaEvent] = [VoiceActivity(True)]
            if self.recognising:
                utterance.heard = True
                events.append(SpeechStarted())
            return events
        events = [VoiceActivity(False)]
        if self.recognising:
            if not utterance.heard:
                events.append(SpeechStarted())
            phrase = Phrase(utterance.alternatives, typed=utterance.typed)
            if not utterance.typed and self.options.doubts(utterance.alternatives):
                events.append(SpeechRejected(unsure=phrase))  # (as a call's leg does)
            elif utterance.alternatives:
                events.append(SpeechRecognised(phrase))
            else:
                events.append(SpeechRejected())
        return events

    def _stop_recordings(self, now: float) -> None:
        for recording in self.recordings.values():
            if recording.stop is None:
                recording.stop = now


class SavedRecordings:
    """The files of a simulated call's recordings: when one stops, ``save`` (given the
    command that started it and its length in seconds) writes it and says how many seconds
    it wrote. The terminal phone and ``callhook test`` write silence (no microphone)."""

    def __init__(
        self, media: SimulatedMedia, save: Callable[[StartRecording, float], float] | None
    ) -> None:
        self.media = media
        self.save = save
        self._started: dict[str, StartRecording] = {}
        self._saved: dict[str, float] = {}

    def command(self, command: MediaCommand, now: float) -> None:
        """Follow a media command sent to the call (after the media has seen it)."""
        if isinstance(command, StartRecording):
            self._started[command.filename] = command
        elif isinstance(command, StopRecording):
            start = self._started.pop(command.filename, None)
            recording = self.media.recordings.get(command.filename)
            if start is not None and recording is not None and self.save is not None:
                self._saved[command.filename] = self.save(start, now - recording.start)

    def seconds(self, filename: str) -> float | None:
        """The seconds written to a stopped recording (None: not saved)."""
        return self._saved.get(filename)
