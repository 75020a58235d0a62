"""Digest authentication of callhook's users' phones against what a peer may send
(callhook/sip/authentication.py, registrar.py, the agent's use of them): odd credentials
are answered and leave no transaction behind, captured credentials cannot be replayed
(RFC 7616 §3.3 nonce counts, §3.4.6 the digest uri), nonces from before a restart are
stale. Plain ``now`` values are the virtual clock."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callhook.sip import digest
from callhook.sip.agent import Agent
from callhook.sip.authentication import NONCE_SECONDS, Authenticator, same_uri
from callhook.sip.grammar import quote
from callhook.sip.message import Request, Response, parse
from callhook.sip.registrar import Registrar
from callhook.sip.transaction import T1
from callhook.sip.transport import Target

PASSWORD = "alice-secret-1"
USERS = {"alice": PASSWORD}
KEY = b"k" * 32
PHONE = Target("192.0.2.10", 5062)
T0 = 1000.0
R_URI = "sip:192.0.2.1"

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def register(
    contact: str = "<sip:alice@93.184.216.34:5062>",
    *,
    auth: str | None = None,
    call_id: str = "reg-1@phone",
    cseq: int = 1,
    branch: str = "z9hG4bK-r1",
    uri: str = R_URI,
    expires: str | None = None,
) -> bytes:
    lines = [
        f"REGISTER {uri} SIP/2.0",
        f"Via: SIP/2.0/UDP 192.0.2.10:5062;branch={branch}",
        "From: <sip:alice@192.0.2.1>;tag=ft",
        "To: <sip:alice@192.0.2.1>",
        f"Call-ID: {call_id}",
        f"CSeq: {cseq} REGISTER",
        f"Contact: {contact}",
    ]
    if expires is not None:
        lines.append(f"Expires: {expires}")
    if auth is not None:
        lines.append(f"Authorization: {auth}")
    return ("\r\n".join(lines) + "\r\nContent-Length: 0\r\n\r\n").encode()


def request(data: bytes) -> Request:
    message = parse(data)
    assert isinstance(message, Request)
    return message


def credentials(
    auth: Authenticator,
    now: float,
    *,
    method: str = "REGISTER",
    uri: str = R_URI,
    nc: int = 1,
    password: str = PASSWORD,
    nonce: str | None = None,
) -> str:
    """What a phone answers to a challenge issued at ``now``."""
    challenge = digest.Challenge("callhook", nonce or auth.nonce(now), "MD5", ("auth",))
    return digest.authorization(challenge, method, uri, "alice", password, nonce_count=nc)


def header(**params: str) -> str:
    """An Authorization header value with exactly these parameters (quoted)."""
    return "Digest " + ", ".join(f"{k}={quote(v)}" for k, v in params.items())


def statuses(agent: Agent) -> list[int]:
    out = [parse(data) for data, _ in agent.take_datagrams()]
    return [m.status for m in out if isinstance(m, Response)]


def drain(agent: Agent, now: float) -> None:
    """Run the agent's timers until none is due within a few minutes of ``now``."""
    limit = now + 128 * T1 + 60
    while (deadline := agent.deadline) is not None and deadline <= limit:
        agent.handle_timer(deadline)


def agent() -> Agent:
    new = Agent("192.0.2.1", 5060)
    new.use_registrar(Registrar(USERS, KEY))
    return new


def invite(auth: str) -> bytes:
    lines = [
        "INVITE sip:support@192.0.2.1 SIP/2.0",
        "Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK-i1",
        "From: <sip:alice@192.0.2.1>;tag=ft",
        "To: <sip:support@192.0.2.1>",
        "Call-ID: call-1@phone",
        "CSeq: 1 INVITE",
        "Contact: <sip:alice@192.0.2.10:5062>",
        f"Authorization: {auth}",
    ]
    return ("\r\n".join(lines) + "\r\nContent-Length: 0\r\n\r\n").encode()


# --- whatever a peer sends, it is answered ---------------------------------------------

GOOD = {
    "username": "alice",
    "realm": "callhook",
    "nonce": "0",
    "uri": R_URI,
    "response": "0" * 32,
    "qop": "auth",
    "nc": "00000001",
    "cnonce": "c",
}

ODD = [
    {"nonce": "1.2.é"},  # the reviewer's: compare_digest raised TypeError on non-ASCII
    {"nonce": "deadbeef.1.000000000000.é" + "0" * 31},
    {"nonce": "deadbeef.١٢.000000000000." + "0" * 32},  # Arabic-Indic digits
    {"nonce": "." * 3},
    {"nonce": ""},
    {"nc": "²"},
    {"nc": "0000000²"},
    {"nc": "１"},  # fullwidth digit
    {"nc": "f" * 5000},
    {"response": "é" * 32},
    {"response": ""},
    {"username": "ålice"},
    {"username": ""},
    {"uri": "é"},
    {"uri": "sip:%zz@[::1"},
    {"algorithm": "ß"},
    {"algorithm": "MD5-sess"},
    {"qop": "auth-int"},
    {"qop": "ａｕｔｈ"},
    {"cnonce": ""},
]


@pytest.mark.parametrize("method", ["REGISTER", "INVITE"])
@pytest.mark.parametrize("odd", ODD, ids=lambda odd: repr(odd)[:40])
def test_odd_credentials_are_answered_and_leave_no_transaction(
    odd: dict[str, str], method: str
) -> None:
    """Before, a non-ASCII nonce raised inside the agent: no answer, and the server
    transaction stayed in ``_txs`` for ever (its deadline None)."""
    peer = agent()
    registrar = peer.registrar
    assert registrar is not None
    params = dict(GOOD, nonce=registrar.auth.nonce(T0))
    params.update(odd)
    auth = header(**params)
    peer.receive(register(auth=auth) if method == "REGISTER" else invite(auth), PHONE, T0)
    answered = statuses(peer)
    assert len(answered) == 1 and answered[0] in (400, 401, 403), answered
    drain(peer, T0)
    assert peer._txs == {}


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=40)


@FUZZ
@given(st.dictionaries(st.sampled_from([*GOOD, "algorithm", "opaque", "stale"]), _TEXT))
def test_any_credentials_are_judged_without_raising(params: dict[str, str]) -> None:
    registrar = Registrar(USERS, KEY)
    value = header(**{**GOOD, "nonce": registrar.auth.nonce(T0), **params})
    try:
        message = request(register(auth=value))
    except ValueError:
        return  # not a message the agent would have parsed
    answer = registrar.register(message, PHONE, T0)
    assert answer.status in (400, 401, 403)


@settings(FUZZ, max_examples=60)
@given(_TEXT, _TEXT, _TEXT)
def test_any_odd_register_reaches_an_answer_and_its_transaction_ends(
    nonce: str, nc: str, expires: str
) -> None:
    peer = agent()
    auth = header(**{**GOOD, "nonce": nonce, "nc": nc})
    try:
        data = register(auth=auth, expires=expires.strip() or "0")
        request(data)
    except ValueError:
        return
    peer.receive(data, PHONE, T0)
    assert len(statuses(peer)) == 1
    drain(peer, T0)
    assert peer._txs == {}


@pytest.mark.parametrize(
    "expires",
    [
        "Expires: ²",  # "²".isdigit() is True, int("²") raises
        "Expires: ٣٠٠",
        "Expires: 0000000000000000000000000000300",  # leading zeros: 300
        "Expires: " + "9" * 5000,  # int() refuses 4300 digits and more
    ],
)
@pytest.mark.parametrize("where", ["header", "param"])
def test_an_odd_expires_from_an_authenticated_phone_is_answered(expires: str, where: str) -> None:
    peer = agent()
    registrar = peer.registrar
    assert registrar is not None
    value = expires.partition(": ")[2]
    contact = "<sip:alice@93.184.216.34:5062>"
    if where == "param":
        data = register(f"{contact};expires={value}", auth=credentials(registrar.auth, T0))
    else:
        data = register(contact, expires=value, auth=credentials(registrar.auth, T0))
    peer.receive(data, PHONE, T0)
    assert statuses(peer) == [200]
    (binding,) = registrar.bindings("alice", T0)
    # Not a number: as if absent (an hour); a number too long: lowered to the hour.
    assert binding.expires_in(T0) == (300 if value.startswith("000") else 3600)
    drain(peer, T0)
    assert peer._txs == {}


# --- replays ------------------------------------------------------------------------------


def test_a_captured_register_replayed_later_with_another_contact_is_refused() -> None:
    """The reviewer's attack: the phone's REGISTER captured, replayed 240 s later (its nonce
    still young) with the attacker's Contact and an hour's expiry."""
    registrar = Registrar(USERS, KEY)
    auth = credentials(registrar.auth, T0)
    first = registrar.register(request(register(auth=auth)), PHONE, T0)
    assert first.status == 200
    replay = register("<sip:x@151.101.1.1>", auth=auth, call_id="evil", expires="3600")
    answer = registrar.register(request(replay), Target("151.101.1.1", 5060), T0 + 240)
    assert answer.status == 401
    assert all(digest.parse_challenge(v).stale for _, v in answer.headers)
    assert [b.contact for b in registrar.bindings("alice", T0 + 240)] == [
        "sip:alice@93.184.216.34:5062"
    ]
    assert registrar.take_failures() == []  # not a guess: no ban for the phone's address


def test_a_phone_reusing_its_nonce_with_a_higher_count_is_accepted() -> None:
    """RFC 7616 §3.4: a client may send the nonce again with the next nc."""
    registrar = Registrar(USERS, KEY)
    nonce = registrar.auth.nonce(T0)
    for nc, now in ((1, T0), (2, T0 + 60), (5, T0 + 120)):
        auth = credentials(registrar.auth, T0, nc=nc, nonce=nonce)
        answer = registrar.register(request(register(auth=auth, cseq=nc)), PHONE, now)
        assert answer.status == 200, nc
    auth = credentials(registrar.auth, T0, nc=4, nonce=nonce)  # lower than 5: a replay
    assert registrar.register(request(register(auth=auth, cseq=9)), PHONE, T0 + 130).status == 401


def test_credentials_without_qop_are_challenged_again() -> None:
    """RFC 2069's form has no nonce count, so no replay protection: not accepted."""
    registrar = Registrar(USERS, KEY)
    challenge = digest.Challenge("callhook", registrar.auth.nonce(T0), "MD5")  # no qop
    auth = digest.authorization(challenge, "REGISTER", R_URI, "alice", PASSWORD)
    assert "nc=" not in auth
    answer = registrar.register(request(register(auth=auth)), PHONE, T0)
    assert answer.status == 401 and registrar.take_failures() == []


@pytest.mark.parametrize(
    ("digest_uri", "status"),
    [
        (R_URI, 200),
        ("SIP:192.0.2.1", 200),  # §19.1.4: scheme and host without regard to case
        ("sip:192.0.2.1;transport=udp", 200),  # a parameter only one side has: ignored
        ("sip:192.0.2.1:5060", 400),  # an explicit default port is another URI
        ("sip:192.0.2.2", 400),
        ("sip:attacker.example", 400),
        ("/", 400),
    ],
)
def test_the_digest_uri_must_be_the_request_uri(digest_uri: str, status: int) -> None:
    """RFC 7616 §3.4.6 (RFC 2617 §3.2.2.5): else 400, and not counted as a guess."""
    registrar = Registrar(USERS, KEY)
    auth = credentials(registrar.auth, T0, uri=digest_uri)
    answer = registrar.register(request(register(auth=auth)), PHONE, T0)
    assert answer.status == status
    assert registrar.take_failures() == []


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("sip:alice@Example.COM", "SIP:alice@example.com", True),
        ("sip:ALICE@example.com", "sip:alice@example.com", False),  # userinfo: exactly
        ("sip:%61lice@example.com", "sip:alice@example.com", True),  # after unescaping
        ("sip:a@example.com;transport=TCP", "sip:a@example.com;transport=tcp", True),
        ("sip:a@example.com;user=phone", "sip:a@example.com", False),
        ("sip:a@example.com;maddr=192.0.2.1", "sip:a@example.com", False),
        ("sip:a@example.com;lr", "sip:a@example.com", True),
        ("sip:a@example.com?Subject=x", "sip:a@example.com", False),
        ("sips:a@example.com", "sip:a@example.com", False),
        ("sip:a@[::1]:5060", "sip:a@[::1]:5060", True),
    ],
)
def test_uris_are_compared_as_rfc_3261_section_19_1_4_says(a: str, b: str, same: bool) -> None:
    assert same_uri(a, b) is same and same_uri(b, a) is same


def test_a_nonce_from_before_a_restart_is_stale_not_valid() -> None:
    """Its clock (monotonic) may have started again since a reboot: the stamp means
    nothing, so the nonce is recognised (same key) but stale, and the phone answers again
    without bothering its user."""
    before = Registrar(USERS, KEY, boot="0000aaaa")
    auth = credentials(before.auth, T0)
    after = Registrar(USERS, KEY, boot="0000bbbb")
    answer = after.register(request(register(auth=auth)), PHONE, T0 + 1)
    assert answer.status == 401
    assert all(digest.parse_challenge(v).stale for _, v in answer.headers)
    assert after.take_failures() == []
    assert Registrar(USERS, KEY).auth.boot != Registrar(USERS, KEY).auth.boot  # random


def test_the_table_of_nonce_counts_is_bounded_and_what_it_forgets_is_stale() -> None:
    auth = Authenticator(USERS, KEY, max_nonces=3)
    issued = [(T0 + n, credentials(auth, T0 + n)) for n in range(4)]
    for now, value in issued:
        assert auth.check(request(register(auth=value)), now).outcome == "ok"
    assert len(auth._counts) == 3
    # The first nonce was forgotten: with its next count it is stale, not valid again.
    nonce = digest.parse_credentials(issued[0][1])["nonce"]
    again = credentials(auth, T0, nc=2, nonce=nonce)
    assert auth.check(request(register(auth=again)), T0 + 5).outcome == "stale"
    # Only right digests are remembered: wrong ones leave the table as it was.
    for n in range(10):
        wrong = credentials(auth, T0 + 5, password=f"guess-{n:04}")
        assert auth.check(request(register(auth=wrong)), T0 + 5).outcome == "wrong"
    assert len(auth._counts) == 3


def test_a_nonce_lasts_its_five_minutes_whatever_the_count() -> None:
    auth = Authenticator(USERS, KEY)
    nonce = auth.nonce(T0)
    ok = credentials(auth, T0, nc=1, nonce=nonce)
    assert auth.check(request(register(auth=ok)), T0 + NONCE_SECONDS).outcome == "ok"
    later = credentials(auth, T0, nc=2, nonce=nonce)
    assert auth.check(request(register(auth=later)), T0 + NONCE_SECONDS + 1).outcome == "stale"
