"""The agent registering with a trunk (registrations.py through agent.py), on a virtual clock:
REGISTERs leave with the agent's Via on the trunk's transport, answers reach the registration,
refreshes and keep-alives go out at their times, shutdown unregisters."""

from __future__ import annotations

from callhook.sip.agent import Agent
from callhook.sip.message import Request, Response, parse, serialize
from callhook.sip.registration import RegistrationSpec
from callhook.sip.registrations import KEEPALIVE, STREAM_KEEPALIVE
from callhook.sip.responses import make_response
from callhook.sip.transport import Target

T0 = 50.0
REGISTRAR = Target("192.0.2.50", 5060)
SPEC = RegistrationSpec("provider", "sip.example:5060", "me", "secret", expires=300)
CHALLENGE = 'Digest realm="sip.example", nonce="abc123", qop="auth", algorithm=MD5'


def sent_requests(agent: Agent) -> list[tuple[Request, Target]]:
    out = []
    for data, target in agent.take_datagrams():
        message = parse(data)
        assert isinstance(message, Request)
        out.append((message, target))
    return out


def answer(agent: Agent, request: Request, status: int, now: float, **headers: str) -> None:
    response = make_response(request, status, server="registrar", to_tag="reg1")
    for name, value in headers.items():
        response.headers.add(name.replace("_", "-"), value)
    if status == 200:
        response.headers.add("Contact", f"{request.headers.get('Contact')};expires=120")
    agent.receive(serialize(response), REGISTRAR, now)


def test_register_challenge_register_refresh_keepalive_and_unregister() -> None:
    agent = Agent("192.0.2.1", 5060)
    agent.register(SPEC, T0, REGISTRAR)
    ((first, target),) = sent_requests(agent)
    assert target == REGISTRAR and first.method == "REGISTER"
    assert first.uri == "sip:sip.example:5060"
    assert first.top_via.transport == "UDP" and first.top_via.host == "192.0.2.1"
    assert first.headers.get("Contact") == "<sip:me@192.0.2.1:5060>"
    answer(agent, first, 401, T0 + 0.1, WWW_Authenticate=CHALLENGE)
    ((second, _),) = sent_requests(agent)
    assert second.cseq[0] == first.cseq[0] + 1
    assert 'username="me"' in (second.headers.get("Authorization") or "")
    assert second.branch != first.branch
    answer(agent, second, 200, T0 + 0.2)
    registration = agent.registrations.by_name["provider"]
    assert registration.state == "registered" and registration.granted == 120
    # A keep-alive to the registrar before the refresh (120 s lifetime: refresh at 108 s).
    agent.handle_timer(T0 + 0.2 + KEEPALIVE)
    assert agent.take_datagrams() == [(b"\r\n\r\n", REGISTRAR)]
    deadline = agent.deadline
    assert deadline is not None
    refresh_at = T0 + 0.1 + 108  # counted from when the REGISTER that got the 2xx was sent
    while deadline < refresh_at:
        agent.handle_timer(deadline)
        assert all(data == b"\r\n\r\n" for data, _ in agent.take_datagrams())
        deadline = agent.deadline
        assert deadline is not None
    agent.handle_timer(refresh_at)
    ((refresh, _),) = sent_requests(agent)
    assert refresh.method == "REGISTER" and refresh.call_id == first.call_id
    answer(agent, refresh, 200, refresh_at + 0.1)
    agent.unregister_all(refresh_at + 1)
    ((bye, _),) = sent_requests(agent)
    assert bye.headers.get("Expires") == "0"
    answer(agent, bye, 200, refresh_at + 1.1)
    assert agent.registrations.by_name["provider"].state == "unregistered"


def test_a_silent_registrar_fails_the_registration_after_timer_f() -> None:
    agent = Agent("192.0.2.1", 5060)
    agent.register(SPEC, T0, REGISTRAR)
    sent_requests(agent)
    now = T0
    while (deadline := agent.deadline) is not None and deadline <= T0 + 40:
        now = deadline
        agent.handle_timer(now)
        agent.take_datagrams()  # retransmissions of the REGISTER (Timer E)
    registration = agent.registrations.by_name["provider"]
    assert registration.state == "failing"
    assert "no answer" in registration.reason
    assert registration.next_try_in(now) == 30


def test_over_tcp_the_register_says_so_and_pings_are_rarer() -> None:
    agent = Agent("192.0.2.1", 5060, ports={"tcp": 5062})
    spec = RegistrationSpec("p", "sip.example", "me", "secret", transport="tcp")
    target = Target("192.0.2.50", 5060, "tcp")
    agent.register(spec, T0, target)
    ((request, sent_to),) = sent_requests(agent)
    assert sent_to == target
    assert request.top_via.transport == "TCP" and request.top_via.port == 5062
    assert request.headers.get("Contact") == "<sip:me@192.0.2.1:5062;transport=tcp>"
    response = make_response(request, 200, server="registrar", to_tag="r")
    response.headers.add("Contact", f"{request.headers.get('Contact')};expires=3600")
    agent.receive(serialize(response), target, T0 + 0.1)
    agent.handle_timer(T0 + 0.1)  # Timer K is zero on a stream: the transaction ends now
    assert agent.deadline == T0 + 0.1 + STREAM_KEEPALIVE


def test_a_connection_that_cannot_be_made_fails_the_register_at_once() -> None:
    agent = Agent("192.0.2.1", 5060, ports={"tcp": 5060})
    target = Target("192.0.2.50", 5060, "tcp")
    agent.register(RegistrationSpec("p", "sip.example", "me", "pw", transport="tcp"), T0, target)
    sent_requests(agent)
    agent.transport_failed(target, T0 + 0.01)
    registration = agent.registrations.by_name["p"]
    assert registration.state == "failing"
    assert registration.reason.startswith("cannot connect to tcp 192.0.2.50:5060")
    assert registration.next_try_in(T0 + 0.01) == 30


def test_a_lost_connection_registers_again_at_once() -> None:
    """RFC 5626 §4.4: the binding was made over that connection; the registrar cannot
    reach us any more, so we register again now instead of at the refresh."""
    agent = Agent("192.0.2.1", 5060, ports={"tcp": 5060})
    target = Target("192.0.2.50", 5060, "tcp")
    agent.register(RegistrationSpec("p", "sip.example", "me", "pw", transport="tcp"), T0, target)
    ((first, _),) = sent_requests(agent)
    response = make_response(first, 200, server="registrar", to_tag="r")
    response.headers.add("Contact", f"{first.headers.get('Contact')};expires=300")
    agent.receive(serialize(response), target, T0 + 0.1)
    agent.handle_timer(T0 + 0.1)
    assert sent_requests(agent) == []
    agent.registrations.flow_lost(Target("192.0.2.99", 5060, "tcp"), T0 + 5)  # not ours
    assert sent_requests(agent) == []
    agent.registrations.flow_lost(target, T0 + 5)
    ((again, sent_to),) = sent_requests(agent)
    assert again.method == "REGISTER" and sent_to == target
    assert again.cseq[0] == first.cseq[0] + 1


def natted(agent: Agent, request: Request, now: float, received: str, rport: int) -> None:
    """A 2xx as a registrar sends it when the REGISTER came through a NAT (RFC 3581 §4)."""
    response = make_response(request, 200, server="registrar", to_tag="r")
    via = request.headers.get_all("Via")[0].replace(";rport", f";received={received};rport={rport}")
    response.headers.remove("Via")
    response.headers.add("Via", via)
    response.headers.add("Contact", f"{request.headers.get('Contact')};expires=300")
    agent.receive(serialize(response), REGISTRAR, now)


def test_behind_a_nat_the_contact_moves_to_where_the_registrar_saw_us() -> None:
    agent = Agent("10.0.0.2", 5060)
    agent.register(SPEC, T0, REGISTRAR)
    ((first, _),) = sent_requests(agent)
    natted(agent, first, T0 + 0.1, "203.0.113.7", 40001)
    ((again, _),) = sent_requests(agent)
    assert again.headers.get_all("Contact") == [
        "<sip:me@203.0.113.7:40001>",
        "<sip:me@10.0.0.2:5060>;expires=0",  # the old binding goes in the same request
    ]
    registration = agent.registrations.by_name["provider"]
    assert registration.reason == "behind NAT: registering 203.0.113.7:40001"
    # Seen at the same address again: settled, nothing more is sent until the refresh.
    response = make_response(again, 200, server="registrar", to_tag="r")
    response.headers.remove("Via")
    response.headers.add(
        "Via",
        again.headers.get_all("Via")[0].replace(";rport", ";received=203.0.113.7;rport=40001"),
    )
    response.headers.add("Contact", "<sip:me@203.0.113.7:40001>;expires=300")
    agent.receive(serialize(response), REGISTRAR, T0 + 0.2)
    assert sent_requests(agent) == []
    assert registration.state == "registered" and registration.reason == ""
    assert registration.granted == 300


def test_a_nat_that_moves_us_at_every_register_does_not_make_a_loop() -> None:
    agent = Agent("10.0.0.2", 5060)
    agent.register(SPEC, T0, REGISTRAR)
    ((first, _),) = sent_requests(agent)
    natted(agent, first, T0 + 0.1, "203.0.113.7", 40001)
    ((again, _),) = sent_requests(agent)
    natted(agent, again, T0 + 0.2, "203.0.113.7", 40002)  # moved again at once
    assert sent_requests(agent) == []  # not within REWRITE_AFTER
    assert agent.registrations.by_name["provider"].state == "registered"


def test_over_tcp_the_contact_stays_whatever_the_registrar_saw() -> None:
    agent = Agent("10.0.0.2", 5060, ports={"tcp": 5060})
    target = Target("192.0.2.50", 5060, "tcp")
    agent.register(RegistrationSpec("p", "sip.example", "me", "pw", transport="tcp"), T0, target)
    ((first, _),) = sent_requests(agent)
    response = make_response(first, 200, server="registrar", to_tag="r")
    response.headers.remove("Via")
    response.headers.add(
        "Via", first.headers.get_all("Via")[0].replace(";rport", ";received=203.0.113.7;rport=1")
    )
    response.headers.add("Contact", f"{first.headers.get('Contact')};expires=300")
    agent.receive(serialize(response), target, T0 + 0.1)
    assert sent_requests(agent) == []


def test_calls_from_a_natted_trunk_get_the_contact_it_registered() -> None:
    """The registrar reaches us only through the NAT: our 2xx's Contact (where its ACK
    and BYE go) names the address it registered, not our own."""
    agent = Agent("10.0.0.2", 5060)
    agent.register(SPEC, T0, REGISTRAR)
    ((first, _),) = sent_requests(agent)
    natted(agent, first, T0 + 0.1, "203.0.113.7", 40001)
    sent_requests(agent)
    offer = b"v=0\r\no=a 1 1 IN IP4 192.0.2.50\r\ns=-\r\nc=IN IP4 192.0.2.50\r\nt=0 0\r\n"
    invite = (
        "INVITE sip:+441234567890@203.0.113.7:40001 SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 192.0.2.50:5060;branch=z9hG4bK-in1\r\n"
        "From: <sip:caller@192.0.2.50>;tag=c1\r\nTo: <sip:+441234567890@sip.example>\r\n"
        "Call-ID: in1@192.0.2.50\r\nCSeq: 1 INVITE\r\nContact: <sip:p@192.0.2.50:5060>\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(offer)}\r\n\r\n"
    ).encode() + offer
    agent.receive(invite, REGISTRAR, T0 + 1)
    (event,) = agent.take_events()
    agent.answer(event.call_id, b"v=0\r\n", T0 + 1.1)
    ok = parse(agent.take_datagrams()[-1][0])
    assert isinstance(ok, Response) and ok.status == 200
    assert ok.headers.get_all("Contact") == ["<sip:+441234567890@203.0.113.7:40001>"]
    # Another peer still gets our own address.
    other = invite.replace(b"in1@", b"in2@").replace(b"z9hG4bK-in1", b"z9hG4bK-in2")
    agent.receive(other, Target("192.0.2.99", 5060), T0 + 2)
    (event,) = agent.take_events()
    agent.answer(event.call_id, b"v=0\r\n", T0 + 2.1)
    ok = parse(agent.take_datagrams()[-1][0])
    assert isinstance(ok, Response)
    assert ok.headers.get_all("Contact") == ["<sip:+441234567890@10.0.0.2:5060>"]


def test_a_registrar_that_drops_every_connection_is_not_registered_with_in_a_loop() -> None:
    """RFC 5626 §4.5: a flow lost soon after it was made waits before the next one."""
    agent = Agent("192.0.2.1", 5060, ports={"tcp": 5060})
    target = Target("192.0.2.50", 5060, "tcp")
    agent.register(RegistrationSpec("p", "sip.example", "me", "pw", transport="tcp"), T0, target)

    def registered_at(now: float) -> None:
        ((request, _),) = sent_requests(agent)
        response = make_response(request, 200, server="registrar", to_tag="r")
        response.headers.add("Contact", f"{request.headers.get('Contact')};expires=300")
        agent.receive(serialize(response), target, now)
        agent.handle_timer(now)

    registered_at(T0 + 0.1)
    agent.registrations.flow_lost(target, T0 + 1)  # the first loss: again at once
    registered_at(T0 + 1.1)
    agent.registrations.flow_lost(target, T0 + 2)  # lost again at once: back off
    assert sent_requests(agent) == []
    registration = agent.registrations.by_name["p"]
    assert registration.deadline == T0 + 2 + 30  # RFC 5626 §4.5 base-time
    agent.handle_timer(T0 + 32)
    registered_at(T0 + 32.1)
    # A flow that lived FLOW_STABLE seconds: its loss is re-registered at once again.
    agent.registrations.flow_lost(target, T0 + 32.1 + 120)
    ((again, _),) = sent_requests(agent)
    assert again.method == "REGISTER"


def test_the_old_contact_is_removed_again_when_its_register_was_challenged() -> None:
    agent = Agent("10.0.0.2", 5060)
    agent.register(SPEC, T0, REGISTRAR)
    ((first, _),) = sent_requests(agent)
    natted(agent, first, T0 + 0.1, "203.0.113.7", 40001)
    ((moved, _),) = sent_requests(agent)
    answer(agent, moved, 401, T0 + 0.2, WWW_Authenticate=CHALLENGE)
    ((retry, _),) = sent_requests(agent)
    assert "<sip:me@10.0.0.2:5060>;expires=0" in retry.headers.get_all("Contact")


def test_leaving_stops_refreshing_and_removes_no_binding() -> None:
    """Another node registers the trunks now: no ``Expires: 0`` (naming the same Contact it
    would remove that node's binding too); the binding lapses by itself. Also when a
    REGISTER was in flight; and registering again later works."""
    agent = Agent("192.0.2.1", 5060)
    agent.register(SPEC, T0, REGISTRAR)
    ((first, _),) = sent_requests(agent)
    answer(agent, first, 200, T0 + 0.1)
    agent.leave_registrations(T0 + 1, "another node registers the trunks")
    registration = agent.registrations.by_name["provider"]
    assert (registration.state, registration.reason) == (
        "unregistered",
        "another node registers the trunks",
    )
    assert sent_requests(agent) == []
    agent.handle_timer(T0 + 200)  # past the refresh and any keep-alive
    assert agent.take_datagrams() == []
    # Taken up again: it registers; left while that REGISTER is in flight: its 200 is
    # taken, and still nothing removes the binding.
    agent.register(SPEC, T0 + 300, REGISTRAR)
    ((again, _),) = sent_requests(agent)
    assert again.headers.get("Expires") != "0"
    agent.leave_registrations(T0 + 300.05, "another node registers the trunks")
    answer(agent, again, 200, T0 + 300.1)
    assert sent_requests(agent) == []
    assert registration.state == "unregistered"
