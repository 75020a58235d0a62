"""SIP transactions (callhook/sip/transaction.py) driven through their tables on a virtual clock.

RFC 3261 §17 with RFC 6026's Accepted states, over UDP: T1 = 0.5 s, T2 = 4 s, T4 = 5 s.
Every timer is checked at its boundary: nothing happens 1 ms before it is due, and it
fires exactly when it is due. Times start at T0 (not 0) so that nothing relies on the
clock's origin.
"""

from __future__ import annotations

import pytest

from callhook.sip.message import Request, Response, parse, serialize
from callhook.sip.transaction import (
    Deliver,
    Kind,
    Output,
    State,
    Timeout,
    Transaction,
    Transmit,
    ack_for,
    client,
    server,
)
from callhook.sip.transport import Target

T0 = 1000.0
EPS = 0.001  # "1 ms before"
PEER = Target("192.0.2.20", 5070)

INVITE_BYTES = (
    b"INVITE sip:bob@192.0.2.20:5070 SIP/2.0\r\n"
    b"Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKict1;rport\r\n"
    b"Via: SIP/2.0/UDP 198.51.100.7:5060;branch=z9hG4bKupstream\r\n"
    b"Max-Forwards: 70\r\n"
    b"Route: <sip:proxy1.example.com;lr>\r\n"
    b"Route: <sip:proxy2.example.com;lr>\r\n"
    b"From: <sip:alice@192.0.2.1>;tag=fromtag1\r\n"
    b"To: <sip:bob@192.0.2.20>\r\n"
    b"Call-ID: ict-call@192.0.2.1\r\n"
    b"CSeq: 41 INVITE\r\n"
    b"Contact: <sip:alice@192.0.2.1:5060>\r\n"
    b'Authorization: Digest username="alice", realm="r", nonce="n", uri="sip:b", '
    b'response="00"\r\n'
    b"Content-Type: application/sdp\r\n"
    b"Content-Length: 4\r\n"
    b"\r\n"
    b"v=0\n"
)


def request(data: bytes = INVITE_BYTES) -> Request:
    msg = parse(data)
    assert isinstance(msg, Request)
    return msg


def options_request() -> Request:
    return request(
        b"OPTIONS sip:bob@192.0.2.20:5070 SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKnict1\r\n"
        b"Max-Forwards: 70\r\n"
        b"From: <sip:alice@192.0.2.1>;tag=f2\r\n"
        b"To: <sip:bob@192.0.2.20>\r\n"
        b"Call-ID: nict-call@192.0.2.1\r\n"
        b"CSeq: 7 OPTIONS\r\n"
        b"Content-Length: 0\r\n\r\n"
    )


def response_to(req: Request, status: int, to_tag: str | None = "totag9") -> Response:
    """A response the peer would send to ``req`` (only the top Via comes back)."""
    data = (
        f"SIP/2.0 {status} Whatever\r\n"
        f"Via: {req.headers.get_all('Via')[0]};received=192.0.2.1\r\n"
        f"From: {req.headers.get('From')}\r\n"
        f"To: {req.headers.get('To')}{f';tag={to_tag}' if to_tag else ''}\r\n"
        f"Call-ID: {req.call_id}\r\n"
        f"CSeq: {req.cseq[0]} {req.cseq[1]}\r\n"
        f"Content-Length: 0\r\n\r\n"
    ).encode()
    msg = parse(data)
    assert isinstance(msg, Response)
    return msg


def transmits(outputs: list[Output]) -> list[Transmit]:
    return [o for o in outputs if isinstance(o, Transmit)]


def assert_fires_at(tx: Transaction, when: float) -> list[Output]:
    """Nothing 1 ms before ``when``; something exactly at ``when``."""
    assert tx.deadline == pytest.approx(when)
    assert tx.on_timer(when - EPS) == []
    out = tx.on_timer(when)
    assert out, f"nothing fired at {when - T0}"
    return out


def retransmission_times(tx: Transaction, until: float) -> list[float]:
    """Relative times at which ``tx`` retransmitted, firing its timers one by one."""
    times = []
    while tx.deadline is not None and tx.deadline <= until:
        when = tx.deadline
        out = tx.on_timer(when)
        if transmits(out):
            times.append(when - T0)
    return times


# --- INVITE client transaction (§17.1.1) -----------------------------------------------


def test_ict_sends_the_request_at_once_and_starts_in_calling() -> None:
    req = request()
    tx, out = client(req, PEER, T0)
    assert tx.kind is Kind.ICT
    assert tx.state is State.CALLING
    assert out == [Transmit(serialize(req), PEER)]
    assert tx.key == ("z9hG4bKict1", "INVITE")


def test_ict_timer_a_doubles_from_t1_until_timer_b_at_64_t1() -> None:
    req = request()
    tx, _ = client(req, PEER, T0)
    # Timer A: T1, 2*T1, 4*T1 ... (no cap): retransmissions at 0.5, 1.5, 3.5, 7.5, 15.5, 31.5
    expected = [0.5, 1.5, 3.5, 7.5, 15.5, 31.5]
    for rel in expected:
        out = assert_fires_at(tx, T0 + rel)
        assert out == [Transmit(serialize(req), PEER)]
        assert tx.state is State.CALLING
    # Timer B = 64*T1 = 32 s: the transaction gives up and tells the user.
    out = assert_fires_at(tx, T0 + 32.0)
    assert out == [Timeout("B")]
    assert tx.terminated
    assert tx.deadline is None
    assert tx.on_timer(T0 + 1000) == []


def test_ict_provisional_response_stops_retransmissions() -> None:
    tx, _ = client(request(), PEER, T0)
    assert tx.on_timer(T0 + 0.5)  # one retransmission
    ringing = response_to(tx.request, 180)
    out = tx.receive(ringing, T0 + 0.7)
    assert out == [Deliver(ringing)]
    assert tx.state is State.PROCEEDING
    # §17.1.1.2: no more retransmissions in Proceeding (and Timer B only bounds Calling).
    assert tx.deadline is None
    assert tx.on_timer(T0 + 100) == []
    more = response_to(tx.request, 183)
    assert tx.receive(more, T0 + 101) == [Deliver(more)]
    assert tx.state is State.PROCEEDING


@pytest.mark.parametrize("via_proceeding", [False, True])
def test_ict_non_2xx_final_response_is_acked_and_completed(via_proceeding: bool) -> None:
    req = request()
    tx, _ = client(req, PEER, T0)
    if via_proceeding:
        tx.receive(response_to(req, 180), T0 + 0.2)
    busy = response_to(req, 486)
    out = tx.receive(busy, T0 + 1.0)
    assert tx.state is State.COMPLETED
    assert len(out) == 2
    ack_out, deliver = out
    assert deliver == Deliver(busy)
    assert isinstance(ack_out, Transmit)
    assert ack_out.address == PEER
    ack = parse(ack_out.data)
    assert isinstance(ack, Request)
    # §17.1.1.3: Request-URI, Call-ID, From as in the INVITE; To from the response;
    # a single Via equal to the INVITE's top Via (same branch); CSeq number n, method ACK;
    # the INVITE's Route header fields.
    assert ack.method == "ACK"
    assert ack.uri == "sip:bob@192.0.2.20:5070"
    assert ack.headers.get_all("Via") == ["SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKict1;rport"]
    assert ack.branch == "z9hG4bKict1"
    assert ack.headers.get("From") == "<sip:alice@192.0.2.1>;tag=fromtag1"
    assert ack.headers.get("To") == "<sip:bob@192.0.2.20>;tag=totag9"
    assert ack.to_tag == "totag9"
    assert ack.call_id == "ict-call@192.0.2.1"
    assert ack.cseq == (41, "ACK")
    assert ack.headers.get_all("Route") == [
        "<sip:proxy1.example.com;lr>",
        "<sip:proxy2.example.com;lr>",
    ]
    assert ack.body == b""
    assert ack.headers.get("Content-Length") == "0"
    assert "Content-Type" not in ack.headers
    # Retransmissions of the request are over.
    assert "A" not in tx.timers
    assert "B" not in tx.timers


def test_ict_completed_reacks_retransmitted_final_and_timer_d_is_32s() -> None:
    req = request()
    tx, _ = client(req, PEER, T0)
    busy = response_to(req, 486)
    first = tx.receive(busy, T0 + 1.0)
    first_ack = transmits(first)[0]
    # A retransmitted final response: the ACK again, nothing to the user (§17.1.1.2).
    again = tx.receive(busy, T0 + 2.0)
    assert again == [first_ack]
    # Other responses are ignored in Completed.
    assert tx.receive(response_to(req, 180), T0 + 2.5) == []
    assert tx.receive(response_to(req, 200), T0 + 2.6) == []
    # Timer D: 32 s from the first final response, then Terminated silently.
    out = tx.on_timer(T0 + 1.0 + 32.0 - EPS)
    assert out == []
    assert tx.state is State.COMPLETED
    assert tx.on_timer(T0 + 1.0 + 32.0) == []
    assert tx.terminated
    assert tx.deadline is None


@pytest.mark.parametrize("via_proceeding", [False, True])
def test_ict_2xx_goes_to_accepted_and_delivers_retransmissions(via_proceeding: bool) -> None:
    req = request()
    tx, _ = client(req, PEER, T0)
    if via_proceeding:
        tx.receive(response_to(req, 180), T0 + 0.1)
    ok = response_to(req, 200)
    out = tx.receive(ok, T0 + 2.0)
    # RFC 6026 §7.2: the 2xx goes to the user, who ACKs it (not the transaction).
    assert out == [Deliver(ok)]
    assert tx.state is State.ACCEPTED
    assert tx.deadline == pytest.approx(T0 + 2.0 + 32.0)  # only Timer M is left
    # Each 2xx retransmission is delivered too (the UA core re-sends its ACK).
    assert tx.receive(ok, T0 + 3.0) == [Deliver(ok)]
    # Neither retransmissions nor ACKs from the transaction itself.
    assert tx.on_timer(T0 + 3.5) == []
    # A non-2xx in Accepted is ignored.
    assert tx.receive(response_to(req, 486), T0 + 4.0) == []
    assert tx.state is State.ACCEPTED
    # Timer M = 64*T1.
    assert tx.on_timer(T0 + 34.0 - EPS) == []
    assert tx.state is State.ACCEPTED
    assert tx.on_timer(T0 + 34.0) == []
    assert tx.terminated
    assert tx.receive(ok, T0 + 35.0) == []


def test_ict_timer_b_boundary_without_any_response() -> None:
    tx, _ = client(request(), PEER, T0)
    # Jump straight to 1 ms before B: whatever A did, B has not fired.
    out = tx.on_timer(T0 + 32.0 - EPS)
    assert Timeout("B") not in out
    assert not tx.terminated
    # (the catch-up Timer A fire above rescheduled A to 1 s later, so only B is due now)
    assert tx.on_timer(T0 + 32.0) == [Timeout("B")]
    assert tx.terminated


def test_ict_retransmission_is_the_same_bytes_to_the_same_address() -> None:
    req = request()
    tx, first = client(req, PEER, T0)
    assert transmits(tx.on_timer(T0 + 0.5)) == first


# --- non-INVITE client transaction (§17.1.2) -------------------------------------------


def test_nict_timer_e_doubles_capped_at_t2_and_timer_f_at_64_t1() -> None:
    req = options_request()
    tx, out = client(req, PEER, T0)
    assert tx.kind is Kind.NICT
    assert tx.state is State.TRYING
    assert out == [Transmit(serialize(req), PEER)]
    # E: 0.5, 1, 2, 4, 4, 4 ... -> at 0.5, 1.5, 3.5, 7.5, 11.5, ... 31.5
    expected = [0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5, 23.5, 27.5, 31.5]
    for rel in expected:
        assert assert_fires_at(tx, T0 + rel) == [Transmit(serialize(req), PEER)]
    assert assert_fires_at(tx, T0 + 32.0) == [Timeout("F")]
    assert tx.terminated
    assert tx.deadline is None


def test_nict_timer_e_is_t2_in_proceeding() -> None:
    req = options_request()
    tx, _ = client(req, PEER, T0)
    assert assert_fires_at(tx, T0 + 0.5)  # E fired once in Trying: next in 1 s
    trying = response_to(req, 100, to_tag=None)
    assert tx.receive(trying, T0 + 0.7) == [Deliver(trying)]
    assert tx.state is State.PROCEEDING
    # The running E fires when it was due (1.5) and is then reset to T2 (§17.1.2.2).
    assert assert_fires_at(tx, T0 + 1.5) == [Transmit(serialize(req), PEER)]
    for rel in (5.5, 9.5, 13.5, 17.5, 21.5, 25.5, 29.5):
        assert assert_fires_at(tx, T0 + rel) == [Transmit(serialize(req), PEER)]
    assert assert_fires_at(tx, T0 + 32.0) == [Timeout("F")]
    assert tx.terminated


def test_nict_proceeding_delivers_more_provisionals() -> None:
    req = options_request()
    tx, _ = client(req, PEER, T0)
    first = response_to(req, 100, to_tag=None)
    second = response_to(req, 183, to_tag=None)
    assert tx.receive(first, T0 + 0.1) == [Deliver(first)]
    assert tx.receive(second, T0 + 0.2) == [Deliver(second)]
    assert tx.state is State.PROCEEDING


@pytest.mark.parametrize("status", [200, 404])
@pytest.mark.parametrize("via_proceeding", [False, True])
def test_nict_final_response_completes_with_timer_k(status: int, via_proceeding: bool) -> None:
    req = options_request()
    tx, _ = client(req, PEER, T0)
    if via_proceeding:
        tx.receive(response_to(req, 100, to_tag=None), T0 + 0.1)
    final = response_to(req, status)
    assert tx.receive(final, T0 + 0.3) == [Deliver(final)]
    assert tx.state is State.COMPLETED
    # E and F are stopped: only K (T4 = 5 s for UDP) remains.
    assert set(tx.timers) == {"K"}
    assert tx.on_timer(T0 + 0.5) == []
    # Retransmissions of the final response are absorbed.
    assert tx.receive(final, T0 + 1.0) == []
    assert tx.receive(response_to(req, 100, to_tag=None), T0 + 1.1) == []
    assert tx.on_timer(T0 + 0.3 + 5.0 - EPS) == []
    assert tx.state is State.COMPLETED
    assert tx.on_timer(T0 + 0.3 + 5.0) == []
    assert tx.terminated
    assert tx.deadline is None


def test_nict_no_timeout_after_a_final_response() -> None:
    req = options_request()
    tx, _ = client(req, PEER, T0)
    tx.receive(response_to(req, 200), T0 + 0.1)
    outputs = tx.on_timer(T0 + 100.0)
    assert not any(isinstance(o, Timeout) for o in outputs)
    assert tx.terminated


# --- INVITE server transaction (§17.2.1) -----------------------------------------------


def incoming_invite() -> Request:
    return request(
        b"INVITE sip:app@192.0.2.1:5060 SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.20:5070;branch=z9hG4bKist1\r\n"
        b"Max-Forwards: 70\r\n"
        b"From: <sip:bob@192.0.2.20>;tag=peer1\r\n"
        b"To: <sip:app@192.0.2.1>\r\n"
        b"Call-ID: ist-call@192.0.2.20\r\n"
        b"CSeq: 5 INVITE\r\n"
        b"Contact: <sip:bob@192.0.2.20:5070>\r\n"
        b"Content-Length: 0\r\n\r\n"
    )


def ack_for_invite(invite: Request, to_tag: str = "ours") -> Request:
    return request(
        f"ACK {invite.uri} SIP/2.0\r\n"
        f"Via: {invite.headers.get('Via')}\r\n"
        f"From: {invite.headers.get('From')}\r\n"
        f"To: {invite.headers.get('To')};tag={to_tag}\r\n"
        f"Call-ID: {invite.call_id}\r\n"
        f"CSeq: {invite.cseq[0]} ACK\r\n"
        f"Content-Length: 0\r\n\r\n".encode()
    )


def uas_response(req: Request, status: int, tag: str | None = "ours") -> Response:
    headers = req.headers.copy()
    for name in ("Max-Forwards", "Contact", "Content-Length"):
        headers.remove(name)
    if tag is not None:
        headers.set("To", f"{req.headers.get('To')};tag={tag}")
    return Response(status, "Reason", headers)


def test_ist_starts_in_proceeding_and_resends_the_last_provisional() -> None:
    inv = incoming_invite()
    tx = server(inv, PEER)
    assert tx.kind is Kind.IST
    assert tx.state is State.PROCEEDING
    assert tx.deadline is None
    # Before any response, a retransmitted INVITE has nothing to resend.
    assert tx.receive(inv, T0) == []
    trying = uas_response(inv, 100, tag=None)
    assert tx.respond(trying, T0) == [Transmit(serialize(trying), PEER)]
    assert tx.receive(inv, T0 + 0.5) == [Transmit(serialize(trying), PEER)]
    ringing = uas_response(inv, 180)
    assert tx.respond(ringing, T0 + 1.0) == [Transmit(serialize(ringing), PEER)]
    # §17.2.1: the most recent provisional response is retransmitted.
    assert tx.receive(inv, T0 + 1.5) == [Transmit(serialize(ringing), PEER)]
    assert tx.state is State.PROCEEDING
    assert tx.deadline is None  # no timers in Proceeding


def test_ist_non_2xx_timer_g_doubles_to_t2_and_timer_h_times_out() -> None:
    inv = incoming_invite()
    tx = server(inv, PEER)
    busy = uas_response(inv, 486)
    sent = Transmit(serialize(busy), PEER)
    assert tx.respond(busy, T0) == [sent]
    assert tx.state is State.COMPLETED
    # G: T1, 2T1, 4T1, then T2: at 0.5, 1.5, 3.5, 7.5, 11.5, ... 31.5
    expected = [0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5, 23.5, 27.5, 31.5]
    for rel in expected:
        assert assert_fires_at(tx, T0 + rel) == [sent]
    # H = 64*T1: no ACK, the transaction gives up and tells the user.
    assert assert_fires_at(tx, T0 + 32.0) == [Timeout("H")]
    assert tx.terminated
    assert tx.deadline is None


def test_ist_completed_resends_final_on_invite_retransmission() -> None:
    inv = incoming_invite()
    tx = server(inv, PEER)
    busy = uas_response(inv, 486)
    tx.respond(busy, T0)
    assert tx.receive(inv, T0 + 0.2) == [Transmit(serialize(busy), PEER)]
    assert tx.state is State.COMPLETED


def test_ist_ack_confirms_stops_g_and_timer_i_is_t4() -> None:
    inv = incoming_invite()
    tx = server(inv, PEER)
    tx.respond(uas_response(inv, 486), T0)
    tx.on_timer(T0 + 0.5)  # one retransmission
    ack = ack_for_invite(inv)
    assert tx.receive(ack, T0 + 0.8) == []
    assert tx.state is State.CONFIRMED
    assert "G" not in tx.timers
    # Confirmed absorbs ACK and INVITE retransmissions.
    assert tx.receive(ack, T0 + 1.0) == []
    assert tx.receive(inv, T0 + 1.1) == []
    # Timer G would have fired at 1.5: it does not.
    assert tx.on_timer(T0 + 1.5) == []
    # Timer I = T4 = 5 s from the ACK.
    assert tx.deadline == pytest.approx(T0 + 0.8 + 5.0)
    assert tx.on_timer(T0 + 5.8 - EPS) == []
    assert tx.state is State.CONFIRMED
    assert tx.on_timer(T0 + 5.8) == []
    assert tx.terminated
    assert tx.deadline is None


def test_ist_2xx_accepted_absorbs_invite_retransmissions() -> None:
    inv = incoming_invite()
    tx = server(inv, PEER)
    tx.respond(uas_response(inv, 100, tag=None), T0)
    ok = uas_response(inv, 200)
    assert tx.respond(ok, T0 + 1.0) == [Transmit(serialize(ok), PEER)]
    assert tx.state is State.ACCEPTED
    # RFC 6026 §7.1: INVITE retransmissions are absorbed (not even the 2xx is resent:
    # that is the TU's job, §13.3.1.4).
    assert tx.receive(inv, T0 + 1.2) == []
    # The TU's own 2xx retransmissions go out through the transaction.
    assert tx.respond(ok, T0 + 1.5) == [Transmit(serialize(ok), PEER)]
    # The transaction never retransmits on its own: only Timer L is running.
    assert set(tx.timers) == {"L"}
    assert tx.deadline == pytest.approx(T0 + 1.0 + 32.0)
    # Timer L = 64*T1.
    assert tx.on_timer(T0 + 33.0 - EPS) == []
    assert tx.state is State.ACCEPTED
    assert tx.on_timer(T0 + 33.0) == []
    assert tx.terminated


def test_ist_ignores_late_responses_from_the_user_after_a_final() -> None:
    inv = incoming_invite()
    tx = server(inv, PEER)
    tx.respond(uas_response(inv, 486), T0)
    assert tx.respond(uas_response(inv, 180), T0 + 0.1) == []
    assert tx.state is State.COMPLETED


# --- non-INVITE server transaction (§17.2.2) -------------------------------------------


def incoming_bye() -> Request:
    return request(
        b"BYE sip:app@192.0.2.1:5060 SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.20:5070;branch=z9hG4bKnist1\r\n"
        b"Max-Forwards: 70\r\n"
        b"From: <sip:bob@192.0.2.20>;tag=peer1\r\n"
        b"To: <sip:app@192.0.2.1>;tag=ours\r\n"
        b"Call-ID: ist-call@192.0.2.20\r\n"
        b"CSeq: 6 BYE\r\n"
        b"Content-Length: 0\r\n\r\n"
    )


def test_nist_trying_absorbs_retransmissions() -> None:
    bye = incoming_bye()
    tx = server(bye, PEER)
    assert tx.kind is Kind.NIST
    assert tx.state is State.TRYING
    assert tx.key == ("z9hG4bKnist1", "BYE")
    assert tx.receive(bye, T0) == []
    assert tx.state is State.TRYING
    assert tx.deadline is None


def test_nist_proceeding_resends_provisional() -> None:
    bye = incoming_bye()
    tx = server(bye, PEER)
    trying = uas_response(bye, 100, tag=None)
    assert tx.respond(trying, T0) == [Transmit(serialize(trying), PEER)]
    assert tx.state is State.PROCEEDING
    assert tx.receive(bye, T0 + 0.5) == [Transmit(serialize(trying), PEER)]


@pytest.mark.parametrize("via_proceeding", [False, True])
def test_nist_completed_resends_final_and_timer_j_is_64_t1(via_proceeding: bool) -> None:
    bye = incoming_bye()
    tx = server(bye, PEER)
    if via_proceeding:
        tx.respond(uas_response(bye, 100, tag=None), T0)
    ok = uas_response(bye, 200, tag=None)
    assert tx.respond(ok, T0 + 0.1) == [Transmit(serialize(ok), PEER)]
    assert tx.state is State.COMPLETED
    assert tx.receive(bye, T0 + 1.0) == [Transmit(serialize(ok), PEER)]
    # A later final response from the user is ignored in Completed.
    assert tx.respond(uas_response(bye, 500, tag=None), T0 + 1.1) == []
    # No retransmissions of its own (only J).
    assert set(tx.timers) == {"J"}
    assert tx.on_timer(T0 + 0.1 + 32.0 - EPS) == []
    assert tx.state is State.COMPLETED
    assert tx.on_timer(T0 + 0.1 + 32.0) == []
    assert tx.terminated
    assert tx.deadline is None


# --- ack_for on its own (§17.1.1.3) ----------------------------------------------------


def test_ack_for_keeps_only_what_17_1_1_3_lists() -> None:
    inv = request()
    resp = response_to(inv, 603, to_tag="declined1")
    ack = ack_for(inv, resp)
    names = [name for name, _ in ack.headers.items()]
    assert set(names) == {"Via", "Max-Forwards", "Route", "From", "To", "Call-ID", "CSeq"}
    assert "Authorization" not in ack.headers
    assert "Contact" not in ack.headers
    assert ack.headers.count("Via") == 1
    assert ack.headers.get("To") == "<sip:bob@192.0.2.20>;tag=declined1"
    assert ack.headers.get("CSeq") == "41 ACK"
    assert ack.uri == inv.uri
    assert ack.body == b""
    # The INVITE itself is untouched.
    assert inv.headers.count("Via") == 2
    assert inv.cseq == (41, "INVITE")


def test_transactions_report_their_matching_key() -> None:
    inv = incoming_invite()
    ist = server(inv, PEER)
    ist.match = "2543|special"
    assert ist.key == ("2543|special", "INVITE")
    nict, _ = client(options_request(), PEER, T0)
    assert nict.key == ("z9hG4bKnict1", "OPTIONS")


def test_retransmission_schedules_compared_side_by_side() -> None:
    """A (no cap) and E/G (capped at T2) differ from the fifth retransmission on."""
    ict, _ = client(request(), PEER, T0)
    nict, _ = client(options_request(), PEER, T0)
    ist = server(incoming_invite(), PEER)
    ist.respond(uas_response(incoming_invite(), 480), T0)
    assert retransmission_times(ict, T0 + 31.9) == [0.5, 1.5, 3.5, 7.5, 15.5, 31.5]
    capped = [0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5, 23.5, 27.5, 31.5]
    assert retransmission_times(nict, T0 + 31.9) == capped
    assert retransmission_times(ist, T0 + 31.9) == capped
