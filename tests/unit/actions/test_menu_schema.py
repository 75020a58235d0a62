"""Validation of ``run_menu``, ``run_speech_menu`` and ``delete_file``: shapes, defaults, paths.

Every bad menu definition gets a message that names the JSON path of the
offending value (or, for a clash between two values, the path of the list or
action and the indexes of both), and the published JSON Schema refuses what
the validator refuses wherever a schema can say it.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import pytest

from callhook.actions.menuschema import RunMenu, RunSpeechMenu
from callhook.actions.response import InvalidResponse, json_schema, parse_response
from callhook.actions.schema import DeleteFile

NEXT = {"url": "/next"}
RM = "$.actions[0].run_menu"
SM = "$.actions[0].run_speech_menu"


@pytest.fixture(scope="module")
def validator() -> Any:
    return jsonschema.Draft202012Validator(json_schema())


def doc(action: str, **props: Any) -> dict[str, Any]:
    return {"actions": [{action: props}]}


def parsed(document: dict[str, Any]) -> Any:
    (action,) = parse_response(json.dumps(document)).actions
    return action


def problems(document: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidResponse) as info:
        parse_response(json.dumps(document))
    return [str(p) for p in info.value.problems]


def option(digit: str, url: str = "/next") -> dict[str, Any]:
    return {"digit": digit, "next_page": {"url": url}}


def test_run_menu_defaults_are_aculabs(validator: Any) -> None:
    document = doc("run_menu", menu_options=[option("1")])
    validator.validate(document)
    menu = parsed(document)
    assert isinstance(menu, RunMenu)
    assert menu.help_digit == "*"
    assert menu.seconds_digit_timeout == 5
    assert menu.prompt is None
    assert menu.on_digit_timeout_messages is None  # None: the default messages


def test_run_speech_menu_defaults_are_aculabs(validator: Any) -> None:
    document = doc("run_speech_menu", menu_options=[{"words": ["yes"], "next_page": NEXT}])
    validator.validate(document)
    menu = parsed(document)
    assert isinstance(menu, RunSpeechMenu)
    assert (menu.language, menu.help_digit, menu.help_word, menu.seconds_timeout) == (
        "en-US",
        "*",
        "help",
        5,
    )


@pytest.mark.parametrize(
    ("document", "path", "expected"),
    [
        pytest.param(
            doc("run_menu", menu_options=[]), f"{RM}.menu_options", "at least 1", id="no-options"
        ),
        pytest.param(
            doc("run_menu"), f"{RM}.menu_options", "required property is missing", id="missing"
        ),
        pytest.param(
            doc("run_menu", menu_options=[option("1"), option("2"), option("1")]),
            f"{RM}.menu_options",
            "digit '1' is used by menu_options[0] and menu_options[2]",
            id="duplicate-digit",
        ),
        pytest.param(
            doc("run_menu", menu_options=[option("x")]),
            f"{RM}.menu_options[0].digit",
            "expected one digit of 0123456789ABCD#*, got 'x'",
            id="bad-digit",
        ),
        pytest.param(
            doc("run_menu", menu_options=[option("12")]),
            f"{RM}.menu_options[0].digit",
            "expected one digit",
            id="two-digits",
        ),
        pytest.param(
            doc("run_menu", menu_options=[option("")]),
            f"{RM}.menu_options[0].digit",
            "expected one digit",
            id="empty-digit",
        ),
        pytest.param(
            doc("run_menu", menu_options=[{"digit": "1"}]),
            f"{RM}.menu_options[0].next_page",
            "required property is missing",
            id="no-next_page",
        ),
        pytest.param(
            doc("run_menu", menu_options=[option("1"), option("*")]),
            RM,
            "help_digit '*' is also the digit of menu_options[1]",
            id="help-digit-clash",
        ),
        pytest.param(
            doc("run_menu", menu_options=[option("1")], seconds_digit_timeout=0),
            f"{RM}.seconds_digit_timeout",
            "greater than or equal to 1",
            id="timeout-0",
        ),
        pytest.param(
            doc("run_menu", menu_options=[option("1")], help_digit="**"),
            f"{RM}.help_digit",
            "one digit",
            id="bad-help-digit",
        ),
        pytest.param(
            doc("run_speech_menu", menu_options=[{"words": [""], "next_page": NEXT}]),
            f"{SM}.menu_options[0].words[0]",
            "expected a word or short phrase, got ''",
            id="empty-word",
        ),
        pytest.param(
            doc("run_speech_menu", menu_options=[{"words": ["  ?! "], "next_page": NEXT}]),
            f"{SM}.menu_options[0].words[0]",
            "expected a word or short phrase",
            id="no-letters",
        ),
        pytest.param(
            doc("run_speech_menu", menu_options=[{"next_page": NEXT}]),
            f"{SM}.menu_options[0]",
            "needs words to say, a digit to press, or both",
            id="neither",
        ),
        pytest.param(
            doc(
                "run_speech_menu",
                menu_options=[
                    {"words": ["Sales"], "next_page": NEXT},
                    {"words": ["sales!"], "next_page": NEXT},
                ],
            ),
            f"{SM}.menu_options",
            "'sales!' is a word of menu_options[0] and menu_options[1]",
            id="duplicate-word",
        ),
        pytest.param(
            doc(
                "run_speech_menu",
                menu_options=[
                    {"words": ["a"], "digit": "3", "next_page": NEXT},
                    {"words": ["b"], "digit": "3", "next_page": NEXT},
                ],
            ),
            f"{SM}.menu_options",
            "digit '3' is used by menu_options[0] and menu_options[1]",
            id="speech-duplicate-digit",
        ),
        pytest.param(
            doc("run_speech_menu", menu_options=[{"words": ["Help"], "next_page": NEXT}]),
            SM,
            "help_word 'help' is also a word of menu_options[0]",
            id="help-word-clash",
        ),
        pytest.param(
            doc("run_speech_menu", menu_options=[option("1")], language="english"),
            f"{SM}.language",
            "BCP-47",
            id="language",
        ),
        pytest.param(
            doc("run_speech_menu", menu_options=[option("1")], help_word="?"),
            SM,
            "help_word: expected a word or an empty string",
            id="help-word-no-letters",
        ),
    ],
)
def test_bad_menus_are_refused_with_their_path(
    validator: Any, document: dict[str, Any], path: str, expected: str
) -> None:
    (problem,) = problems(document)
    assert problem.startswith(f"{path}: "), problem
    assert expected in problem, problem


@pytest.mark.parametrize(
    "document",
    [
        doc("run_menu", menu_options=[]),
        doc("run_menu", menu_options=[option("x")]),
        doc("run_menu", menu_options=[option("1")], seconds_digit_timeout=0),
        doc("run_speech_menu", menu_options=[{"words": [""], "next_page": NEXT}]),
        doc("run_speech_menu", menu_options=[{"words": ["a"], "next_page": NEXT, "x": 1}]),
        doc("delete_file", filename="../x.wav"),
        doc("delete_file"),
    ],
)
def test_the_schema_refuses_them_too(validator: Any, document: dict[str, Any]) -> None:
    assert not validator.is_valid(document)


def test_a_speech_menu_option_may_have_a_digit_and_no_words(validator: Any) -> None:
    document = doc("run_speech_menu", menu_options=[option("1")], help_word="")
    validator.validate(document)
    (only,) = parsed(document).menu_options
    assert (only.words, only.digit) == ([], "1")


def test_delete_file_takes_a_name_of_the_namespace(validator: Any) -> None:
    document = doc("delete_file", filename="recordings/20261124-abc.wav")
    validator.validate(document)
    assert parsed(document) == DeleteFile(filename="recordings/20261124-abc.wav")


@pytest.mark.parametrize(
    ("name", "expected"),
    [("../etc/passwd", "'..' is not allowed"), ("/abs.wav", "expected a file name")],
)
def test_delete_file_names_are_confined(name: str, expected: str) -> None:
    (problem,) = problems(doc("delete_file", filename=name))
    assert problem.startswith("$.actions[0].delete_file.filename: "), problem
    assert expected in problem


def test_a_body_nested_too_deeply_is_an_invalid_list_not_a_crash() -> None:
    body = "[" * 100_000 + "]" * 100_000
    with pytest.raises(InvalidResponse) as info:
        parse_response(body)
    assert str(info.value) == "$: nested too deeply to be an action list"
