"""The ``record`` action (docs/reference.md, "record"; docs/behaviour.md, "record").

States
------
``BEEP``     the start beep is playing (``beep_on_start``)
``LISTEN``   waiting for the first audio; nothing is written yet
``CAPTURE``  writing the caller's audio to the file
``DONE``     ``outcome`` is set

=========  =======================================  ===============================
state      event                                    what happens
=========  =======================================  ===============================
BEEP       beep finished                            -> LISTEN
LISTEN     sound starts (or was already there)      recording starts -> CAPTURE
LISTEN     initial silence expires                  reason ``silence``, no sound
CAPTURE    sound stops                              silence timer starts
CAPTURE    sound starts again                       silence timer cancelled
CAPTURE    silence timer expires                    reason ``silence``
CAPTURE    seconds_max_duration reached             reason ``duration``
any        a digit of barge_in_digits               reason ``bargein`` + the digit
any        recorder reports an error / size limit   reason ``error`` / ``filesize``
any        caller hangs up                          reason ``hangup``
any        runner aborts the action                 reason ``aborted``
=========  =======================================  ===============================

The initial silence is ``milliseconds_max_initial_silence`` measured from the
end of the beep, or ``milliseconds_max_silence`` when it is 0. Every reason
completes the action: ``next_page`` is requested with the result, even after
a hang-up (the application needs the file name of what was captured). Other
digits are ignored.

*callhook*: the file begins :data:`PREROLL` seconds before the sound was first
detected (so the first syllable is kept) and ends when the recording stops,
trailing silence included: nothing the caller sent is thrown away.
``seconds_duration`` is that span, to one decimal; ``contains_sound`` is
whether sound was detected while recording. A recording that never started
(initial silence, or a barge-in digit before any sound) still produces a
valid, empty WAV file, so ``filename`` always names a file.
"""

from __future__ import annotations

import enum

from callhook.actions.machine import (
    ActionContext,
    ActionMachine,
    Completed,
    Prompter,
    StopReason,
    Timer,
    earliest,
)
from callhook.actions.schema import Record
from callhook.events import (
    DetectVoice,
    DigitReceived,
    MediaCommand,
    MediaEvent,
    PlayTone,
    RecorderFailed,
    StartRecording,
    StopRecording,
    VoiceActivity,
)

#: Seconds of audio before the detected start of sound that the file keeps.
PREROLL = 0.3
#: The start beep: 1 kHz for 250 ms.
BEEP = PlayTone(frequency_hz=1000.0, seconds=0.25)


class State(enum.Enum):
    BEEP = "beep"
    LISTEN = "listen"
    CAPTURE = "capture"
    DONE = "done"


class RecordMachine(ActionMachine):
    """Runs one ``record`` action (see the module docstring)."""

    def __init__(self, action: Record, ctx: ActionContext) -> None:
        self.action = action
        self.ctx = ctx
        self.prompter = Prompter(ctx)
        self.filename = ctx.new_recording_name()
        self.state = State.LISTEN
        self.voice = ctx.voice_active
        self.listen_start = 0.0
        self.file_start: float | None = None
        self.silence_since: float | None = None
        self.heard_sound = False

    def start(self, now: float) -> list[MediaCommand]:
        if self.ctx.recording_refused() is not None:
            # Refused before it began (too little free disk: the refusal is logged where
            # it was decided): ended at once, no file, rather than failing mid-call.
            self.outcome = Completed("record", self._result(now, now, "error"))
            self.state = State.DONE
            return []
        # Voice activity from the start: a caller who speaks during the beep is heard.
        commands: list[MediaCommand] = [DetectVoice(True)]
        if self.action.beep_on_start:
            self.state = State.BEEP
            return commands + self.prompter.start(items=(BEEP,))
        return commands + self._listen(now)

    def _listen(self, now: float) -> list[MediaCommand]:
        self.state = State.LISTEN
        self.listen_start = now
        if self.voice:
            return self._capture(now)
        return []

    def _capture(self, now: float, preroll: float | None = None) -> list[MediaCommand]:
        self.state = State.CAPTURE
        if preroll is None:
            preroll = min(PREROLL, now - self.listen_start)
            self.heard_sound = True
        self.file_start = now - preroll
        cipher = self.action.encryption_cipher
        return [
            StartRecording(
                self.filename,
                self.action.format,
                cipher.as_tuple() if cipher else None,
                preroll=preroll,
                max_seconds=self.action.seconds_max_duration,
            )
        ]

    def _limits(self) -> tuple[float, float | None]:
        """(max-duration deadline, silence deadline or None), while capturing."""
        assert self.file_start is not None
        a = self.action
        limit = self.file_start + a.seconds_max_duration
        if self.silence_since is None:
            return limit, None
        return limit, self.silence_since + a.milliseconds_max_silence / 1000

    @property
    def deadline(self) -> float | None:
        return earliest(self.timers())

    def timers(self) -> tuple[Timer, ...]:
        if self.state is State.LISTEN:
            a = self.action
            initial = a.milliseconds_max_initial_silence or a.milliseconds_max_silence
            return (
                Timer("initial silence", self.listen_start, self.listen_start + initial / 1000),
            )
        if self.state is State.CAPTURE:
            assert self.file_start is not None
            limit, silence = self._limits()
            running = [Timer("max duration", self.file_start, limit)]
            if silence is not None and self.silence_since is not None:
                running.append(Timer("silence", self.silence_since, silence))
            return tuple(running)
        return ()

    def on_deadline(self, now: float) -> list[MediaCommand]:
        if self.state is State.LISTEN:
            return self._finish(now, "silence")
        if self.state is State.CAPTURE:
            limit, silence = self._limits()
            # Whichever timer is due first decides the reason.
            by_silence = silence is not None and silence < limit
            return self._finish(now, "silence" if by_silence else "duration")
        return []

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        if self.state is State.DONE:
            return []
        if isinstance(event, VoiceActivity):
            self.voice = event.active
            if self.state is State.LISTEN and event.active:
                return self._capture(now)
            if self.state is State.CAPTURE:
                self.silence_since = None if event.active else now
            return []
        if isinstance(event, DigitReceived):
            if event.digit in self.action.barge_in_digits:
                return self._finish(now, "bargein", event.digit)
            return []
        if isinstance(event, RecorderFailed):
            return self._finish(now, event.reason)
        if self.prompter.finished(event):
            return self._listen(now)
        return []

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        if self.state is State.DONE:
            return []
        return self._finish(now, why)

    def _result(self, now: float, file_start: float, reason: str) -> dict[str, object]:
        return {
            "filename": self.filename,
            "file_available": False,
            "id": self.action.id,
            "contains_sound": self.heard_sound,
            "seconds_duration": round(max(0.0, now - file_start), 1),
            "reason": reason,
        }

    def _finish(self, now: float, reason: str, digit: str | None = None) -> list[MediaCommand]:
        commands = self.prompter.stop()
        if self.file_start is None:
            # Never started: still leave a valid (empty) file behind the name.
            commands += self._capture(now, preroll=0.0)
        assert self.file_start is not None
        commands += [StopRecording(self.filename), DetectVoice(False)]
        result = self._result(now, self.file_start, reason)
        if digit is not None:
            result["barge_in_digit"] = digit
        self.outcome = Completed("record", result)
        self.state = State.DONE
        return commands
