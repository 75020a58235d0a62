"""A play action nested in another action, in both of its accepted forms.

The reference types ``prompt`` as "play action" and the ``on_*_messages``
arrays as "array of play actions"; its §4.1 writes an action as an object with
the single key ``play``. That keyed form is canonical; the bare play body is a
documented shorthand. For every place a play action nests, both forms must be
accepted by the validator and by the published JSON Schema, must give the same
:class:`Play`, and an error inside either must be reported at its own JSON path.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import pytest

from callhook.actions.response import InvalidResponse, json_schema, parse_response
from callhook.actions.schema import Play

BODY = {"play_list": [{"text_to_say": "Enter your number."}]}
OTHER = {"play_list": [{"file_to_play": "prompts/sorry.wav"}], "barge_in_on_digit": True}
NEXT = {"url": "/next"}


def _in(action: str, **base: Any) -> Callable[[str, Any], dict[str, Any]]:
    def make(prop: str, value: Any) -> dict[str, Any]:
        return {"actions": [{action: {**base, prop: value}}]}

    return make


GET_NUMBER = _in("get_number", next_page=NEXT)
GET_INPUT = _in("get_input", next_page=NEXT)
MENU_OPTIONS = [{"digit": "1", "next_page": NEXT}]
RUN_MENU = _in("run_menu", menu_options=MENU_OPTIONS)
SPEECH_OPTIONS = [{"words": ["sales"], "digit": "1", "next_page": NEXT}]
RUN_SPEECH_MENU = _in("run_speech_menu", menu_options=SPEECH_OPTIONS)

# (action builder, action name, property): every place a single play action nests.
SINGLE = [
    pytest.param(GET_NUMBER, "get_number", "prompt", id="get_number.prompt"),
    pytest.param(GET_INPUT, "get_input", "prompt", id="get_input.prompt"),
    pytest.param(RUN_MENU, "run_menu", "prompt", id="run_menu.prompt"),
    pytest.param(RUN_SPEECH_MENU, "run_speech_menu", "prompt", id="run_speech_menu.prompt"),
]
# Every array of play actions.
ARRAYS = [
    pytest.param(GET_NUMBER, "get_number", "on_digit_timeout_messages", id="gn.timeout"),
    pytest.param(GET_NUMBER, "get_number", "on_invalid_digit_messages", id="gn.invalid"),
    pytest.param(GET_INPUT, "get_input", "on_input_timeout_messages", id="gi.timeout"),
    pytest.param(GET_INPUT, "get_input", "on_invalid_input_messages", id="gi.invalid"),
    pytest.param(RUN_MENU, "run_menu", "on_digit_timeout_messages", id="menu.timeout"),
    pytest.param(RUN_MENU, "run_menu", "on_invalid_digit_messages", id="menu.invalid"),
    pytest.param(RUN_SPEECH_MENU, "run_speech_menu", "on_input_timeout_messages", id="sm.timeout"),
    pytest.param(RUN_SPEECH_MENU, "run_speech_menu", "on_invalid_input_messages", id="sm.invalid"),
]


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def parsed(doc: dict[str, Any]) -> Any:
    (action,) = parse_response(json.dumps(doc)).actions
    return action


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidResponse) as info:
        parse_response(json.dumps(doc))
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize(("make", "action", "prop"), SINGLE)
def test_a_prompt_in_both_forms_is_the_same_play(
    validator: Any, make: Callable[..., dict[str, Any]], action: str, prop: str
) -> None:
    keyed, bare = make(prop, {"play": BODY}), make(prop, BODY)
    validator.validate(keyed)
    validator.validate(bare)
    a, b = getattr(parsed(keyed), prop), getattr(parsed(bare), prop)
    assert isinstance(a, Play) and a == b
    assert a.play_list[0].text_to_say == "Enter your number."  # type: ignore[union-attr]
    assert a.barge_in_on_digit is True  # a prompt's default (reference 2.1)


@pytest.mark.parametrize(("make", "action", "prop"), ARRAYS)
def test_message_arrays_take_both_forms_mixed(
    validator: Any, make: Callable[..., dict[str, Any]], action: str, prop: str
) -> None:
    doc = make(prop, [{"play": BODY}, BODY, {"play": OTHER}])
    validator.validate(doc)
    messages = getattr(parsed(doc), prop)
    assert [type(m).__name__ for m in messages] == ["MessagePlay"] * 3
    assert messages[0] == messages[1]
    # Barge-in is off by default in messages (reference 2.2), in both forms; a message
    # that asks for it gets it.
    assert [m.barge_in_on_digit for m in messages] == [False, False, True]


@pytest.mark.parametrize(("make", "action", "prop"), SINGLE)
def test_an_error_inside_a_keyed_prompt_names_its_path(
    validator: Any, make: Callable[..., dict[str, Any]], action: str, prop: str
) -> None:
    keyed = make(prop, {"play": {**BODY, "loop": True}})
    assert problems(keyed) == [f"$.actions[0].{action}.{prop}.play.loop: unknown property"]
    assert not validator.is_valid(keyed)
    bare = make(prop, {**BODY, "loop": True})
    assert problems(bare) == [f"$.actions[0].{action}.{prop}.loop: unknown property"]
    assert not validator.is_valid(bare)


@pytest.mark.parametrize(("make", "action", "prop"), ARRAYS)
def test_an_error_inside_a_keyed_message_names_its_path(
    validator: Any, make: Callable[..., dict[str, Any]], action: str, prop: str
) -> None:
    doc = make(prop, [{"play": BODY}, {"play": {"play_list": []}}])
    (problem,) = problems(doc)
    assert problem.startswith(f"$.actions[0].{action}.{prop}[1].play.play_list: ")
    assert "at least 1 item" in problem
    assert not validator.is_valid(doc)


@pytest.mark.parametrize(
    ("value", "path", "expected"),
    [
        ({"play": BODY, "barge_in_on_digit": False}, ".barge_in_on_digit", "unknown property"),
        ({"get_number": {}}, "", "expected a play action"),
        ("Welcome", "", "expected a play action"),
        ([BODY], "", "expected a play action"),
        ({"play": "Welcome"}, ".play", "should be a valid dictionary"),
    ],
)
def test_what_is_not_a_play_action(validator: Any, value: Any, path: str, expected: str) -> None:
    doc = GET_NUMBER("prompt", value)
    (problem,) = problems(doc)
    assert problem.startswith(f"$.actions[0].get_number.prompt{path}: "), problem
    assert expected in problem
    assert not validator.is_valid(doc)


def test_the_schema_documents_both_forms_keyed_first() -> None:
    defs = json_schema()["$defs"]
    for name in ("GetNumber", "GetInput", "RunMenu", "RunSpeechMenu"):
        prompt = defs[name]["properties"]["prompt"]
        given, null = prompt["anyOf"]  # an optional property: null means "not given"
        assert null == {"type": "null"}
        refs = [r["$ref"].rsplit("/", 1)[1] for r in given["oneOf"]]
        assert refs == ["PlayStep", "Play"], name
        assert '{"play":' in prompt["description"]
    assert defs["PlayStep"]["required"] == ["play"]
    assert defs["PlayStep"]["additionalProperties"] is False
