"""The transfer action's machine (callhook/actions/transfer.py) on a virtual clock, and its
wire model: a REFER, its answer and NOTIFYs, the fallback connect, and the result."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from callhook.actions.connectschema import Transfer
from callhook.actions.machine import ActionContext, Completed, Continue
from callhook.actions.transfer import TransferMachine
from callhook.events import (
    CallCallee,
    CalleeAnswered,
    CalleeEnded,
    JoinCallee,
    Refer,
    ReferAnswered,
    ReferNotified,
    StartPrompt,
)

T0 = 50.0
PAGE = {"url": "/transferred"}


def machine(**props: Any) -> TransferMachine:
    action = Transfer.model_validate({"destination": "sip:bob@example.com", **props})
    return TransferMachine(action, ActionContext())


def result(m: TransferMachine) -> dict[str, Any]:
    assert isinstance(m.outcome, Completed) and m.outcome.action == "transfer"
    return m.outcome.result


def test_accepted_then_answered_is_transferred() -> None:
    m = machine(next_page=PAGE, referred_by="sip:ivr@callhook.example")
    assert m.start(T0) == [Refer("sip:bob@example.com", "sip:ivr@callhook.example")]
    assert m.deadline == T0 + 30  # seconds_timeout's default
    assert m.handle(ReferAnswered(202), T0 + 0.1) == []
    for status in (100, 180):
        m.handle(ReferNotified(status), T0 + 1)
        assert m.outcome is None
    m.handle(ReferNotified(200, "", final=True), T0 + 4)
    assert result(m) == {
        "transferred": True,
        "destination": "sip:bob@example.com",
        "refer_status": "202",
        "notify_status": "200",
        "call_cause": "",
        "call_raw_cause": "200",
        "fell_back": False,
    }
    assert m.deadline is None


def test_the_destination_refusing_leaves_the_caller_here_with_its_cause() -> None:
    m = machine(next_page=PAGE)
    m.start(T0)
    m.handle(ReferAnswered(202), T0)
    m.handle(ReferNotified(180), T0 + 1)
    m.handle(ReferNotified(486, "busy", final=True), T0 + 2)
    got = result(m)
    assert (got["transferred"], got["notify_status"]) == (False, "486")
    assert (got["call_cause"], got["call_raw_cause"]) == ("busy", "486")


def test_a_refused_refer_without_a_fallback_is_reported() -> None:
    m = machine(next_page=PAGE)
    m.start(T0)
    assert m.handle(ReferAnswered(501), T0 + 0.05) == []
    got = result(m)
    assert (got["transferred"], got["refer_status"], got["fell_back"]) == (False, "501", False)
    assert "connect_result" not in got


def test_a_refused_refer_falls_back_to_the_connect_asked_for() -> None:
    m = machine(
        next_page=PAGE,
        fallback_connect={"connect": {"destinations": ["sip:bob@example.com"]}},
    )
    m.start(T0)
    commands = m.handle(ReferAnswered(405), T0 + 0.1)
    assert commands[0] == CallCallee(0, "sip:bob@example.com", None)
    assert isinstance(commands[1], StartPrompt)  # ringback while it rings
    assert m.deadline == T0 + 0.1 + 30  # the connect's seconds_answer_timeout now
    assert JoinCallee(0) in m.handle(CalleeAnswered(0, {"call_id": "far"}), T0 + 3)
    assert m.outcome is None
    m.handle(CalleeEnded(0, "hung_up", "BYE"), T0 + 13)
    got = result(m)
    assert (got["transferred"], got["refer_status"], got["fell_back"]) == (False, "405", True)
    connected = got["connect_result"]
    assert connected["connected"] is True and connected["seconds_connected_duration"] == 10
    assert connected["destination"] == "sip:bob@example.com"


def test_the_fallback_connect_timing_out_ends_the_transfer() -> None:
    m = machine(fallback_connect={"connect": {"destinations": ["sip:b@x"]}}, next_page=PAGE)
    m.start(T0)
    m.handle(ReferAnswered(501), T0)
    deadline = m.deadline
    assert deadline is not None
    m.on_deadline(deadline)
    got = result(m)
    assert got["fell_back"] is True and got["connect_result"]["call_cause"] == "no_answer"


@pytest.mark.parametrize(
    ("events", "refer_status", "notify_status"),
    [((), "", ""), ((ReferAnswered(202), ReferNotified(180)), "202", "180")],
)
def test_no_outcome_in_time_is_not_transferred(
    events: tuple[Any, ...], refer_status: str, notify_status: str
) -> None:
    m = machine(next_page=PAGE, seconds_timeout=10)
    m.start(T0)
    for event in events:
        m.handle(event, T0 + 1)
    assert m.deadline == T0 + 10
    m.on_deadline(T0 + 10)
    got = result(m)
    assert (got["transferred"], got["refer_status"], got["notify_status"]) == (
        False,
        refer_status,
        notify_status,
    )


def test_a_hang_up_while_waiting_still_reports_and_without_next_page_the_list_goes_on() -> None:
    m = machine(next_page=PAGE)
    m.start(T0)
    m.handle(ReferAnswered(202), T0)
    m.stop(T0 + 1, "hangup")
    assert result(m)["transferred"] is False
    quiet = machine()
    quiet.start(T0)
    quiet.handle(ReferAnswered(202), T0)
    quiet.handle(ReferNotified(200, final=True), T0 + 2)
    assert isinstance(quiet.outcome, Continue)


@pytest.mark.parametrize(
    ("status", "cause", "transferred"), [(200, "", True), (486, "busy", False)]
)
def test_a_notify_that_overtakes_the_202_is_the_outcome(
    status: int, cause: str, transferred: bool
) -> None:
    m = machine(next_page=PAGE)
    m.start(T0)
    m.handle(ReferNotified(status, cause, final=True), T0 + 0.1)  # RFC 6665 §4.1.2.4
    got = result(m)
    assert (got["transferred"], got["notify_status"]) == (transferred, str(status))
    assert got["refer_status"] == ""  # its 202 had not come yet
    m.handle(ReferAnswered(202), T0 + 0.2)  # and when it comes, nothing changes
    assert result(m) == got


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"destination": "bob"}, "a sip: or sips: URI, or a number"),
        ({"destination": "user:alice"}, "a sip: or sips: URI, or a number"),
        ({"destination": "sip:"}, "a sip: or sips: URI, or a number"),
        ({"destination": "sip:bob@example.com\r\nX: 1"}, "a sip: or sips: URI, or a number"),
        ({"destination": "sip:bob@example.com>;x=<"}, "a sip: or sips: URI, or a number"),
        ({"destination": "sip:bob @example.com"}, "a sip: or sips: URI, or a number"),
        ({"referred_by": "ivr@example.com"}, r"a sip: or sips: URI \(RFC 3892\)"),
        ({"seconds_timeout": 0}, "greater than or equal to 1"),
        ({"fallback_connect": {"destinations": ["sip:b@x"]}}, "connect"),
        ({"fallback": True}, "Extra inputs are not permitted"),
    ],
)
def test_the_wire_model_refuses_what_cannot_be_done(props: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Transfer.model_validate({"destination": "sip:bob@example.com", **props})


def test_defaults_and_number_destinations() -> None:
    action = Transfer.model_validate({"destination": "+44-1908-273800"})
    assert action.seconds_timeout == 30 and action.referred_by is None
    assert action.fallback_connect is None and action.next_page is None
