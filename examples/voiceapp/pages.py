"""The pages: each takes the parsed page request and returns the page's answer.

State travels in the ``token`` (callhook sends back what the last answer set), so the
application keeps nothing between requests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from callhook import sdk

Page = Callable[[sdk.PageRequest], dict[str, Any]]

#: The PIN the PIN entry accepts, and how many tries a caller gets.
PIN = "1234"
TRIES = 3
DEPARTMENTS = ("sales", "support", "billing")


# --- a PIN entry -------------------------------------------------------------------------


def pin_start(request: sdk.PageRequest) -> dict[str, Any]:
    return _ask_pin("Welcome. Enter your four digit PIN.", tries=0)


def _ask_pin(prompt: str, tries: int) -> dict[str, Any]:
    return sdk.response(
        sdk.get_number("check", prompt=prompt, digit_count=4, seconds_timeout=20),
        sdk.play("I did not get your PIN. Goodbye."),
        sdk.hang_up(),
        token=str(tries),
    )


def pin_check(request: sdk.PageRequest) -> dict[str, Any]:
    tries = int(request.token or "0") + 1
    entered = request.result().entered_number
    if entered == PIN:
        return sdk.response(sdk.play("PIN accepted. Your balance is 42 pounds."), sdk.hang_up())
    if tries >= TRIES:
        return sdk.response(sdk.play("That PIN is not right. Goodbye."), sdk.hang_up())
    return _ask_pin("That PIN is not right. Enter your four digit PIN.", tries)


# --- a speech menu -----------------------------------------------------------------------


def menu_start(request: sdk.PageRequest) -> dict[str, Any]:
    options = [
        sdk.speech_menu_option("choice", words=[name], digit=str(i))
        for i, name in enumerate(DEPARTMENTS, start=1)
    ]
    return sdk.response(
        sdk.run_speech_menu(
            options, prompt="Which department? Say sales, support or billing, or press 1, 2 or 3."
        ),
        sdk.play("Sorry, I could not help. Goodbye."),
        sdk.hang_up(),
    )


def menu_choice(request: sdk.PageRequest) -> dict[str, Any]:
    result = request.result()
    name = (
        result.selected_input
        if result.input_type == "speech"
        else DEPARTMENTS[int(result.selected_input) - 1]
    )
    return sdk.response(sdk.play(f"Connecting you to {name}."), sdk.hang_up())


# --- a voicemail -------------------------------------------------------------------------


def voicemail_start(request: sdk.PageRequest) -> dict[str, Any]:
    return sdk.response(
        sdk.play("Nobody can take your call. Leave a message after the beep."),
        sdk.record("recorded", beep_on_start=True, seconds_max_duration=120),
    )


def voicemail_recorded(request: sdk.PageRequest) -> dict[str, Any]:
    recording = request.result()
    if not recording.contains_sound:
        return sdk.response(sdk.play("I did not hear a message. Goodbye."), sdk.hang_up())
    seconds = round(recording.seconds_duration)
    return sdk.response(
        sdk.play(f"Thank you. Your message of {seconds} seconds is saved. Goodbye."),
        sdk.hang_up(),
    )


PAGES: dict[str, Page] = {
    "pin/start": pin_start,
    "pin/check": pin_check,
    "menu/start": menu_start,
    "menu/choice": menu_choice,
    "voicemail/start": voicemail_start,
    "voicemail/recorded": voicemail_recorded,
}


def answer(path: str, body: bytes) -> dict[str, Any] | None:
    """The answer of page ``path`` to a request ``body`` (None: no such page; a final
    page gets an empty answer)."""
    if path == "final":
        return {}
    page = PAGES.get(path)
    return None if page is None else page(sdk.parse_request(body))
