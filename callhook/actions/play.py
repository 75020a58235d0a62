"""The ``play`` action and ``sleep``.

``play`` (docs/reference.md, "play"; docs/behaviour.md):

========================  ===================================================
event                     what happens
========================  ===================================================
prompt finished           the action is over
digit, barge-in on digit  prompt stops, the digit is cached, the action is over
digit, no barge-in        ignored (the input buffer is left as it was)
phrase, barge-in speech   prompt stops, the phrase is cached, the action is over
hang-up                   prompt stops, the action is over
========================  ===================================================

With ``barge_in_on_speech_options.barge_in_phrases`` only a phrase containing
one of those phrases barges in. ``sleep`` waits its seconds and ignores input.
"""

from __future__ import annotations

from callhook.actions.fields import menu_words
from callhook.actions.machine import (
    ActionContext,
    ActionMachine,
    Continue,
    Prompter,
    StopReason,
    Timer,
    earliest,
)
from callhook.actions.schema import Play, Sleep
from callhook.events import (
    DigitReceived,
    MediaCommand,
    MediaEvent,
    Phrase,
    RecognitionOptions,
    SpeechRecognised,
    StartRecognition,
    StopRecognition,
)


def phrase_matches(phrase: Phrase, wanted: list[str]) -> bool:
    """Whether any alternative of ``phrase`` contains one of ``wanted`` (as whole words)."""
    if not wanted:
        return True
    texts = [f" {menu_words(a.text)} " for a in phrase.alternatives]
    return any(f" {menu_words(w)} " in t for w in wanted for t in texts)


class PlayMachine(ActionMachine):
    """Runs one ``play`` action."""

    def __init__(self, action: Play, ctx: ActionContext) -> None:
        self.action = action
        self.ctx = ctx
        options = action.barge_in_on_speech_options
        self.prompter = Prompter(ctx, options.language if options else None)
        self.recognising = False

    def start(self, now: float) -> list[MediaCommand]:
        commands: list[MediaCommand] = []
        if self.action.barge_in_on_speech:
            options = self.action.barge_in_on_speech_options
            language = options.language if options else "en-US"
            self.recognising = True
            commands.append(StartRecognition(RecognitionOptions(language=language, mode="auto")))
        return commands + self.prompter.start(self.action)

    def _finish(self, reason: str) -> list[MediaCommand]:
        self.outcome = Continue(reason)
        commands = self.prompter.stop()
        if self.recognising:
            self.recognising = False
            commands.append(StopRecognition())
        return commands

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        if self.prompter.finished(event):
            return self._finish("played")
        if isinstance(event, DigitReceived) and self.action.barge_in_on_digit:
            self.ctx.buffer.digits += event.digit
            return self._finish(f"barge-in on digit {event.digit}")
        if isinstance(event, SpeechRecognised) and self.recognising:
            options = self.action.barge_in_on_speech_options
            if phrase_matches(event.phrase, options.barge_in_phrases if options else []):
                self.ctx.buffer.phrases.append(event.phrase)
                return self._finish("barge-in on speech")
        return []

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        return self._finish(why)


class SleepMachine(ActionMachine):
    """Runs one ``sleep`` action."""

    def __init__(self, action: Sleep) -> None:
        self.seconds = action.seconds
        self.since = self.until = 0.0

    def start(self, now: float) -> list[MediaCommand]:
        self.since = now
        self.until = now + self.seconds
        if self.seconds <= 0:
            self.outcome = Continue("slept")
        return []

    @property
    def deadline(self) -> float | None:
        return earliest(self.timers())

    def timers(self) -> tuple[Timer, ...]:
        return () if self.outcome else (Timer("sleep", self.since, self.until),)

    def on_deadline(self, now: float) -> list[MediaCommand]:
        self.outcome = Continue("slept")
        return []

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        return []

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        self.outcome = Continue(why)
        return []
