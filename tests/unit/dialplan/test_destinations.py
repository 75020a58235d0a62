"""A connect's destinations in Aculab's forms (callhook/dialplan/destinations.py): the prefixes of
Aculab's "Call prefixes" table, the rule for a destination without one, and what
validation refuses before any call (with its JSON path)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import pytest

from callhook.actions.response import InvalidResponse, json_schema, parse_response
from callhook.dialplan import destinations
from callhook.dialplan.destinations import Destination


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tel:441908273800", Destination("number", "+441908273800")),
        ("tel:+441908273800", Destination("number", "+441908273800")),
        ("TEL:44-1908-273800", Destination("number", "+441908273800")),
        ("sip:contact@example.com", Destination("sip", "sip:contact@example.com")),
        ("sips:contact@example.com:5061", Destination("sip", "sips:contact@example.com:5061")),
        ("contact@example.com", Destination("sip", "sip:contact@example.com")),
        ("441908273800", Destination("number", "441908273800")),
        ("01908-273800", Destination("number", "01908273800")),
        ("+15551234567", Destination("number", "+15551234567")),
        ("*97", Destination("number", "*97")),
        ("loc:my_inbound_service", Destination("local", "my_inbound_service")),
        ("webrtc:clientId", Destination("webrtc", "clientId")),
        ("webrtc:agent+7.desk_2-b", Destination("webrtc", "agent+7.desk_2-b")),
        (
            "wss://www.example.com/mywsapp",
            Destination("websocket", "wss://www.example.com/mywsapp"),
        ),
        ("ws://127.0.0.1:8000/agent", Destination("websocket", "ws://127.0.0.1:8000/agent")),
        ("con:MyConferenceRoom", Destination("conference", "MyConferenceRoom")),
        ("user:alice", Destination("user", "alice")),
        ("  sip:a@b  ", Destination("sip", "sip:a@b")),
    ],
)
def test_parse(text: str, expected: Destination) -> None:
    assert destinations.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tel:01908273800", "no leading 0"),
        ("tel:", "full international number"),
        ("tel:44 1908", "full international number"),
        ("tel:44--1908", "full international number"),
        ("tel:sales", "full international number"),
        ("fax:441908273800", "unknown prefix 'fax:'"),
        ("mailto:bob@example.com", "unknown prefix 'mailto:'"),
        ("sip:", "not a SIP address"),
        ("sip:bob@", "not a SIP address"),
        ("loc:", "loc: names an application"),
        ("loc:../etc", "loc: names an application"),
        ("webrtc:", "client id"),
        ("webrtc:bad id", "client id"),
        ("wss:", "wss://host/path"),
        ("con:", "conference room"),
        ("user:", "user: names"),
        ("support", "expected a telephone number"),
        ("441908 273800", "expected a telephone number"),
        ("44-", "expected a telephone number"),
    ],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(destinations.BadDestination, match=re.escape(message)):
        destinations.parse(text)


def connect(*dests: str) -> dict[str, Any]:
    return {"actions": [{"connect": {"destinations": list(dests)}}]}


@pytest.fixture(scope="module")
def validator() -> Any:
    return jsonschema.Draft202012Validator(json_schema())


@pytest.mark.parametrize(
    "text",
    [
        "tel:441908273800",
        "sip:a@b.example",
        "bob@pbx.example",
        "2000",
        "loc:support",
        "webrtc:desk-1",
        "wss://agent.example/v1",
        "user:alice",
        "con:weekly",
    ],
)
def test_validate_and_the_schema_accept(validator: Any, text: str) -> None:
    parse_response(json.dumps(connect(text)))
    validator.validate(connect(text))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("tel:0441908273800", "no leading 0"),
        ("fax:123", "unknown prefix"),
        ("support", "expected a telephone number"),
    ],
)
def test_validate_and_the_schema_refuse_before_any_call(
    validator: Any, text: str, why: str
) -> None:
    with pytest.raises(InvalidResponse) as info:
        parse_response(json.dumps(connect("sip:ok@example.com", text)))
    (problem,) = info.value.problems
    assert problem.path == "$.actions[0].connect.destinations[1]"
    assert why in problem.message
    assert not validator.is_valid(connect(text))


def test_a_room_is_no_one_of_several_destinations(validator: Any) -> None:
    """A room takes the caller at once: validate refuses it beside others (the JSON Schema
    cannot say so: it checks each destination alone)."""
    with pytest.raises(InvalidResponse) as info:
        parse_response(json.dumps(connect("sip:ok@example.com", "con:weekly")))
    (problem,) = info.value.problems
    assert problem.path == "$.actions[0].connect"
    assert "cannot be one of several destinations" in problem.message
