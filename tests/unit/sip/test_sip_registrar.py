"""callhook's registrar for its users' phones (callhook/sip/registrar.py, authentication.py)
and the agent's use of it: REGISTERs as bytes, a virtual clock (plain ``now`` values),
digest answers computed by callhook's own UAC code (``digest.authorization``) and checked
against RFC 7616's worked examples."""

from __future__ import annotations

import pytest

from callhook.sip import digest
from callhook.sip.agent import Agent, IncomingCall
from callhook.sip.authentication import NONCE_SECONDS, Authenticator
from callhook.sip.message import Request, Response, parse
from callhook.sip.registrar import MAX_BINDINGS, Binding, Registrar
from callhook.sip.transport import Target

PASSWORD = "alice-secret-1"
USERS = {"alice": PASSWORD, "bob": "bob-secret-22"}
KEY = b"k" * 32
PHONE = Target("192.0.2.10", 5062)
T0 = 1000.0


def register(
    *contacts: str,
    user: str = "alice",
    call_id: str = "reg-1@phone",
    cseq: int = 1,
    expires: int | None = None,
    auth: str | None = None,
) -> Request:
    lines = [
        "REGISTER sip:192.0.2.1 SIP/2.0",
        "Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK-r" + str(cseq),
        f"From: <sip:{user}@192.0.2.1>;tag=ft",
        f"To: <sip:{user}@192.0.2.1>",
        f"Call-ID: {call_id}",
        f"CSeq: {cseq} REGISTER",
        "Max-Forwards: 70",
    ]
    lines += [f"Contact: {c}" for c in contacts]
    if expires is not None:
        lines.append(f"Expires: {expires}")
    if auth is not None:
        lines.append(f"Authorization: {auth}")
    message = parse(("\r\n".join(lines) + "\r\nContent-Length: 0\r\n\r\n").encode())
    assert isinstance(message, Request)
    return message


def answered(
    registrar: Registrar,
    request: Request,
    now: float,
    *,
    username: str = "alice",
    password: str = PASSWORD,
    source: Target = PHONE,
    algorithm: str = "MD5",
) -> tuple[int, dict[str, list[str]]]:
    """``request`` as a phone sends it: first without credentials (401), then answering the
    challenge for ``algorithm`` with ``username`` and ``password``: the final status and
    its headers."""
    first = registrar.register(request, source, now)
    assert first.status == 401, first
    challenge = next(
        c for c in (digest.parse_challenge(v) for _, v in first.headers) if c.algorithm == algorithm
    )
    auth = digest.authorization(challenge, "REGISTER", request.uri, username, password)
    again = Request(request.method, request.uri, request.headers.copy())
    again.headers.set("Authorization", auth)
    answer = registrar.register(again, source, now)
    headers: dict[str, list[str]] = {}
    for name, value in answer.headers:
        headers.setdefault(name, []).append(value)
    return answer.status, headers


def new() -> Registrar:
    return Registrar(USERS, KEY)


# --- digest ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("MD5", "8ca523f5e9506fed4657c9700eebdbec"),
        ("SHA-256", "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"),
    ],
)
def test_the_digest_is_rfc_7616s_worked_example(algorithm: str, expected: str) -> None:
    """RFC 7616 §3.9.1: the same request answered with MD5 and with SHA-256."""
    value = digest.response(
        algorithm,
        "Mufasa",
        "http-auth@example.org",
        "Circle of Life",
        "GET",
        "/dir/index.html",
        "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
        qop="auth",
        nc="00000001",
        cnonce="f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ",
    )
    assert value == expected


def test_a_register_without_credentials_is_challenged_with_md5_and_qop_auth() -> None:
    registrar = new()
    answer = registrar.register(register("<sip:alice@192.0.2.10:5062>"), PHONE, T0)
    assert answer.status == 401
    (name, value), *more = answer.headers
    assert name == "WWW-Authenticate" and not more
    challenge = digest.parse_challenge(value)
    assert (challenge.realm, challenge.algorithm, challenge.qop) == ("callhook", "MD5", ("auth",))
    assert not challenge.stale
    assert registrar.take_changes() == [] and registrar.take_failures() == []


def test_sha_256_is_offered_first_when_configured_and_its_answer_accepted() -> None:
    registrar = Registrar(USERS, KEY, algorithms=("SHA-256", "MD5"))
    first = registrar.register(register("<sip:alice@192.0.2.10:5062>"), PHONE, T0)
    algorithms = [digest.parse_challenge(v).algorithm for _, v in first.headers]
    assert algorithms == ["SHA-256", "MD5"]  # RFC 8760 §2.4: most preferred first
    status, _ = answered(
        registrar, register("<sip:alice@192.0.2.10:5062>"), T0, algorithm="SHA-256"
    )
    assert status == 200


def test_an_algorithm_not_offered_is_challenged_again() -> None:
    registrar = Registrar(USERS, KEY)  # MD5 only
    nonce = registrar.auth.nonce(T0)
    sha = digest.Challenge("callhook", nonce, "SHA-256", ("auth",))
    auth = digest.authorization(sha, "REGISTER", "sip:192.0.2.1", "alice", PASSWORD)
    answer = registrar.register(register("<sip:a@192.0.2.10>", auth=auth), PHONE, T0)
    assert answer.status == 401
    assert registrar.take_failures() == []


def test_the_right_password_registers_the_phone_and_the_200_lists_it() -> None:
    registrar = new()
    status, headers = answered(registrar, register("<sip:alice@192.0.2.10:5062>"), T0)
    assert status == 200
    assert headers["Contact"] == ["<sip:alice@192.0.2.10:5062>;expires=3600"]
    assert registrar.take_changes() == ["alice"]
    (binding,) = registrar.bindings("alice", T0)
    assert binding.target == Target("192.0.2.10", 5062) and binding.source == PHONE


def test_a_wrong_password_is_refused_and_counted() -> None:
    registrar = new()
    status, _ = answered(registrar, register("<sip:a@192.0.2.10>"), T0, password="guess-1234")
    assert status == 403
    assert registrar.take_failures() == [("192.0.2.10", "REGISTER as alice")]
    assert registrar.bindings("alice", T0) == [] and registrar.take_changes() == []


def test_an_unknown_user_is_answered_as_a_wrong_password_is() -> None:
    """The same challenge, then the same 403 (counted): no user name is revealed."""
    registrar = new()
    status, _ = answered(
        registrar, register("<sip:x@192.0.2.10>", user="carol"), T0, username="carol"
    )
    assert status == 403
    assert registrar.take_failures() == [("192.0.2.10", "REGISTER as carol")]


def test_a_user_may_register_only_their_own_address_of_record() -> None:
    registrar = new()
    status, _ = answered(
        registrar,
        register("<sip:b@192.0.2.10>", user="bob"),
        T0,
        username="alice",
    )
    assert status == 403
    assert registrar.take_failures() == []  # the password was right: no guess
    assert registrar.bindings("bob", T0) == []


def test_an_expired_nonce_with_the_right_password_gets_stale_true_and_no_failure() -> None:
    registrar = new()
    old = digest.Challenge("callhook", registrar.auth.nonce(T0), "MD5", ("auth",))
    auth = digest.authorization(old, "REGISTER", "sip:192.0.2.1", "alice", PASSWORD)
    request = register("<sip:a@192.0.2.10>", auth=auth)
    assert registrar.register(request, PHONE, T0 + NONCE_SECONDS - 1).status == 200
    later = registrar.register(request, PHONE, T0 + NONCE_SECONDS + 1)
    assert later.status == 401
    assert all(digest.parse_challenge(v).stale for _, v in later.headers)
    assert registrar.take_failures() == []


def test_a_forged_nonce_is_challenged_afresh_and_not_counted() -> None:
    registrar = new()
    other = Authenticator(USERS, b"another key")  # nonces not minted with our key
    forged = digest.Challenge("callhook", other.nonce(T0), "MD5", ("auth",))
    auth = digest.authorization(forged, "REGISTER", "sip:192.0.2.1", "alice", PASSWORD)
    answer = registrar.register(register("<sip:a@192.0.2.10>", auth=auth), PHONE, T0)
    assert answer.status == 401
    assert not any(digest.parse_challenge(v).stale for _, v in answer.headers)
    assert registrar.take_failures() == [] and registrar.bindings("alice", T0) == []


# --- bindings (§10.3 steps 6-8) ----------------------------------------------------------


def test_a_binding_lasts_as_long_as_expires_says() -> None:
    registrar = new()
    answered(registrar, register("<sip:a@192.0.2.10>", expires=120), T0)
    assert len(registrar.bindings("alice", T0 + 119)) == 1
    assert registrar.bindings("alice", T0 + 121) == []


def test_the_contacts_expires_param_wins_and_long_ones_are_lowered() -> None:
    registrar = new()
    request = register("<sip:a@192.0.2.10>;expires=300", "<sip:b@192.0.2.11>", expires=90000)
    status, headers = answered(registrar, request, T0)
    assert status == 200
    assert sorted(headers["Contact"]) == [
        "<sip:a@192.0.2.10>;expires=300",
        "<sip:b@192.0.2.11>;expires=3600",
    ]


def test_too_brief_an_expiry_gets_423_with_min_expires() -> None:
    registrar = new()
    status, headers = answered(registrar, register("<sip:a@192.0.2.10>", expires=30), T0)
    assert status == 423
    assert headers["Min-Expires"] == ["60"]
    assert registrar.bindings("alice", T0) == []


def test_expires_0_removes_one_binding_and_contact_star_removes_all() -> None:
    registrar = new()
    answered(registrar, register("<sip:a@192.0.2.10>", "<sip:b@192.0.2.11>"), T0)
    registrar.take_changes()
    status, headers = answered(registrar, register("<sip:a@192.0.2.10>;expires=0", cseq=2), T0 + 1)
    assert status == 200 and headers["Contact"] == ["<sip:b@192.0.2.11>;expires=3599"]
    assert registrar.take_changes() == ["alice"]
    status, headers = answered(registrar, register("*", cseq=3, expires=0), T0 + 2)
    assert status == 200 and "Contact" not in headers
    assert registrar.bindings("alice", T0 + 2) == [] and registrar.take_changes() == ["alice"]


def test_contact_star_needs_expires_0() -> None:
    registrar = new()
    status, _ = answered(registrar, register("*", expires=60), T0)
    assert status == 400


def test_a_register_with_no_contact_asks_for_the_bindings_and_changes_nothing() -> None:
    registrar = new()
    answered(registrar, register("<sip:a@192.0.2.10>"), T0)
    registrar.take_changes()
    status, headers = answered(registrar, register(cseq=2), T0 + 10)
    assert status == 200 and headers["Contact"] == ["<sip:a@192.0.2.10>;expires=3590"]
    assert registrar.take_changes() == []


def test_a_refresh_with_a_higher_cseq_renews_the_binding() -> None:
    registrar = new()
    answered(registrar, register("<sip:a@192.0.2.10>", expires=120), T0)
    answered(registrar, register("<sip:a@192.0.2.10>", cseq=2, expires=120), T0 + 100)
    (binding,) = registrar.bindings("alice", T0 + 200)
    assert binding.cseq == 2


def test_an_out_of_order_cseq_fails_the_whole_register() -> None:
    """§10.3 step 7: same Call-ID, CSeq not higher: 500, and nothing of it applied."""
    registrar = new()
    answered(registrar, register("<sip:a@192.0.2.10>", cseq=5, expires=120), T0)
    registrar.take_changes()
    late = register("<sip:new@192.0.2.12>", "<sip:a@192.0.2.10>", cseq=4)
    status, _ = answered(registrar, late, T0 + 1)
    assert status == 500
    (binding,) = registrar.bindings("alice", T0 + 1)
    assert (binding.contact, binding.cseq) == ("sip:a@192.0.2.10", 5)
    assert registrar.take_changes() == []


def test_another_call_id_replaces_the_binding_whatever_its_cseq() -> None:
    """A phone that restarted registers with a new Call-ID and may start its CSeq low."""
    registrar = new()
    answered(registrar, register("<sip:a@192.0.2.10>", cseq=50), T0)
    status, _ = answered(
        registrar, register("<sip:a@192.0.2.10>", call_id="reg-2@phone", cseq=1), T0 + 1
    )
    assert status == 200
    (binding,) = registrar.bindings("alice", T0 + 1)
    assert (binding.call_id, binding.cseq) == ("reg-2@phone", 1)


def test_contact_uris_are_compared_as_uris() -> None:
    registrar = new()
    answered(registrar, register("<sip:a@Phone.Example:5062>"), T0)
    answered(registrar, register("<sip:a@phone.example:5062>;expires=0", cseq=2), T0 + 1)
    assert registrar.bindings("alice", T0 + 1) == []


def test_a_phone_is_never_locked_out_by_a_full_set_of_bindings() -> None:
    """Past the limit the stale bindings go (those from the REGISTER's own address first,
    then the soonest to expire), not the right REGISTER: a phone whose Contact port
    changes at every reboot would otherwise be refused for an hour."""
    registrar = new()
    phone = Target("93.184.216.34", 5060)  # public: each Contact is reached as it says
    for n in range(MAX_BINDINGS):
        contact = f"<sip:a@93.184.216.34:{6000 + n}>"
        status, _ = answered(
            registrar, register(contact, call_id=f"boot-{n}"), T0 + n, source=phone
        )
        assert status == 200
    assert len(registrar.bindings("alice", T0 + 20)) == MAX_BINDINGS
    # Another phone of alice's, elsewhere, registers for a short time; then the first
    # phone reboots once more: its own oldest binding makes room, not the other phone's.
    other = Target("151.101.1.1", 5060)
    answered(registrar, register("<sip:a@151.101.1.1>", call_id="o"), T0 + 20, source=other)
    assert len(registrar.bindings("alice", T0 + 20)) == MAX_BINDINGS
    contacts = {b.contact for b in registrar.bindings("alice", T0 + 20)}
    assert "sip:a@151.101.1.1" in contacts and "sip:a@93.184.216.34:6000" not in contacts
    status, headers = answered(
        registrar, register("<sip:a@93.184.216.34:7000>", call_id="boot-x"), T0 + 30, source=phone
    )
    assert status == 200 and len(headers["Contact"]) == MAX_BINDINGS
    contacts = {b.contact for b in registrar.bindings("alice", T0 + 30)}
    assert {"sip:a@151.101.1.1", "sip:a@93.184.216.34:7000"} <= contacts
    assert "sip:a@93.184.216.34:6001" not in contacts  # the oldest from that address


def test_from_elsewhere_the_binding_that_expires_soonest_makes_room() -> None:
    registrar = new()
    for n in range(MAX_BINDINGS):
        source = Target(f"151.101.1.{n + 1}", 5060)
        request = register(f"<sip:a@151.101.1.{n + 1}>", call_id=f"c{n}", expires=3600 - n * 60)
        assert answered(registrar, request, T0, source=source)[0] == 200
    newcomer = Target("93.184.216.34", 5060)
    status, _ = answered(registrar, register("<sip:a@93.184.216.34>"), T0 + 1, source=newcomer)
    assert status == 200
    contacts = {b.contact for b in registrar.bindings("alice", T0 + 1)}
    assert len(contacts) == MAX_BINDINGS and "sip:a@93.184.216.34" in contacts
    assert f"sip:a@151.101.1.{MAX_BINDINGS}" not in contacts  # the shortest expiry went


def test_a_register_listing_more_contacts_than_a_user_may_have_is_refused() -> None:
    registrar = new()
    contacts = [f"<sip:a@192.0.2.{10 + n}>" for n in range(MAX_BINDINGS + 1)]
    status, _ = answered(registrar, register(*contacts), T0)
    assert status == 403
    assert registrar.bindings("alice", T0) == [] and registrar.take_failures() == []


@pytest.mark.parametrize(
    ("contact", "source", "target"),
    [
        # The same host: its Contact.
        ("<sip:a@192.0.2.10:5070>", PHONE, Target("192.0.2.10", 5070)),
        # A public Contact on another host: believed (a multi-homed phone). (Not TEST-NET
        # addresses here: Python counts the documentation ranges as private.)
        ("<sip:a@93.184.216.34:5060>", Target("151.101.1.1", 5060), Target("93.184.216.34", 5060)),
        # A private Contact from a public source: behind a NAT, reached at the source.
        ("<sip:a@192.168.1.20:5060>", Target("203.0.113.9", 40000), Target("203.0.113.9", 40000)),
        # Over TCP: on its connection, whatever the Contact says.
        (
            "<sip:a@192.168.1.20:5060;transport=tcp>",
            Target("203.0.113.9", 40001, "tcp"),
            Target("203.0.113.9", 40001, "tcp"),
        ),
    ],
)
def test_where_a_phone_is_reached(contact: str, source: Target, target: Target) -> None:
    registrar = new()
    status, _ = answered(registrar, register(contact), T0, source=source)
    assert status == 200
    (binding,) = registrar.bindings("alice", T0)
    assert binding.target == target


def test_a_contact_naming_a_host_is_reached_at_its_source_over_udp() -> None:
    """callhook does not look phones' names up: a name could be made to lead anywhere."""
    registrar = new()
    source = Target("151.101.1.1", 5070)
    status, _ = answered(registrar, register("<sip:a@phone.example:5060>"), T0, source=source)
    assert status == 200
    (binding,) = registrar.bindings("alice", T0)
    assert binding.target == source


TRUNKS = {"sip.provider.example", "198.51.100.7"}


@pytest.mark.parametrize(
    ("contact", "source"),
    [
        ("<sip:+19005550100@sip.provider.example>", PHONE),
        ("<sip:+19005550100@SIP.Provider.Example:5060>", PHONE),
        ("<sip:+19005550100@198.51.100.7>", PHONE),
        # A private Contact from the trunk's address would be reached at that address.
        ("<sip:+19005550100@192.168.1.5>", Target("198.51.100.7", 5060)),
    ],
)
def test_a_contact_that_is_a_trunks_is_refused(contact: str, source: Target) -> None:
    """``connect`` to ``user:NAME`` is not checked against ``[outbound] allow``: a user's
    password must not buy calls through a provider that trusts callhook's address."""
    registrar = Registrar(USERS, KEY, is_trunk=lambda host: host.lower() in TRUNKS)
    status, _ = answered(registrar, register(contact), T0, source=source)
    assert status == 403
    assert registrar.bindings("alice", T0) == [] and registrar.take_changes() == []


def test_a_binding_that_turns_out_to_be_a_trunks_is_dropped() -> None:
    """Loaded before the trunks were resolved, or a trunk configured since: not called."""
    trunks: set[str] = set()
    registrar = Registrar(USERS, KEY, is_trunk=lambda host: host in trunks)
    phone = Target("198.51.100.7", 5060)
    registrar.load([Binding("alice", "sip:a@198.51.100.7", "c", 1, T0 + 60, phone, phone)], T0)
    assert len(registrar.bindings("alice", T0)) == 1
    trunks.add("198.51.100.7")
    assert registrar.bindings("alice", T0) == []
    assert registrar.take_changes() == ["alice"]


def test_stored_bindings_are_loaded_but_not_those_expired_or_of_unknown_users() -> None:
    registrar = new()

    def binding(user: str, expires_at: float) -> Binding:
        return Binding(user, "sip:a@192.0.2.10", "c", 1, expires_at, PHONE, PHONE)

    taken = registrar.load(
        [binding("alice", T0 + 60), binding("alice", T0 - 1), binding("carol", T0 + 60)], T0
    )
    assert taken == 1
    assert [b.user for b in registrar.bindings("alice", T0)] == ["alice"]
    assert registrar.take_changes() == []
    # A worker following the stored bindings: what was stored is all there is now.
    other = Target("192.0.2.11", 5060)
    moved = Binding("alice", "sip:a@192.0.2.11", "d", 1, T0 + 90, other, other)
    assert registrar.replace_all([moved], T0) == 1
    assert registrar.bindings("alice", T0) == [moved]
    assert registrar.replace_all([], T0) == 0 and registrar.bindings("alice", T0) == []
    assert registrar.take_changes() == []  # nothing of its own to store


# --- the agent: REGISTER, and calls from users ------------------------------------------


def agent_with_registrar() -> Agent:
    agent = Agent("192.0.2.1", 5060)
    agent.use_registrar(new())
    return agent


def responses(agent: Agent) -> list[Response]:
    out = [parse(data) for data, _ in agent.take_datagrams()]
    return [m for m in out if isinstance(m, Response)]


def test_the_agent_answers_register_through_its_registrar_and_allows_it() -> None:
    agent = agent_with_registrar()
    agent.receive(register_bytes(), PHONE, T0)
    (challenge,) = responses(agent)
    assert challenge.status == 401
    assert (challenge.headers.get("WWW-Authenticate") or "").startswith("Digest ")
    agent.receive(options_bytes(), PHONE, T0)
    (ok,) = responses(agent)
    assert "REGISTER" in [m.strip() for m in ok.headers.get_all("Allow")]


def register_bytes() -> bytes:
    return (
        b"REGISTER sip:192.0.2.1 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK-a1\r\n"
        b"From: <sip:alice@192.0.2.1>;tag=1\r\nTo: <sip:alice@192.0.2.1>\r\nCall-ID: r@x\r\n"
        b"CSeq: 1 REGISTER\r\nContact: <sip:alice@192.0.2.10:5062>\r\nContent-Length: 0\r\n\r\n"
    )


def options_bytes() -> bytes:
    return (
        b"OPTIONS sip:192.0.2.1 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK-o1\r\n"
        b"From: <sip:x@192.0.2.1>;tag=1\r\nTo: <sip:192.0.2.1>\r\nCall-ID: o@x\r\n"
        b"CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    )


OFFER = (
    "v=0\r\no=a 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n"
    "m=audio 40000 RTP/AVP 0\r\n"
)


def invite_bytes(
    from_user: str,
    cseq: int = 1,
    auth: str | None = None,
    *,
    from_host: str = "192.0.2.1",
    call_id: str = "call-1@phone",
) -> bytes:
    lines = [
        "INVITE sip:support@192.0.2.1 SIP/2.0",
        f"Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK-i{cseq}-{call_id}",
        f"From: <sip:{from_user}@{from_host}>;tag=ft",
        "To: <sip:support@192.0.2.1>",
        f"Call-ID: {call_id}",
        f"CSeq: {cseq} INVITE",
        "Contact: <sip:a@192.0.2.10:5062>",
        "Content-Type: application/sdp",
    ]
    if auth is not None:
        lines.append(f"Authorization: {auth}")
    return ("\r\n".join(lines) + f"\r\nContent-Length: {len(OFFER)}\r\n\r\n" + OFFER).encode()


def test_a_call_from_a_user_is_challenged_and_then_says_who_it_is_from() -> None:
    agent = agent_with_registrar()
    agent.receive(invite_bytes("alice"), PHONE, T0)
    (challenge,) = responses(agent)
    assert challenge.status == 401 and agent.take_events() == []
    parsed = digest.parse_challenge(challenge.headers.get("WWW-Authenticate") or "")
    auth = digest.authorization(parsed, "INVITE", "sip:support@192.0.2.1", "alice", PASSWORD)
    agent.receive(invite_bytes("alice", cseq=2, auth=auth), PHONE, T0 + 0.1)
    assert [r.status for r in responses(agent)] == [100]
    (event,) = agent.take_events()
    assert isinstance(event, IncomingCall) and event.caller_user == "alice"


def test_a_call_from_a_user_with_a_wrong_password_is_refused_and_counted() -> None:
    agent = agent_with_registrar()
    registrar = agent.registrar
    assert registrar is not None
    nonce = registrar.auth.nonce(T0)
    challenge = digest.Challenge("callhook", nonce, "MD5", ("auth",))
    auth = digest.authorization(challenge, "INVITE", "sip:support@192.0.2.1", "alice", "nope1234")
    agent.receive(invite_bytes("alice", auth=auth), PHONE, T0)
    assert [r.status for r in responses(agent)] == [403]
    assert agent.take_events() == []
    assert registrar.take_failures() == [("192.0.2.10", "INVITE as alice")]


@pytest.mark.parametrize("name", ["alice", "carol", "+441234567890"])
def test_every_call_from_callhooks_own_domain_is_challenged_alike(name: str) -> None:
    """Whether the From user exists or not (or is a number), the same 401, and with a digest
    the same 403, counted: a scanner learns no user names (docs/security.md, "Users'
    phones: digest")."""
    agent = agent_with_registrar()
    registrar = agent.registrar
    assert registrar is not None
    agent.receive(invite_bytes(name), PHONE, T0)
    (challenge,) = responses(agent)
    assert (challenge.status, challenge.reason) == (401, "Unauthorized")
    assert [h for h, _ in challenge.headers.items()].count("WWW-Authenticate") == 1
    assert agent.take_events() == []
    parsed = digest.parse_challenge(challenge.headers.get("WWW-Authenticate") or "")
    guess = digest.authorization(parsed, "INVITE", "sip:support@192.0.2.1", name, "guess-123")
    agent.receive(invite_bytes(name, cseq=2, auth=guess), PHONE, T0 + 0.1)
    (refusal,) = responses(agent)
    assert (refusal.status, refusal.reason) == (403, "Forbidden")
    assert registrar.take_failures() == [("192.0.2.10", f"INVITE as {name}")]


def test_a_domain_callhook_is_known_by_is_its_own_too() -> None:
    """``[sip] domains``: the names phones use for callhook (the host of their From)."""
    agent = Agent("192.0.2.1", 5060)
    agent.use_registrar(Registrar(USERS, KEY, domains=["PBX.example.com"]))
    agent.receive(invite_bytes("nobody", from_host="pbx.example.com"), PHONE, T0)
    assert [r.status for r in responses(agent)] == [401]


@pytest.mark.parametrize("host", ["example.com", "192.0.2.99", "anonymous.invalid"])
def test_a_call_from_another_domain_is_not_challenged(host: str) -> None:
    """Callers from other domains (trunks, anyone [security] allow admits) are not callhook's
    users, even with a user's name: their calls run as anybody's."""
    agent = agent_with_registrar()
    agent.receive(invite_bytes("alice", from_host=host), PHONE, T0)
    assert [r.status for r in responses(agent)] == [100]
    (event,) = agent.take_events()
    assert isinstance(event, IncomingCall) and event.caller_user == ""


def test_a_captured_invites_credentials_cannot_call_again() -> None:
    """The nonce count (RFC 7616 §3.3): the same Authorization in a new INVITE (another
    Call-ID) gets a fresh challenge, not a call."""
    agent = agent_with_registrar()
    nonce = agent_registrar(agent).auth.nonce(T0)
    challenge = digest.Challenge("callhook", nonce, "MD5", ("auth",))
    auth = digest.authorization(challenge, "INVITE", "sip:support@192.0.2.1", "alice", PASSWORD)
    agent.receive(invite_bytes("alice", auth=auth), PHONE, T0)
    assert [r.status for r in responses(agent)] == [100]
    agent.take_events()
    agent.receive(invite_bytes("alice", auth=auth, call_id="again@x"), PHONE, T0 + 60)
    (answer,) = responses(agent)
    assert answer.status == 401 and agent.take_events() == []
    assert digest.parse_challenge(answer.headers.get("WWW-Authenticate") or "").stale


def agent_registrar(agent: Agent) -> Registrar:
    assert agent.registrar is not None
    return agent.registrar


def test_without_users_register_is_not_allowed() -> None:
    agent = Agent("192.0.2.1", 5060)
    agent.receive(register_bytes(), PHONE, T0)
    (refusal,) = responses(agent)
    assert refusal.status == 405
