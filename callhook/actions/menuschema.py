"""Wire models of the menu actions: ``run_menu`` and ``run_speech_menu``, in the shapes of
Aculab REST API version 2's pages (docs/behaviour.md records what those pages leave open)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, model_validator

from callhook.actions.fields import DigitOrEmpty, Language, OneDigit, Opt, Strict, Words, menu_words
from callhook.actions.schema import MessagePlayAction, PlayAction, WebPageRequest

# --- menus (Aculab REST API v2 run_menu, run_speech_menu; docs/behaviour.md) -------------


def _unique_digits(options: list[Any]) -> list[Any]:
    seen: dict[str, int] = {}
    for index, option in enumerate(options):
        if option.digit is None:
            continue
        if option.digit in seen:
            raise ValueError(
                f"digit {option.digit!r} is used by menu_options[{seen[option.digit]}] "
                f"and menu_options[{index}]; each option needs its own digit"
            )
        seen[option.digit] = index
    return options


class MenuOption(Strict):
    """One choice of a ``run_menu``: the digit to press and the page it leads to."""

    digit: OneDigit
    next_page: WebPageRequest


class RunMenu(Strict):
    """The ``run_menu`` action: the caller picks an option with one key press."""

    name: ClassVar[str] = "run_menu"
    menu_options: Annotated[list[MenuOption], Field(min_length=1), AfterValidator(_unique_digits)]
    prompt: Opt[PlayAction] = None
    help_digit: DigitOrEmpty = "*"
    seconds_digit_timeout: Annotated[int, Field(ge=1, le=3600)] = 5
    on_digit_timeout_messages: Opt[list[MessagePlayAction]] = None
    on_invalid_digit_messages: Opt[list[MessagePlayAction]] = None

    @model_validator(mode="after")
    def _help(self) -> RunMenu:
        for index, option in enumerate(self.menu_options):
            if self.help_digit and option.digit == self.help_digit:
                raise ValueError(
                    f"help_digit {self.help_digit!r} is also the digit of menu_options[{index}]"
                )
        return self


class SpeechMenuOption(Strict):
    """One choice of a ``run_speech_menu``: words to say and/or a digit, and its page."""

    words: list[Words] = Field(default_factory=list)
    digit: Opt[OneDigit] = None
    next_page: WebPageRequest

    @model_validator(mode="after")
    def _something(self) -> SpeechMenuOption:
        if not self.words and self.digit is None:
            raise ValueError("an option needs words to say, a digit to press, or both")
        return self


def _unique_words(options: list[SpeechMenuOption]) -> list[SpeechMenuOption]:
    seen: dict[str, int] = {}
    for index, option in enumerate(options):
        for word in option.words:
            key = menu_words(word)
            if key in seen and seen[key] != index:
                raise ValueError(
                    f"{word!r} is a word of menu_options[{seen[key]}] "
                    f"and menu_options[{index}]; each option needs its own words"
                )
            seen[key] = index
    return options


class RunSpeechMenu(Strict):
    """The ``run_speech_menu`` action: the caller says an option's words or presses its digit."""

    name: ClassVar[str] = "run_speech_menu"
    menu_options: Annotated[
        list[SpeechMenuOption],
        Field(min_length=1),
        AfterValidator(_unique_digits),
        AfterValidator(_unique_words),
    ]
    prompt: Opt[PlayAction] = None
    language: Language = "en-US"
    # Engine-specific options; accepted for compatibility and passed to nothing.
    speech_model_options: Opt[dict[str, Any]] = None
    help_digit: DigitOrEmpty = "*"
    help_word: str = "help"
    # 0 or less: no timeout (the menu waits until the caller answers or hangs up).
    seconds_timeout: Annotated[int, Field(le=3600)] = 5
    on_input_timeout_messages: Opt[list[MessagePlayAction]] = None
    on_invalid_input_messages: Opt[list[MessagePlayAction]] = None

    @model_validator(mode="after")
    def _help(self) -> RunSpeechMenu:
        help_word = menu_words(self.help_word)
        if self.help_word and not help_word:
            raise ValueError(
                f"help_word: expected a word or an empty string, got {self.help_word!r}"
            )
        for index, option in enumerate(self.menu_options):
            if self.help_digit and option.digit == self.help_digit:
                raise ValueError(
                    f"help_digit {self.help_digit!r} is also the digit of menu_options[{index}]"
                )
            if help_word and help_word in {menu_words(w) for w in option.words}:
                raise ValueError(
                    f"help_word {self.help_word!r} is also a word of menu_options[{index}]"
                )
        return self
