"""Wire names and defaults of the action models (docs/behaviour.md and
docs/applications.md, which list them with the Aculab page each follows).

Every default is read back from what :func:`parse_response` builds from a
document that leaves the property out, so each expected value here comes from
the spec (or docs/behaviour.md), never from the code under test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from callhook.actions.catalogue import ACTION_MODELS
from callhook.actions.gather import GatherSpec
from callhook.actions.response import parse_response
from callhook.actions.schema import (
    Cipher,
    DigitInputOptions,
    FileItem,
    GetInput,
    GetNumber,
    MessagePlay,
    Play,
    Record,
    SpeechRecognitionOptions,
    TextItem,
    WebPageRequest,
    WordHint,
)

NEXT = {"url": "/next"}
SAY = {"play_list": [{"text_to_say": "hello"}]}


def parse_one(item: dict[str, Any]) -> Any:
    """The single action parse_response builds from ``{"actions": [item]}``."""
    response = parse_response(json.dumps({"actions": [item]}))
    assert len(response.actions) == 1
    return response.actions[0]


def get_number(**props: Any) -> GetNumber:
    action = parse_one({"get_number": {"next_page": NEXT, **props}})
    assert isinstance(action, GetNumber)
    return action


def get_input(**props: Any) -> GetInput:
    action = parse_one({"get_input": {"next_page": NEXT, **props}})
    assert isinstance(action, GetInput)
    return action


def record(**props: Any) -> Record:
    action = parse_one({"record": {"next_page": NEXT, **props}})
    assert isinstance(action, Record)
    return action


def play(**props: Any) -> Play:
    action = parse_one({"play": {**SAY, **props}})
    assert isinstance(action, Play)
    return action


# --- exact property names -----------------------------------------------------------------

# Property sets of docs/reference.md (get_number, get_input, record and the shared objects).
GET_NUMBER_PROPERTIES = {
    "next_page",
    "prompt",
    "digit_count",
    "end_digit",
    "valid_digits",
    "help_digit",
    "seconds_timeout",
    "milliseconds_inter_digit_timeout",
    "milliseconds_initial_timeout",
    "on_digit_timeout_messages",
    "on_invalid_digit_messages",
}
GET_INPUT_PROPERTIES = {
    "next_page",
    "prompt",
    "speech_input_mode",
    "speech_recognition_options",
    "digit_input_enabled",
    "digit_input_options",
    "seconds_timeout",
    "milliseconds_inter_speech_timeout",
    "milliseconds_inter_digit_timeout",
    "milliseconds_initial_timeout",
    "on_input_timeout_messages",
    "on_invalid_input_messages",
    "help_digit",
}
RECORD_PROPERTIES = {
    "next_page",
    "id",
    "barge_in_digits",
    "seconds_max_duration",
    "milliseconds_max_silence",
    "milliseconds_max_initial_silence",
    "format",
    "encryption_cipher",
    "beep_on_start",
    "recording_available_page",
}


@pytest.mark.parametrize(
    ("model", "spec_names", "extra_names"),
    [
        pytest.param(GetNumber, GET_NUMBER_PROPERTIES, set(), id="get_number"),
        pytest.param(GetInput, GET_INPUT_PROPERTIES, set(), id="get_input"),
        pytest.param(Record, RECORD_PROPERTIES, set(), id="record"),
        # The shared objects: the spec shows some fields and says "other fields: not
        # shown"; callhook's additions are listed here so that a new one is noticed.
        pytest.param(WebPageRequest, {"url"}, {"method"}, id="web_page_request"),
        pytest.param(
            Play,
            {"play_list", "barge_in_on_speech", "barge_in_on_digit"},
            {"barge_in_on_speech_options"},
            id="play",
        ),
        pytest.param(
            MessagePlay,
            {"play_list", "barge_in_on_speech", "barge_in_on_digit"},
            {"barge_in_on_speech_options"},
            id="message_play",
        ),
        pytest.param(TextItem, {"text_to_say"}, {"tts_voice", "text_is_private"}, id="text_item"),
        pytest.param(FileItem, {"file_to_play"}, {"decryption_cipher"}, id="file_item"),
        pytest.param(Cipher, {"type", "key", "initialisation_vector"}, set(), id="cipher"),
        pytest.param(
            SpeechRecognitionOptions,
            {"word_hints"},
            {
                "language",  # "the object also sets the language": its name is callhook's
                "language_outbound",
                "max_alternatives",
                "enable_profanity_filtering",
                "speech_model_options",
                "speech_model_options_outbound",
            },
            id="speech_recognition_options",
        ),
        pytest.param(WordHint, {"words"}, set(), id="word_hint"),
        pytest.param(
            DigitInputOptions, {"digit_count", "valid_digits"}, {"end_digit"}, id="digit_options"
        ),
    ],
)
def test_model_property_names_are_the_spec_names(
    model: type[BaseModel], spec_names: set[str], extra_names: set[str]
) -> None:
    names = set(model.model_fields)
    assert spec_names - names == set(), "spec properties missing from the model"
    assert names - spec_names == extra_names, "properties beyond the spec"


def test_action_names() -> None:
    # The three input actions, play (used by prompts), the control actions (sleep,
    # clear_input, redirect, hang_up), Aculab's menus, delete_file, connect and
    # start/stop_transcription, connect_to_conference, and callhook's transfer
    # (docs/behaviour.md).
    assert set(ACTION_MODELS) == {
        "start_transcription",
        "stop_transcription",
        "connect",
        "connect_to_conference",
        "transfer",
        "run_menu",
        "run_speech_menu",
        "delete_file",
        "play",
        "get_number",
        "get_input",
        "record",
        "sleep",
        "hang_up",
        "redirect",
        "clear_input",
    }
    for name, model in ACTION_MODELS.items():
        assert getattr(model, "name") == name  # noqa: B009 - ClassVar on a pydantic model


# --- get_number (docs/reference.md) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("prompt", None),
        ("digit_count", 0),
        ("end_digit", "#"),
        ("valid_digits", "0123456789"),
        ("help_digit", "*"),
        ("seconds_timeout", 30),
        ("milliseconds_inter_digit_timeout", 5000),
    ],
)
def test_get_number_default(field: str, expected: object) -> None:
    assert getattr(get_number(), field) == expected


def test_get_number_initial_timeout_defaults_to_default_inter_digit_timeout() -> None:
    action = get_number()
    assert action.initial_timeout_ms == 5000


def test_get_number_initial_timeout_defaults_to_given_inter_digit_timeout() -> None:
    action = get_number(milliseconds_inter_digit_timeout=1234)
    assert action.initial_timeout_ms == 1234


@pytest.mark.parametrize("initial", [700, 0, -1])
def test_get_number_given_initial_timeout_wins(initial: int) -> None:
    # 0 and negative are meaningful values ("disables it"), not "not given".
    action = get_number(milliseconds_inter_digit_timeout=1234, milliseconds_initial_timeout=initial)
    assert action.initial_timeout_ms == initial


def test_get_number_default_messages() -> None:
    # Section 2.2: two default spoken messages each, barge-in disabled; the words are
    # those of docs/behaviour.md.
    spec = GatherSpec.for_get_number(get_number())
    assert [texts(m) for m in spec.timeout_messages] == [
        ["Sorry, I did not hear that."],
        ["Please use your telephone keypad to enter a valid number."],
    ]
    assert [texts(m) for m in spec.invalid_messages] == [
        ["Sorry, that is not a valid number."],
        ["Please use your telephone keypad to enter a valid number."],
    ]
    for message in (*spec.timeout_messages, *spec.invalid_messages):
        assert message.barge_in_on_digit is False
        assert message.barge_in_on_speech is False


def test_get_input_default_messages() -> None:
    spec = GatherSpec.for_get_input(get_input())
    assert [texts(m) for m in spec.timeout_messages] == [
        ["Sorry, I did not hear anything."],
        ["Please speak clearly, or use your telephone keypad."],
    ]
    assert [texts(m) for m in spec.invalid_messages] == [
        ["Sorry, that is not valid input."],
        ["Please speak clearly, or use your telephone keypad."],
    ]
    for message in (*spec.timeout_messages, *spec.invalid_messages):
        assert message.barge_in_on_digit is False
        assert message.barge_in_on_speech is False


@pytest.mark.parametrize(
    ("action", "field"),
    [
        ("get_number", "on_digit_timeout_messages"),
        ("get_number", "on_invalid_digit_messages"),
        ("get_input", "on_input_timeout_messages"),
        ("get_input", "on_invalid_input_messages"),
    ],
)
def test_empty_message_list_is_kept_not_replaced_by_defaults(action: str, field: str) -> None:
    # docs/behaviour.md: an empty list means the first timeout/invalid digit finishes.
    parsed = parse_one({action: {"next_page": NEXT, field: []}})
    assert getattr(parsed, field) == []
    spec = (
        GatherSpec.for_get_number(parsed)
        if isinstance(parsed, GetNumber)
        else GatherSpec.for_get_input(parsed)
    )
    kept = spec.timeout_messages if "timeout" in field else spec.invalid_messages
    assert kept == ()


def texts(message: Play) -> list[str]:
    return [item.text_to_say for item in message.play_list if isinstance(item, TextItem)]


@pytest.mark.parametrize(
    ("action", "field"),
    [
        ("get_number", "on_digit_timeout_messages"),
        ("get_number", "on_invalid_digit_messages"),
        ("get_input", "on_input_timeout_messages"),
        ("get_input", "on_invalid_input_messages"),
    ],
)
def test_message_items_default_to_no_barge_in(action: str, field: str) -> None:
    parsed = parse_one(
        {action: {"next_page": NEXT, field: [SAY, {**SAY, "barge_in_on_digit": True}]}}
    )
    first, second = getattr(parsed, field)
    assert isinstance(first, MessagePlay)
    assert first.barge_in_on_digit is False
    assert first.barge_in_on_speech is False
    # An explicit value is kept.
    assert second.barge_in_on_digit is True


@pytest.mark.parametrize("action", ["get_number", "get_input"])
def test_prompt_is_a_play_with_play_defaults(action: str) -> None:
    parsed = parse_one({action: {"next_page": NEXT, "prompt": SAY}})
    assert type(parsed.prompt) is Play
    assert parsed.prompt.barge_in_on_digit is True
    assert parsed.prompt.barge_in_on_speech is False


# --- get_input (docs/reference.md) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("prompt", None),
        ("speech_input_mode", "timeout"),
        ("speech_recognition_options", None),
        ("digit_input_enabled", True),
        ("digit_input_options", None),
        ("seconds_timeout", 30),
        ("milliseconds_inter_speech_timeout", 1000),
        ("milliseconds_inter_digit_timeout", 3000),
        ("milliseconds_initial_timeout", 5000),
        ("help_digit", "*"),
    ],
)
def test_get_input_default(field: str, expected: object) -> None:
    assert getattr(get_input(), field) == expected


@pytest.mark.parametrize(
    ("field", "expected"),
    [("digit_count", 0), ("end_digit", "#"), ("valid_digits", "0123456789")],
)
def test_get_input_default_digit_settings(field: str, expected: object) -> None:
    # "omitting it gives the default digit settings" (those of get_number).
    assert getattr(get_input().digits, field) == expected


@pytest.mark.parametrize(
    ("field", "expected"),
    [("digit_count", 4), ("end_digit", "#"), ("valid_digits", "0123456789")],
)
def test_get_input_partial_digit_options_keep_other_defaults(field: str, expected: object) -> None:
    action = get_input(digit_input_options={"digit_count": 4})
    assert getattr(action.digits, field) == expected


@pytest.mark.parametrize(
    ("field", "expected"),
    [("language", "en-US"), ("max_alternatives", 1), ("word_hints", [])],
)
def test_get_input_default_recognition_options(field: str, expected: object) -> None:
    assert getattr(get_input().recognition, field) == expected


@pytest.mark.parametrize(
    ("field", "expected"),
    [("language", "en-US"), ("max_alternatives", 2), ("word_hints", [])],
)
def test_get_input_partial_recognition_options_keep_other_defaults(
    field: str, expected: object
) -> None:
    action = get_input(speech_recognition_options={"max_alternatives": 2})
    assert getattr(action.recognition, field) == expected


def test_get_input_word_hints_round_trip() -> None:
    action = get_input(
        speech_recognition_options={
            "language": "en-GB",
            "word_hints": [{"words": ["yes", "no"]}, {"words": ["operator"]}],
        }
    )
    assert action.recognition.language == "en-GB"
    assert action.recognition.hint_words() == ("yes", "no", "operator")


# --- record (docs/reference.md) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("id", ""),
        ("barge_in_digits", "#"),
        ("seconds_max_duration", 60),
        ("milliseconds_max_silence", 3000),
        ("milliseconds_max_initial_silence", 0),
        ("format", None),  # determined automatically
        ("encryption_cipher", None),  # saved unencrypted
        ("beep_on_start", False),
        ("recording_available_page", None),
    ],
)
def test_record_default(field: str, expected: object) -> None:
    assert getattr(record(), field) == expected


# --- play and the shared objects ------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("barge_in_on_digit", True),
        ("barge_in_on_speech", False),
        ("barge_in_on_speech_options", None),
    ],
)
def test_play_default(field: str, expected: object) -> None:
    assert getattr(play(), field) == expected


def test_play_item_defaults() -> None:
    action = play(play_list=[{"text_to_say": "hi"}, {"file_to_play": "prompts/hi.wav"}])
    text, file = action.play_list
    assert isinstance(text, TextItem)
    assert (text.text_to_say, text.tts_voice, text.text_is_private) == ("hi", None, False)
    assert isinstance(file, FileItem)
    assert (file.file_to_play, file.decryption_cipher) == ("prompts/hi.wav", None)


def test_web_page_request_method_defaults_to_post() -> None:
    # docs/behaviour.md: every page request is a POST unless the object says GET.
    assert get_number().next_page.method == "POST"
    assert get_number(next_page={"url": "/n", "method": "GET"}).next_page.method == "GET"


def test_start_transcription_defaults_are_aculabs() -> None:
    from callhook.actions.schema import StartTranscription

    action = StartTranscription.model_validate({"results_page": {"url": "results"}})
    assert action.transcription_mode == "separate"
    assert action.id == ""
    assert action.enable_interim_results is False
    assert action.speech_recognition_options.language == "en-US"
    with pytest.raises(ValueError):
        StartTranscription.model_validate({})  # results_page is required
    with pytest.raises(ValueError):
        StartTranscription.model_validate(
            {"results_page": {"url": "r"}, "transcription_mode": "both"}
        )
