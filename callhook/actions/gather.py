"""``get_number`` and ``get_input``: one input state machine.

``get_number`` is ``get_input`` with speech disabled and another result
shape, so both run on :class:`GatherMachine`, configured by a
:class:`GatherSpec`. Every rule below is a row of docs/behaviour.md's "Input between actions"
(or a default of section 2); where the reference is silent the decision is
marked *callhook* and documented in ``docs/behaviour.md``.

States
------
``PROMPT``   the prompt (or, after the help digit, the prompt again) is playing
``WAIT``     waiting for input after the prompt or a retry message ended
``MESSAGE``  a timeout or invalid-input message is playing
``DONE``     ``outcome`` is set

Transitions
-----------
========  ============================  =============================================
state     event                         what happens
========  ============================  =============================================
start     cached digits                 fed as if pressed now; a prompt with barge-in
                                        on digit is then not played
start     cached phrase (no digits)     completes at once with it
PROMPT    prompt finished               -> WAIT; all timers run from now
PROMPT    digit, prompt barge-in        prompt stops, -> WAIT, the digit is handled
PROMPT    digit, no barge-in            ignored
PROMPT    phrase (get_input)            prompt stops, -> WAIT, the phrase is handled
WAIT      valid digit                   appended; complete at digit_count; speech
                                        heard so far is dropped (digits win)
WAIT      end digit                     complete, without the end digit
WAIT      help digit                    digits cleared, prompt again -> PROMPT
WAIT      invalid digit                 next invalid message -> MESSAGE
WAIT      phrase, auto mode             complete with it
WAIT      phrase, timeout mode          kept; complete when inter-speech expires
WAIT      deadline, phrases kept        complete with the phrases
WAIT      deadline, otherwise           next timeout message -> MESSAGE
MESSAGE   message finished              -> WAIT, or after the last one: no input
MESSAGE   digit, message barge-in       message stops, -> WAIT, the digit is handled
any       hang-up                       no input
========  ============================  =============================================

"No input" means the action finishes without requesting ``next_page`` and the
next action of the list runs (only an action that completed requests its next_page:
docs/behaviour.md, "Pages").

Timers (all in WAIT, from ``wait_start``, the end of the prompt or message):
overall ``seconds_timeout`` from ``wait_start`` (0: return at once with what is
there); initial timeout from ``wait_start`` until the first digit or speech;
inter-digit from the last digit; inter-speech from the last phrase. A timer of
0 ms or less is disabled (docs/reference.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Literal

from callhook.actions.machine import (
    ActionContext,
    ActionMachine,
    Completed,
    Continue,
    Outcome,
    Prompter,
    State,
    StopReason,
    Timer,
    earliest,
    messages_or,
    say,
)
from callhook.actions.schema import GetInput, GetNumber, Play
from callhook.events import (
    DigitReceived,
    MediaCommand,
    MediaEvent,
    Phrase,
    RecognitionOptions,
    SpeechRecognised,
    SpeechRejected,
    SpeechStarted,
    StartRecognition,
    StopRecognition,
)

# Default retry messages (Aculab's pages give their gist; the words are callhook's).
GET_NUMBER_TIMEOUT_MESSAGES = (
    "Sorry, I did not hear that.",
    "Please use your telephone keypad to enter a valid number.",
)
GET_NUMBER_INVALID_MESSAGES = (
    "Sorry, that is not a valid number.",
    "Please use your telephone keypad to enter a valid number.",
)
GET_INPUT_TIMEOUT_MESSAGES = (
    "Sorry, I did not hear anything.",
    "Please speak clearly, or use your telephone keypad.",
)
GET_INPUT_INVALID_MESSAGES = (
    "Sorry, that is not valid input.",
    "Please speak clearly, or use your telephone keypad.",
)


_GET_NUMBER_TIMEOUT_MESSAGES = say(*GET_NUMBER_TIMEOUT_MESSAGES)
_GET_NUMBER_INVALID_MESSAGES = say(*GET_NUMBER_INVALID_MESSAGES)
_GET_INPUT_TIMEOUT_MESSAGES = say(*GET_INPUT_TIMEOUT_MESSAGES)
_GET_INPUT_INVALID_MESSAGES = say(*GET_INPUT_INVALID_MESSAGES)


@dataclass(frozen=True, slots=True)
class DigitRules:
    """How keypad entry works: digit_count, end_digit, valid_digits, help_digit."""

    count: int = 0
    end: str = "#"
    valid: str = "0123456789"
    help: str = "*"


class Verdict(enum.Enum):
    ADDED = "added"
    COMPLETE = "complete"
    HELP = "help"
    INVALID = "invalid"


@dataclass(slots=True)
class DigitEntry:
    """The digits of the current attempt, judged one key at a time (docs/reference.md,
    "get_number")."""

    rules: DigitRules
    digits: str = ""

    def feed(self, digit: str) -> Verdict:
        rules = self.rules
        if rules.help and digit == rules.help:
            self.digits = ""
            return Verdict.HELP
        if rules.end and digit == rules.end:
            return Verdict.COMPLETE
        if digit in rules.valid:
            self.digits += digit
            if rules.count and len(self.digits) >= rules.count:
                return Verdict.COMPLETE
            return Verdict.ADDED
        return Verdict.INVALID


@dataclass(frozen=True, slots=True)
class GatherSpec:
    """Everything :class:`GatherMachine` needs, from either action."""

    action: Literal["get_number", "get_input"]
    prompt: Play | None
    digits: DigitRules | None  # None: digit input disabled
    speech: RecognitionOptions | None  # None: speech input disabled
    seconds_timeout: int
    initial_ms: int
    inter_digit_ms: int
    inter_speech_ms: int
    timeout_messages: tuple[Play, ...]
    invalid_messages: tuple[Play, ...]

    @classmethod
    def for_get_number(cls, a: GetNumber) -> GatherSpec:
        return cls(
            action="get_number",
            prompt=a.prompt,
            digits=DigitRules(a.digit_count, a.end_digit, a.valid_digits, a.help_digit),
            speech=None,
            seconds_timeout=a.seconds_timeout,
            initial_ms=a.initial_timeout_ms,
            inter_digit_ms=a.milliseconds_inter_digit_timeout,
            inter_speech_ms=0,
            timeout_messages=messages_or(a.on_digit_timeout_messages, _GET_NUMBER_TIMEOUT_MESSAGES),
            invalid_messages=messages_or(a.on_invalid_digit_messages, _GET_NUMBER_INVALID_MESSAGES),
        )

    @classmethod
    def for_get_input(cls, a: GetInput) -> GatherSpec:
        d = a.digits
        r = a.recognition
        return cls(
            action="get_input",
            prompt=a.prompt,
            digits=(
                DigitRules(d.digit_count, d.end_digit, d.valid_digits, a.help_digit)
                if a.digit_input_enabled
                else None
            ),
            speech=(
                None
                if a.speech_input_mode == "disabled"
                else RecognitionOptions(
                    language=r.language,
                    word_hints=r.hint_words(),
                    max_alternatives=r.max_alternatives,
                    mode=a.speech_input_mode,
                )
            ),
            seconds_timeout=a.seconds_timeout,
            initial_ms=a.milliseconds_initial_timeout,
            inter_digit_ms=a.milliseconds_inter_digit_timeout,
            inter_speech_ms=a.milliseconds_inter_speech_timeout,
            timeout_messages=messages_or(a.on_input_timeout_messages, _GET_INPUT_TIMEOUT_MESSAGES),
            invalid_messages=messages_or(a.on_invalid_input_messages, _GET_INPUT_INVALID_MESSAGES),
        )


class GatherMachine(ActionMachine):
    """Runs one ``get_number`` or ``get_input`` action (see the module docstring)."""

    def __init__(self, spec: GatherSpec, ctx: ActionContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.state = State.WAIT
        self.prompter = Prompter(ctx, spec.speech.language if spec.speech else None)
        self.entry = DigitEntry(spec.digits or DigitRules())
        self.phrases: list[Phrase] = []
        self.speaking = False
        self.recognising = False
        self.wait_start = 0.0
        self.initial_from = 0.0
        self.last_input = 0.0
        self.timeouts = 0
        self.invalids = 0
        self.last_message = False

    # --- the machine interface ------------------------------------------------------

    def start(self, now: float) -> list[MediaCommand]:
        spec, buffer = self.spec, self.ctx.buffer
        commands: list[MediaCommand] = []
        if spec.digits is not None and buffer.digits:
            # Cached digits prefix further digits; digits win over cached speech.
            cached = buffer.take_digits()
            if spec.speech is not None:
                buffer.take_phrases()
            self._begin_wait(now)
            for digit in cached:
                commands += self.handle(DigitReceived(digit), now)
            if self.state is State.WAIT and self.outcome is None:
                prompt = spec.prompt
                if prompt is not None and not prompt.barge_in_on_digit:
                    commands += self._play_prompt()
                else:
                    commands += self._enter_wait(now)
        elif spec.speech is not None and buffer.phrases:
            self.phrases = buffer.take_phrases()
            commands += self._complete_speech()
        elif spec.prompt is not None:
            commands += self._play_prompt()
        else:
            commands += self._enter_wait(now)
        return commands + self._sync_recognition()

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        if self.state is State.DONE:
            return []
        if self.prompter.finished(event):
            commands = self._prompt_finished(now)
        elif isinstance(event, DigitReceived):
            commands = self._digit_event(event.digit, now)
        elif isinstance(event, SpeechStarted | SpeechRecognised | SpeechRejected):
            commands = self._speech_event(event, now)
        else:
            commands = []
        return commands + self._sync_recognition()

    @property
    def deadline(self) -> float | None:
        return earliest(self.timers())

    def timers(self) -> tuple[Timer, ...]:
        if self.state is not State.WAIT:
            return ()
        spec = self.spec
        running = []
        if spec.seconds_timeout > 0:
            running.append(
                Timer("overall", self.wait_start, self.wait_start + spec.seconds_timeout)
            )
        if self.entry.digits:
            if spec.inter_digit_ms > 0:
                expires = self.last_input + spec.inter_digit_ms / 1000
                running.append(Timer("inter-digit", self.last_input, expires))
        elif self.phrases:
            if not self.speaking and spec.inter_speech_ms > 0:
                expires = self.last_input + spec.inter_speech_ms / 1000
                running.append(Timer("inter-speech", self.last_input, expires))
        elif not self.speaking and spec.initial_ms > 0:
            expires = self.initial_from + spec.initial_ms / 1000
            running.append(Timer("initial", self.initial_from, expires))
        return tuple(running)

    def on_deadline(self, now: float) -> list[MediaCommand]:
        if self.state is not State.WAIT:
            return []
        if self.phrases and not self.entry.digits:
            # inter-speech or overall timeout after speech: the speech is the input
            commands = self._complete_speech()
        else:
            self.timeouts += 1
            commands = self._retry(now, self.spec.timeout_messages, self.timeouts, "timeout")
        return commands + self._sync_recognition()

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        if self.state is State.DONE:
            return []
        return self._finish(Continue(why)) + self._sync_recognition()

    # --- events -----------------------------------------------------------------------

    def _prompt_finished(self, now: float) -> list[MediaCommand]:
        if self.state is State.MESSAGE and self.last_message:
            return self._finish(Continue("no input after the last message"))
        return self._enter_wait(now)

    def _digit_event(self, digit: str, now: float) -> list[MediaCommand]:
        if self.spec.digits is None:
            return []
        if self.state is State.WAIT:
            return self._digit(digit, now)
        if self.prompter.playing is not None and self.prompter.barge_in_on_digit:
            commands = self.prompter.stop()
            self._begin_wait(now)
            commands += self._digit(digit, now)
            return commands + self._check_immediate()
        return []  # no barge-in: the prompt or message plays on, the key is ignored

    def _speech_event(
        self, event: SpeechStarted | SpeechRecognised | SpeechRejected, now: float
    ) -> list[MediaCommand]:
        if self.spec.speech is None or self.entry.digits:
            return []  # digit input takes precedence (docs/behaviour.md)
        if self.state not in (State.PROMPT, State.WAIT):
            return []
        if isinstance(event, SpeechStarted):
            self.speaking = True
            return []
        self.speaking = False
        if isinstance(event, SpeechRejected) and event.unsure is not None and not self.phrases:
            # Heard but not understood (under the confidence floor): asked again at once
            # with the next timeout message, as when nothing was recognised (callhook:
            # docs/behaviour.md, "The confidence floor").
            stopped = self.prompter.stop() if self.state is State.PROMPT else []
            self.timeouts += 1
            return stopped + self._retry(
                now, self.spec.timeout_messages, self.timeouts, "not understood"
            )
        if isinstance(event, SpeechRejected):
            if not self.phrases:
                self.initial_from = now  # noise, not speech: wait for speech again
            self.last_input = now
            return []
        commands: list[MediaCommand] = []
        if self.state is State.PROMPT:
            commands += self.prompter.stop()  # speech barges in on the prompt (docs/behaviour.md)
            self._begin_wait(now)
        alternatives = event.phrase.alternatives[: self.spec.speech.max_alternatives]
        self.phrases.append(replace(event.phrase, alternatives=alternatives))
        self.last_input = now
        if self.spec.speech.mode == "auto":
            return commands + self._complete_speech()
        return commands + self._check_immediate()

    # --- steps ------------------------------------------------------------------------

    def _digit(self, digit: str, now: float) -> list[MediaCommand]:
        verdict = self.entry.feed(digit)
        if verdict is Verdict.COMPLETE:
            return self._complete_digits()
        if verdict is Verdict.ADDED:
            self.phrases.clear()
            self.speaking = False
            self.last_input = now
            return []
        self.phrases.clear()
        if verdict is Verdict.HELP:
            if self.spec.prompt is not None:
                return self._play_prompt()
            return self._enter_wait(now)
        self.invalids += 1
        return self._retry(now, self.spec.invalid_messages, self.invalids, "invalid")

    def _play_prompt(self) -> list[MediaCommand]:
        self.state = State.PROMPT
        return self.prompter.start(self.spec.prompt)

    def _begin_wait(self, now: float) -> None:
        # ``speaking`` is kept: a caller who started talking during the prompt is
        # still talking when it ends, and no timer may cut them off.
        self.state = State.WAIT
        self.wait_start = self.initial_from = self.last_input = now

    def _enter_wait(self, now: float) -> list[MediaCommand]:
        self._begin_wait(now)
        return self._check_immediate()

    def _check_immediate(self) -> list[MediaCommand]:
        # seconds_timeout 0: return at once with whatever input is there (docs/reference.md).
        if self.state is not State.WAIT or self.spec.seconds_timeout != 0:
            return []
        if self.entry.digits:
            return self._complete_digits()
        if self.phrases:
            return self._complete_speech()
        return self._finish(Continue("no input (seconds_timeout 0)"))

    def _retry(
        self, now: float, messages: tuple[Play, ...], count: int, kind: str
    ) -> list[MediaCommand]:
        self.entry.digits = ""
        self.phrases.clear()
        self.speaking = False
        if count > len(messages):
            return self._finish(Continue(f"no input ({kind}, no message left)"))
        self.state = State.MESSAGE
        self.last_message = count == len(messages)
        return self.prompter.start(messages[count - 1])

    def _complete_digits(self) -> list[MediaCommand]:
        digits = self.entry.digits
        if self.spec.action == "get_number":
            return self._finish(Completed("get_number", {"entered_number": digits}))
        return self._finish(
            Completed("get_input", {"input_type": "digits", "digits_input": digits})
        )

    def _complete_speech(self) -> list[MediaCommand]:
        speech = [p.to_json() for p in self.phrases]
        return self._finish(
            Completed("get_input", {"input_type": "speech", "speech_input": speech})
        )

    def _finish(self, outcome: Outcome) -> list[MediaCommand]:
        self.outcome = outcome
        self.state = State.DONE
        return self.prompter.stop()

    def _sync_recognition(self) -> list[MediaCommand]:
        """Start or stop the recognition stream so it runs exactly when speech can count."""
        want = (
            self.spec.speech is not None
            and self.state in (State.PROMPT, State.WAIT)
            and not self.entry.digits
        )
        if want == self.recognising:
            return []
        self.recognising = want
        if want:
            assert self.spec.speech is not None
            return [
                StartRecognition(replace(self.spec.speech, min_confidence=self.ctx.min_confidence))
            ]
        return [StopRecognition()]
