"""Typed builders of the actions an application answers with.

Each builder takes the action's properties as keyword arguments with the wire names
(``digit_count``, ``next_page``, ...), leaves out what is not given (so callhook applies
the reference's defaults), and checks the action with the very validation ``callhook
validate`` and ``serve`` apply (:func:`callhook.actions.response.parse_response`): what a
builder returns is valid, and what is not valid raises :class:`InvalidAction` naming the
property and what was expected there, at the line that built it.

Nested play actions are written in their canonical form, ``{"play": {...}}`` (reference
§4.1); a ``prompt`` may be given as a plain string, which is said by text-to-speech.
A page (``next_page`` and the like) is its URL, absolute or relative to the page that
answers, or :func:`page` for a GET page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from callhook.actions.response import InvalidResponse, Problem, parse_response

#: A page to request: its URL, or ``{"url": ..., "method": "GET"|"POST"}`` (:func:`page`).
Page = str | Mapping[str, str]
#: A play list item (:func:`say`, :func:`file`, :func:`digits`), or a text to say.
Item = str | Mapping[str, Any]


class InvalidAction(ValueError):
    """An action a builder would not emit, because ``callhook validate`` would refuse it.

    ``problems`` are the same :class:`~callhook.actions.response.Problem` objects
    ``validate`` reports, their paths relative to the action (``$.digit_count``)."""

    def __init__(self, name: str, problems: Sequence[Problem]) -> None:
        self.name = name
        self.problems = list(problems)
        lines = "; ".join(f"{p.path}: {p.message}" for p in self.problems)
        super().__init__(f"{name}: {lines}")


@dataclass(frozen=True)
class Action:
    """One action, checked: ``name`` and its properties in wire form."""

    name: str
    properties: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The action as the wire has it: ``{"<name>": {...}}``."""
        return {self.name: json.loads(json.dumps(self.properties))}


def page(url: str, method: Literal["POST", "GET"] = "POST") -> dict[str, str]:
    """A web page request object: ``url`` requested with ``method``."""
    return {"url": url, "method": method}


def say(
    text: str, *, tts_voice: str | None = None, text_is_private: bool | None = None
) -> dict[str, Any]:
    """A play list item spoken by text-to-speech."""
    return _given(text_to_say=text, tts_voice=tts_voice, text_is_private=text_is_private)


def file(
    file_to_play: str | Mapping[str, str], *, decryption_cipher: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A play list item: a WAV of the media file store (its name) or of the web (:func:`page`
    with GET, or ``{"url": ...}``), decrypted with ``decryption_cipher`` (:func:`cipher`)."""
    return _given(file_to_play=file_to_play, decryption_cipher=decryption_cipher)


def digits(digits_to_play: str) -> dict[str, Any]:
    """A play list item of DTMF digits sent to the far end."""
    return {"digits_to_play": digits_to_play}


def cipher(key: str, initialisation_vector: str) -> dict[str, str]:
    """An ``aescbc`` cipher object (key of 32/48/64 hex characters, IV of 32)."""
    return {"type": "aescbc", "key": key, "initialisation_vector": initialisation_vector}


def speech_options(
    *,
    word_hints: Sequence[str] | None = None,
    language: str | None = None,
    max_alternatives: int | None = None,
    enable_profanity_filtering: bool | None = None,
) -> dict[str, Any]:
    """A speech recognition options object; ``word_hints`` are the words (or phrases) the
    recogniser should expect, as one word hint object."""
    hints = [{"words": list(word_hints)}] if word_hints else None
    return _given(
        language=language,
        word_hints=hints,
        max_alternatives=max_alternatives,
        enable_profanity_filtering=enable_profanity_filtering,
    )


def digit_options(
    *, digit_count: int | None = None, end_digit: str | None = None, valid_digits: str | None = None
) -> dict[str, Any]:
    """A digit input options object of ``get_input``."""
    return _given(digit_count=digit_count, end_digit=end_digit, valid_digits=valid_digits)


def menu_option(digit: str, next_page: Page) -> dict[str, Any]:
    """One choice of :func:`run_menu`."""
    return {"digit": digit, "next_page": _page(next_page)}


def speech_menu_option(
    next_page: Page, *, words: Sequence[str] | None = None, digit: str | None = None
) -> dict[str, Any]:
    """One choice of :func:`run_speech_menu`: words to say, a digit to press, or both."""
    return _given(words=list(words) if words is not None else None, digit=digit) | {
        "next_page": _page(next_page)
    }


def secondary_call(
    *,
    call_recording: bool | None = None,
    call_recording_encryption: bool | None = None,
    call_recording_eliminate_dtmf: bool | None = None,
    call_recording_mode: Literal["mixed", "separate"] | None = None,
    call_recording_cipher: Mapping[str, str] | None = None,
    minutes_max_call_duration: int | None = None,
    first_page: Page | None = None,
    final_page: Page | None = None,
    error_page: Page | None = None,
) -> dict[str, Any]:
    """The ``secondary_call`` object of :func:`connect`."""
    return _given(
        call_recording=call_recording,
        call_recording_encryption=call_recording_encryption,
        call_recording_eliminate_dtmf=call_recording_eliminate_dtmf,
        call_recording_mode=call_recording_mode,
        call_recording_cipher=call_recording_cipher,
        minutes_max_call_duration=minutes_max_call_duration,
        first_page=_page(first_page) if first_page is not None else None,
        final_page=_page(final_page) if final_page is not None else None,
        error_page=_page(error_page) if error_page is not None else None,
    )


def conference_participant(
    *,
    talker: bool | None = None,
    start_on_entry: bool | None = None,
    destroy_on_exit: bool | None = None,
    beep_on_entry: bool | None = None,
    exit_digit: str | None = None,
    mute_digit: str | None = None,
    unmute_digit: str | None = None,
    while_stopped_media: Action | str | None = None,
    name: Action | str | None = None,
    has_joined_message: Action | str | None = None,
    has_left_message: Action | str | None = None,
) -> dict[str, Any]:
    """The ``conference_participant`` object of :func:`connect_to_conference`."""
    return _given(
        talker=talker,
        start_on_entry=start_on_entry,
        destroy_on_exit=destroy_on_exit,
        beep_on_entry=beep_on_entry,
        exit_digit=exit_digit,
        mute_digit=mute_digit,
        unmute_digit=unmute_digit,
        while_stopped_media=_prompt(while_stopped_media),
        name=_prompt(name),
        has_joined_message=_prompt(has_joined_message),
        has_left_message=_prompt(has_left_message),
    )


# --- the actions -------------------------------------------------------------------------


def play(
    *items: Item,
    barge_in_on_digit: bool | None = None,
    barge_in_on_speech: bool | None = None,
    barge_in_on_speech_options: Mapping[str, Any] | None = None,
) -> Action:
    """``play``: the items in order (a string is said by text-to-speech)."""
    return _action(
        "play",
        play_list=[say(i) if isinstance(i, str) else dict(i) for i in items],
        barge_in_on_digit=barge_in_on_digit,
        barge_in_on_speech=barge_in_on_speech,
        barge_in_on_speech_options=barge_in_on_speech_options,
    )


def get_number(
    next_page: Page,
    *,
    prompt: Action | str | None = None,
    digit_count: int | None = None,
    end_digit: str | None = None,
    valid_digits: str | None = None,
    help_digit: str | None = None,
    seconds_timeout: int | None = None,
    milliseconds_inter_digit_timeout: int | None = None,
    milliseconds_initial_timeout: int | None = None,
    on_digit_timeout_messages: Sequence[Action | str] | None = None,
    on_invalid_digit_messages: Sequence[Action | str] | None = None,
) -> Action:
    """``get_number``: a keypad number; ``next_page`` receives ``entered_number``."""
    return _action(
        "get_number",
        next_page=_page(next_page),
        prompt=_prompt(prompt),
        digit_count=digit_count,
        end_digit=end_digit,
        valid_digits=valid_digits,
        help_digit=help_digit,
        seconds_timeout=seconds_timeout,
        milliseconds_inter_digit_timeout=milliseconds_inter_digit_timeout,
        milliseconds_initial_timeout=milliseconds_initial_timeout,
        on_digit_timeout_messages=_prompts(on_digit_timeout_messages),
        on_invalid_digit_messages=_prompts(on_invalid_digit_messages),
    )


def get_input(
    next_page: Page,
    *,
    prompt: Action | str | None = None,
    speech_input_mode: Literal["timeout", "disabled", "auto"] | None = None,
    speech_recognition_options: Mapping[str, Any] | None = None,
    digit_input_enabled: bool | None = None,
    digit_input_options: Mapping[str, Any] | None = None,
    seconds_timeout: int | None = None,
    milliseconds_inter_speech_timeout: int | None = None,
    milliseconds_inter_digit_timeout: int | None = None,
    milliseconds_initial_timeout: int | None = None,
    on_input_timeout_messages: Sequence[Action | str] | None = None,
    on_invalid_input_messages: Sequence[Action | str] | None = None,
    help_digit: str | None = None,
) -> Action:
    """``get_input``: speech or keypad digits; options from :func:`speech_options` and
    :func:`digit_options`."""
    return _action(
        "get_input",
        next_page=_page(next_page),
        prompt=_prompt(prompt),
        speech_input_mode=speech_input_mode,
        speech_recognition_options=speech_recognition_options,
        digit_input_enabled=digit_input_enabled,
        digit_input_options=digit_input_options,
        seconds_timeout=seconds_timeout,
        milliseconds_inter_speech_timeout=milliseconds_inter_speech_timeout,
        milliseconds_inter_digit_timeout=milliseconds_inter_digit_timeout,
        milliseconds_initial_timeout=milliseconds_initial_timeout,
        on_input_timeout_messages=_prompts(on_input_timeout_messages),
        on_invalid_input_messages=_prompts(on_invalid_input_messages),
        help_digit=help_digit,
    )


def record(
    next_page: Page,
    *,
    id: str | None = None,
    barge_in_digits: str | None = None,
    seconds_max_duration: int | None = None,
    milliseconds_max_silence: int | None = None,
    milliseconds_max_initial_silence: int | None = None,
    format: Literal["alaw", "ulaw"] | None = None,
    encryption_cipher: Mapping[str, str] | None = None,
    beep_on_start: bool | None = None,
    recording_available_page: Page | None = None,
) -> Action:
    """``record``: the caller to a WAV file of the media file store."""
    return _action(
        "record",
        next_page=_page(next_page),
        id=id,
        barge_in_digits=barge_in_digits,
        seconds_max_duration=seconds_max_duration,
        milliseconds_max_silence=milliseconds_max_silence,
        milliseconds_max_initial_silence=milliseconds_max_initial_silence,
        format=format,
        encryption_cipher=encryption_cipher,
        beep_on_start=beep_on_start,
        recording_available_page=(
            _page(recording_available_page) if recording_available_page is not None else None
        ),
    )


def run_menu(
    menu_options: Sequence[Mapping[str, Any]],
    *,
    prompt: Action | str | None = None,
    help_digit: str | None = None,
    seconds_digit_timeout: int | None = None,
    on_digit_timeout_messages: Sequence[Action | str] | None = None,
    on_invalid_digit_messages: Sequence[Action | str] | None = None,
) -> Action:
    """``run_menu``: one key press picks an option (:func:`menu_option`)."""
    return _action(
        "run_menu",
        menu_options=[dict(o) for o in menu_options],
        prompt=_prompt(prompt),
        help_digit=help_digit,
        seconds_digit_timeout=seconds_digit_timeout,
        on_digit_timeout_messages=_prompts(on_digit_timeout_messages),
        on_invalid_digit_messages=_prompts(on_invalid_digit_messages),
    )


def run_speech_menu(
    menu_options: Sequence[Mapping[str, Any]],
    *,
    prompt: Action | str | None = None,
    language: str | None = None,
    speech_model_options: Mapping[str, Any] | None = None,
    help_digit: str | None = None,
    help_word: str | None = None,
    seconds_timeout: int | None = None,
    on_input_timeout_messages: Sequence[Action | str] | None = None,
    on_invalid_input_messages: Sequence[Action | str] | None = None,
) -> Action:
    """``run_speech_menu``: saying an option's words or pressing its digit picks it
    (:func:`speech_menu_option`)."""
    return _action(
        "run_speech_menu",
        menu_options=[dict(o) for o in menu_options],
        prompt=_prompt(prompt),
        language=language,
        speech_model_options=speech_model_options,
        help_digit=help_digit,
        help_word=help_word,
        seconds_timeout=seconds_timeout,
        on_input_timeout_messages=_prompts(on_input_timeout_messages),
        on_invalid_input_messages=_prompts(on_invalid_input_messages),
    )


def connect(
    destinations: str | Sequence[str],
    *,
    call_from: str | None = None,
    hold_media: Action | str | None = None,
    pass_early_media: bool | None = None,
    seconds_answer_timeout: int | None = None,
    classify_callee: Mapping[str, Any] | bool | None = None,
    secondary_call: Mapping[str, Any] | None = None,
    next_page: Page | None = None,
) -> Action:
    """``connect``: call the destinations (SIP URIs, numbers, ``user:NAME``) and put the
    caller through to the first that answers. ``classify_callee``: ``True`` (its defaults)
    or its options: who answered (a live speaker, an answering machine, a fax machine)
    is found before the far end is joined, and the result says it."""
    if classify_callee is True:
        classify_callee = {"enable": True}
    elif classify_callee is False:
        classify_callee = {"enable": False}
    return _action(
        "connect",
        destinations=[destinations] if isinstance(destinations, str) else list(destinations),
        call_from=call_from,
        hold_media=_prompt(hold_media),
        pass_early_media=pass_early_media,
        seconds_answer_timeout=seconds_answer_timeout,
        classify_callee=classify_callee,
        secondary_call=secondary_call,
        next_page=_page(next_page) if next_page is not None else None,
    )


def connect_to_conference(
    name: str,
    *,
    hold_media: Action | str | None = None,
    seconds_answer_timeout: int | None = None,
    conference_participant: Mapping[str, Any] | None = None,
    secondary_call: Mapping[str, Any] | None = None,
    next_page: Page | None = None,
) -> Action:
    """``connect_to_conference``: the caller joins the application's room ``name``;
    ``next_page`` gets how long it was in when it leaves."""
    return _action(
        "connect_to_conference",
        name=name,
        hold_media=_prompt(hold_media),
        seconds_answer_timeout=seconds_answer_timeout,
        conference_participant=conference_participant,
        secondary_call=secondary_call,
        next_page=_page(next_page) if next_page is not None else None,
    )


def transfer(
    destination: str,
    *,
    referred_by: str | None = None,
    seconds_timeout: int | None = None,
    fallback_connect: Action | None = None,
    next_page: Page | None = None,
) -> Action:
    """``transfer`` (callhook's own): a blind SIP REFER of the caller to ``destination``;
    ``fallback_connect`` (a :func:`connect`) runs when it is refused."""
    if fallback_connect is not None and fallback_connect.name != "connect":
        raise InvalidAction(
            "transfer", [Problem(path="$.fallback_connect", message="expected a connect action")]
        )
    return _action(
        "transfer",
        destination=destination,
        referred_by=referred_by,
        seconds_timeout=seconds_timeout,
        fallback_connect=fallback_connect,
        next_page=_page(next_page) if next_page is not None else None,
    )


def sleep(seconds: float) -> Action:
    """``sleep``: wait on the call."""
    return _action("sleep", seconds=seconds)


def hang_up() -> Action:
    """``hang_up``: end the call."""
    return _action("hang_up")


def redirect(next_page: Page) -> Action:
    """``redirect``: request ``next_page`` and run its actions instead of the rest."""
    return _action("redirect", next_page=_page(next_page))


def clear_input() -> Action:
    """``clear_input``: forget digits and speech heard during earlier prompts."""
    return _action("clear_input")


def delete_file(filename: str) -> Action:
    """``delete_file``: delete a file of the application's media file store."""
    return _action("delete_file", filename=filename)


def start_transcription(
    results_page: Page,
    *,
    transcription_mode: Literal["separate", "mixed", "inbound", "outbound"] | None = None,
    id: str | None = None,
    speech_recognition_options: Mapping[str, Any] | None = None,
    enable_interim_results: bool | None = None,
) -> Action:
    """``start_transcription``: transcribe the call as it goes on; each phrase is posted
    to ``results_page`` (outside the call's flow: answer it 204) and the next action runs
    at once."""
    return _action(
        "start_transcription",
        results_page=_page(results_page),
        transcription_mode=transcription_mode,
        id=id,
        speech_recognition_options=speech_recognition_options,
        enable_interim_results=enable_interim_results,
    )


def stop_transcription() -> Action:
    """``stop_transcription``: end the call's transcription."""
    return _action("stop_transcription")


def response(*actions: Action, token: str | None = None) -> dict[str, Any]:
    """A page's answer: the actions in order (none: hang up), and the ``token`` the next
    page request will carry (None: null, Aculab's default; to keep a token, pass the
    request's own on). Checked as a whole, as ``serve`` checks it."""
    body: dict[str, Any] = {"actions": [a.to_json() for a in actions]}
    if token is not None:
        body["token"] = token
    try:
        parse_response(json.dumps(body))
    except InvalidResponse as exc:
        raise InvalidAction("response", exc.problems) from None
    return body


# --- helpers -------------------------------------------------------------------------------


def _given(**properties: Any) -> dict[str, Any]:
    return {k: v for k, v in properties.items() if v is not None}


def _page(value: Page) -> Any:
    return {"url": value} if isinstance(value, str) else dict(value)


def _prompt(value: Action | str | None) -> Any:
    if value is None:
        return None
    return play(value) if isinstance(value, str) else value


def _prompts(values: Sequence[Action | str] | None) -> Any:
    return None if values is None else [_prompt(v) for v in values]


def _wire(value: Any) -> Any:
    if isinstance(value, Action):
        return value.to_json()
    if isinstance(value, Mapping):
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_wire(v) for v in value]
    return value


def _action(action: str, /, **properties: Any) -> Action:
    name = action
    body = {k: _wire(v) for k, v in _given(**properties).items()}
    try:
        parse_response(json.dumps({"actions": [{name: body}]}))
    except InvalidResponse as exc:
        prefix = f"$.actions[0].{name}"
        problems = [
            Problem(
                path="$" + p.path[len(prefix) :] if p.path.startswith(prefix) else p.path,
                message=p.message,
            )
            for p in exc.problems
        ]
        raise InvalidAction(name, problems) from None
    except TypeError as exc:  # not JSON at all (a set, an object)
        raise InvalidAction(name, [Problem(path="$", message=str(exc))]) from None
    return Action(name, body)
