"""The SIP user agent (callhook/sip/agent.py) end to end: bytes in, bytes out, a virtual clock.

Each test plays the peer: it builds requests and responses as bytes, feeds them to
``Agent.receive`` with a source address and an explicit ``now``, fires ``handle_timer``
at chosen instants, and parses what ``take_datagrams`` returns. No sockets, no sleeps.
Times start at T0 (not 0); T1 = 0.5 s, T2 = 4 s (RFC 3261 §17).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callhook.sip.agent import (
    Agent,
    CallAnswered,
    CallConfirmed,
    CallEvent,
    CallProgress,
    CallTerminated,
    Credentials,
    IncomingCall,
    InfoReceived,
    Reoffer,
)
from callhook.sip.message import (
    Request,
    Response,
    parse,
    parse_via,
)
from callhook.sip.transport import Target

HOST, PORT = "192.0.2.1", 5060
ME = (HOST, PORT)
PEER = Target("192.0.2.10", 5062)  # the caller: its Via says so too
CALLEE = Target("192.0.2.20", 5070)  # the callee of our outbound calls
TARGET = "sip:bob@192.0.2.20:5070"
T0 = 1000.0
EPS = 0.001
CALL_ID = "inbound-1@192.0.2.10"
FROM_TAG = "caller-tag-1"
INVITE_BRANCH = "z9hG4bK-inv-1"
PEER_CONTACT = "<sip:alice@192.0.2.10:5062>"
OFFER = (
    b"v=0\r\no=alice 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n"
    b"m=audio 40000 RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n"
)
ANSWER = (
    b"v=0\r\no=callhook 7 7 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n"
    b"m=audio 30000 RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n"
)
HOLD = (
    b"v=0\r\no=alice 1 2 IN IP4 198.51.100.50\r\ns=-\r\nc=IN IP4 198.51.100.50\r\nt=0 0\r\n"
    b"m=audio 41000 RTP/AVP 0 101\r\na=sendonly\r\n"
)
DATA = Path(__file__).resolve().parents[2] / "data" / "sip" / "rfc4475"

Sent = list[tuple[Request | Response, Target]]


# --- helpers ---------------------------------------------------------------------------


def sent(agent: Agent) -> Sent:
    """What the agent sent since the last call, parsed (each datagram must parse)."""
    out: Sent = []
    for data, address in agent.take_datagrams():
        out.append((parse(data), address))
    return out


def responses(out: Sent) -> list[Response]:
    return [m for m, _ in out if isinstance(m, Response)]


def requests(out: Sent, method: str | None = None) -> list[Request]:
    return [m for m, _ in out if isinstance(m, Request) and (method is None or m.method == method)]


def statuses(out: Sent) -> list[int]:
    return [r.status for r in responses(out)]


def one(out: Sent) -> tuple[Request | Response, Target]:
    assert len(out) == 1, [(m.status if isinstance(m, Response) else m.method, a) for m, a in out]
    return out[0]


def one_response(agent: Agent) -> tuple[Response, Target]:
    msg, address = one(sent(agent))
    assert isinstance(msg, Response)
    return msg, address


def one_request(agent: Agent) -> tuple[Request, Target]:
    msg, address = one(sent(agent))
    assert isinstance(msg, Request)
    return msg, address


def events_of(agent: Agent, kind: type) -> list[CallEvent]:
    return [e for e in agent.take_events() if isinstance(e, kind)]


def sip_request(
    method: str,
    *,
    call_id: str | None = CALL_ID,
    from_tag: str = FROM_TAG,
    to_tag: str | None = None,
    cseq: int = 1,
    cseq_method: str | None = None,
    branch: str = INVITE_BRANCH,
    via: str | None = None,
    uri: str = "sip:app@192.0.2.1:5060",
    contact: str | None = PEER_CONTACT,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    content_type: str | None = None,
) -> bytes:
    """A request from the peer, as bytes."""
    lines = [
        f"{method} {uri} SIP/2.0",
        f"Via: {via or f'SIP/2.0/UDP {PEER[0]}:{PEER[1]};branch={branch}'}",
        "Max-Forwards: 70",
        f"From: <sip:alice@example.com>;tag={from_tag}",
        f"To: <sip:app@192.0.2.1>{f';tag={to_tag}' if to_tag else ''}",
    ]
    if call_id is not None:
        lines.append(f"Call-ID: {call_id}")
    lines.append(f"CSeq: {cseq} {cseq_method or method}")
    if contact is not None:
        lines.append(f"Contact: {contact}")
    lines += [f"{name}: {value}" for name, value in headers]
    if body:
        lines.append(f"Content-Type: {content_type or 'application/sdp'}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def offer_call(
    agent: Agent,
    now: float = T0,
    *,
    headers: Sequence[tuple[str, str]] = (),
    cseq: int = 1,
    via: str | None = None,
    source: Target = PEER,
) -> IncomingCall:
    """The peer calls us; returns the IncomingCall event (the 100 is checked and taken)."""
    agent.receive(
        sip_request("INVITE", body=OFFER, headers=headers, cseq=cseq, via=via), source, now
    )
    trying, _ = one_response(agent)
    assert trying.status == 100
    (event,) = agent.take_events()
    assert isinstance(event, IncomingCall)
    return event


def answer_call(agent: Agent, now: float = T0) -> Response:
    """Answer the offered call; returns our 200 (its To tag is the dialog's local tag)."""
    agent.answer(CALL_ID, ANSWER, now)
    ok, address = one_response(agent)
    assert ok.status == 200
    assert address == PEER
    return ok


def ack_bytes(to_tag: str, *, cseq: int = 1, branch: str = "z9hG4bK-ack-1") -> bytes:
    return sip_request("ACK", to_tag=to_tag, cseq=cseq, branch=branch)


def confirmed_call(
    agent: Agent,
    now: float = T0,
    *,
    headers: Sequence[tuple[str, str]] = (),
    cseq: int = 1,
) -> str:
    """An inbound call offered, answered and ACKed at ``now``; returns our To tag."""
    offer_call(agent, now, headers=headers, cseq=cseq)
    ok = answer_call(agent, now)
    tag = ok.to_tag
    assert tag
    agent.receive(ack_bytes(tag, cseq=cseq), PEER, now + 0.1)
    assert sent(agent) == []
    assert agent.take_events() == [CallConfirmed(CALL_ID)]
    return tag


def drain(agent: Agent, until: float) -> list[tuple[float, Sent]]:
    """Fire every timer up to ``until``; (time, what was sent) for each firing that sent."""
    fired = []
    while agent.deadline is not None and agent.deadline <= until:
        when = agent.deadline
        agent.handle_timer(when)
        out = sent(agent)
        if out:
            fired.append((when, out))
    return fired


def assert_no_leaks(agent: Agent, now: float) -> None:
    """Far in the future every transaction and timer is gone."""
    agent.handle_timer(now + 100.0)
    agent.handle_timer(now + 200.0)
    agent.take_datagrams()
    agent.take_events()
    assert agent._txs == {}
    assert agent.deadline is None


def auth_params(value: str) -> dict[str, str]:
    assert value.startswith("Digest ")
    return {
        name.lower(): quoted or bare
        for name, quoted, bare in re.findall(r'([A-Za-z-]+)=(?:"([^"]*)"|([^,\s]+))', value[7:])
    }


# --- inbound INVITE ---------------------------------------------------------------------


def test_invite_gets_100_at_once_and_an_incoming_call_event() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(sip_request("INVITE", body=OFFER), PEER, T0)
    trying, address = one_response(agent)
    assert address == PEER
    assert trying.status == 100
    assert trying.headers.get_all("Via") == [
        f"SIP/2.0/UDP {PEER[0]}:{PEER[1]};branch={INVITE_BRANCH}"
    ]
    assert trying.call_id == CALL_ID
    assert trying.cseq == (1, "INVITE")
    assert trying.from_tag == FROM_TAG
    assert trying.to_tag is None  # a 100 creates no dialog
    assert trying.body == b""
    (event,) = agent.take_events()
    assert event == IncomingCall(
        call_id=CALL_ID,
        user="app",
        from_uri="sip:alice@example.com",
        to_uri="sip:app@192.0.2.1",
        request_uri="sip:app@192.0.2.1:5060",
        offer=OFFER,
        source=PEER,
    )


def test_ring_and_answer_build_the_dialog_responses() -> None:
    agent = Agent(HOST, PORT)
    record_route = ("<sip:p1.example.com;lr>, <sip:p2.example.com;lr>", "<sip:p3.example.com;lr>")
    offer_call(agent, headers=[("Record-Route", rr) for rr in record_route])
    agent.ring(CALL_ID, T0 + 0.1)
    ringing, address = one_response(agent)
    assert address == PEER
    assert ringing.status == 180
    tag = ringing.to_tag
    assert tag
    assert ringing.headers.get("Contact") == "<sip:app@192.0.2.1:5060>"
    ok = answer_call(agent, T0 + 1.0)
    # Same To tag as the 180 (one dialog), §12.1.1 Record-Route copied in order, Contact.
    assert ok.to_tag == tag
    assert ok.from_tag == FROM_TAG
    assert ok.cseq == (1, "INVITE")
    assert ok.call_id == CALL_ID
    assert ok.headers.get_all("Record-Route") == [
        "<sip:p1.example.com;lr>",
        "<sip:p2.example.com;lr>",
        "<sip:p3.example.com;lr>",
    ]
    assert ok.headers.get("Contact") == "<sip:app@192.0.2.1:5060>"
    assert ok.headers.get("Content-Type") == "application/sdp"
    assert ok.body == ANSWER
    assert ok.headers.get("Content-Length") == str(len(ANSWER))
    assert agent.take_events() == []


def test_answer_without_ring() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    ok = answer_call(agent, T0 + 0.2)
    assert ok.to_tag
    assert "Record-Route" not in ok.headers


def test_2xx_is_retransmitted_t1_doubling_to_t2_until_the_ack() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    agent.answer(CALL_ID, ANSWER, T0)
    (first,) = agent.take_datagrams()
    # §13.3.1.4: T1, 2T1, 4T1 ... capped at T2: at 0.5, 1.5, 3.5, 7.5, 11.5, 15.5
    for rel in (0.5, 1.5, 3.5, 7.5, 11.5, 15.5):
        assert agent.deadline == pytest.approx(T0 + rel)
        agent.handle_timer(T0 + rel - EPS)
        assert agent.take_datagrams() == []
        agent.handle_timer(T0 + rel)
        assert agent.take_datagrams() == [first]
    ok = parse(first[0])
    assert isinstance(ok, Response)
    assert ok.to_tag
    agent.receive(ack_bytes(ok.to_tag), PEER, T0 + 16.0)
    assert agent.take_events() == [CallConfirmed(CALL_ID)]
    assert sent(agent) == []
    # The ACK stopped the retransmissions: nothing at 19.5, nor ever after.
    assert drain(agent, T0 + 300.0) == []
    assert agent.take_events() == []


def test_retransmitted_ack_is_absorbed() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(ack_bytes(tag), PEER, T0 + 0.5)
    assert sent(agent) == []
    assert agent.take_events() == []


def test_no_ack_within_64_t1_ends_the_call_with_bye() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    ok = answer_call(agent, T0)
    fired = drain(agent, T0 + 40.0)
    byes = [(when, m, a) for when, out in fired for m, a in out if isinstance(m, Request)]
    assert byes, "no BYE"
    when, bye, address = byes[0]
    assert isinstance(bye, Request)
    assert bye.method == "BYE"
    assert bye.uri == "sip:alice@192.0.2.10:5062"  # the caller's Contact
    assert address == PEER
    assert bye.from_tag == ok.to_tag
    assert bye.to_tag == FROM_TAG
    assert bye.call_id == CALL_ID
    assert when >= T0 + 32.0
    # The 2xx retransmissions stop with the BYE.
    assert all(isinstance(m, Request) for t, out in fired if t >= when for m, _ in out)
    assert agent.take_events() == [CallTerminated(CALL_ID, "dropped", "408", by_remote=False)]
    assert_no_leaks(agent, T0 + 40.0)


def test_no_ack_bye_goes_out_exactly_at_64_t1() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    answer_call(agent, T0)
    fired = drain(agent, T0 + 32.0 - EPS)
    assert [when - T0 for when, _ in fired] == [
        0.5,
        1.5,
        3.5,
        7.5,
        11.5,
        15.5,
        19.5,
        23.5,
        27.5,
        31.5,
    ]
    assert all(statuses(out) == [200] for _, out in fired)
    agent.handle_timer(T0 + 32.0)
    out = sent(agent)
    assert [m.method for m in requests(out)] == ["BYE"]
    assert statuses(out) == []


def test_invite_retransmissions_are_absorbed() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    invite = sip_request("INVITE", body=OFFER)
    # Proceeding: the last provisional response (the 100) is sent again, no new call.
    agent.receive(invite, PEER, T0 + 0.5)
    again, _ = one_response(agent)
    assert again.status == 100
    assert agent.take_events() == []
    agent.ring(CALL_ID, T0 + 0.6)
    ringing, _ = one_response(agent)
    agent.receive(invite, PEER, T0 + 0.7)
    again, _ = one_response(agent)
    assert again.status == 180
    assert again.to_tag == ringing.to_tag
    # After the 2xx (Accepted, RFC 6026): absorbed, nothing new goes out.
    answer_call(agent, T0 + 1.0)
    agent.receive(invite, PEER, T0 + 1.2)
    assert sent(agent) == []
    assert agent.take_events() == []
    assert len(agent.calls) == 1


# --- BYE --------------------------------------------------------------------------------


def test_bye_from_the_peer() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(sip_request("BYE", to_tag=tag, cseq=2, branch="z9hG4bK-bye-1"), PEER, T0 + 5.0)
    ok, address = one_response(agent)
    assert address == PEER
    assert ok.status == 200
    assert ok.cseq == (2, "BYE")
    assert ok.to_tag == tag
    assert agent.take_events() == [CallTerminated(CALL_ID, "hung_up", "BYE", by_remote=True)]
    # A retransmitted BYE gets the same 200 again, and no second event.
    agent.receive(sip_request("BYE", to_tag=tag, cseq=2, branch="z9hG4bK-bye-1"), PEER, T0 + 5.5)
    assert statuses(sent(agent)) == [200]
    assert agent.take_events() == []
    assert_no_leaks(agent, T0 + 6.0)


@pytest.mark.parametrize(
    ("call_id", "to_tag"),
    [("unknown@192.0.2.10", "whatever"), (CALL_ID, "not-our-tag")],
)
def test_bye_for_an_unknown_dialog_gets_481(call_id: str, to_tag: str) -> None:
    agent = Agent(HOST, PORT)
    confirmed_call(agent)
    agent.receive(
        sip_request("BYE", call_id=call_id, to_tag=to_tag, cseq=2, branch="z9hG4bK-b"),
        PEER,
        T0 + 1.0,
    )
    resp, _ = one_response(agent)
    assert resp.status == 481
    assert agent.take_events() == []


def test_our_bye_follows_the_loose_route_set() -> None:
    agent = Agent(HOST, PORT)
    rr = [
        ("Record-Route", "<sip:p1.example.com:5080;lr>"),
        ("Record-Route", "<sip:p2.example.com;lr>"),
    ]
    tag = confirmed_call(agent, headers=rr)
    agent.hang_up(CALL_ID, T0 + 10.0)
    bye, address = one_request(agent)
    assert bye.method == "BYE"
    # §12.2.1.1: Request-URI = remote target (the Contact), Route = route set, in order
    # (the UAS keeps the Record-Route order), sent to the first route.
    assert bye.uri == "sip:alice@192.0.2.10:5062"
    assert bye.headers.get_all("Route") == [
        "<sip:p1.example.com:5080;lr>",
        "<sip:p2.example.com;lr>",
    ]
    assert address == Target("p1.example.com", 5080)
    assert bye.from_tag == tag
    assert bye.to_tag == FROM_TAG
    assert bye.cseq[1] == "BYE"
    assert 1 <= bye.cseq[0] < 2**31
    via = parse_via(bye.headers.get_all("Via")[0])
    assert (via.host, via.port) == ME
    assert (via.branch or "").startswith("z9hG4bK")
    assert agent.take_events() == [CallTerminated(CALL_ID, "completed", "200", by_remote=False)]
    # The BYE is retransmitted (Timer E) until its 200.
    agent.handle_timer(T0 + 10.5)
    again, _ = one_request(agent)
    assert again.cseq == bye.cseq
    assert again.branch == bye.branch
    ok = (
        f"SIP/2.0 200 OK\r\nVia: {bye.headers.get('Via')}\r\nFrom: {bye.headers.get('From')}\r\n"
        f"To: {bye.headers.get('To')}\r\nCall-ID: {CALL_ID}\r\nCSeq: {bye.cseq[0]} BYE\r\n"
        "Content-Length: 0\r\n\r\n"
    ).encode()
    agent.receive(ok, ("p1.example.com", 5080), T0 + 10.7)
    assert drain(agent, T0 + 30.0) == []
    assert_no_leaks(agent, T0 + 30.0)


def test_our_bye_with_a_strict_router_first() -> None:
    agent = Agent(HOST, PORT)
    rr = [("Record-Route", "<sip:strict.example.com:5090>, <sip:p2.example.com;lr>")]
    confirmed_call(agent, headers=rr)
    agent.hang_up(CALL_ID, T0 + 10.0)
    bye, address = one_request(agent)
    # §12.2.1.1 strict routing: the first route is the Request-URI, the remote target
    # is the last Route value.
    assert bye.uri == "sip:strict.example.com:5090"
    assert bye.headers.get_all("Route") == [
        "<sip:p2.example.com;lr>",
        "<sip:alice@192.0.2.10:5062>",
    ]
    assert address == Target("strict.example.com", 5090)


def test_hang_up_before_answer_declines_with_603() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    agent.ring(CALL_ID, T0 + 0.1)
    ringing, _ = one_response(agent)
    agent.hang_up(CALL_ID, T0 + 1.0)
    decline, address = one_response(agent)
    assert decline.status == 603
    assert decline.to_tag == ringing.to_tag
    assert address == PEER
    assert agent.take_events() == [CallTerminated(CALL_ID, "completed", "603", by_remote=False)]
    # Retransmitted (Timer G) until the ACK, which is absorbed.
    agent.handle_timer(T0 + 1.5)
    assert statuses(sent(agent)) == [603]
    assert decline.to_tag
    agent.receive(ack_bytes(decline.to_tag, branch=INVITE_BRANCH), PEER, T0 + 1.6)
    assert sent(agent) == []
    assert drain(agent, T0 + 40.0) == []
    assert_no_leaks(agent, T0 + 40.0)


def test_hang_up_while_waiting_for_the_ack_sends_bye_only_after_it() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    ok = answer_call(agent, T0)
    agent.hang_up(CALL_ID, T0 + 0.2)
    # §15: the callee must not send BYE before the ACK: only 2xx retransmissions for now.
    assert sent(agent) == []
    fired = drain(agent, T0 + 3.6)
    assert all(statuses(out) == [200] for _, out in fired)
    assert len(fired) == 3
    assert ok.to_tag
    agent.receive(ack_bytes(ok.to_tag), PEER, T0 + 4.0)
    bye, _ = one_request(agent)
    assert bye.method == "BYE"
    assert bye.from_tag == ok.to_tag
    terminated = [e for e in agent.take_events() if isinstance(e, CallTerminated)]
    assert terminated == [CallTerminated(CALL_ID, "completed", "200", by_remote=False)]


# --- CANCEL -----------------------------------------------------------------------------


def cancel_bytes(branch: str = INVITE_BRANCH, call_id: str = CALL_ID) -> bytes:
    return sip_request("CANCEL", branch=branch, call_id=call_id, contact=None)


def test_cancel_before_answer() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    agent.ring(CALL_ID, T0 + 0.1)
    ringing, _ = one_response(agent)
    agent.receive(cancel_bytes(), PEER, T0 + 1.0)
    out = sent(agent)
    assert statuses(out) == [200, 487]
    ok, terminated = responses(out)
    # §9.2: 200 to the CANCEL, 487 to the INVITE (with the dialog's To tag).
    assert ok.cseq == (1, "CANCEL")
    assert terminated.cseq == (1, "INVITE")
    assert terminated.to_tag == ringing.to_tag
    assert all(address == PEER for _, address in out)
    assert agent.take_events() == [CallTerminated(CALL_ID, "hung_up", "487", by_remote=True)]
    # Too late to answer now.
    agent.answer(CALL_ID, ANSWER, T0 + 1.1)
    assert sent(agent) == []
    # The 487 is retransmitted until its ACK (same branch as the INVITE), which is absorbed.
    agent.handle_timer(T0 + 1.5)
    assert statuses(sent(agent)) == [487]
    assert terminated.to_tag
    agent.receive(ack_bytes(terminated.to_tag, branch=INVITE_BRANCH), PEER, T0 + 1.6)
    assert sent(agent) == []
    assert agent.take_events() == []
    assert drain(agent, T0 + 60.0) == []
    assert_no_leaks(agent, T0 + 60.0)


def test_cancel_for_an_unknown_transaction_gets_481() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    agent.receive(cancel_bytes(branch="z9hG4bK-other"), PEER, T0 + 1.0)
    resp, _ = one_response(agent)
    assert resp.status == 481
    assert resp.cseq == (1, "CANCEL")
    assert agent.take_events() == []
    # The call is still there to be answered.
    answer_call(agent, T0 + 2.0)


def test_a_cancel_with_the_branch_but_another_sent_by_is_not_the_invites() -> None:
    """§17.2.3: a server transaction is the branch and the top Via's sent-by. A third
    party that learnt the branch cannot cancel another client's INVITE."""
    agent = Agent(HOST, PORT)
    offer_call(agent)
    forged = sip_request(
        "CANCEL", contact=None, via=f"SIP/2.0/UDP 203.0.113.66:5060;branch={INVITE_BRANCH}"
    )
    agent.receive(forged, ("203.0.113.66", 5060), T0 + 1.0)
    resp, _ = one_response(agent)
    assert resp.status == 481
    assert agent.take_events() == []
    agent.receive(cancel_bytes(), PEER, T0 + 1.5)  # (the caller's own: its INVITE's)
    assert statuses(sent(agent)) == [200, 487]


def test_cancel_after_answer_gets_200_only() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    ok = answer_call(agent, T0)
    agent.receive(cancel_bytes(), PEER, T0 + 0.2)
    resp, _ = one_response(agent)
    assert resp.status == 200
    assert resp.cseq == (1, "CANCEL")
    assert agent.take_events() == []
    assert ok.to_tag
    agent.receive(ack_bytes(ok.to_tag), PEER, T0 + 0.3)
    assert agent.take_events() == [CallConfirmed(CALL_ID)]


# --- OPTIONS and shutting down ----------------------------------------------------------


def test_options_gets_200_with_allow_accept_supported() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(
        sip_request("OPTIONS", call_id="opt-1", branch="z9hG4bK-opt", contact=None), PEER, T0
    )
    ok, address = one_response(agent)
    assert address == PEER
    assert ok.status == 200
    assert ok.to_tag
    allow = {m.strip() for m in ok.headers.get_all("Allow")}
    assert {"INVITE", "ACK", "CANCEL", "BYE", "OPTIONS", "INFO", "UPDATE"} <= allow
    assert "application/sdp" in ok.headers.get_all("Accept")
    assert "timer" in ok.headers.get_all("Supported")
    assert agent.take_events() == []
    assert_no_leaks(agent, T0)


def test_not_accepting_gives_503_to_options_and_new_invites() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.accepting = False
    agent.receive(
        sip_request("OPTIONS", call_id="opt-2", branch="z9hG4bK-opt2", contact=None), PEER, T0
    )
    resp, _ = one_response(agent)
    assert resp.status == 503
    agent.receive(
        sip_request("INVITE", call_id="new@x", branch="z9hG4bK-new", body=OFFER), PEER, T0 + 1
    )
    resp, _ = one_response(agent)
    assert resp.status == 503
    assert agent.take_events() == []
    # The running call still works.
    agent.receive(sip_request("BYE", to_tag=tag, cseq=2, branch="z9hG4bK-bye"), PEER, T0 + 2)
    assert statuses(sent(agent)) == [200]


# --- re-INVITE and UPDATE (§14, RFC 3311) ----------------------------------------------


def reinvite_bytes(tag: str, *, cseq: int = 2, branch: str = "z9hG4bK-reinv-1") -> bytes:
    return sip_request(
        "INVITE",
        to_tag=tag,
        cseq=cseq,
        branch=branch,
        contact="<sip:alice@198.51.100.50:5064>",
        body=HOLD,
    )


def test_reinvite_for_hold_with_a_new_media_address() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(reinvite_bytes(tag), PEER, T0 + 10.0)
    trying, _ = one_response(agent)
    assert trying.status == 100
    assert agent.take_events() == [Reoffer(CALL_ID, HOLD)]
    agent.answer_reoffer(CALL_ID, ANSWER.replace(b"a=sendrecv", b"a=recvonly"), T0 + 10.1)
    ok, address = one_response(agent)
    assert address == PEER
    assert ok.status == 200
    assert ok.cseq == (2, "INVITE")
    assert ok.to_tag == tag
    assert ok.headers.get_all("Contact") == ["<sip:app@192.0.2.1:5060>"]  # once
    assert ok.headers.get("Content-Type") == "application/sdp"
    assert b"a=recvonly" in ok.body
    agent.receive(ack_bytes(tag, cseq=2, branch="z9hG4bK-ack-2"), PEER, T0 + 10.2)
    assert sent(agent) == []
    assert agent.take_events() == []
    # The re-INVITE refreshed the remote target: our BYE goes to the new Contact.
    agent.hang_up(CALL_ID, T0 + 11.0)
    bye, bye_address = one_request(agent)
    assert bye.uri == "sip:alice@198.51.100.50:5064"
    assert bye_address == Target("198.51.100.50", 5064)
    assert_no_leaks(agent, T0 + 11.0)


def test_reinvite_with_a_lower_cseq_gets_500() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent, cseq=10)
    agent.receive(reinvite_bytes(tag, cseq=9), PEER, T0 + 5.0)
    resp, _ = one_response(agent)
    assert resp.status == 500
    assert resp.cseq == (9, "INVITE")
    assert agent.take_events() == []


def test_reinvite_while_one_is_pending_gets_500_with_retry_after() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(reinvite_bytes(tag, cseq=2), PEER, T0 + 5.0)
    sent(agent)
    agent.take_events()
    agent.receive(reinvite_bytes(tag, cseq=3, branch="z9hG4bK-reinv-2"), PEER, T0 + 5.1)
    resp, _ = one_response(agent)
    # §14.2: 500 with a Retry-After between 0 and 10 seconds.
    assert resp.status == 500
    assert resp.cseq == (3, "INVITE")
    retry = resp.headers.get("Retry-After")
    assert retry is not None
    assert 0 <= int(retry.split(";")[0].split("(")[0].strip()) <= 10
    assert agent.take_events() == []
    # The first one is still pending and can be answered.
    agent.answer_reoffer(CALL_ID, ANSWER, T0 + 5.2)
    ok, _ = one_response(agent)
    assert (ok.status, ok.cseq) == (200, (2, "INVITE"))


def test_reinvite_2xx_is_retransmitted_until_the_ack() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(reinvite_bytes(tag), PEER, T0 + 10.0)
    sent(agent)
    agent.answer_reoffer(CALL_ID, ANSWER, T0 + 10.0)
    (first,) = agent.take_datagrams()
    agent.handle_timer(T0 + 10.5)
    assert agent.take_datagrams() == [first]
    agent.handle_timer(T0 + 11.5)
    assert agent.take_datagrams() == [first]


def test_reject_reoffer_keeps_the_call() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(reinvite_bytes(tag), PEER, T0 + 10.0)
    sent(agent)
    agent.take_events()
    agent.reject_reoffer(CALL_ID, 488, T0 + 10.1)
    resp, _ = one_response(agent)
    assert resp.status == 488
    # Its ACK (same branch: a non-2xx) is absorbed; the call goes on.
    agent.receive(ack_bytes(tag, cseq=2, branch="z9hG4bK-reinv-1"), PEER, T0 + 10.2)
    assert sent(agent) == []
    agent.receive(sip_request("BYE", to_tag=tag, cseq=3, branch="z9hG4bK-b3"), PEER, T0 + 12)
    assert statuses(sent(agent)) == [200]
    assert events_of(agent, CallTerminated) == [
        CallTerminated(CALL_ID, "hung_up", "BYE", by_remote=True)
    ]


def test_update_with_sdp_is_a_reoffer_without_ack() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(
        sip_request("UPDATE", to_tag=tag, cseq=2, branch="z9hG4bK-upd", body=HOLD),
        PEER,
        T0 + 3.0,
    )
    assert sent(agent) == []  # waits for the application's answer
    assert agent.take_events() == [Reoffer(CALL_ID, HOLD)]
    agent.answer_reoffer(CALL_ID, ANSWER, T0 + 3.1)
    ok, address = one_response(agent)
    assert address == PEER
    assert (ok.status, ok.cseq) == (200, (2, "UPDATE"))
    assert ok.headers.get_all("Contact") == ["<sip:app@192.0.2.1:5060>"]  # RFC 3311 §5.2
    assert ok.body == ANSWER
    assert ok.headers.get("Content-Type") == "application/sdp"
    # No ACK for UPDATE: nothing is retransmitted, the transaction just ends.
    assert drain(agent, T0 + 60.0) == []
    assert_no_leaks(agent, T0 + 60.0)


def test_update_without_sdp_gets_200_at_once() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    agent.receive(sip_request("UPDATE", to_tag=tag, cseq=2, branch="z9hG4bK-u"), PEER, T0 + 3)
    resp, _ = one_response(agent)
    assert (resp.status, resp.cseq) == (200, (2, "UPDATE"))
    assert agent.take_events() == []


def test_update_outside_a_dialog_gets_481() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(
        sip_request("UPDATE", to_tag="x", call_id="nope", branch="z9hG4bK-u", body=HOLD), PEER, T0
    )
    resp, _ = one_response(agent)
    assert resp.status == 481


# --- INFO -------------------------------------------------------------------------------


def test_info_in_the_dialog() -> None:
    agent = Agent(HOST, PORT)
    tag = confirmed_call(agent)
    body = b"Signal=5\r\nDuration=160\r\n"
    agent.receive(
        sip_request(
            "INFO",
            to_tag=tag,
            cseq=2,
            branch="z9hG4bK-info",
            body=body,
            content_type="application/dtmf-relay",
        ),
        PEER,
        T0 + 2.0,
    )
    ok, _ = one_response(agent)
    assert (ok.status, ok.cseq) == (200, (2, "INFO"))
    assert agent.take_events() == [InfoReceived(CALL_ID, "application/dtmf-relay", body)]


def test_info_outside_a_dialog_gets_481() -> None:
    agent = Agent(HOST, PORT)
    confirmed_call(agent)
    agent.receive(
        sip_request(
            "INFO",
            call_id="other@x",
            to_tag="t",
            branch="z9hG4bK-info2",
            body=b"Signal=1\r\n",
            content_type="application/dtmf-relay",
        ),
        PEER,
        T0 + 2.0,
    )
    resp, _ = one_response(agent)
    assert resp.status == 481
    assert agent.take_events() == []


# --- what the agent refuses (§8.2) -----------------------------------------------------


@pytest.mark.parametrize("method", ["MESSAGE", "REGISTER", "SUBSCRIBE"])
def test_standard_method_not_implemented_gets_405_with_allow(method: str) -> None:
    agent = Agent(HOST, PORT)
    agent.receive(sip_request(method, branch="z9hG4bK-m", call_id="m@x"), PEER, T0)
    resp, address = one_response(agent)
    assert address == PEER
    assert resp.status == 405
    assert resp.cseq == (1, method)
    allow = {m.strip() for m in resp.headers.get_all("Allow")}
    assert "INVITE" in allow
    assert method not in allow
    assert agent.take_events() == []


def test_unknown_method_gets_501() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(sip_request("FOOBAR", branch="z9hG4bK-f", call_id="f@x"), PEER, T0)
    resp, _ = one_response(agent)
    assert resp.status == 501
    assert resp.cseq == (1, "FOOBAR")


def test_require_100rel_gets_420_with_unsupported() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(sip_request("INVITE", body=OFFER, headers=[("Require", "100rel")]), PEER, T0)
    resp, _ = one_response(agent)
    assert resp.status == 420
    assert resp.headers.get_all("Unsupported") == ["100rel"]
    assert agent.take_events() == []
    # Its ACK is absorbed and the 420 stops.
    assert resp.to_tag
    agent.receive(ack_bytes(resp.to_tag, branch=INVITE_BRANCH), PEER, T0 + 0.1)
    assert sent(agent) == []
    assert drain(agent, T0 + 60.0) == []


def test_require_timer_is_accepted() -> None:
    agent = Agent(HOST, PORT)
    offer_call(
        agent, headers=[("Require", "timer"), ("Supported", "timer"), ("Session-Expires", "1800")]
    )


def test_session_expires_below_90_gets_422_with_min_se() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(sip_request("INVITE", body=OFFER, headers=[("Session-Expires", "60")]), PEER, T0)
    resp, _ = one_response(agent)
    assert resp.status == 422
    assert resp.headers.get("Min-SE") == "90"
    assert agent.take_events() == []


def test_session_expires_1800_with_supported_timer() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent, headers=[("Supported", "timer"), ("Session-Expires", "1800")])
    ok = answer_call(agent)
    # RFC 4028 §9: the UAS sets the refresher; refresher=uac needs Require: timer.
    assert ok.headers.get("Session-Expires") == "1800;refresher=uac"
    assert "timer" in ok.headers.get_all("Require")


def test_session_timer_when_the_caller_does_not_support_it() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent, headers=[("Session-Expires", "1800")])
    ok = answer_call(agent)
    value = ok.headers.get("Session-Expires")
    assert value is not None
    refresher = value.partition("refresher=")[2]
    assert refresher == "uas" or "timer" in ok.headers.get_all("Require")
    assert refresher != "uac"


def test_session_timer_keeps_the_callers_refresher_choice() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent, headers=[("Supported", "timer"), ("Session-Expires", "1800;refresher=uas")])
    ok = answer_call(agent)
    assert ok.headers.get("Session-Expires") == "1800;refresher=uas"


@pytest.mark.parametrize(
    ("allow", "method"), [("INVITE, ACK, BYE, UPDATE", "UPDATE"), (None, "INVITE")]
)
def test_when_we_refresh_the_session_we_do_it_at_half_the_interval(
    allow: str | None, method: str
) -> None:
    """RFC 4028 §10: the refresher sends UPDATE (if allowed) or re-INVITE at half the interval."""
    agent = Agent(HOST, PORT)
    headers = [("Session-Expires", "600")]  # no Supported: timer -> we refresh
    if allow is not None:
        headers.append(("Allow", allow))
    tag = confirmed_call(agent, headers=headers)
    assert drain(agent, T0 + 0.1 + 300 - EPS) == []  # nothing before half the interval
    agent.handle_timer(T0 + 0.1 + 300)
    refresh, address = one_request(agent)
    assert refresh.method == method
    assert address == Target("192.0.2.10", 5062)
    assert refresh.to_tag == FROM_TAG and refresh.from_tag == tag  # in our dialog
    assert refresh.headers.get("Session-Expires") == "600;refresher=uas"
    assert refresh.cseq[1] == method
    if method == "INVITE":
        assert refresh.body == ANSWER  # the same session: our current SDP
    ok = (
        f"SIP/2.0 200 OK\r\nVia: {refresh.headers.get('Via')}\r\n"
        f"From: {refresh.headers.get('From')}\r\nTo: {refresh.headers.get('To')}\r\n"
        f"Call-ID: {refresh.call_id}\r\nCSeq: {refresh.headers.get('CSeq')}\r\n"
        f"Contact: {PEER_CONTACT}\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    agent.receive(ok, PEER, T0 + 300.2)
    out = sent(agent)
    assert [m.method for m in requests(out)] == (["ACK"] if method == "INVITE" else [])
    # ... and again half an interval later
    agent.handle_timer(T0 + 300.2 + 300)
    again, _ = one_request(agent)
    assert again.method == method and again.cseq[0] > refresh.cseq[0]


def test_a_refused_refresh_ends_the_call() -> None:
    agent = Agent(HOST, PORT)
    confirmed_call(agent, headers=[("Session-Expires", "600"), ("Allow", "UPDATE")])
    agent.take_events()
    agent.handle_timer(T0 + 0.1 + 300)
    refresh, _ = one_request(agent)
    gone = (
        f"SIP/2.0 481 Call/Transaction Does Not Exist\r\nVia: {refresh.headers.get('Via')}\r\n"
        f"From: {refresh.headers.get('From')}\r\nTo: {refresh.headers.get('To')}\r\n"
        f"Call-ID: {refresh.call_id}\r\nCSeq: {refresh.headers.get('CSeq')}\r\n"
        "Content-Length: 0\r\n\r\n"
    ).encode()
    agent.receive(gone, PEER, T0 + 300.2)
    assert agent.take_events() == [CallTerminated(CALL_ID, "dropped", "481", by_remote=True)]
    assert_no_leaks(agent, T0 + 300.2)


def test_unsupported_content_type_on_invite_gets_415() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(sip_request("INVITE", body=b"<xml/>", content_type="application/xml"), PEER, T0)
    resp, _ = one_response(agent)
    assert resp.status == 415
    assert "application/sdp" in resp.headers.get_all("Accept")
    assert agent.take_events() == []


def test_cseq_method_mismatch_gets_400() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(
        sip_request("OPTIONS", cseq_method="INVITE", branch="z9hG4bK-mm", call_id="mm@x"),
        PEER,
        T0,
    )
    resp, _ = one_response(agent)
    assert resp.status == 400
    assert "CSeq" in resp.reason


@pytest.mark.parametrize("call_id", [b"abc\xff@192.0.2.10", b"caf\xc3\xa9@192.0.2.10"])
def test_a_call_id_beyond_ascii_gets_400(call_id: bytes) -> None:
    """§25.1: a Call-ID is visible ASCII (it names the call in logs, files and APIs)."""
    agent = Agent(HOST, PORT)
    data = sip_request("INVITE", body=OFFER).replace(CALL_ID.encode(), call_id)
    agent.receive(data, PEER, T0)
    resp, _ = one_response(agent)
    assert resp.status == 400
    assert "(bad Call-ID " in resp.reason
    assert agent.take_events() == []


def test_missing_call_id_gets_400_with_the_reason() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(sip_request("INVITE", call_id=None, body=OFFER), PEER, T0)
    resp, address = one_response(agent)
    assert address == PEER
    assert resp.status == 400
    assert "Call-ID" in resp.reason
    assert resp.cseq == (1, "INVITE")
    assert agent.take_events() == []


@pytest.mark.parametrize(
    ("mangle", "status", "words"),
    [
        (lambda b: b.replace(b"Content-Length: ", b"Content-Length: 9"), 400, "Content-Length"),
        (lambda b: b.replace(b" SIP/2.0\r\n", b" SIP/3.0\r\n", 1), 505, "version"),
    ],
)
def test_request_that_does_not_frame_gets_its_status_and_reason(
    mangle: Callable[[bytes], bytes], status: int, words: str
) -> None:
    agent = Agent(HOST, PORT)
    agent.receive(mangle(sip_request("INVITE", body=OFFER)), PEER, T0)
    resp, address = one_response(agent)
    assert address == PEER
    assert resp.status == status
    assert words.lower() in resp.reason.lower()
    assert resp.call_id == CALL_ID
    assert resp.cseq == (1, "INVITE")
    assert agent.take_events() == []
    assert agent.calls == {}


def test_keepalive_and_noise_are_ignored() -> None:
    agent = Agent(HOST, PORT)
    for data in (b"\r\n\r\n", b"\r\n", b"hello", b"\x00\xff" * 20):
        agent.receive(data, PEER, T0)
    assert sent(agent) == []
    assert agent.take_events() == []


# --- rport and where responses go (RFC 3261 §18.2.2, RFC 3581) ---------------------------


def answer_call_to(agent: Agent, where: Target) -> Response:
    agent.answer(CALL_ID, ANSWER, T0 + 0.5)
    ok, address = one_response(agent)
    assert address == where
    return ok


def test_rport_response_goes_to_the_source() -> None:
    agent = Agent(HOST, PORT)
    nat = Target("203.0.113.7", 40001)
    via = f"SIP/2.0/UDP 10.0.0.5:5060;branch={INVITE_BRANCH};rport"
    agent.receive(sip_request("INVITE", via=via, body=OFFER), nat, T0)
    trying, address = one_response(agent)
    assert address == nat
    top = parse_via(trying.headers.get_all("Via")[0])
    assert top.params.get("received") == "203.0.113.7"
    assert top.params.get("rport") == "40001"
    assert top.branch == INVITE_BRANCH
    (event,) = agent.take_events()
    assert isinstance(event, IncomingCall)
    assert event.source == nat
    ok = answer_call_to(agent, nat)
    assert parse_via(ok.headers.get_all("Via")[0]).params.get("rport") == "40001"


def test_rport_with_same_host_still_gets_received() -> None:
    agent = Agent(HOST, PORT)
    via = f"SIP/2.0/UDP {PEER[0]}:5060;branch={INVITE_BRANCH};rport"
    agent.receive(sip_request("INVITE", via=via, body=OFFER), PEER, T0)
    trying, address = one_response(agent)
    assert address == PEER  # the source port (5062), not the Via's 5060
    top = parse_via(trying.headers.get_all("Via")[0])
    assert top.params.get("rport") == str(PEER[1])
    assert top.params.get("received") == PEER[0]  # RFC 3581 §4: always with rport


def test_without_rport_responses_go_to_received_host_and_via_port() -> None:
    agent = Agent(HOST, PORT)
    via = f"SIP/2.0/UDP caller.example.com:5070;branch={INVITE_BRANCH}"
    agent.receive(sip_request("INVITE", via=via, body=OFFER), ("203.0.113.8", 33333), T0)
    trying, address = one_response(agent)
    assert address == Target("203.0.113.8", 5070)
    top = parse_via(trying.headers.get_all("Via")[0])
    assert top.params.get("received") == "203.0.113.8"
    assert "rport" not in top.params


def test_a_received_the_sender_wrote_is_replaced_by_its_source() -> None:
    """A forged received= would make us answer a victim (a reflection without spoofing):
    the request's source replaces it, on the normal path and on the 403 of refuse()."""
    via = f"SIP/2.0/UDP {PEER[0]}:5060;branch={INVITE_BRANCH};received=198.51.100.99"
    for send in ("receive", "refuse"):
        agent = Agent(HOST, PORT)
        getattr(agent, send)(sip_request("INVITE", via=via, body=OFFER), PEER, T0)
        response, address = one_response(agent)
        assert address == Target(PEER[0], 5060), send
        top = parse_via(response.headers.get_all("Via")[0])
        assert top.params.get("received") == PEER[0]


def test_without_rport_same_host_no_received_and_default_port() -> None:
    agent = Agent(HOST, PORT)
    via = f"SIP/2.0/UDP {PEER[0]};branch={INVITE_BRANCH}"
    agent.receive(sip_request("INVITE", via=via, body=OFFER), PEER, T0)
    trying, address = one_response(agent)
    assert address == Target(PEER[0], 5060)
    assert trying.headers.get_all("Via") == [via]


def test_lower_vias_are_copied_unchanged() -> None:
    agent = Agent(HOST, PORT)
    via = (
        f"SIP/2.0/UDP 10.0.0.5:5060;branch={INVITE_BRANCH};rport, "
        "SIP/2.0/UDP 10.0.0.9:5099;branch=z9hG4bK-lower"
    )
    agent.receive(sip_request("INVITE", via=via, body=OFFER), ("203.0.113.7", 4000), T0)
    trying, _ = one_response(agent)
    vias = trying.headers.get_all("Via")
    assert len(vias) == 2
    assert vias[1] == "SIP/2.0/UDP 10.0.0.9:5099;branch=z9hG4bK-lower"


# --- outbound calls ---------------------------------------------------------------------


def place_call(
    agent: Agent,
    now: float = T0,
    *,
    credentials: Credentials | None = None,
    from_user: str = "callhook",
    from_display: str | None = None,
) -> tuple[str, Request]:
    """``agent.invite`` to TARGET; returns the Call-ID and the INVITE sent to CALLEE."""
    call_id = agent.invite(
        TARGET,
        OFFER,
        now,
        credentials=credentials,
        from_user=from_user,
        from_display=from_display,
    )
    invite, address = one_request(agent)
    assert address == CALLEE
    assert invite.method == "INVITE"
    return call_id, invite


def reply(
    req: Request,
    status: int,
    *,
    to_tag: str | None = "callee-tag",
    contact: str | None = "<sip:bob@192.0.2.20:5070>",
    record_route: Sequence[str] = (),
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
) -> bytes:
    """The callee's response to our request ``req``."""
    lines = [
        f"SIP/2.0 {status} Reason",
        f"Via: {req.headers.get_all('Via')[0]}",
        *(f"Record-Route: {rr}" for rr in record_route),
        f"From: {req.headers.get('From')}",
        f"To: {req.headers.get('To')}{f';tag={to_tag}' if to_tag else ''}",
        f"Call-ID: {req.call_id}",
        f"CSeq: {req.cseq[0]} {req.cseq[1]}",
    ]
    if contact is not None and status < 300 and status > 100:
        lines.append(f"Contact: {contact}")
    lines += [f"{name}: {value}" for name, value in headers]
    if body:
        lines.append("Content-Type: application/sdp")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_invite_is_well_formed_and_retransmitted_by_timer_a() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent, from_user="ivr", from_display="IVR")
    assert invite.uri == TARGET
    assert invite.call_id == call_id
    vias = invite.headers.get_all("Via")
    assert len(vias) == 1
    via = parse_via(vias[0])
    assert (via.host, via.port) == ME
    assert "rport" in via.params  # RFC 3581 §3
    assert (via.branch or "").startswith("z9hG4bK")
    assert len(via.branch or "") > len("z9hG4bK")
    assert invite.from_tag
    assert invite.to_tag is None
    assert invite.cseq == (1, "INVITE")
    assert invite.headers.get("Contact") == "<sip:ivr@192.0.2.1:5060>"
    assert (invite.headers.get("From") or "").startswith('"IVR" <sip:ivr@192.0.2.1:5060>')
    assert invite.headers.get("To") == f"<{TARGET}>"
    assert invite.headers.get("Max-Forwards") == "70"
    assert invite.headers.get("Content-Type") == "application/sdp"
    assert invite.body == OFFER
    # Timer A: the same bytes at 0.5, 1.5, 3.5 ...
    first = agent.take_datagrams()
    assert first == []
    for rel in (0.5, 1.5, 3.5, 7.5):
        agent.handle_timer(T0 + rel - EPS)
        assert agent.take_datagrams() == []
        agent.handle_timer(T0 + rel)
        (data, address) = agent.take_datagrams()[0]
        assert address == CALLEE
        assert parse(data) == invite
    assert agent.take_events() == []


def test_two_calls_have_distinct_identifiers() -> None:
    agent = Agent(HOST, PORT)
    id1, inv1 = place_call(agent)
    id2, inv2 = place_call(agent)
    assert id1 != id2
    assert inv1.branch != inv2.branch
    assert inv1.from_tag != inv2.from_tag


def test_outbound_call_answered() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 100, to_tag=None), CALLEE, T0 + 0.1)
    assert sent(agent) == []
    assert agent.take_events() == []
    agent.receive(reply(invite, 180), CALLEE, T0 + 0.2)
    assert sent(agent) == []
    assert agent.take_events() == [CallProgress(call_id, 180)]
    # No more retransmissions once something came back (Proceeding).
    assert drain(agent, T0 + 5.0) == []
    ok = reply(
        invite,
        200,
        record_route=["<sip:p1.example.com:5080;lr>", "<sip:p2.example.com;lr>"],
        contact="<sip:bob@192.0.2.99:5072>",
        body=ANSWER,
    )
    agent.receive(ok, CALLEE, T0 + 6.0)
    ack, address = one_request(agent)
    # §13.2.2.4: ACK built like an in-dialog request: new branch, Request-URI = the
    # Contact, Route = the reversed Record-Route, CSeq number of the INVITE, method ACK.
    assert ack.method == "ACK"
    assert ack.branch != invite.branch
    assert (ack.branch or "").startswith("z9hG4bK")
    assert ack.uri == "sip:bob@192.0.2.99:5072"
    assert ack.headers.get_all("Route") == [
        "<sip:p2.example.com;lr>",
        "<sip:p1.example.com:5080;lr>",
    ]
    assert address == Target("p2.example.com", 5060)
    assert ack.cseq == (1, "ACK")
    assert ack.call_id == call_id
    assert ack.from_tag == invite.from_tag
    assert ack.to_tag == "callee-tag"
    assert agent.take_events() == [CallAnswered(call_id, ANSWER)]
    # A retransmitted 200: the same ACK again, no new event.
    agent.receive(ok, CALLEE, T0 + 6.5)
    again, again_address = one_request(agent)
    assert again.method == "ACK"
    assert again.cseq == (1, "ACK")
    assert again_address == address
    assert agent.take_events() == []
    # Also after Timer M ended the INVITE transaction.
    agent.handle_timer(T0 + 6.0 + 32.0)
    assert sent(agent) == []
    agent.receive(ok, CALLEE, T0 + 40.0)
    late, _ = one_request(agent)
    assert late.method == "ACK"
    assert agent.take_events() == []
    # Our BYE: next CSeq, route set, Contact as Request-URI.
    agent.hang_up(call_id, T0 + 41.0)
    bye, bye_address = one_request(agent)
    assert bye.method == "BYE"
    assert bye.cseq == (2, "BYE")
    assert bye.uri == "sip:bob@192.0.2.99:5072"
    assert bye.headers.get_all("Route") == ack.headers.get_all("Route")
    assert bye_address == Target("p2.example.com", 5060)
    assert agent.take_events() == [CallTerminated(call_id, "completed", "200", by_remote=False)]
    agent.receive(reply(bye, 200), ("p2.example.com", 5060), T0 + 41.1)
    assert sent(agent) == []
    assert_no_leaks(agent, T0 + 41.1)


def test_outbound_call_ended_by_the_callee() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 200, body=ANSWER), CALLEE, T0 + 1.0)
    sent(agent)
    agent.take_events()
    bye = (
        "BYE sip:callhook@192.0.2.1:5060 SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 192.0.2.20:5070;branch=z9hG4bK-callee-bye\r\n"
        f"From: <{TARGET}>;tag=callee-tag\r\n"
        f"To: {invite.headers.get('From')}\r\n"
        f"Call-ID: {call_id}\r\n"
        "CSeq: 1 BYE\r\n"
        "Content-Length: 0\r\n\r\n"
    ).encode()
    agent.receive(bye, CALLEE, T0 + 5.0)
    ok, address = one_response(agent)
    assert (ok.status, ok.cseq) == (200, (1, "BYE"))
    assert address == CALLEE
    assert agent.take_events() == [CallTerminated(call_id, "hung_up", "BYE", by_remote=True)]


@pytest.mark.parametrize(
    ("status", "cause"),
    [
        (486, "busy"),
        (600, "busy"),
        (404, "unobtainable"),
        (480, "no_answer"),
        (408, "no_answer"),
        (503, "failed"),
    ],
)
def test_outbound_call_refused(status: int, cause: str) -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 180), CALLEE, T0 + 0.2)
    agent.take_events()
    agent.receive(reply(invite, status), CALLEE, T0 + 1.0)
    ack, address = one_request(agent)
    # §17.1.1.3: the ACK of a non-2xx: same branch, To with the tag, CSeq n ACK.
    assert ack.method == "ACK"
    assert address == CALLEE
    assert ack.branch == invite.branch
    assert ack.uri == invite.uri
    assert ack.cseq == (1, "ACK")
    assert ack.to_tag == "callee-tag"
    assert agent.take_events() == [CallTerminated(call_id, cause, str(status), by_remote=True)]
    # A retransmitted final response is ACKed again, without a second event.
    agent.receive(reply(invite, status), CALLEE, T0 + 1.5)
    again, _ = one_request(agent)
    assert again.method == "ACK"
    assert agent.take_events() == []
    assert_no_leaks(agent, T0 + 2.0)


def test_timer_b_without_any_answer() -> None:
    agent = Agent(HOST, PORT)
    call_id, _ = place_call(agent)
    fired = drain(agent, T0 + 32.0 - EPS)
    assert [round(when - T0, 3) for when, _ in fired] == [0.5, 1.5, 3.5, 7.5, 15.5, 31.5]
    assert agent.take_events() == []
    agent.handle_timer(T0 + 32.0)
    assert sent(agent) == []
    assert agent.take_events() == [CallTerminated(call_id, "failed", "408", by_remote=True)]
    assert_no_leaks(agent, T0 + 32.0)


SHA_CHALLENGE = 'Digest realm="trunk.example", nonce="n-sha-1", algorithm=SHA-256, qop="auth"'
MD5_CHALLENGE = 'Digest realm="trunk.example", nonce="n-md5-1"'
CREDS = Credentials("alice", "s3cr3t")


def h(algorithm: str, text: str) -> str:
    name = {"MD5": "md5", "SHA-256": "sha256"}[algorithm]
    return hashlib.new(name, text.encode()).hexdigest()


def expected_response(params: dict[str, str], method: str, password: str) -> str:
    """RFC 7616 §3.4.1 computed here from the sent parameters."""
    algorithm = params.get("algorithm", "MD5")
    ha1 = h(algorithm, f"{params['username']}:{params['realm']}:{password}")
    ha2 = h(algorithm, f"{method}:{params['uri']}")
    if "qop" in params:
        return h(
            algorithm,
            f"{ha1}:{params['nonce']}:{params['nc']}:{params['cnonce']}:{params['qop']}:{ha2}",
        )
    return h(algorithm, f"{ha1}:{params['nonce']}:{ha2}")


def challenged(
    agent: Agent, status: int, challenges: Sequence[str]
) -> tuple[str, Request, Request]:
    """Place a call, answer it with ``status`` and the challenges; returns the two INVITEs."""
    call_id, invite = place_call(agent, credentials=CREDS)
    header = "WWW-Authenticate" if status == 401 else "Proxy-Authenticate"
    agent.receive(
        reply(invite, status, headers=[(header, c) for c in challenges]), CALLEE, T0 + 0.3
    )
    out = sent(agent)
    (ack,) = requests(out, "ACK")
    assert ack.branch == invite.branch  # the 401/407 is ACKed in its own transaction
    (second,) = requests(out, "INVITE")
    assert [a for _, a in out] == [CALLEE, CALLEE]
    assert agent.take_events() == []
    return call_id, invite, second


def test_401_sha256_qop_auth_is_answered() -> None:
    agent = Agent(HOST, PORT)
    call_id, first, second = challenged(agent, 401, [SHA_CHALLENGE])
    # §22.2: CSeq + 1, new branch, same Call-ID, From tag, To, Request-URI and body.
    assert second.cseq == (2, "INVITE")
    assert second.branch != first.branch
    assert (second.branch or "").startswith("z9hG4bK")
    assert second.call_id == call_id
    assert second.from_tag == first.from_tag
    assert second.headers.get("To") == first.headers.get("To")
    assert second.uri == first.uri
    assert second.body == OFFER
    assert "Proxy-Authorization" not in second.headers
    value = second.headers.get("Authorization")
    assert value is not None
    params = auth_params(value)
    assert params["username"] == "alice"
    assert params["realm"] == "trunk.example"
    assert params["nonce"] == "n-sha-1"
    assert params["uri"] == TARGET
    assert params["algorithm"] == "SHA-256"
    assert params["qop"] == "auth"
    assert params["nc"] == "00000001"
    assert params["cnonce"]
    assert params["response"] == expected_response(params, "INVITE", "s3cr3t")
    # The authenticated INVITE is answered normally; ACK carries CSeq 2.
    agent.receive(reply(second, 200, body=ANSWER), CALLEE, T0 + 1.0)
    ack, _ = one_request(agent)
    assert ack.cseq == (2, "ACK")
    assert agent.take_events() == [CallAnswered(call_id, ANSWER)]
    agent.hang_up(call_id, T0 + 2.0)
    bye, _ = one_request(agent)
    assert bye.cseq == (3, "BYE")


def test_401_md5_without_qop_is_answered() -> None:
    agent = Agent(HOST, PORT)
    _, _, second = challenged(agent, 401, [MD5_CHALLENGE])
    value = second.headers.get("Authorization")
    assert value is not None
    params = auth_params(value)
    assert params.get("algorithm", "MD5") == "MD5"
    assert "qop" not in params
    assert "cnonce" not in params
    assert params["response"] == expected_response(params, "INVITE", "s3cr3t")


def test_407_gets_proxy_authorization() -> None:
    agent = Agent(HOST, PORT)
    _, _, second = challenged(agent, 407, [SHA_CHALLENGE])
    assert "Authorization" not in second.headers
    value = second.headers.get("Proxy-Authorization")
    assert value is not None
    params = auth_params(value)
    assert params["response"] == expected_response(params, "INVITE", "s3cr3t")


@pytest.mark.parametrize("order", ["md5-first", "sha-first"])
def test_sha256_chosen_when_both_are_offered(order: str) -> None:
    agent = Agent(HOST, PORT)
    challenges = [MD5_CHALLENGE, SHA_CHALLENGE]
    if order == "sha-first":
        challenges.reverse()
    _, _, second = challenged(agent, 401, challenges)
    assert second.headers.count("Authorization") == 1
    value = second.headers.get("Authorization")
    assert value is not None
    params = auth_params(value)
    assert params["algorithm"] == "SHA-256"
    assert params["nonce"] == "n-sha-1"
    assert params["response"] == expected_response(params, "INVITE", "s3cr3t")


def test_401_without_credentials_fails() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.receive(
        reply(invite, 401, headers=[("WWW-Authenticate", SHA_CHALLENGE)]), CALLEE, T0 + 0.3
    )
    ack, _ = one_request(agent)
    assert ack.method == "ACK"
    assert agent.take_events() == [CallTerminated(call_id, "failed", "401", by_remote=True)]


def test_401_with_an_unusable_challenge_fails() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent, credentials=CREDS)
    agent.receive(
        reply(invite, 401, headers=[("WWW-Authenticate", 'Basic realm="x"')]), CALLEE, T0 + 0.3
    )
    out = sent(agent)
    assert [m.method for m in requests(out)] == ["ACK"]
    assert agent.take_events() == [CallTerminated(call_id, "failed", "401", by_remote=True)]


def test_second_401_after_authenticating_fails() -> None:
    agent = Agent(HOST, PORT)
    call_id, _, second = challenged(agent, 401, [SHA_CHALLENGE])
    again = SHA_CHALLENGE.replace("n-sha-1", "n-sha-2")
    agent.receive(reply(second, 401, headers=[("WWW-Authenticate", again)]), CALLEE, T0 + 1.0)
    out = sent(agent)
    assert [m.method for m in requests(out)] == ["ACK"]
    assert agent.take_events() == [CallTerminated(call_id, "failed", "401", by_remote=True)]


def test_authentication_never_loops() -> None:
    """Whatever the retry policy, a trunk that always says 401 ends the call."""
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent, credentials=CREDS)
    now = T0
    invites = 1
    for _ in range(10):
        now += 0.5
        agent.receive(
            reply(invite, 401, headers=[("WWW-Authenticate", SHA_CHALLENGE)]), CALLEE, now
        )
        new = requests(sent(agent), "INVITE")
        if not new:
            break
        invites += 1
        (invite,) = new
    assert invites <= 3
    assert agent.take_events() == [CallTerminated(call_id, "failed", "401", by_remote=True)]


def test_stale_nonce_is_retried() -> None:
    agent = Agent(HOST, PORT)
    _, _, second = challenged(agent, 401, [SHA_CHALLENGE])
    stale = SHA_CHALLENGE.replace("n-sha-1", "n-sha-2") + ", stale=true"
    agent.receive(reply(second, 401, headers=[("WWW-Authenticate", stale)]), CALLEE, T0 + 1.0)
    (third,) = requests(sent(agent), "INVITE")
    assert third.cseq == (3, "INVITE")
    value = third.headers.get("Authorization")
    assert value is not None
    params = auth_params(value)
    assert params["nonce"] == "n-sha-2"
    assert params["response"] == expected_response(params, "INVITE", "s3cr3t")


def test_ack_of_authenticated_invite_carries_the_credentials() -> None:
    agent = Agent(HOST, PORT)
    _, _, second = challenged(agent, 401, [SHA_CHALLENGE])
    agent.receive(reply(second, 200, body=ANSWER), CALLEE, T0 + 1.0)
    ack, _ = one_request(agent)
    assert ack.headers.get("Authorization") == second.headers.get("Authorization")


def test_hang_up_while_ringing_sends_cancel_then_acks_the_487() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 180), CALLEE, T0 + 0.2)
    agent.take_events()
    agent.hang_up(call_id, T0 + 2.0)
    cancel, address = one_request(agent)
    # §9.1: same Request-URI, Call-ID, From, To (no tag), top Via (same branch), CSeq n CANCEL.
    assert cancel.method == "CANCEL"
    assert address == CALLEE
    assert cancel.uri == invite.uri
    assert cancel.headers.get_all("Via") == invite.headers.get_all("Via")
    assert cancel.branch == invite.branch
    assert cancel.call_id == call_id
    assert cancel.headers.get("From") == invite.headers.get("From")
    assert cancel.headers.get("To") == invite.headers.get("To")
    assert cancel.cseq == (1, "CANCEL")
    assert agent.take_events() == [CallTerminated(call_id, "completed", "487", by_remote=False)]
    agent.receive(reply(cancel, 200), CALLEE, T0 + 2.1)
    assert sent(agent) == []
    agent.receive(reply(invite, 487), CALLEE, T0 + 2.2)
    ack, _ = one_request(agent)
    assert ack.method == "ACK"
    assert ack.branch == invite.branch
    assert ack.cseq == (1, "ACK")
    assert ack.to_tag == "callee-tag"
    assert agent.take_events() == []
    assert_no_leaks(agent, T0 + 2.2)


def test_cancel_waits_for_a_provisional_response() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.hang_up(call_id, T0 + 0.1)
    # §9.1: no CANCEL before any provisional response.
    assert requests(sent(agent), "CANCEL") == []
    assert agent.take_events() == [CallTerminated(call_id, "completed", "487", by_remote=False)]
    agent.receive(reply(invite, 183), CALLEE, T0 + 0.4)
    out = sent(agent)
    (cancel,) = requests(out, "CANCEL")
    assert cancel.branch == invite.branch
    assert agent.take_events() == [CallProgress(call_id, 183)]


def test_cancel_goes_out_after_100_trying() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.hang_up(call_id, T0 + 0.1)
    agent.receive(reply(invite, 100, to_tag=None), CALLEE, T0 + 0.2)
    (cancel,) = requests(sent(agent), "CANCEL")
    assert cancel.branch == invite.branch


def test_hang_up_after_100_trying_sends_cancel_at_once() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 100, to_tag=None), CALLEE, T0 + 0.2)
    agent.hang_up(call_id, T0 + 1.0)
    (cancel,) = requests(sent(agent), "CANCEL")
    assert cancel.branch == invite.branch


def test_200_after_hang_up_before_any_response_is_acked_and_byed() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.hang_up(call_id, T0 + 0.1)
    agent.take_events()
    agent.receive(reply(invite, 200, body=ANSWER), CALLEE, T0 + 0.5)
    out = sent(agent)
    assert [m.method for m in requests(out)] == ["ACK", "BYE"]
    assert agent.take_events() == []  # no CallAnswered for a call already over


def test_200_crossing_our_cancel_is_acked_and_byed() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 180), CALLEE, T0 + 0.2)
    agent.hang_up(call_id, T0 + 1.0)
    (cancel,) = requests(sent(agent), "CANCEL")
    agent.take_events()
    agent.receive(reply(cancel, 200), CALLEE, T0 + 1.1)
    agent.receive(reply(invite, 200, body=ANSWER), CALLEE, T0 + 1.2)
    out = sent(agent)
    assert [m.method for m in requests(out)] == ["ACK", "BYE"]
    assert agent.take_events() == []


def test_cancelled_invite_without_final_response_is_destroyed() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 180), CALLEE, T0 + 0.2)
    agent.hang_up(call_id, T0 + 1.0)
    (cancel,) = requests(sent(agent), "CANCEL")
    agent.receive(reply(cancel, 200), CALLEE, T0 + 1.1)
    assert_no_leaks(agent, T0 + 1.1)


def test_malformed_responses_are_dropped_silently() -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    good = reply(invite, 200, body=ANSWER)
    broken = [
        good.replace(f"Call-ID: {call_id}\r\n".encode(), b""),  # no Call-ID
        good.replace(b"CSeq: 1 INVITE", b"CSeq: one INVITE"),  # bad CSeq
        good.replace(b"Via: ", b"Via: SIP/2.0/UDP 198.51.100.1;branch=z9hG4bKx\r\nVia: ", 1),
        good.replace(b"SIP/2.0 200 Reason", b"SIP/2.0 2000 Reason"),  # bad status line
        good.replace(b"SIP/2.0 200 Reason", b"SIP/3.0 200 Reason"),  # bad version
        good.replace(b"Content-Length: ", b"Content-Length: 99"),  # does not frame
    ]
    for n, data in enumerate(broken):
        agent.receive(data, CALLEE, T0 + 0.1 + n * 0.01)
        assert sent(agent) == [], n
        assert agent.take_events() == [], n
    # Still in Calling: Timer A goes on.
    agent.handle_timer(T0 + 0.5)
    (retransmitted,) = requests(sent(agent), "INVITE")
    assert retransmitted == invite
    # And the real answer still works.
    agent.receive(good, CALLEE, T0 + 0.6)
    assert [m.method for m in requests(sent(agent))] == ["ACK"]
    assert agent.take_events() == [CallAnswered(call_id, ANSWER)]


def test_response_for_no_transaction_is_ignored() -> None:
    agent = Agent(HOST, PORT)
    _, invite = place_call(agent)
    stray = reply(invite, 180).replace((invite.branch or "").encode(), b"z9hG4bK-not-ours")
    agent.receive(stray, CALLEE, T0 + 0.1)
    assert sent(agent) == []
    assert agent.take_events() == []


# --- more RFC corner cases -------------------------------------------------------------


def test_stray_2xx_with_an_inbound_calls_call_id_is_dropped() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    forged = (
        "SIP/2.0 200 OK\r\n"
        "Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-never-sent\r\n"
        f"From: <sip:alice@example.com>;tag={FROM_TAG}\r\n"
        "To: <sip:app@192.0.2.1>;tag=evil\r\n"
        f"Call-ID: {CALL_ID}\r\n"
        "CSeq: 1 INVITE\r\n"
        "Contact: <sip:evil@203.0.113.66>\r\n"
        "Content-Length: 0\r\n\r\n"
    ).encode()
    agent.receive(forged, ("203.0.113.66", 5060), T0 + 0.5)
    assert sent(agent) == []
    assert agent.take_events() == []
    answer_call(agent, T0 + 1.0)  # the real call is still ours to answer


def test_rfc2543_callers_ack_confirms_the_call() -> None:
    agent = Agent(HOST, PORT)
    via = f"SIP/2.0/UDP {PEER[0]}:{PEER[1]}"  # no branch at all
    agent.receive(sip_request("INVITE", via=via, body=OFFER), PEER, T0)
    assert statuses(sent(agent)) == [100]
    agent.take_events()
    ok = answer_call(agent, T0 + 0.1)
    assert ok.to_tag
    agent.receive(sip_request("ACK", via=via, to_tag=ok.to_tag), PEER, T0 + 0.2)
    assert agent.take_events() == [CallConfirmed(CALL_ID)]
    assert drain(agent, T0 + 10.0) == []


def test_rfc2543_caller_without_branch_can_cancel() -> None:
    agent = Agent(HOST, PORT)
    via = f"SIP/2.0/UDP {PEER[0]}:{PEER[1]}"
    agent.receive(sip_request("INVITE", via=via, body=OFFER), PEER, T0)
    sent(agent)
    agent.take_events()
    agent.receive(sip_request("CANCEL", via=via, contact=None), PEER, T0 + 1)
    assert statuses(sent(agent)) == [200, 487]
    assert agent.take_events() == [CallTerminated(CALL_ID, "hung_up", "487", by_remote=True)]


def test_bye_on_the_early_dialog_ends_the_call() -> None:
    agent = Agent(HOST, PORT)
    offer_call(agent)
    agent.ring(CALL_ID, T0 + 0.1)
    ringing, _ = one_response(agent)
    assert ringing.to_tag
    agent.receive(
        sip_request("BYE", to_tag=ringing.to_tag, cseq=2, branch="z9hG4bK-early-bye"),
        PEER,
        T0 + 1.0,
    )
    out = responses(sent(agent))
    assert sorted((r.cseq[1], r.status) for r in out) == [("BYE", 200), ("INVITE", 487)]
    assert agent.take_events() == [CallTerminated(CALL_ID, "hung_up", "BYE", by_remote=True)]


def test_ack_without_call_id_is_discarded() -> None:
    agent = Agent(HOST, PORT)
    agent.receive(sip_request("ACK", call_id=None, to_tag="x"), PEER, T0)
    assert sent(agent) == []


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b.replace(b"CSeq: 1 INVITE", b"CSeq: x INVITE"),
        lambda b: b.replace(f"Call-ID: {CALL_ID}\r\n".encode(), b""),
    ],
    ids=["bad-cseq", "no-call-id"],
)
def test_rfc2543_request_with_broken_fields_gets_400(mangle: Callable[[bytes], bytes]) -> None:
    agent = Agent(HOST, PORT)
    via = f"SIP/2.0/UDP {PEER[0]}:{PEER[1]};branch=old-style-1"
    agent.receive(mangle(sip_request("INVITE", via=via, body=OFFER)), PEER, T0)
    resp, _ = one_response(agent)
    assert resp.status == 400


# --- robustness -------------------------------------------------------------------------

RFC4475_FILES = sorted(DATA.glob("*.dat"))


def test_the_rfc4475_corpus_is_there() -> None:
    assert len(RFC4475_FILES) == 50


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(
            p,
            id=p.stem,
        )
        for p in RFC4475_FILES
    ],
)
def test_rfc4475_message_never_raises_and_replies_parse(path: Path) -> None:
    agent = Agent(HOST, PORT)
    source = ("192.0.2.77", 5062)
    with ErrorLog():
        agent.receive(path.read_bytes(), source, T0)
    out = sent(agent)  # every datagram parses
    for msg, _ in out:
        assert isinstance(msg, Response)  # only answers, never a request of our own
        assert 100 <= msg.status < 700
        assert msg.headers.get_all("Via")
    # A response is never answered.
    if path.read_bytes().lstrip(b"\r\n").startswith(b"SIP/"):
        assert out == []
    # Whatever it was, once the application has dealt with any call it made, nothing leaks.
    for event in agent.take_events():
        if isinstance(event, IncomingCall):
            agent.reject(event.call_id, 486, T0 + 1.0)
    sent(agent)
    assert_no_leaks(agent, T0 + 1.0)


class ErrorLog(logging.Handler):
    """Collects ERROR records of the SIP logger: the agent logs a bug it caught that way."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> ErrorLog:
        logging.getLogger("callhook.sip").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("callhook.sip").removeHandler(self)
        assert not self.records, [r.getMessage() for r in self.records]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=1200))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    agent = Agent(HOST, PORT)
    with ErrorLog():
        agent.receive(data, PEER, T0)
        sent(agent)
        agent.handle_timer(T0 + 100.0)
        sent(agent)


def mutate(draw: st.DrawFn, lines: list[bytes]) -> bytes:
    """A few line-level and byte-level mutations of a message's lines."""
    lines = list(lines)
    header_end = lines.index(b"")
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["drop", "dup", "flip", "insert", "truncate", "swap"]))
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "drop":
            del lines[i]
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "flip" and lines[i]:
            j = draw(st.integers(0, len(lines[i]) - 1))
            byte = draw(st.integers(0, 255))
            lines[i] = lines[i][:j] + bytes([byte]) + lines[i][j + 1 :]
        elif kind == "insert":
            lines.insert(min(i, header_end), draw(st.binary(max_size=40)))
        elif kind == "truncate":
            lines = lines[: i + 1]
        elif kind == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        if not lines:
            lines = [b""]
        header_end = min(header_end, len(lines) - 1)
    return b"\r\n".join(lines)


@st.composite
def mutated_invite(draw: st.DrawFn) -> bytes:
    lines = sip_request(
        "INVITE",
        body=OFFER,
        headers=[("Record-Route", "<sip:p1.example.com;lr>"), ("Supported", "timer")],
    ).split(b"\r\n")
    return mutate(draw, lines)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_invite(), st.sampled_from(["INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "INFO"]))
def test_mutated_requests_never_raise_nor_leak(data: bytes, method: str) -> None:
    data = data.replace(b"INVITE", method.encode())
    agent = Agent(HOST, PORT)
    with ErrorLog():
        agent.receive(data, PEER, T0)
        sent(agent)
        for event in agent.take_events():
            if isinstance(event, IncomingCall):
                agent.answer(event.call_id, ANSWER, T0 + 0.1)
        agent.receive(data, PEER, T0 + 0.2)  # and again, as a retransmission
        sent(agent)
        assert_no_leaks(agent, T0 + 0.2)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_responses_never_raise_nor_leak(data: st.DataObject) -> None:
    agent = Agent(HOST, PORT)
    call_id, invite = place_call(agent)
    status = data.draw(st.sampled_from([180, 200, 486]))
    good = reply(
        invite,
        status,
        record_route=["<sip:p1.example.com;lr>"],
        body=ANSWER if status == 200 else b"",
    )
    mutated = data.draw(st.composite(lambda draw: mutate(draw, good.split(b"\r\n")))())
    with ErrorLog():
        agent.receive(mutated, CALLEE, T0 + 0.1)
        sent(agent)
        agent.take_events()
        # The callee then refuses (ignored if the mutated 2xx was taken), and we hang up.
        agent.receive(reply(invite, 486), CALLEE, T0 + 0.2)
        agent.hang_up(call_id, T0 + 0.3)
        sent(agent)
        assert_no_leaks(agent, T0 + 0.3)


def test_2xx_with_a_malformed_record_route_does_not_raise() -> None:
    agent = Agent(HOST, PORT)
    _, invite = place_call(agent)
    agent.receive(reply(invite, 200, record_route=["<foo>"], body=ANSWER), CALLEE, T0 + 0.1)
    sent(agent)


# --- nothing leaks ----------------------------------------------------------------------


def _peer_bye(agent: Agent) -> float:
    tag = confirmed_call(agent)
    agent.receive(sip_request("BYE", to_tag=tag, cseq=2, branch="z9hG4bK-b"), PEER, T0 + 1)
    return T0 + 1


def _our_bye_unanswered(agent: Agent) -> float:
    confirmed_call(agent)
    agent.hang_up(CALL_ID, T0 + 1)
    return T0 + 1


def _no_ack(agent: Agent) -> float:
    offer_call(agent)
    answer_call(agent, T0)
    return T0


def _cancel_acked(agent: Agent) -> float:
    offer_call(agent)
    agent.receive(cancel_bytes(), PEER, T0 + 0.5)
    (_, final) = responses(sent(agent))
    assert final.to_tag
    agent.receive(ack_bytes(final.to_tag, branch=INVITE_BRANCH), PEER, T0 + 0.6)
    return T0 + 0.6


def _cancel_never_acked(agent: Agent) -> float:
    offer_call(agent)
    agent.receive(cancel_bytes(), PEER, T0 + 0.5)
    return T0 + 0.5


def _rejected(agent: Agent) -> float:
    offer_call(agent)
    agent.reject(CALL_ID, 486, T0 + 0.3)
    return T0 + 0.3


def _reinvite_and_update(agent: Agent) -> float:
    tag = confirmed_call(agent)
    agent.receive(reinvite_bytes(tag), PEER, T0 + 1)
    agent.answer_reoffer(CALL_ID, ANSWER, T0 + 1.1)
    agent.receive(ack_bytes(tag, cseq=2, branch="z9hG4bK-a2"), PEER, T0 + 1.2)
    agent.receive(
        sip_request("UPDATE", to_tag=tag, cseq=3, branch="z9hG4bK-u3", body=HOLD), PEER, T0 + 2
    )
    agent.answer_reoffer(CALL_ID, ANSWER, T0 + 2.1)
    agent.receive(
        sip_request(
            "INFO",
            to_tag=tag,
            cseq=4,
            branch="z9hG4bK-i4",
            body=b"Signal=1\r\n",
            content_type="application/dtmf-relay",
        ),
        PEER,
        T0 + 3,
    )
    agent.hang_up(CALL_ID, T0 + 4)
    return T0 + 4


def _refusals(agent: Agent) -> float:
    for n, method in enumerate(("OPTIONS", "MESSAGE", "FOOBAR")):
        agent.receive(sip_request(method, branch=f"z9hG4bK-r{n}", call_id=f"r{n}"), PEER, T0)
    agent.receive(sip_request("INVITE", body=OFFER, headers=[("Require", "100rel")]), PEER, T0)
    agent.receive(sip_request("BYE", call_id="none", to_tag="x", branch="z9hG4bK-bb"), PEER, T0)
    return T0


def _outbound_answered_and_hung_up(agent: Agent) -> float:
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 180), CALLEE, T0 + 0.1)
    agent.receive(reply(invite, 200, body=ANSWER), CALLEE, T0 + 1)
    agent.hang_up(call_id, T0 + 2)
    return T0 + 2


def _outbound_busy(agent: Agent) -> float:
    _, invite = place_call(agent)
    agent.receive(reply(invite, 486), CALLEE, T0 + 1)
    return T0 + 1


def _outbound_no_answer(agent: Agent) -> float:
    place_call(agent)
    return T0


def _outbound_authenticated(agent: Agent) -> float:
    call_id, _, second = challenged(agent, 407, [SHA_CHALLENGE])
    agent.receive(reply(second, 200, body=ANSWER), CALLEE, T0 + 1)
    agent.hang_up(call_id, T0 + 2)
    return T0 + 2


def _outbound_cancelled(agent: Agent) -> float:
    call_id, invite = place_call(agent)
    agent.receive(reply(invite, 180), CALLEE, T0 + 0.1)
    agent.hang_up(call_id, T0 + 1)
    (cancel,) = requests(sent(agent), "CANCEL")
    agent.receive(reply(cancel, 200), CALLEE, T0 + 1.1)
    agent.receive(reply(invite, 487), CALLEE, T0 + 1.2)
    return T0 + 1.2


def _outbound_hung_up_then_answered(agent: Agent) -> float:
    call_id, invite = place_call(agent)
    agent.hang_up(call_id, T0 + 0.1)
    agent.receive(reply(invite, 200, body=ANSWER), CALLEE, T0 + 1)
    return T0 + 1


SCENARIOS: dict[str, Callable[[Agent], float]] = {
    "peer-bye": _peer_bye,
    "our-bye-unanswered": _our_bye_unanswered,
    "no-ack": _no_ack,
    "cancel-acked": _cancel_acked,
    "cancel-never-acked": _cancel_never_acked,
    "rejected": _rejected,
    "reinvite-update-info": _reinvite_and_update,
    "refusals": _refusals,
    "outbound-answered": _outbound_answered_and_hung_up,
    "outbound-busy": _outbound_busy,
    "outbound-no-answer": _outbound_no_answer,
    "outbound-authenticated": _outbound_authenticated,
    "outbound-cancelled": _outbound_cancelled,
    "outbound-hung-up-then-answered": _outbound_hung_up_then_answered,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_no_transaction_or_timer_outlives_a_scenario(scenario: Callable[[Agent], float]) -> None:
    agent = Agent(HOST, PORT)
    now = scenario(agent)
    assert agent._txs  # the scenario left work for the timers
    # Every datagram produced on the way parses.
    sent(agent)
    for when, _ in drain(agent, now + 100.0):
        assert now <= when <= now + 100.0
    assert_no_leaks(agent, now)


def test_ended_calls_are_forgotten() -> None:
    agent = Agent(HOST, PORT)
    now = _peer_bye(agent)
    assert_no_leaks(agent, now)
    assert agent.calls == {}


def test_a_bug_anywhere_in_handling_loses_the_message_not_the_agent(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """receive and refuse never raise (fuzzing's bar: no input stops serve's loop), even
    when the parser itself has a bug: the message is logged and lost."""
    import callhook.sip.core
    import callhook.sip.uas

    def broken(data: bytes) -> object:
        raise RuntimeError("a parser bug")

    agent = Agent(HOST, PORT)
    monkeypatch.setattr(callhook.sip.core, "parse", broken)
    monkeypatch.setattr(callhook.sip.uas, "parse", broken)
    request = sip_request("INVITE", body=OFFER)
    agent.receive(request, PEER, T0)
    agent.refuse(request, PEER, T0)
    assert agent.take_datagrams() == []
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        f"SIP message from {PEER} could not be handled",
        f"SIP from {PEER}: the 403 could not be made",
    ]
    monkeypatch.undo()
    offer_call(agent, T0 + 1)  # and the next message is handled as ever
