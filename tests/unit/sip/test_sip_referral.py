"""A transfer's SIP side (callhook/sip/referral.py) on a virtual clock: the REFER we send
in a call's dialog, its final response, the NOTIFYs of its outcome, and the answers to
NOTIFYs that are not ours."""

from __future__ import annotations

import pytest

from callhook.sip.agent import Agent
from callhook.sip.message import Request, Response, parse, serialize
from callhook.sip.notices import ReferProgress, ReferResponse
from callhook.sip.referral import sipfrag_status
from tests.unit.sip.test_sip_agent import (
    CALL_ID,
    HOST,
    PEER,
    PORT,
    T0,
    ack_bytes,
    answer_call,
    confirmed_call,
    drain,
    offer_call,
    one_request,
    one_response,
    sent,
    sip_request,
)

TARGET = "sip:bob@example.com"
BY = "sip:ivr@callhook.example"


def refer(agent: Agent, now: float = T0 + 1) -> tuple[str, bytes]:
    """A confirmed call, then our REFER: returns (our tag, the REFER's 202 as bytes)."""
    tag = confirmed_call(agent)
    agent.refer(CALL_ID, TARGET, BY, now)
    request, address = one_request(agent)
    assert address == PEER and request.method == "REFER"
    assert request.headers.get("Refer-To") == f"<{TARGET}>"
    assert request.headers.get("Referred-By") == f"<{BY}>"
    assert request.headers.get("Call-ID") == CALL_ID  # in the call's dialog (RFC 3515 §2.4.2)
    assert request.uri == "sip:alice@192.0.2.10:5062"  # the peer's Contact
    accepted = Response(202, "Accepted", request.headers.copy())
    return tag, serialize(accepted)


def notify(tag: str, cseq: int, body: bytes, **headers: str) -> bytes:
    fields = {"Event": "refer", "Subscription-State": "active;expires=60", **headers}
    return sip_request(
        "NOTIFY",
        to_tag=tag,
        cseq=cseq,
        branch=f"z9hG4bK-notify-{cseq}",
        headers=[(k.replace("_", "-"), v) for k, v in fields.items()],
        body=body,
        content_type="message/sipfrag",
    )


def test_refer_accepted_then_notified_to_the_end() -> None:
    agent = Agent(HOST, PORT)
    tag, accepted = refer(agent)
    agent.receive(accepted, PEER, T0 + 1.1)
    assert agent.take_events() == [ReferResponse(CALL_ID, 202)]
    agent.receive(notify(tag, 2, b"SIP/2.0 100 Trying\r\n"), PEER, T0 + 1.2)
    ok, _ = one_response(agent)
    assert (ok.status, ok.cseq) == (200, (2, "NOTIFY"))
    assert agent.take_events() == [ReferProgress(CALL_ID, 100, False)]
    final = notify(tag, 3, b"SIP/2.0 200 OK\r\n", Subscription_State="terminated;reason=noresource")
    agent.receive(final, PEER, T0 + 3)
    assert one_response(agent)[0].status == 200
    assert agent.take_events() == [ReferProgress(CALL_ID, 200, True)]


def test_a_refused_refer_is_reported_with_its_status() -> None:
    agent = Agent(HOST, PORT)
    _, accepted = refer(agent)
    refused = parse(accepted)
    assert isinstance(refused, Response)
    agent.receive(serialize(Response(501, "Not Implemented", refused.headers)), PEER, T0 + 1.1)
    assert agent.take_events() == [ReferResponse(CALL_ID, 501)]


def test_no_answer_to_the_refer_is_a_408_after_timer_f() -> None:
    agent = Agent(HOST, PORT)
    refer(agent)
    fired = drain(agent, T0 + 1 + 32.0)  # Timer F: 64*T1 (§17.1.2.2)
    methods = {r.method for _, out in fired for r, _ in out if isinstance(r, Request)}
    assert methods == {"REFER"}  # retransmitted (Timer E) until Timer F
    assert agent.take_events() == [ReferResponse(CALL_ID, 408)]


@pytest.mark.parametrize(
    ("headers", "status"),
    [({"Event": "presence"}, 489), ({"Event": ""}, 489)],
)
def test_a_notify_of_another_event_package_gets_489(headers: dict[str, str], status: int) -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(notify(tag, 2, b"SIP/2.0 200 OK\r\n", **headers), PEER, T0 + 1)
    assert one_response(agent)[0].status == status
    assert agent.take_events() == []


def test_a_notify_outside_any_dialog_gets_481() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(notify("no-such-tag", 2, b"SIP/2.0 200 OK\r\n"), PEER, T0)
    assert one_response(agent)[0].status == 481


def test_a_refer_asked_for_before_the_ack_goes_once_the_ack_comes() -> None:
    """As a BYE does (RFC 3261 §15): sent before the ACK, it could overtake the 2xx
    through a proxy of several processes and reach a caller with no dialog yet."""
    agent = Agent(HOST, PORT)
    offer_call(agent)
    tag = answer_call(agent).to_tag
    assert tag
    agent.refer(CALL_ID, TARGET, BY, T0 + 0.01)
    assert sent(agent) == []  # not yet
    agent.receive(ack_bytes(tag), PEER, T0 + 0.1)
    request, address = one_request(agent)
    assert address == PEER and request.method == "REFER"
    assert request.headers.get("Refer-To") == f"<{TARGET}>"
    assert request.headers.get("Referred-By") == f"<{BY}>"
    agent.receive(ack_bytes(tag), PEER, T0 + 0.2)  # (a retransmitted ACK: nothing more)
    assert sent(agent) == []


def test_a_refer_needs_a_call_that_is_up() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    with pytest.raises(ValueError, match="not up"):
        agent.refer(CALL_ID, TARGET, BY, T0)
    with pytest.raises(KeyError):
        agent.refer("no-such-call", TARGET, BY, T0)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"SIP/2.0 180 Ringing\r\n", 180),
        (b"  SIP/2.0 603 Declined\r\nContent-Length: 0\r\n", 603),
        (b"SIP/2.0 99 Odd\r\n", 0),
        (b"garbage", 0),
        (b"", 0),
    ],
)
def test_sipfrag_status(body: bytes, status: int) -> None:
    assert sipfrag_status(body) == status


def test_a_notify_where_no_refer_was_sent_or_for_another_refer_gets_481() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(notify(tag, 2, b"SIP/2.0 200 OK\r\n"), PEER, T0 + 1)  # no REFER of ours
    assert one_response(agent)[0].status == 481
    assert agent.take_events() == []
    agent.refer(CALL_ID, TARGET, BY, T0 + 2)
    refer_request, _ = one_request(agent)
    cseq = refer_request.cseq[0]
    agent.receive(notify(tag, 3, b"SIP/2.0 200 OK\r\n", Event=f"refer;id={cseq + 7}"), PEER, T0 + 3)
    assert one_response(agent)[0].status == 481  # another REFER's subscription
    agent.receive(
        notify(tag, 4, b"SIP/2.0 180 Ringing\r\n", Event=f"refer;id={cseq}"), PEER, T0 + 4
    )
    assert one_response(agent)[0].status == 200
    assert agent.take_events() == [ReferProgress(CALL_ID, 180, False)]
