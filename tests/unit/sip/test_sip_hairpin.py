"""A call callhook places to itself (a hairpin: a connect to an application of the same
serve): the agent is both ends of one Call-ID, and tells the halves apart by their tags.

Sans-IO, as tests/unit/sip/test_sip_agent.py: what the agent sends to its own address is fed
back to it, on a virtual clock."""

from __future__ import annotations

from callhook.sip.agent import (
    Agent,
    CallAnswered,
    CallConfirmed,
    CallEvent,
    CallTerminated,
    IncomingCall,
)
from callhook.sip.core import HAIRPIN
from callhook.sip.message import Request, Response, parse
from callhook.sip.transport import Target

HOST, PORT = "192.0.2.1", 5060
ME = Target(HOST, PORT)
T0 = 1000.0
OFFER = (
    b"v=0\r\no=callhook 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n"
    b"m=audio 30000 RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n"
)
ANSWER = OFFER.replace(b"30000", b"30002")


def loop(agent: Agent, now: float) -> list[Request | Response]:
    """Deliver what the agent sent to itself back to it until it sends nothing more;
    everything it sent, parsed, in order."""
    seen: list[Request | Response] = []
    for _ in range(20):
        out = agent.take_datagrams()
        if not out:
            return seen
        for data, address in out:
            assert (address.host, address.port) == (HOST, PORT)  # only to itself
            seen.append(parse(data))
            agent.receive(data, ME, now)
    raise AssertionError("the agent kept talking to itself")


def events(agent: Agent) -> list[CallEvent]:
    return agent.take_events()


def placed_and_answered(agent: Agent) -> tuple[str, str]:
    out_id = agent.invite(f"sip:callee@{HOST}:{PORT}", OFFER, T0, from_user="alice")
    loop(agent, T0)
    incoming = [e for e in events(agent) if isinstance(e, IncomingCall)]
    assert len(incoming) == 1
    in_id = incoming[0].call_id
    # The inbound half has its own key; both are the one Call-ID on the wire.
    assert in_id == out_id + HAIRPIN
    assert incoming[0].user == "callee"
    agent.answer(in_id, ANSWER, T0 + 0.1)
    loop(agent, T0 + 0.1)
    got = events(agent)
    assert CallAnswered(out_id, ANSWER) in [e for e in got if isinstance(e, CallAnswered)]
    assert CallConfirmed(in_id) in got  # the outbound half's ACK reached the inbound half
    return out_id, in_id


def test_a_call_to_itself_is_two_calls_with_one_call_id() -> None:
    agent = Agent(HOST, PORT)
    out_id, in_id = placed_and_answered(agent)
    assert agent.calls[out_id].direction == "outbound"
    assert agent.calls[in_id].direction == "inbound"
    assert agent.calls[out_id].invite.call_id == agent.calls[in_id].invite.call_id == out_id


def test_the_inbound_half_hanging_up_ends_the_outbound_half() -> None:
    agent = Agent(HOST, PORT)
    out_id, in_id = placed_and_answered(agent)
    agent.hang_up(in_id, T0 + 2.0)
    sent = loop(agent, T0 + 2.0)
    bye = [m for m in sent if isinstance(m, Request) and m.method == "BYE"]
    assert len(bye) == 1 and bye[0].call_id == out_id
    ok = [m for m in sent if isinstance(m, Response) and m.cseq[1] == "BYE"]
    assert [r.status for r in ok] == [200]  # the outbound half took it (not a 481)
    ended = {e.call_id: e for e in events(agent) if isinstance(e, CallTerminated)}
    assert ended[out_id].cause == "hung_up" and ended[out_id].by_remote
    assert ended[in_id].by_remote is False
    agent.handle_timer(T0 + 100.0)
    agent.handle_timer(T0 + 200.0)
    assert agent.calls == {}


def test_the_outbound_half_hanging_up_ends_the_inbound_half() -> None:
    agent = Agent(HOST, PORT)
    out_id, in_id = placed_and_answered(agent)
    agent.hang_up(out_id, T0 + 2.0)
    loop(agent, T0 + 2.0)
    ended = {e.call_id: e for e in events(agent) if isinstance(e, CallTerminated)}
    assert ended[in_id].cause == "hung_up" and ended[in_id].by_remote
    assert ended[out_id].by_remote is False


def test_cancelling_the_outbound_half_ends_the_ringing_inbound_half() -> None:
    agent = Agent(HOST, PORT)
    out_id = agent.invite(f"sip:callee@{HOST}:{PORT}", OFFER, T0)
    loop(agent, T0)
    (incoming,) = [e for e in events(agent) if isinstance(e, IncomingCall)]
    agent.ring(incoming.call_id, T0 + 0.1)
    loop(agent, T0 + 0.1)
    events(agent)
    agent.hang_up(out_id, T0 + 1.0)  # CANCEL, as a connect drops a far leg that rings
    sent = loop(agent, T0 + 1.0)
    assert [m.method for m in sent if isinstance(m, Request)] == ["CANCEL", "ACK"]
    assert sorted(m.status for m in sent if isinstance(m, Response)) == [200, 487]
    ended = {e.call_id: e for e in events(agent) if isinstance(e, CallTerminated)}
    assert ended[incoming.call_id].raw_cause == "487"


def test_another_party_reusing_a_call_id_of_ours_is_refused() -> None:
    """Only our own INVITE (its From tag ours) makes the inbound half; anyone else's INVITE
    with the Call-ID of one of our calls gets 482 and our call is kept."""
    agent = Agent(HOST, PORT)
    out_id = agent.invite("sip:bob@192.0.2.20:5070", OFFER, T0)
    agent.take_datagrams()
    forged = (
        f"INVITE sip:callee@{HOST}:{PORT} SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 192.0.2.66:5060;branch=z9hG4bK-forged\r\n"
        "Max-Forwards: 70\r\nFrom: <sip:eve@192.0.2.66>;tag=eve\r\n"
        f"To: <sip:callee@{HOST}>\r\nCall-ID: {out_id}\r\nCSeq: 1 INVITE\r\n"
        "Contact: <sip:eve@192.0.2.66>\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    agent.receive(forged, Target("192.0.2.66", 5060), T0 + 0.1)
    answers = [parse(d) for d, _ in agent.take_datagrams()]
    assert [r.status for r in answers if isinstance(r, Response)][-1] == 482
    assert not [e for e in events(agent) if isinstance(e, IncomingCall)]
    assert agent.calls[out_id].direction == "outbound"
