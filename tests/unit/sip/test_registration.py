"""Trunk registration (callhook/sip/registration.py): RFC 3261 §10 on a virtual clock.

Each test plays the agent and the registrar: it takes the REGISTERs the Registration
produces, puts a Via on them as the agent would, sends them through serialize/parse,
and answers with responses built here, at explicit instants. No sockets, no sleeps.
Times start at T0 (not 0).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import replace

import pytest

from callhook.sip import digest
from callhook.sip.message import Headers, Request, Response, parse, parse_name_addr, serialize
from callhook.sip.registration import (
    MAX_BACKOFF,
    Registration,
    RegistrationSpec,
    backoff,
    refresh_after,
    with_via,
)

T0 = 1000.0
USER, PASSWORD = "alice", "s3cret"
HOST, PORT = "192.0.2.1", 5062
OURS = f"<sip:{USER}@{HOST}:{PORT}>"
SPEC = RegistrationSpec("carrier", "sip.example", USER, PASSWORD)
_branches = itertools.count(1)


def make(**changes: object) -> Registration:
    return Registration(replace(SPEC, **changes), HOST, PORT, user_agent="callhook/test")  # type: ignore[arg-type]


def sent(reg: Registration) -> list[Request]:
    """What the Registration wants sent, with the agent's Via, through the wire format."""
    out = []
    for request in reg.take_requests():
        assert "Via" not in request.headers  # the agent adds it
        via = f"SIP/2.0/UDP {HOST}:{PORT};branch=z9hG4bK-{next(_branches)};rport"
        message = parse(serialize(with_via(request, via)))
        assert isinstance(message, Request)
        out.append(message)
    return out


def one(reg: Registration) -> Request:
    requests = sent(reg)
    assert len(requests) == 1, requests
    return requests[0]


def answer(request: Request, status: int, reason: str, *extra: tuple[str, str]) -> Response:
    """The registrar's response to ``request`` (§8.2.6.2 copies, a To tag, ``extra``)."""
    headers = Headers()
    for name in ("Via", "From", "Call-ID", "CSeq"):
        headers.add(name, request.headers.get(name) or "")
    headers.add("To", f"{request.headers.get('To')};tag=registrar")
    for name, value in extra:
        headers.add(name, value)
    return Response(status, reason, headers)


def ok(request: Request, *extra: tuple[str, str]) -> Response:
    """A 200 binding our contact for what it asked for (as the ``expires`` param)."""
    asked = request.headers.get("Expires")
    return answer(request, 200, "OK", ("Contact", f"{OURS};expires={asked}"), *extra)


def www(
    nonce: str = "n1", *, realm: str = "sip.example", algorithm: str = "MD5", **more: str
) -> str:
    params = "".join(f", {k}={v}" for k, v in more.items())
    return f'Digest realm="{realm}", nonce="{nonce}", algorithm={algorithm}, qop="auth"{params}'


def fields(header: str) -> dict[str, str]:
    """The auth-params of an Authorization value, quotes removed."""
    assert header.startswith("Digest ")
    out = {}
    for name, quoted, bare in re.findall(r'([a-zA-Z-]+)=(?:"([^"]*)"|([^,\s]+))', header[7:]):
        out[name] = quoted or bare
    return out


def check_digest(request: Request, header: str, challenge: str) -> dict[str, str]:
    """The credentials in ``header`` are right for ``challenge`` (recomputed here)."""
    value = request.headers.get(header)
    assert value is not None, f"no {header}"
    got = fields(value)
    expected = digest.authorization(
        digest.parse_challenge(challenge),
        "REGISTER",
        request.uri,
        USER,
        PASSWORD,
        nonce_count=int(got["nc"], 16),
        cnonce=got["cnonce"],
    )
    assert value == expected
    assert got["uri"] == request.uri
    return got


def state(reg: Registration) -> str:
    """The state, read afresh (so that mypy does not narrow it across calls)."""
    return reg.state


def registered(reg: Registration, now: float = T0) -> Request:
    """Start ``reg`` at ``now`` and have the registrar accept it; the REGISTER sent."""
    reg.start(now)
    request = one(reg)
    reg.on_response(request, ok(request), now + 0.05)
    assert state(reg) == "registered"
    return request


# --- the REGISTER request -------------------------------------------------------------


def test_first_register_is_well_formed() -> None:
    reg = make()
    assert state(reg) == "unregistered" and reg.deadline is None
    reg.start(T0)
    request = one(reg)
    assert request.method == "REGISTER"
    assert request.uri == "sip:sip.example"  # §10.2: no user part
    to = parse_name_addr(request.headers.get("To") or "")
    from_ = parse_name_addr(request.headers.get("From") or "")
    assert str(to.uri) == str(from_.uri) == "sip:alice@sip.example"
    assert to.tag is None and from_.tag
    assert request.headers.get("Contact") == OURS
    assert request.headers.get("Expires") == "300"
    assert request.headers.get("Max-Forwards") == "70"
    assert request.headers.get("User-Agent") == "callhook/test"
    assert request.headers.get("CSeq") == "1 REGISTER"
    assert request.headers.get("Content-Length") == "0"
    assert request.call_id.endswith("@" + HOST)
    assert "Authorization" not in request.headers
    assert state(reg) == "registering"
    assert reg.take_changes() == [("registering", "")]
    assert reg.destination == ("sip.example", 5060)


@pytest.mark.parametrize(
    ("registrar", "transport", "uri", "contact", "destination"),
    [
        ("sip.example:5080", "udp", "sip:sip.example:5080", OURS, ("sip.example", 5080)),
        (
            "sip.example",
            "tcp",
            "sip:sip.example",
            f"<sip:{USER}@{HOST}:{PORT};transport=tcp>",
            ("sip.example", 5060),
        ),
        (
            "sip.example",
            "tls",
            "sips:sip.example",
            f"<sips:{USER}@{HOST}:{PORT}>",
            ("sip.example", 5061),
        ),
        ("[2001:db8::1]", "udp", "sip:[2001:db8::1]", OURS, ("2001:db8::1", 5060)),
    ],
)
def test_request_uri_contact_and_destination(
    registrar: str, transport: str, uri: str, contact: str, destination: tuple[str, int]
) -> None:
    reg = make(registrar=registrar, transport=transport)
    reg.start(T0)
    request = one(reg)
    assert request.uri == uri
    assert request.headers.get("Contact") == contact
    assert reg.destination == destination
    scheme = uri.split(":")[0]
    host = registrar.rsplit(":", 1)[0] if not registrar.startswith("[") else registrar
    assert request.headers.get("To") == f"<{scheme}:{USER}@{host}>"


def test_ipv6_contact_host_is_bracketed() -> None:
    reg = Registration(SPEC, "2001:db8::5", 5060)
    reg.start(T0)
    assert one(reg).headers.get("Contact") == f"<sip:{USER}@[2001:db8::5]:5060>"


@pytest.mark.parametrize(
    "changes",
    [{"transport": "sctp"}, {"registrar": "bad host"}, {"expires": 0}, {"username": ""}],
)
def test_bad_spec_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="carrier"):
        make(**changes)


def test_with_via_puts_the_via_first() -> None:
    request = Request("REGISTER", "sip:x", Headers([("CSeq", "1 REGISTER")]))
    assert with_via(request, "SIP/2.0/UDP h;branch=z9hG4bK1").headers.items()[0] == (
        "Via",
        "SIP/2.0/UDP h;branch=z9hG4bK1",
    )


# --- lifetime and refresh ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("lifetime", "after"),
    [(1, 1.0), (4, 2.0), (10, 5.0), (20, 15.0), (60, 54.0), (300, 270.0), (3600, 3240.0)],
)
def test_refresh_rule(lifetime: int, after: float) -> None:
    # min(90 %, L - 5 s), never before L/2 nor before 1 s.
    assert refresh_after(lifetime) == after


def test_granted_lifetime_is_our_contacts_expires() -> None:
    reg = make()
    reg.start(T0)
    request = one(reg)
    response = answer(
        request,
        200,
        "OK",
        ("Contact", f"<sip:{USER}@198.51.100.7:5060>;expires=3600"),  # another device
        ("Contact", f"<sip:{USER}@{HOST}:{PORT}>;expires=120, <sip:{USER}@{HOST}:5999>"),
        ("Expires", "900"),
    )
    reg.on_response(request, response, T0 + 0.1)
    assert state(reg) == "registered" and reg.reason == ""
    assert reg.granted == 120
    assert reg.expires_in(T0 + 0.1) == 120  # counted from the REGISTER: 119.9 rounded up
    assert reg.deadline == T0 + 108  # refresh_after(120)
    assert reg.next_try_in(T0 + 1) is None
    assert reg.take_changes() == [("registering", ""), ("registered", "")]


@pytest.mark.parametrize(
    ("extra", "granted"),
    [
        ((("Contact", "<sip:bob@198.51.100.7>;expires=50"), ("Expires", "600")), 600),
        ((("Contact", f"<sip:{USER}@{HOST}:{PORT}>"), ("Expires", "600")), 600),
        ((), 300),  # nothing said: what we asked
    ],
)
def test_granted_lifetime_falls_back(extra: tuple[tuple[str, str], ...], granted: int) -> None:
    reg = make()
    reg.start(T0)
    request = one(reg)
    reg.on_response(request, answer(request, 200, "OK", *extra), T0)
    assert reg.granted == granted
    assert reg.deadline == T0 + refresh_after(granted)


def test_refresh_is_sent_on_time_with_the_same_call_id() -> None:
    reg = make()
    first = registered(reg)
    reg.take_changes()
    reg.handle_timer(T0 + 269.9)
    assert sent(reg) == []
    reg.handle_timer(T0 + 270)
    refresh = one(reg)
    assert refresh.call_id == first.call_id  # §10.2.4
    assert refresh.from_tag == first.from_tag
    assert refresh.cseq == (2, "REGISTER")
    assert refresh.headers.get("Expires") == "300"
    assert state(reg) == "registered" and reg.deadline is None  # in flight
    reg.on_response(refresh, ok(refresh), T0 + 270.2)
    assert reg.deadline == T0 + 540
    assert reg.take_changes() == []  # a refresh is not a change


def test_zero_lifetime_granted_is_a_failure() -> None:
    reg = make()
    reg.start(T0)
    request = one(reg)
    reg.on_response(request, answer(request, 200, "OK", ("Expires", "0")), T0)
    assert state(reg) == "failing"
    assert "no lifetime" in reg.reason


# --- authentication ---------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["MD5", "SHA-256"])
def test_401_is_answered_at_once_with_credentials(algorithm: str) -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    challenge = www("abc", algorithm=algorithm, opaque='"op"')
    reg.on_response(first, answer(first, 401, "Unauthorized", ("WWW-Authenticate", challenge)), T0)
    second = one(reg)
    assert second.cseq == (2, "REGISTER")
    assert second.call_id == first.call_id
    got = check_digest(second, "Authorization", challenge)
    assert got["algorithm"] == algorithm and got["nc"] == "00000001" and got["opaque"] == "op"
    reg.on_response(second, ok(second), T0 + 0.1)
    assert state(reg) == "registered"
    assert reg.take_changes() == [("registering", ""), ("registered", "")]


def test_md5_response_matches_an_independent_computation() -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    reg.on_response(first, answer(first, 401, "Unauthorized", ("WWW-Authenticate", www())), T0)
    got = fields(one(reg).headers.get("Authorization") or "")

    def md5(text: str) -> str:
        return hashlib.md5(text.encode()).hexdigest()

    ha1 = md5(f"{USER}:sip.example:{PASSWORD}")
    ha2 = md5("REGISTER:sip:sip.example")
    assert got["response"] == md5(f"{ha1}:n1:{got['nc']}:{got['cnonce']}:auth:{ha2}")


def test_407_is_answered_with_proxy_authorization_sha256_preferred() -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    md5, sha = www("m", realm="proxy"), www("s", realm="proxy", algorithm="SHA-256")
    response = answer(
        first,
        407,
        "Proxy Authentication Required",
        ("Proxy-Authenticate", md5),
        ("Proxy-Authenticate", sha),
    )
    reg.on_response(first, response, T0)
    second = one(reg)
    assert "Authorization" not in second.headers
    assert check_digest(second, "Proxy-Authorization", sha)["algorithm"] == "SHA-256"


def test_kept_challenge_is_reused_with_the_next_nonce_count() -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    reg.on_response(first, answer(first, 401, "Unauthorized", ("WWW-Authenticate", www())), T0)
    second = one(reg)
    reg.on_response(second, ok(second), T0)
    reg.handle_timer(T0 + 270)
    refresh = one(reg)
    got = check_digest(refresh, "Authorization", www())
    assert got["nc"] == "00000002" and got["nonce"] == "n1"


def test_401_again_after_our_credentials_means_the_password_was_refused() -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    reg.on_response(first, answer(first, 401, "Unauthorized", ("WWW-Authenticate", www())), T0)
    second = one(reg)
    reg.on_response(
        second, answer(second, 401, "Unauthorized", ("WWW-Authenticate", www("n2"))), T0 + 1
    )
    assert sent(reg) == []
    assert state(reg) == "failing"
    assert reg.reason == "401 again: the password was refused"
    assert reg.next_try_in(T0 + 1) == 30
    assert reg.take_changes()[-1] == ("failing", "401 again: the password was refused")
    # The retry starts over without the refused credentials.
    reg.handle_timer(T0 + 31)
    retry = one(reg)
    assert "Authorization" not in retry.headers


def test_stale_nonce_is_answered_again() -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    reg.on_response(first, answer(first, 401, "Unauthorized", ("WWW-Authenticate", www())), T0)
    second = one(reg)
    stale = www("n2", stale="true")
    reg.on_response(second, answer(second, 401, "Unauthorized", ("WWW-Authenticate", stale)), T0)
    third = one(reg)
    assert check_digest(third, "Authorization", stale)["nonce"] == "n2"
    reg.on_response(third, ok(third), T0)
    assert state(reg) == "registered"


def test_refused_kept_challenge_is_answered_once_more() -> None:
    # The nonce kept from the last registration may have expired without stale=true.
    reg = make()
    reg.start(T0)
    first = one(reg)
    reg.on_response(first, answer(first, 401, "Unauthorized", ("WWW-Authenticate", www())), T0)
    second = one(reg)
    reg.on_response(second, ok(second), T0)
    reg.handle_timer(T0 + 270)
    refresh = one(reg)
    fresh = www("n2")
    reg.on_response(refresh, answer(refresh, 401, "Unauthorized", ("WWW-Authenticate", fresh)), T0)
    again = one(reg)
    assert check_digest(again, "Authorization", fresh)["nc"] == "00000001"
    reg.on_response(again, ok(again), T0 + 270.1)
    assert state(reg) == "registered" and reg.take_changes() == [
        ("registering", ""),
        ("registered", ""),
    ]


def test_endless_stale_challenges_are_cut_short() -> None:
    reg = make()
    reg.start(T0)
    request = one(reg)
    for n in range(10):
        stale = www(f"n{n}", stale="true")
        reg.on_response(
            request, answer(request, 401, "Unauthorized", ("WWW-Authenticate", stale)), T0
        )
        requests = sent(reg)
        if not requests:
            break
        request = requests[0]
    assert n == 4  # four answered, the fifth refused
    assert state(reg) == "failing" and "still challenged" in reg.reason


def test_challenge_for_another_realm_is_not_answered() -> None:
    reg = make(realm="carrier.example")
    reg.start(T0)
    first = one(reg)
    challenge = www(realm="evil.example")
    reg.on_response(first, answer(first, 401, "Unauthorized", ("WWW-Authenticate", challenge)), T0)
    assert sent(reg) == []
    assert state(reg) == "failing"
    assert reg.reason == ("401 Unauthorized: challenge for realm evil.example, not carrier.example")


def test_configured_realm_picks_its_challenge() -> None:
    reg = make(realm="carrier.example")
    reg.start(T0)
    first = one(reg)
    theirs, ours = www("x", realm="other", algorithm="SHA-256"), www("y", realm="carrier.example")
    response = answer(
        first, 401, "Unauthorized", ("WWW-Authenticate", theirs), ("WWW-Authenticate", ours)
    )
    reg.on_response(first, response, T0)
    assert check_digest(one(reg), "Authorization", ours)["realm"] == "carrier.example"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ((("WWW-Authenticate", 'Basic realm="x"'),), "401 Unauthorized: no digest challenge"),
        ((), "401 Unauthorized without WWW-Authenticate"),
    ],
)
def test_unanswerable_challenge_fails(extra: tuple[tuple[str, str], ...], reason: str) -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    reg.on_response(first, answer(first, 401, "Unauthorized", *extra), T0)
    assert sent(reg) == []
    assert state(reg) == "failing" and reg.reason.startswith(reason)


# --- 423 Interval Too Brief -------------------------------------------------------------


def test_423_raises_the_lifetime_for_good() -> None:
    reg = make(expires=60)
    reg.start(T0)
    first = one(reg)
    reg.on_response(
        first, answer(first, 423, "Interval Too Brief", ("Min-Expires", "600")), T0 + 0.1
    )
    second = one(reg)
    assert second.headers.get("Expires") == "600" and second.cseq[0] == 2
    assert state(reg) == "registering"
    reg.on_response(second, ok(second), T0 + 0.2)
    assert reg.take_changes() == [
        ("registering", ""),
        ("registering", "423: registrar asks for at least 600 s"),
        ("registered", ""),
    ]
    reg.handle_timer(T0 + 0.1 + 540)
    assert one(reg).headers.get("Expires") == "600"  # and keeps asking for it


@pytest.mark.parametrize("min_expires", [None, "30", "soon"])
def test_423_without_a_usable_min_expires_fails(min_expires: str | None) -> None:
    reg = make(expires=60)
    reg.start(T0)
    first = one(reg)
    extra = () if min_expires is None else (("Min-Expires", min_expires),)
    reg.on_response(first, answer(first, 423, "Interval Too Brief", *extra), T0)
    assert sent(reg) == []
    assert state(reg) == "failing"
    assert reg.reason == "423 Interval Too Brief without a usable Min-Expires"


# --- failures and back-off --------------------------------------------------------------


def test_backoff_rule() -> None:
    assert [backoff(n) for n in range(1, 10)] == [30, 60, 120, 240, 480, 960, 1800, 1800, 1800]
    assert backoff(1000) == MAX_BACKOFF


def test_failures_back_off_doubling_to_the_cap() -> None:
    reg = make()
    reg.start(T0)
    now = T0
    waits = []
    for _ in range(9):
        request = one(reg)
        reg.on_response(request, answer(request, 403, "Forbidden"), now)
        assert reg.deadline is not None
        waits.append(reg.deadline - now)
        assert reg.next_try_in(now) == waits[-1]
        reg.handle_timer(reg.deadline - 0.01)
        assert sent(reg) == []  # not early
        now = reg.deadline
        reg.handle_timer(now)
    assert waits == [30, 60, 120, 240, 480, 960, 1800, 1800, 1800]
    # Logged once: the state and reason did not change between attempts.
    assert reg.take_changes() == [("registering", ""), ("failing", "403 Forbidden")]


def test_success_resets_the_backoff() -> None:
    reg = make()
    reg.start(T0)
    request = one(reg)
    reg.on_response(request, answer(request, 500, "Server Internal Error"), T0)
    reg.handle_timer(T0 + 30)
    request = one(reg)
    reg.on_response(request, answer(request, 500, "Server Internal Error"), T0 + 30)
    assert reg.next_try_in(T0 + 30) == 60
    reg.handle_timer(T0 + 90)
    request = one(reg)
    reg.on_response(request, ok(request), T0 + 90)
    reg.handle_timer(T0 + 90 + 270)
    refresh = one(reg)
    reg.on_response(refresh, answer(refresh, 500, "Server Internal Error"), T0 + 361)
    assert reg.next_try_in(T0 + 361) == 30


def test_retry_after_is_honoured() -> None:
    reg = make()
    reg.start(T0)
    request = one(reg)
    response = answer(request, 503, "Service Unavailable", ("Retry-After", "90 (maintenance)"))
    reg.on_response(request, response, T0)
    assert reg.reason == "503 Service Unavailable"
    assert reg.deadline == T0 + 90
    reg.handle_timer(T0 + 89)
    assert sent(reg) == []
    reg.handle_timer(T0 + 90)
    assert len(sent(reg)) == 1


def test_timeout_fails_and_retries() -> None:
    reg = make(registrar="sip.example")
    reg.start(T0)
    request = one(reg)
    reg.on_timeout(request, T0 + 32)
    assert state(reg) == "failing"
    assert reg.reason == "no answer from sip.example:5060"
    assert reg.deadline == T0 + 62
    reg.handle_timer(T0 + 62)
    retry = one(reg)
    reg.on_timeout(retry, T0 + 94, "cannot resolve sip.example")
    assert reg.reason == "cannot resolve sip.example" and reg.deadline == T0 + 154


def test_failed_refresh_says_the_binding_still_holds_then_that_it_lapsed() -> None:
    reg = make()
    registered(reg)
    reg.take_changes()
    reg.handle_timer(T0 + 270)
    refresh = one(reg)
    reg.on_response(refresh, answer(refresh, 403, "Forbidden"), T0 + 271)
    assert state(reg) == "failing"
    assert reg.reason == "403 Forbidden; the current binding holds for 29 s more"
    assert reg.expires_in(T0 + 271) == 29
    assert reg.deadline == T0 + 300  # the lapse comes before the retry (T0 + 301)
    reg.handle_timer(T0 + 300)
    assert sent(reg) == []
    assert reg.expires_in(T0 + 300) is None
    assert reg.reason == "403 Forbidden; the binding has lapsed"
    assert reg.deadline == T0 + 301
    reg.handle_timer(T0 + 301)
    retry = one(reg)
    reg.on_response(retry, answer(retry, 403, "Forbidden"), T0 + 301)
    assert reg.take_changes() == [
        ("failing", "403 Forbidden; the current binding holds for 29 s more"),
        ("failing", "403 Forbidden; the binding has lapsed"),
    ]
    reg.handle_timer(T0 + 361)
    retry = one(reg)
    reg.on_response(retry, ok(retry), T0 + 361)
    assert reg.take_changes() == [("registered", "")]


def test_refresh_timeout_after_the_lapse() -> None:
    reg = make()
    registered(reg)
    reg.handle_timer(T0 + 270)
    refresh = one(reg)
    reg.on_timeout(refresh, T0 + 302)
    assert reg.reason == "no answer from sip.example:5060; the binding has lapsed"


# --- one in flight ----------------------------------------------------------------------


def test_never_more_than_one_request_in_flight() -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    reg.start(T0 + 1)  # again: nothing new
    for t in range(1, 100):
        reg.handle_timer(T0 + t)
    assert reg.deadline is None and sent(reg) == []
    reg.on_response(first, answer(first, 100, "Trying"), T0 + 1)  # 1xx: ignored
    assert sent(reg) == [] and state(reg) == "registering"
    # A response that names another CSeq (an older REGISTER) is not the one in flight.
    older = Request(first.method, first.uri, first.headers.copy())
    older.headers.set("CSeq", "0 REGISTER")
    reg.on_response(older, ok(older), T0 + 2)
    assert state(reg) == "registering"
    reg.on_response(first, ok(first), T0 + 3)
    assert state(reg) == "registered"
    reg.on_response(first, ok(first), T0 + 4)  # a duplicate answer: ignored
    assert sent(reg) == [] and reg.deadline == T0 + 270


# --- unregistering ----------------------------------------------------------------------


def test_stop_unregisters_once() -> None:
    reg = make()
    first = registered(reg)
    reg.take_changes()
    reg.stop(T0 + 10)
    bye = one(reg)
    assert bye.headers.get("Expires") == "0"
    assert bye.headers.get("Contact") == f"{OURS};expires=0"  # §10.2.2
    assert bye.call_id == first.call_id and bye.cseq == (2, "REGISTER")
    assert state(reg) == "registered"  # until the answer
    reg.stop(T0 + 11)
    assert sent(reg) == []
    reg.on_response(bye, answer(bye, 200, "OK"), T0 + 11)
    assert state(reg) == "unregistered" and reg.reason == ""
    assert reg.take_changes() == [("unregistered", "")]
    assert reg.deadline is None and reg.expires_in(T0 + 12) is None
    reg.handle_timer(T0 + 1000)
    assert sent(reg) == []


def test_unregister_carries_the_kept_credentials_and_answers_a_challenge() -> None:
    reg = make()
    reg.start(T0)
    first = one(reg)
    reg.on_response(first, answer(first, 401, "Unauthorized", ("WWW-Authenticate", www())), T0)
    second = one(reg)
    reg.on_response(second, ok(second), T0)
    reg.stop(T0 + 5)
    bye = one(reg)
    assert check_digest(bye, "Authorization", www())["nc"] == "00000002"
    fresh = www("n2")
    reg.on_response(bye, answer(bye, 401, "Unauthorized", ("WWW-Authenticate", fresh)), T0 + 5)
    again = one(reg)
    assert again.headers.get("Expires") == "0"
    check_digest(again, "Authorization", fresh)
    reg.on_response(again, answer(again, 200, "OK"), T0 + 5)
    assert state(reg) == "unregistered"
    assert sent(reg) == []


@pytest.mark.parametrize("outcome", ["timeout", "500"])
def test_unregister_ends_on_any_answer_or_timeout(outcome: str) -> None:
    reg = make()
    registered(reg)
    reg.stop(T0 + 5)
    bye = one(reg)
    if outcome == "timeout":
        reg.on_timeout(bye, T0 + 37)
        assert reg.reason == "unregister: no answer from sip.example:5060"
    else:
        reg.on_response(bye, answer(bye, 500, "Server Internal Error"), T0 + 5)
        assert reg.reason == "unregister: 500 Server Internal Error"
    assert state(reg) == "unregistered" and reg.deadline is None
    reg.handle_timer(T0 + 5000)
    assert sent(reg) == []


def test_stop_without_a_binding_sends_nothing() -> None:
    reg = make()
    reg.stop(T0)  # never started
    assert sent(reg) == [] and reg.take_changes() == []
    reg.start(T0)
    request = one(reg)
    reg.on_response(request, answer(request, 403, "Forbidden"), T0)
    reg.stop(T0 + 1)  # failing, never registered
    assert sent(reg) == []
    assert state(reg) == "unregistered" and reg.deadline is None


@pytest.mark.parametrize(("status", "unregisters"), [(200, True), (403, False)])
def test_stop_while_registering_waits_for_the_answer(status: int, unregisters: bool) -> None:
    reg = make()
    reg.start(T0)
    request = one(reg)
    reg.stop(T0 + 0.1)
    assert sent(reg) == []  # one in flight
    response = ok(request) if status == 200 else answer(request, 403, "Forbidden")
    reg.on_response(request, response, T0 + 0.2)
    if unregisters:
        bye = one(reg)
        assert bye.headers.get("Expires") == "0" and bye.cseq[0] == 2
        reg.on_response(bye, answer(bye, 200, "OK"), T0 + 0.3)
    else:
        assert sent(reg) == []
    assert state(reg) == "unregistered"


def test_start_again_after_stop() -> None:
    reg = make()
    first = registered(reg)
    reg.stop(T0 + 1)
    bye = one(reg)
    reg.start(T0 + 2)  # while the unregister is in flight
    assert sent(reg) == []
    reg.on_response(bye, answer(bye, 200, "OK"), T0 + 3)
    again = one(reg)
    assert again.headers.get("Expires") == "300" and again.call_id == first.call_id
    assert again.cseq[0] == 3
    reg.on_response(again, ok(again), T0 + 3)
    assert state(reg) == "registered"


def test_stop_while_failing_with_a_binding_still_unregisters() -> None:
    reg = make()
    registered(reg)
    reg.handle_timer(T0 + 270)
    refresh = one(reg)
    reg.on_response(refresh, answer(refresh, 503, "Service Unavailable"), T0 + 271)
    assert state(reg) == "failing"
    reg.stop(T0 + 280)
    bye = one(reg)
    assert bye.headers.get("Expires") == "0"
    reg.on_response(bye, answer(bye, 200, "OK"), T0 + 281)
    assert state(reg) == "unregistered" and reg.deadline is None


def test_start_before_a_stop_took_effect_carries_on() -> None:
    reg = make()
    reg.start(T0)
    request = one(reg)
    reg.stop(T0 + 0.1)
    reg.start(T0 + 0.2)  # the REGISTER is still in flight: as if stop() never came
    reg.on_response(request, ok(request), T0 + 0.3)
    assert sent(reg) == []
    assert state(reg) == "registered" and reg.deadline == T0 + 270
