"""``run_menu`` and ``run_speech_menu``: one menu state machine.

Both are Aculab REST API v2 actions (beyond the three input actions): the caller
picks one of ``menu_options`` with a key press (``run_menu``) or by saying an
option's words or pressing its digit (``run_speech_menu``), and the chosen
option's own ``next_page`` is requested. ``run_menu`` is a speech menu with
speech off and another result, so both run on :class:`MenuMachine`,
configured by a :class:`MenuSpec`. Where Aculab's pages are silent the
decision is callhook's, documented in ``docs/behaviour.md``.

States
------
``PROMPT``   the prompt is playing (first, after the help digit or word, after a message)
``WAIT``     waiting for the caller's choice
``MESSAGE``  a timeout or invalid-input message is playing
``DONE``     ``outcome`` is set

Transitions
-----------
========  ===============================  ==========================================
state     event                            what happens
========  ===============================  ==========================================
start     cached digit                     the first is taken as if pressed now (the
                                           rest stay cached for the next action)
start     cached phrase (speech menu)      taken as if heard now
PROMPT    prompt finished                  -> WAIT; the timeout runs from now
PROMPT    digit, prompt barge-in           prompt stops, the digit is judged
PROMPT    phrase, prompt barge-in speech   prompt stops, the phrase is judged
WAIT      an option's digit or words       complete: that option's ``next_page``
WAIT      help digit or help word          the prompt again -> PROMPT
WAIT      any other digit or phrase        next invalid message -> MESSAGE
WAIT      timeout                          next timeout message -> MESSAGE
MESSAGE   message finished                 the prompt again -> PROMPT (WAIT without
                                           one); after the last message: no input
MESSAGE   digit, message barge-in          message stops, the digit is judged
any       hang-up                          no input
========  ===============================  ==========================================

"No input" means the action finishes without requesting a page and the next
action of the list runs, as for ``get_number``. The timeout
(``seconds_digit_timeout`` / ``seconds_timeout``) runs from the end of the
prompt or message, and not while the caller is speaking.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from callhook.actions.fields import menu_words
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
from callhook.actions.menuschema import RunMenu, RunSpeechMenu
from callhook.actions.schema import Play, WebPageRequest
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

# Aculab's default messages for the menus (its version 2 pages give their wording).
RUN_MENU_TIMEOUT_MESSAGES = (
    "Sorry, I did not hear that.",
    "Please listen to the instructions and then use your telephone keypad to enter a valid number.",
)
RUN_MENU_INVALID_MESSAGES = (
    "Sorry, that was not a valid number.",
    "Please listen to the instructions and enter a valid number.",
)
SPEECH_MENU_TIMEOUT_MESSAGES = (
    "Sorry, I did not get anything.",
    "Please listen to the instructions, and then speak clearly or press the relevant digit.",
)
SPEECH_MENU_INVALID_MESSAGES = (
    "Sorry, I did not recognise that.",
    "Please listen to the instructions, and then clearly say the relevant word "
    "or press the relevant digit.",
)

_RUN_MENU_TIMEOUT_MESSAGES = say(*RUN_MENU_TIMEOUT_MESSAGES)
_RUN_MENU_INVALID_MESSAGES = say(*RUN_MENU_INVALID_MESSAGES)
_SPEECH_MENU_TIMEOUT_MESSAGES = say(*SPEECH_MENU_TIMEOUT_MESSAGES)
_SPEECH_MENU_INVALID_MESSAGES = say(*SPEECH_MENU_INVALID_MESSAGES)


@dataclass(frozen=True, slots=True)
class Choice:
    """One menu option: its digit (or None), its words as compared, its page."""

    digit: str | None
    words: tuple[str, ...]
    page: WebPageRequest


@dataclass(frozen=True, slots=True)
class MenuSpec:
    """Everything :class:`MenuMachine` needs, from either action."""

    action: Literal["run_menu", "run_speech_menu"]
    prompt: Play | None
    choices: tuple[Choice, ...]
    help_digit: str
    help_word: str  # as compared ("" none)
    seconds_timeout: float  # 0 or less: no timeout
    speech: RecognitionOptions | None  # None: a digits-only menu
    timeout_messages: tuple[Play, ...]
    invalid_messages: tuple[Play, ...]

    @classmethod
    def for_run_menu(cls, a: RunMenu) -> MenuSpec:
        return cls(
            action="run_menu",
            prompt=a.prompt,
            choices=tuple(Choice(o.digit, (), o.next_page) for o in a.menu_options),
            help_digit=a.help_digit,
            help_word="",
            seconds_timeout=a.seconds_digit_timeout,
            speech=None,
            timeout_messages=messages_or(a.on_digit_timeout_messages, _RUN_MENU_TIMEOUT_MESSAGES),
            invalid_messages=messages_or(a.on_invalid_digit_messages, _RUN_MENU_INVALID_MESSAGES),
        )

    @classmethod
    def for_run_speech_menu(cls, a: RunSpeechMenu) -> MenuSpec:
        choices = tuple(
            Choice(o.digit, tuple(menu_words(w) for w in o.words), o.next_page)
            for o in a.menu_options
        )
        # The options' words (and the help word) are the recogniser's hints: a closed set.
        hints = [w for o in a.menu_options for w in o.words]
        if a.help_word:
            hints.append(a.help_word)
        return cls(
            action="run_speech_menu",
            prompt=a.prompt,
            choices=choices,
            help_digit=a.help_digit,
            help_word=menu_words(a.help_word),
            seconds_timeout=a.seconds_timeout,
            speech=RecognitionOptions(
                language=a.language, word_hints=tuple(hints), max_alternatives=3, mode="auto"
            ),
            timeout_messages=messages_or(
                a.on_input_timeout_messages, _SPEECH_MENU_TIMEOUT_MESSAGES
            ),
            invalid_messages=messages_or(
                a.on_invalid_input_messages, _SPEECH_MENU_INVALID_MESSAGES
            ),
        )


def match(phrase: Phrase, choices: tuple[Choice, ...], help_word: str) -> tuple[Choice | None, str]:
    """What a phrase picks: (the choice, the words that matched), (None, the help word), or
    (None, "") when it matches nothing.

    Alternatives are tried best first; in one alternative an option's words (or the
    help word) must appear as whole words. The longest match wins, so "technical
    support" is not taken for "support"; on a tie, the earlier option.
    """
    for alternative in phrase.alternatives:
        heard = f" {menu_words(alternative.text)} "
        best: tuple[Choice | None, str] | None = None
        candidates: list[tuple[Choice | None, str]] = [(c, w) for c in choices for w in c.words]
        if help_word:
            candidates.append((None, help_word))
        for choice, words in candidates:
            if f" {words} " in heard and (best is None or len(words) > len(best[1])):
                best = (choice, words)
        if best is not None:
            return best
    return None, ""


class MenuMachine(ActionMachine):
    """Runs one ``run_menu`` or ``run_speech_menu`` action (see the module docstring)."""

    def __init__(self, spec: MenuSpec, ctx: ActionContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.state = State.WAIT
        self.prompter = Prompter(ctx, spec.speech.language if spec.speech else None)
        self.recognising = False
        self.speaking = False
        self.wait_start = 0.0
        self.timeouts = 0
        self.invalids = 0
        self.last_message = False

    # --- the machine interface ------------------------------------------------------

    def start(self, now: float) -> list[MediaCommand]:
        buffer = self.ctx.buffer
        if buffer.digits:
            # Type-ahead (Aculab: run_menu inspects digits cached from barge-in): one
            # key press picks an option; the rest wait for the next input action.
            digit, buffer.digits = buffer.digits[0], buffer.digits[1:]
            if self.spec.speech is not None:
                buffer.take_phrases()  # digits take precedence, as in get_input
            self._begin_wait(now)
            commands = self._digit(digit, now)
        elif self.spec.speech is not None and buffer.phrases:
            phrases = buffer.take_phrases()
            self._begin_wait(now)
            commands = self._phrase(phrases[0], now)
        elif self.spec.prompt is not None:
            commands = self._play_prompt()
        else:
            commands = self._enter_wait(now)
        return commands + self._sync_recognition()

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        if self.state is State.DONE:
            return []
        commands: list[MediaCommand] = []
        if self.prompter.finished(event):
            commands = self._prompt_finished(now)
        elif isinstance(event, DigitReceived):
            if self.state is State.WAIT:
                commands = self._digit(event.digit, now)
            elif self.prompter.playing is not None and self.prompter.barge_in_on_digit:
                commands = self.prompter.stop()
                self._begin_wait(now)
                commands += self._digit(event.digit, now)
        elif isinstance(event, SpeechStarted | SpeechRecognised | SpeechRejected):
            commands = self._speech(event, now)
        return commands + self._sync_recognition()

    @property
    def deadline(self) -> float | None:
        return earliest(self.timers())

    def timers(self) -> tuple[Timer, ...]:
        if self.state is not State.WAIT or self.speaking or self.spec.seconds_timeout <= 0:
            return ()
        return (Timer("overall", self.wait_start, self.wait_start + self.spec.seconds_timeout),)

    def on_deadline(self, now: float) -> list[MediaCommand]:
        if self.state is not State.WAIT:
            return []
        self.timeouts += 1
        commands = self._retry(self.spec.timeout_messages, self.timeouts, "timeout")
        return commands + self._sync_recognition()

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        if self.state is State.DONE:
            return []
        return self._finish(Continue(why)) + self._sync_recognition()

    # --- events -----------------------------------------------------------------------

    def _prompt_finished(self, now: float) -> list[MediaCommand]:
        if self.state is State.MESSAGE:
            if self.last_message:
                return self._finish(Continue("no input after the last message"))
            # Aculab's messages say "please listen to the instructions": they come again.
            if self.spec.prompt is not None:
                return self._play_prompt()
        return self._enter_wait(now)

    def _speech(
        self, event: SpeechStarted | SpeechRecognised | SpeechRejected, now: float
    ) -> list[MediaCommand]:
        if not self.recognising:
            return []
        if isinstance(event, SpeechStarted):
            self.speaking = True
            return []
        self.speaking = False
        if isinstance(event, SpeechRejected) and event.unsure is not None:
            # Heard but not understood (under the confidence floor): invalid input, the
            # next invalid message asks again (callhook: docs/behaviour.md).
            stopped = self.prompter.stop() if self.state is State.PROMPT else []
            self.invalids += 1
            return stopped + self._retry(self.spec.invalid_messages, self.invalids, "invalid")
        if isinstance(event, SpeechRejected):
            # A noise, not an answer: the menu keeps waiting, its timeout from the end of
            # the noise (as get_input's initial timeout), not cut short by the noise.
            if self.state is State.WAIT:
                self.wait_start = now
            return []
        commands: list[MediaCommand] = []
        if self.state is State.PROMPT:
            commands += self.prompter.stop()  # speech barges in on the prompt
        self._begin_wait(now)
        return commands + self._phrase(event.phrase, now)

    # --- steps ------------------------------------------------------------------------

    def _digit(self, digit: str, now: float) -> list[MediaCommand]:
        for choice in self.spec.choices:
            if choice.digit == digit:
                if self.spec.action == "run_menu":
                    return self._finish(
                        Completed("run_menu", {"selected_digit": digit}, choice.page)
                    )
                result = {"input_type": "digits", "selected_input": digit}
                return self._finish(Completed("run_speech_menu", result, choice.page))
        if self.spec.help_digit and digit == self.spec.help_digit:
            return self._help(now)
        self.invalids += 1
        return self._retry(self.spec.invalid_messages, self.invalids, "invalid")

    def _phrase(self, phrase: Phrase, now: float) -> list[MediaCommand]:
        picked, words = match(phrase, self.spec.choices, self.spec.help_word)
        if picked is not None:
            result = {
                "input_type": "speech",
                "selected_input": words,
                "speech_input": [phrase.to_json()],
            }
            return self._finish(Completed("run_speech_menu", result, picked.page))
        if words:  # the help word
            return self._help(now)
        self.invalids += 1
        return self._retry(self.spec.invalid_messages, self.invalids, "invalid")

    def _help(self, now: float) -> list[MediaCommand]:
        if self.spec.prompt is not None:
            return self._play_prompt()
        return self._enter_wait(now)  # no prompt to repeat: the timeout starts again

    def _play_prompt(self) -> list[MediaCommand]:
        self.state = State.PROMPT
        self.speaking = False
        return self.prompter.start(self.spec.prompt)

    def _begin_wait(self, now: float) -> None:
        self.state = State.WAIT
        self.wait_start = now

    def _enter_wait(self, now: float) -> list[MediaCommand]:
        self._begin_wait(now)
        return []

    def _retry(self, messages: tuple[Play, ...], count: int, kind: str) -> list[MediaCommand]:
        self.speaking = False
        if count > len(messages):
            return self._finish(Continue(f"no input ({kind}, no message left)"))
        self.state = State.MESSAGE
        self.last_message = count == len(messages)
        return self.prompter.start(messages[count - 1])

    def _finish(self, outcome: Outcome) -> list[MediaCommand]:
        self.outcome = outcome
        self.state = State.DONE
        return self.prompter.stop()

    def _sync_recognition(self) -> list[MediaCommand]:
        """Recognise while an answer can count: waiting, or during a prompt that allows it."""
        speech = self.spec.speech
        prompt = self.spec.prompt
        want = speech is not None and (
            self.state is State.WAIT
            or (
                self.state is State.PROMPT
                and self.prompter.playing is not None
                and prompt is not None
                and prompt.barge_in_on_speech
            )
        )
        if want == self.recognising:
            return []
        self.recognising = want
        if want:
            assert speech is not None
            return [StartRecognition(replace(speech, min_confidence=self.ctx.min_confidence))]
        return [StopRecognition()]
