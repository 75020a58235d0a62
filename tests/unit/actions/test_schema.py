"""Validation of page responses: parse_response, its problems, and the JSON Schema.

Each rejection names the exact JSON path of the offending value and checks that
the message says what was expected there. The JSON Schema tests run the same
documents through ``jsonschema`` so that the schema and the validator cannot
drift apart unnoticed.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import pytest

from callhook.actions.response import InvalidResponse, Problem, json_schema, parse_response
from callhook.actions.schema import (
    Cipher,
    ClearInput,
    FileItem,
    GetInput,
    GetNumber,
    HangUp,
    Play,
    Record,
    Redirect,
    Sleep,
)

NEXT = {"url": "/next"}
SAY = {"play_list": [{"text_to_say": "hello"}]}
KEY = "0123456789abcdef" * 4  # 64 hex characters, AES-256
IV = "fedcba9876543210" * 2  # 32 hex characters


def body(doc: Any) -> str | bytes:
    return doc if isinstance(doc, str | bytes) else json.dumps(doc)


def problems_of(doc: Any) -> list[Problem]:
    with pytest.raises(InvalidResponse) as info:
        parse_response(body(doc))
    return info.value.problems


def only_problem(doc: Any) -> Problem:
    problems = problems_of(doc)
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


def accepted(doc: Any) -> list[Any]:
    return parse_response(body(doc)).actions


def one(item: Any) -> dict[str, Any]:
    return {"actions": [item]}


def get_number(**props: Any) -> dict[str, Any]:
    return one({"get_number": {"next_page": NEXT, **props}})


def get_input(**props: Any) -> dict[str, Any]:
    return one({"get_input": {"next_page": NEXT, **props}})


def record(**props: Any) -> dict[str, Any]:
    return one({"record": {"next_page": NEXT, **props}})


def play(*items: Any, **props: Any) -> dict[str, Any]:
    return one({"play": {"play_list": list(items) or SAY["play_list"], **props}})


def cipher(**fields: Any) -> dict[str, Any]:
    return {"type": "aescbc", "key": KEY, "initialisation_vector": IV, **fields}


def redirect_to(url: str) -> dict[str, Any]:
    return one({"redirect": {"next_page": {"url": url}}})


def check(doc: Any, path: str, *expected: str) -> None:
    problem = only_problem(doc)
    assert problem.path == path
    for words in expected:
        assert words in problem.message, problem.message


GN = "$.actions[0].get_number"
GI = "$.actions[0].get_input"
REC = "$.actions[0].record"
PLAY = "$.actions[0].play"
DIGITS = "0123456789ABCD#*"


# --- the action list and its items ------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "path", "expected"),
    [
        pytest.param(
            one({"get_digits": {}}),
            "$.actions[0]",
            ("unknown action 'get_digits'", "get_number, get_input, record"),
            id="unknown-action",
        ),
        pytest.param(
            {"actions": [{"hang_up": {}}, {"Play": SAY}]},
            "$.actions[1]",
            ("unknown action 'Play'",),
            id="unknown-action-second-item-case-sensitive",
        ),
        pytest.param(one({}), "$.actions[0]", ("exactly one key",), id="item-no-key"),
        pytest.param(
            one({"hang_up": {}, "clear_input": {}}),
            "$.actions[0]",
            ("exactly one key", "hang_up, clear_input"),
            id="item-two-keys",
        ),
        pytest.param(
            one({"play": SAY, "bogus": {}}),
            "$.actions[0]",
            ("exactly one key", "play, bogus"),
            id="item-action-and-unknown-key",
        ),
        pytest.param(one(5), "$.actions[0]", ("object with one key", "got 5"), id="item-number"),
        pytest.param(
            one("hang_up"), "$.actions[0]", ("object with one key", 'got "hang_up"'), id="item-str"
        ),
        pytest.param(one(None), "$.actions[0]", ("object with one key", "null"), id="item-null"),
        pytest.param(one([]), "$.actions[0]", ("object with one key", "[]"), id="item-list"),
        pytest.param(
            one({"hang_up": None}),
            "$.actions[0].hang_up",
            ("valid dictionary", "null"),
            id="action-body-null",
        ),
    ],
)
def test_action_item_rejected(doc: Any, path: str, expected: tuple[str, ...]) -> None:
    check(doc, path, *expected)


# --- unknown properties at every level --------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        pytest.param({"actions": [], "bogus": 1}, "$.bogus", id="envelope"),
        pytest.param(get_number(bogus=1), f"{GN}.bogus", id="get_number"),
        pytest.param(get_input(nextpage=NEXT), f"{GI}.nextpage", id="get_input-misspelt"),
        pytest.param(record(max_duration=5), f"{REC}.max_duration", id="record"),
        pytest.param(one({"hang_up": {"reason": 1}}), "$.actions[0].hang_up.reason", id="hang_up"),
        pytest.param(
            play({"text_to_say": "x", "voice": "a"}),
            f"{PLAY}.play_list[0].voice",
            id="play-text-item",
        ),
        pytest.param(
            play({"text_to_say": "x"}, {"file_to_play": "a.wav", "loop": True}),
            f"{PLAY}.play_list[1].loop",
            id="play-file-item",
        ),
        pytest.param(
            play({"text_to_say": "x", "file_to_play": "a.wav"}),
            f"{PLAY}.play_list[0].file_to_play",
            id="play-item-text-and-file",
        ),
        pytest.param(
            get_number(next_page={"url": "/n", "timeout": 5}),
            f"{GN}.next_page.timeout",
            id="next_page",
        ),
        pytest.param(
            get_number(prompt={**SAY, "loop": True}), f"{GN}.prompt.loop", id="get_number-prompt"
        ),
        pytest.param(
            get_number(on_digit_timeout_messages=[SAY, {**SAY, "x": 1}]),
            f"{GN}.on_digit_timeout_messages[1].x",
            id="message-item",
        ),
        pytest.param(
            get_input(digit_input_options={"help_digit": "*"}),
            f"{GI}.digit_input_options.help_digit",
            id="digit_input_options",
        ),
        pytest.param(
            get_input(speech_recognition_options={"lang": "en-GB"}),
            f"{GI}.speech_recognition_options.lang",
            id="speech_recognition_options",
        ),
        pytest.param(
            get_input(speech_recognition_options={"word_hints": [{"words": ["a"], "boost": 2}]}),
            f"{GI}.speech_recognition_options.word_hints[0].boost",
            id="word_hint",
        ),
        pytest.param(
            record(encryption_cipher=cipher(mode="cbc")),
            f"{REC}.encryption_cipher.mode",
            id="record-cipher",
        ),
        pytest.param(
            play({"file_to_play": "a.wav", "decryption_cipher": cipher(padding="pkcs7")}),
            f"{PLAY}.play_list[0].decryption_cipher.padding",
            id="play-cipher",
        ),
    ],
)
def test_unknown_property_rejected(doc: Any, path: str) -> None:
    check(doc, path, "unknown property")


def test_play_item_without_text_or_file_rejected() -> None:
    check(
        play({"tts_voice": "x"}),
        f"{PLAY}.play_list[0]",
        "text_to_say, file_to_play or digits_to_play",
    )


def test_play_item_not_an_object_rejected() -> None:
    check(
        play({"text_to_say": "a"}, "b.wav"),
        f"{PLAY}.play_list[1]",
        "file_to_play or digits_to_play",
    )


# --- wrong JSON types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "path", "expected"),
    [
        pytest.param(
            get_number(digit_count="4"), f"{GN}.digit_count", "valid integer", id="str-int"
        ),
        pytest.param(get_number(digit_count=4.0), f"{GN}.digit_count", "valid integer", id="float"),
        pytest.param(get_number(digit_count=True), f"{GN}.digit_count", "valid integer", id="bool"),
        pytest.param(
            get_input(milliseconds_initial_timeout="5000"),
            f"{GI}.milliseconds_initial_timeout",
            "valid integer",
            id="str-int-get_input",
        ),
        pytest.param(
            record(seconds_max_duration=10.5),
            f"{REC}.seconds_max_duration",
            "valid integer",
            id="float-record",
        ),
        pytest.param(
            get_input(digit_input_enabled=1),
            f"{GI}.digit_input_enabled",
            "valid boolean",
            id="int-bool",
        ),
        pytest.param(
            play(barge_in_on_digit=1),
            f"{PLAY}.barge_in_on_digit",
            "valid boolean",
            id="int-bool-play",
        ),
        pytest.param(
            record(beep_on_start="true"), f"{REC}.beep_on_start", "valid boolean", id="str-bool"
        ),
        pytest.param(get_number(end_digit=5), f"{GN}.end_digit", "valid string", id="int-str"),
        pytest.param(
            get_number(next_page=[NEXT]), f"{GN}.next_page", "valid dictionary", id="list-object"
        ),
        pytest.param(
            get_number(next_page="/next"), f"{GN}.next_page", "valid dictionary", id="str-object"
        ),
        pytest.param(
            get_number(next_page=None), f"{GN}.next_page", "valid dictionary", id="null-obj"
        ),
        pytest.param(
            get_input(digit_input_options=[]),
            f"{GI}.digit_input_options",
            "valid dictionary",
            id="list-digit_input_options",
        ),
        pytest.param(
            record(encryption_cipher=[KEY]),
            f"{REC}.encryption_cipher",
            "valid dictionary",
            id="list-cipher",
        ),
        pytest.param(
            one({"play": {"play_list": {"text_to_say": "x"}}}),
            f"{PLAY}.play_list",
            "valid list",
            id="object-list",
        ),
        pytest.param({"actions": {}}, "$.actions", "valid list", id="actions-object"),
        pytest.param({"actions": None}, "$.actions", "valid list", id="actions-null"),
        pytest.param({"actions": [], "token": 5}, "$.token", "valid string", id="token-int"),
        pytest.param(
            {"actions": [], "api_version": 2}, "$.api_version", "valid string", id="api-int"
        ),
    ],
)
def test_wrong_type_rejected(doc: Any, path: str, expected: str) -> None:
    check(doc, path, expected)


# --- required properties --------------------------------------------------------------------


@pytest.mark.parametrize("action", ["get_number", "get_input", "record", "redirect"])
def test_missing_next_page_rejected(action: str) -> None:
    check(one({action: {}}), f"$.actions[0].{action}.next_page", "required property is missing")


def test_missing_url_rejected() -> None:
    check(get_number(next_page={}), f"{GN}.next_page.url", "required property is missing")


def test_missing_play_list_rejected() -> None:
    check(one({"play": {}}), f"{PLAY}.play_list", "required property is missing")


# --- digits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        *(
            pytest.param(get_number(valid_digits=v), f"{GN}.valid_digits", id=f"valid_digits-{v}")
            for v in ("12a", "abcd", "123E", "1 2", "0123456789+", "٣")
        ),
        pytest.param(
            get_input(digit_input_options={"valid_digits": "12d"}),
            f"{GI}.digit_input_options.valid_digits",
            id="get_input-valid_digits",
        ),
        *(
            pytest.param(record(barge_in_digits=v), f"{REC}.barge_in_digits", id=f"barge-{v}")
            for v in ("#a", "x", "**E")
        ),
    ],
)
def test_digit_string_outside_dtmf_rejected(doc: Any, path: str) -> None:
    check(doc, path, DIGITS)


@pytest.mark.parametrize("field", ["end_digit", "help_digit"])
@pytest.mark.parametrize("value", ["a", "d", "E", "+", " ", "##", "12", "*#"])
def test_single_digit_property_rejected(field: str, value: str) -> None:
    # Lowercase letters, non-DTMF characters, and more than one character.
    check(get_number(**{field: value}), f"{GN}.{field}", "one digit", DIGITS)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        pytest.param(get_input(help_digit="a"), f"{GI}.help_digit", id="get_input-help"),
        pytest.param(get_input(help_digit="**"), f"{GI}.help_digit", id="get_input-help-2"),
        pytest.param(
            get_input(digit_input_options={"end_digit": "a"}),
            f"{GI}.digit_input_options.end_digit",
            id="options-end",
        ),
        pytest.param(
            get_input(digit_input_options={"end_digit": "##"}),
            f"{GI}.digit_input_options.end_digit",
            id="options-end-2",
        ),
    ],
)
def test_single_digit_property_rejected_in_get_input(doc: Any, path: str) -> None:
    check(doc, path, "one digit", DIGITS)


def test_every_dtmf_character_accepted() -> None:
    (gn,) = accepted(get_number(valid_digits=DIGITS, end_digit="", digit_count=4, help_digit=""))
    assert isinstance(gn, GetNumber)
    assert gn.valid_digits == DIGITS
    (rec,) = accepted(record(barge_in_digits=DIGITS))
    assert isinstance(rec, Record)
    assert rec.barge_in_digits == DIGITS
    for digit in DIGITS:
        help_digit = "0" if digit != "0" else "1"
        (action,) = accepted(get_number(end_digit=digit, help_digit=help_digit))
        assert isinstance(action, GetNumber)
        assert action.end_digit == digit


def test_empty_barge_in_digits_accepted() -> None:
    # "string of zero or more digits"
    (rec,) = accepted(record(barge_in_digits=""))
    assert isinstance(rec, Record)
    assert rec.barge_in_digits == ""


@pytest.mark.parametrize(
    ("doc", "path", "expected"),
    [
        pytest.param(
            get_number(digit_count=-1), f"{GN}.digit_count", "greater than or equal to 0", id="gn-1"
        ),
        pytest.param(
            get_number(digit_count=33), f"{GN}.digit_count", "less than or equal to 32", id="gn-33"
        ),
        pytest.param(
            get_input(digit_input_options={"digit_count": -1}),
            f"{GI}.digit_input_options.digit_count",
            "greater than or equal to 0",
            id="options-1",
        ),
        pytest.param(
            get_input(digit_input_options={"digit_count": 33}),
            f"{GI}.digit_input_options.digit_count",
            "less than or equal to 32",
            id="options-33",
        ),
    ],
)
def test_digit_count_out_of_range_rejected(doc: Any, path: str, expected: str) -> None:
    check(doc, path, expected)


@pytest.mark.parametrize(
    ("count", "end"),
    [(32, "#"), (0, "#"), (0, "5"), (1, "")],
)
def test_digit_count_in_range_accepted(count: int, end: str) -> None:
    (gn,) = accepted(get_number(digit_count=count, end_digit=end))
    assert isinstance(gn, GetNumber)
    assert (gn.digit_count, gn.end_digit) == (count, end)
    (gi,) = accepted(get_input(digit_input_options={"digit_count": count, "end_digit": end}))
    assert isinstance(gi, GetInput)
    assert (gi.digits.digit_count, gi.digits.end_digit) == (count, end)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        pytest.param(get_number(digit_count=0, end_digit=""), GN, id="get_number"),
        pytest.param(get_number(end_digit=""), GN, id="get_number-default-count"),
        pytest.param(
            get_input(digit_input_options={"digit_count": 0, "end_digit": ""}),
            f"{GI}.digit_input_options",
            id="digit_input_options",
        ),
        pytest.param(
            get_input(digit_input_options={"end_digit": ""}),
            f"{GI}.digit_input_options",
            id="digit_input_options-default-count",
        ),
    ],
)
def test_unlimited_digits_without_end_digit_rejected(doc: Any, path: str) -> None:
    # Spec section 7 item 4.
    check(doc, path, "digit_count", "end_digit")


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        pytest.param(get_number(help_digit="#"), GN, id="get_number-default-end"),
        pytest.param(get_number(help_digit="5", end_digit="5"), GN, id="get_number-both-5"),
        pytest.param(get_number(end_digit="*"), GN, id="get_number-default-help"),
        pytest.param(get_input(help_digit="#"), GI, id="get_input-default-end"),
        pytest.param(get_input(digit_input_options={"end_digit": "*"}), GI, id="get_input-options"),
    ],
)
def test_help_digit_equal_to_end_digit_rejected(doc: Any, path: str) -> None:
    # docs/behaviour.md: "help_digit equal to end_digit is rejected".
    check(doc, path, "help_digit", "end_digit", "differ")


def test_no_help_digit_and_no_end_digit_accepted() -> None:
    (gn,) = accepted(get_number(help_digit="", end_digit="", digit_count=3))
    assert isinstance(gn, GetNumber)
    assert (gn.help_digit, gn.end_digit) == ("", "")


# --- get_input modes ----------------------------------------------------------------------


def test_get_input_with_no_way_to_receive_input_rejected() -> None:
    check(
        get_input(speech_input_mode="disabled", digit_input_enabled=False),
        GI,
        "speech_input_mode",
        "digit_input_enabled",
    )


@pytest.mark.parametrize(
    ("props", "mode", "digits"),
    [
        ({"speech_input_mode": "disabled"}, "disabled", True),
        ({"digit_input_enabled": False}, "timeout", False),
        ({"speech_input_mode": "auto", "digit_input_enabled": False}, "auto", False),
    ],
)
def test_get_input_with_one_input_accepted(props: dict[str, Any], mode: str, digits: bool) -> None:
    (gi,) = accepted(get_input(**props))
    assert isinstance(gi, GetInput)
    assert (gi.speech_input_mode, gi.digit_input_enabled) == (mode, digits)


@pytest.mark.parametrize("mode", ["Auto", "TIMEOUT", "none", "", "enabled"])
def test_speech_input_mode_outside_the_set_rejected(mode: str) -> None:
    check(
        get_input(speech_input_mode=mode),
        f"{GI}.speech_input_mode",
        "'timeout', 'disabled' or 'auto'",
    )


@pytest.mark.parametrize("mode", ["timeout", "disabled", "auto"])
def test_speech_input_mode_accepted(mode: str) -> None:
    (gi,) = accepted(get_input(speech_input_mode=mode))
    assert isinstance(gi, GetInput)
    assert gi.speech_input_mode == mode


@pytest.mark.parametrize(
    ("count", "expected"),
    [(0, "greater than or equal to 1"), (4, "less than or equal to 3"), (-1, "greater than")],
)
def test_max_alternatives_out_of_range_rejected(count: int, expected: str) -> None:
    check(
        get_input(speech_recognition_options={"max_alternatives": count}),
        f"{GI}.speech_recognition_options.max_alternatives",
        expected,
    )


@pytest.mark.parametrize("count", [1, 2, 3])
def test_max_alternatives_in_range_accepted(count: int) -> None:
    (gi,) = accepted(get_input(speech_recognition_options={"max_alternatives": count}))
    assert isinstance(gi, GetInput)
    assert gi.recognition.max_alternatives == count


@pytest.mark.parametrize("language", ["english", "en_US", "e", ""])
def test_bad_language_rejected(language: str) -> None:
    check(
        get_input(speech_recognition_options={"language": language}),
        f"{GI}.speech_recognition_options.language",
        "language tag",
    )


# --- timeouts and durations -------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "path", "expected"),
    [
        pytest.param(
            get_number(seconds_timeout=-1),
            f"{GN}.seconds_timeout",
            "greater than or equal to 0",
            id="get_number-seconds_timeout",
        ),
        pytest.param(
            get_input(seconds_timeout=-1),
            f"{GI}.seconds_timeout",
            "greater than or equal to 0",
            id="get_input-seconds_timeout",
        ),
        pytest.param(
            record(seconds_max_duration=0),
            f"{REC}.seconds_max_duration",
            "greater than or equal to 1",
            id="seconds_max_duration-0",
        ),
        pytest.param(
            record(seconds_max_duration=-5),
            f"{REC}.seconds_max_duration",
            "greater than or equal to 1",
            id="seconds_max_duration-negative",
        ),
        pytest.param(
            record(milliseconds_max_initial_silence=-1),
            f"{REC}.milliseconds_max_initial_silence",
            "greater than or equal to 0",
            id="max_initial_silence-negative",
        ),
    ],
)
def test_bad_duration_rejected(doc: Any, path: str, expected: str) -> None:
    check(doc, path, expected)


def test_zero_seconds_timeout_accepted() -> None:
    # "0 means return at once with whatever digits are available"
    (gn,) = accepted(get_number(seconds_timeout=0))
    (gi,) = accepted(get_input(seconds_timeout=0))
    assert isinstance(gn, GetNumber)
    assert isinstance(gi, GetInput)
    assert (gn.seconds_timeout, gi.seconds_timeout) == (0, 0)


def test_zero_or_negative_millisecond_timeouts_accepted() -> None:
    # "0 or negative disables it"
    (gn,) = accepted(
        get_number(milliseconds_inter_digit_timeout=-1, milliseconds_initial_timeout=0)
    )
    assert isinstance(gn, GetNumber)
    assert (gn.milliseconds_inter_digit_timeout, gn.initial_timeout_ms) == (-1, 0)
    (gi,) = accepted(
        get_input(
            milliseconds_inter_speech_timeout=0,
            milliseconds_inter_digit_timeout=-5,
            milliseconds_initial_timeout=-100,
        )
    )
    assert isinstance(gi, GetInput)
    assert (
        gi.milliseconds_inter_speech_timeout,
        gi.milliseconds_inter_digit_timeout,
        gi.milliseconds_initial_timeout,
    ) == (0, -5, -100)


# --- record format and cipher -----------------------------------------------------------


@pytest.mark.parametrize("value", ["wav", "ALAW", "mulaw", "", "pcm"])
def test_record_format_outside_the_set_rejected(value: str) -> None:
    check(record(format=value), f"{REC}.format", "'alaw' or 'ulaw'")


@pytest.mark.parametrize("value", ["alaw", "ulaw"])
def test_record_format_accepted(value: str) -> None:
    (rec,) = accepted(record(format=value))
    assert isinstance(rec, Record)
    assert rec.format == value


@pytest.mark.parametrize(
    ("fields", "field", "expected"),
    [
        pytest.param({"key": "g" * 64}, "key", "32 or 48 or 64 hexadecimal", id="key-not-hex"),
        pytest.param({"key": "0x" + "0" * 62}, "key", "hexadecimal", id="key-0x"),
        pytest.param({"key": "0" * 31}, "key", "32 or 48 or 64 hexadecimal", id="key-31"),
        pytest.param({"key": "0" * 33}, "key", "32 or 48 or 64 hexadecimal", id="key-33"),
        pytest.param({"key": "0" * 63}, "key", "32 or 48 or 64 hexadecimal", id="key-63"),
        pytest.param({"key": ""}, "key", "32 or 48 or 64 hexadecimal", id="key-empty"),
        pytest.param(
            {"initialisation_vector": "z" * 32},
            "initialisation_vector",
            "32 hexadecimal",
            id="iv-not-hex",
        ),
        pytest.param(
            {"initialisation_vector": "0" * 31},
            "initialisation_vector",
            "32 hexadecimal",
            id="iv-31",
        ),
        pytest.param(
            {"initialisation_vector": "0" * 64},
            "initialisation_vector",
            "32 hexadecimal",
            id="iv-64",
        ),
        pytest.param({"type": "aesgcm"}, "type", "'aescbc'", id="type"),
    ],
)
def test_bad_cipher_rejected(fields: dict[str, Any], field: str, expected: str) -> None:
    check(record(encryption_cipher=cipher(**fields)), f"{REC}.encryption_cipher.{field}", expected)
    check(
        play({"file_to_play": "a.wav", "decryption_cipher": cipher(**fields)}),
        f"{PLAY}.play_list[0].decryption_cipher.{field}",
        expected,
    )


@pytest.mark.parametrize("missing", ["type", "key", "initialisation_vector"])
def test_cipher_field_missing_rejected(missing: str) -> None:
    fields = {k: v for k, v in cipher().items() if k != missing}
    check(
        record(encryption_cipher=fields),
        f"{REC}.encryption_cipher.{missing}",
        "required property is missing",
    )


@pytest.mark.parametrize("length", [32, 48, 64])
def test_cipher_key_lengths_accepted(length: int) -> None:
    key = ("0123456789ABCDEFabcdef" * 3)[:length]
    (rec,) = accepted(record(encryption_cipher=cipher(key=key)))
    assert isinstance(rec, Record)
    assert rec.encryption_cipher is not None
    assert rec.encryption_cipher.as_tuple() == ("aescbc", key, IV)


def test_cipher_repr_and_str_hide_key_and_iv() -> None:
    doc = {
        "actions": [
            {"record": {"next_page": NEXT, "encryption_cipher": cipher()}},
            {"play": {"play_list": [{"file_to_play": "a.wav", "decryption_cipher": cipher()}]}},
        ]
    }
    response = parse_response(json.dumps(doc))
    rec, pl = response.actions
    assert isinstance(rec, Record)
    assert isinstance(rec.encryption_cipher, Cipher)
    shown = [
        repr(rec.encryption_cipher),
        str(rec.encryption_cipher),
        f"{rec.encryption_cipher}",
        repr(rec),
        str(rec),
        repr(pl),
        str(pl),
        repr(response),
        str(response),
    ]
    for text in shown:
        assert KEY not in text and IV not in text, text
        assert KEY[:16] not in text and IV[:16] not in text, text
    assert "aescbc" in repr(rec.encryption_cipher)
    # The values are there for the code that needs them.
    assert rec.encryption_cipher.key == KEY
    assert rec.encryption_cipher.initialisation_vector == IV


@pytest.mark.parametrize(
    "fields",
    [
        {"key": KEY[:-1] + "g"},  # right length, one bad character
        {"key": KEY + "0"},
        {"initialisation_vector": IV[:-1] + "z"},
        {"initialisation_vector": IV + "0"},
    ],
)
def test_cipher_problems_do_not_echo_the_key(fields: dict[str, Any]) -> None:
    # Problems go to the call log and the server log; keys must not.
    problems = problems_of(record(encryption_cipher=cipher(**fields)))
    assert problems
    for problem in problems:
        assert KEY[:16] not in problem.message and IV[:16] not in problem.message, problem


# --- file names and URLs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../x", "'..' is not allowed"),
        ("/etc/passwd", "absolute paths are not allowed"),
        ("a/../../b", "'..' is not allowed"),
        ("..", "'..' is not allowed"),
        ("a/..", "'..' is not allowed"),
        ("prompts/../../x.wav", "'..' is not allowed"),
        ("", "the file name is empty"),
        ("\\etc\\passwd", "backslashes are not allowed"),
        ("my prompt.wav", "' ' is not allowed in file names"),
        ("caf\u00e9.wav", "'\u00e9' is not allowed in file names"),
        (".hidden.wav", "no component may start with a dot"),
        ("a//b.wav", "empty path component"),
        ("x" * 256, "longer than 255 characters"),
    ],
)
def test_file_to_play_must_be_a_name_the_store_accepts(name: str, why: str) -> None:
    """The store's own name rules (store/files.py), checked when the list is validated."""
    check(
        play({"file_to_play": name}),
        f"{PLAY}.play_list[0].file_to_play",
        "expected a file name in the media file store",
        why,
    )


@pytest.mark.parametrize("name", ["hello.wav", "prompts/hello.wav", "a..b.wav", "recordings/x"])
def test_file_to_play_in_the_namespace_accepted(name: str) -> None:
    (pl,) = accepted(play({"file_to_play": name}))
    assert isinstance(pl, Play)
    (item,) = pl.play_list
    assert isinstance(item, FileItem)
    assert item.file_to_play == name


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ftp://x", "http or https URL"),
        ("javascript:alert(1)", "http or https URL"),
        ("file:///etc/passwd", "http or https URL"),
        ("", "expected a page URL"),
        ("   ", "expected a page URL"),
    ],
)
def test_bad_page_url_rejected(url: str, expected: str) -> None:
    check(get_number(next_page={"url": url}), f"{GN}.next_page.url", expected)
    check(redirect_to(url), "$.actions[0].redirect.next_page.url", expected)
    check(
        record(recording_available_page={"url": url}),
        f"{REC}.recording_available_page.url",
        expected,
    )


@pytest.mark.parametrize(
    "url",
    ["/next", "next", "../up/next?x=1", "https://example.com/next", "http://127.0.0.1:8080/n"],
)
def test_page_url_accepted(url: str) -> None:
    (gn,) = accepted(get_number(next_page={"url": url}))
    assert isinstance(gn, GetNumber)
    assert gn.next_page.url == url


def test_page_method_outside_post_get_rejected() -> None:
    check(get_number(next_page={"url": "/n", "method": "PUT"}), f"{GN}.next_page.method", "'POST'")


# --- the envelope -----------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1", "3", "20", "2.", "v2", ""])
def test_api_version_other_than_2_rejected(version: str) -> None:
    check({"actions": [], "api_version": version}, "$.api_version", "'2.0'")


@pytest.mark.parametrize("version", ["2.0", "2", "2.1"])
def test_api_version_2_accepted(version: str) -> None:
    assert accepted({"actions": [], "api_version": version}) == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("not json", "not valid JSON", id="text"),
        pytest.param("", "not valid JSON", id="empty"),
        pytest.param('{"actions": [}', "not valid JSON", id="truncated"),
        pytest.param(b"\xff\xfe\x00", "not valid JSON", id="bytes"),
        pytest.param("[]", "expected an object with 'actions'", id="list"),
        pytest.param('[{"hang_up": {}}]', "expected an object with 'actions'", id="action-list"),
        pytest.param('"actions"', "expected an object with 'actions'", id="string"),
        pytest.param("null", "expected an object with 'actions'", id="null"),
    ],
)
def test_body_not_an_object_rejected(raw: str | bytes, expected: str) -> None:
    check(raw, "$", expected)


def test_missing_actions_rejected() -> None:
    check({"token": "t"}, "$.actions", "required property is missing")


def test_empty_play_list_rejected() -> None:
    check(one({"play": {"play_list": []}}), f"{PLAY}.play_list", "at least 1 item")
    check(get_number(prompt={"play_list": []}), f"{GN}.prompt.play_list", "at least 1 item")


def test_empty_text_to_say_rejected() -> None:
    check(play({"text_to_say": ""}), f"{PLAY}.play_list[0].text_to_say", "at least 1 character")


def test_empty_action_list_accepted() -> None:
    assert accepted({"actions": []}) == []


def test_every_problem_is_reported() -> None:
    doc = {
        "actions": [
            {"get_digits": {}},
            {"get_number": {"next_page": NEXT, "digit_count": 40, "end_digit": "x"}},
            {"record": {"next_page": NEXT, "format": "wav", "encryption_cipher": cipher(key="0")}},
            {"play": {"play_list": [{"text_to_say": "a"}, {"text_to_say": "b", "bogus": 1}]}},
            {"get_input": {"next_page": {"url": "ftp://x"}, "speech_input_mode": "x"}},
            {"hang_up": {}},
        ],
        "token": 5,
        "api_version": "1.0",
        "extra": True,
    }
    problems = problems_of(doc)
    paths = [p.path for p in problems]
    assert sorted(paths) == sorted(
        [
            "$.actions[0]",
            "$.actions[1].get_number.digit_count",
            "$.actions[1].get_number.end_digit",
            "$.actions[2].record.format",
            "$.actions[2].record.encryption_cipher.key",
            "$.actions[3].play.play_list[1].bogus",
            "$.actions[4].get_input.next_page.url",
            "$.actions[4].get_input.speech_input_mode",
            "$.token",
            "$.api_version",
            "$.extra",
        ]
    )
    with pytest.raises(InvalidResponse) as info:
        parse_response(json.dumps(doc))
    for path in paths:
        assert path in str(info.value)


# --- the token ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "token"),
    [
        pytest.param({"actions": [], "token": "abc-123"}, "abc-123", id="given"),
        pytest.param({"actions": [], "token": ""}, "", id="empty"),
        pytest.param({"actions": []}, None, id="absent-is-null"),
        pytest.param({"actions": [], "token": None}, None, id="null"),
        pytest.param({"actions": [], "token": "t" * 5000}, "t" * 5000, id="5000-characters"),
    ],
)
def test_token(validator: Any, doc: dict[str, Any], token: str | None) -> None:
    # Aculab's HTTP response: "an optional user-defined string of up to 5000 characters.
    # This defaults to null."
    assert parse_response(json.dumps(doc)).token == token
    validator.validate(doc)


def test_a_token_over_5000_characters_is_refused(validator: Any) -> None:
    doc = {"actions": [], "token": "t" * 5001}
    assert only_problem(doc).path == "$.token"
    assert not validator.is_valid(doc)


def test_parse_response_accepts_bytes() -> None:
    response = parse_response(b'{"actions": [{"hang_up": {}}], "token": "t"}')
    assert [type(a) for a in response.actions] == [HangUp]
    assert response.token == "t"


# --- null for optional properties ------------------------------------------------------------

NULL_OPTIONAL = [
    pytest.param(get_number(prompt=None), f"{GN}.prompt", id="get_number-prompt"),
    pytest.param(
        get_number(milliseconds_initial_timeout=None),
        f"{GN}.milliseconds_initial_timeout",
        id="get_number-initial-timeout",
    ),
    pytest.param(
        get_number(on_digit_timeout_messages=None),
        f"{GN}.on_digit_timeout_messages",
        id="get_number-messages",
    ),
    pytest.param(
        get_input(digit_input_options=None), f"{GI}.digit_input_options", id="get_input-digits"
    ),
    pytest.param(
        get_input(speech_recognition_options=None),
        f"{GI}.speech_recognition_options",
        id="get_input-speech",
    ),
    pytest.param(record(format=None), f"{REC}.format", id="record-format"),
    pytest.param(record(encryption_cipher=None), f"{REC}.encryption_cipher", id="record-cipher"),
    pytest.param(
        record(recording_available_page=None),
        f"{REC}.recording_available_page",
        id="record-available-page",
    ),
    pytest.param(
        play({"text_to_say": "x", "tts_voice": None}),
        f"{PLAY}.play_list[0].tts_voice",
        id="play-tts_voice",
    ),
    pytest.param({"actions": [], "api_version": None}, "$.api_version", id="api_version"),
    pytest.param(
        play({"file_to_play": "a.wav", "text_to_say": None}),
        f"{PLAY}.play_list[0].text_to_say",
        id="play-item-other-kind",
    ),
]


def _without(doc: Any, path: str) -> Any:
    """``doc`` with the property at ``path`` (``$.a.b[0].c``) left out."""
    steps: list[Any] = [
        int(index) if index else name for name, index in re.findall(r"\.(\w+)|\[(\d+)\]", path)
    ]
    out = copy.deepcopy(doc)
    node = out
    for step in steps[:-1]:
        node = node[step]
    del node[steps[-1]]
    return out


@pytest.mark.parametrize(("doc", "path"), NULL_OPTIONAL)
def test_null_for_optional_property_means_not_given(validator: Any, doc: Any, path: str) -> None:
    # Aculab's rule: an optional property that is null gets its default.
    assert parse_response(json.dumps(doc)) == parse_response(json.dumps(_without(doc, path)))
    validator.validate(doc)


NULL_REQUIRED = [
    pytest.param(get_number(next_page=None), "$.actions[0].get_number.next_page", id="next_page"),
    pytest.param(one({"get_number": None}), "$.actions[0].get_number", id="action-body"),
    pytest.param(play(None), "$.actions[0].play.play_list[0]", id="play-item"),
    pytest.param({"actions": None}, "$.actions", id="actions"),
    pytest.param(get_number(bogus=None), "$.actions[0].get_number.bogus", id="unknown-property"),
]


@pytest.mark.parametrize(("doc", "path"), NULL_REQUIRED)
def test_null_for_a_required_or_unknown_property_is_an_error(
    validator: Any, doc: Any, path: str
) -> None:
    assert only_problem(doc).path == path
    assert not validator.is_valid(doc)


# --- the JSON Schema ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


RICH = {
    "api_version": "2.0",
    "token": "session-1",
    "actions": [
        {
            "play": {
                "play_list": [
                    {
                        "text_to_say": "Welcome",
                        "tts_voice": "English US Female",
                        "text_is_private": True,
                    },
                    {
                        "file_to_play": "prompts/welcome.wav",
                        "decryption_cipher": cipher(key="A" * 32),
                    },
                ],
                "barge_in_on_digit": False,
                "barge_in_on_speech": True,
                "barge_in_on_speech_options": {"language": "en-GB", "barge_in_phrases": ["stop"]},
            }
        },
        {"clear_input": {}},
        {
            "get_number": {
                "next_page": {"url": "https://example.com/number", "method": "GET"},
                "prompt": SAY,
                "digit_count": 32,
                "end_digit": "",
                "valid_digits": DIGITS,
                "help_digit": "",
                "seconds_timeout": 0,
                "milliseconds_inter_digit_timeout": -1,
                "milliseconds_initial_timeout": 0,
                "on_digit_timeout_messages": [SAY, {**SAY, "barge_in_on_digit": True}],
                "on_invalid_digit_messages": [],
            }
        },
        {
            "get_input": {
                "next_page": {"url": "input"},
                "prompt": SAY,
                "speech_input_mode": "auto",
                "speech_recognition_options": {
                    "language": "cmn-Hans-CN",
                    "language_outbound": "en-US",
                    "word_hints": [{"words": ["yes", "no"]}],
                    "max_alternatives": 3,
                    "enable_profanity_filtering": True,
                    "speech_model_options": {"model": "phone_call"},
                },
                "digit_input_enabled": True,
                "digit_input_options": {"digit_count": 4, "end_digit": "*", "valid_digits": "123"},
                "seconds_timeout": 10,
                "milliseconds_inter_speech_timeout": 800,
                "milliseconds_inter_digit_timeout": 2000,
                "milliseconds_initial_timeout": 3000,
                "on_input_timeout_messages": [SAY],
                "on_invalid_input_messages": [SAY],
                "help_digit": "#",
            }
        },
        {
            "record": {
                "next_page": {"url": "/recorded"},
                "id": "msg-1",
                "barge_in_digits": "#*",
                "seconds_max_duration": 120,
                "milliseconds_max_silence": 2000,
                "milliseconds_max_initial_silence": 5000,
                "format": "ulaw",
                "encryption_cipher": cipher(),
                "beep_on_start": True,
                "recording_available_page": {"url": "/available"},
            }
        },
        {"sleep": {"seconds": 1.5}},
        {"redirect": {"next_page": {"url": "/elsewhere"}}},
        {"hang_up": {}},
    ],
}


def test_schema_declares_draft_2020_12() -> None:
    assert json_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_rich_document_valid_for_schema_and_validator(validator: Any) -> None:
    validator.validate(RICH)
    response = parse_response(json.dumps(RICH))
    assert [type(a) for a in response.actions] == [
        Play,
        ClearInput,
        GetNumber,
        GetInput,
        Record,
        Sleep,
        Redirect,
        HangUp,
    ]
    assert response.token == "session-1"


# Documents that both the validator and the schema must reject.
BOTH_REJECT = [
    pytest.param(one({"get_digits": {}}), id="unknown-action"),
    pytest.param(one({}), id="item-no-key"),
    pytest.param(one({"hang_up": {}, "clear_input": {}}), id="item-two-keys"),
    pytest.param(one(5), id="item-number"),
    pytest.param({"actions": [], "bogus": 1}, id="unknown-envelope-property"),
    pytest.param(get_number(bogus=1), id="unknown-action-property"),
    pytest.param(play({"text_to_say": "x", "voice": "a"}), id="unknown-play-item-property"),
    pytest.param(
        get_number(next_page={"url": "/n", "timeout": 5}), id="unknown-next_page-property"
    ),
    pytest.param(get_input(digit_input_options={"x": 1}), id="unknown-digit-options-property"),
    pytest.param(get_input(speech_recognition_options={"x": 1}), id="unknown-speech-property"),
    pytest.param(record(encryption_cipher=cipher(mode="cbc")), id="unknown-cipher-property"),
    pytest.param(get_number(digit_count="4"), id="str-for-int"),
    pytest.param(get_input(digit_input_enabled=1), id="int-for-bool"),
    pytest.param(get_number(next_page=None), id="null-for-required"),
    pytest.param(get_number(next_page=[NEXT]), id="list-for-object"),
    pytest.param(get_number(valid_digits="12a"), id="valid_digits-lowercase"),
    pytest.param(get_number(end_digit="E"), id="end_digit-E"),
    pytest.param(get_number(end_digit="##"), id="end_digit-two"),
    pytest.param(get_number(help_digit="x"), id="help_digit-x"),
    pytest.param(record(barge_in_digits="#a"), id="barge_in_digits"),
    pytest.param(get_number(digit_count=33), id="digit_count-33"),
    pytest.param(get_number(digit_count=-1), id="digit_count-negative"),
    pytest.param(record(encryption_cipher=cipher(key="0" * 31)), id="key-31"),
    pytest.param(record(encryption_cipher=cipher(key="0" * 33)), id="key-33"),
    pytest.param(record(encryption_cipher=cipher(key="g" * 64)), id="key-not-hex"),
    pytest.param(record(encryption_cipher=cipher(initialisation_vector="0" * 31)), id="iv-31"),
    pytest.param(get_input(speech_recognition_options={"max_alternatives": 4}), id="max-alt-4"),
    pytest.param(get_input(speech_recognition_options={"max_alternatives": 0}), id="max-alt-0"),
    pytest.param(get_input(speech_input_mode="x"), id="speech-mode"),
    pytest.param(record(format="wav"), id="format"),
    pytest.param(get_number(seconds_timeout=-1), id="seconds_timeout-negative"),
    pytest.param(record(seconds_max_duration=0), id="seconds_max_duration-0"),
    pytest.param(play({"file_to_play": "../x"}), id="file-dotdot"),
    pytest.param(play({"file_to_play": "/etc/passwd"}), id="file-absolute"),
    pytest.param(play({"file_to_play": "a/../../b"}), id="file-inner-dotdot"),
    pytest.param(get_number(next_page={"url": "ftp://x"}), id="url-ftp"),
    pytest.param(get_number(next_page={"url": ""}), id="url-empty"),
    pytest.param({"actions": [], "api_version": "1.0"}, id="api-1.0"),
    pytest.param({"token": "t"}, id="missing-actions"),
    pytest.param([], id="body-list"),
    pytest.param(one({"play": {"play_list": []}}), id="empty-play_list"),
    pytest.param(one({"get_number": {}}), id="missing-next_page"),
]


@pytest.mark.parametrize("doc", BOTH_REJECT)
def test_schema_and_validator_both_reject(validator: Any, doc: Any) -> None:
    assert problems_of(doc)
    assert not validator.is_valid(doc)


BOTH_ACCEPT = [
    pytest.param({"actions": []}, id="empty"),
    pytest.param({"actions": [], "token": None, "api_version": "2"}, id="token-null-api-2"),
    pytest.param(get_number(next_page={"url": "next"}), id="relative-url"),
    pytest.param(get_number(digit_count=None, prompt=None), id="null-for-optional"),
    pytest.param(get_number(digit_count=0), id="digit_count-0"),
    pytest.param(record(barge_in_digits=""), id="no-barge-in-digits"),
    pytest.param(record(encryption_cipher=cipher(key="0" * 48)), id="key-48"),
    pytest.param(play({"file_to_play": "a..b.wav"}), id="file-with-dots"),
    pytest.param(get_input(speech_recognition_options={"max_alternatives": 1}), id="max-alt-1"),
]


@pytest.mark.parametrize("doc", BOTH_ACCEPT)
def test_schema_and_validator_both_accept(validator: Any, doc: Any) -> None:
    parse_response(json.dumps(doc))
    validator.validate(doc)


@pytest.mark.parametrize("name", ["x\\..\\y", "..\\secret.wav", "a\x00b.wav"])
def test_schema_rejects_file_names_the_validator_rejects(validator: Any, name: str) -> None:
    doc = play({"file_to_play": name})
    assert problems_of(doc)
    assert not validator.is_valid(doc)


@pytest.mark.parametrize(
    ("definition", "names"),
    [
        ("GetNumber", "get_number"),
        ("GetInput", "get_input"),
        ("Record", "record"),
    ],
)
def test_schema_properties_and_defaults_match_the_models(definition: str, names: str) -> None:
    schema = json_schema()
    properties = schema["$defs"][definition]["properties"]
    assert schema["$defs"][definition]["required"] == ["next_page"]
    (parsed,) = accepted(one({names: {"next_page": NEXT}}))
    for name, prop in properties.items():
        if "default" in prop:
            assert getattr(parsed, name) == prop["default"], name
    assert set(properties) == set(type(parsed).model_fields)


def test_schema_message_play_defaults_to_no_barge_in() -> None:
    defs = json_schema()["$defs"]
    assert defs["MessagePlay"]["properties"]["barge_in_on_digit"]["default"] is False
    assert defs["Play"]["properties"]["barge_in_on_digit"]["default"] is True
