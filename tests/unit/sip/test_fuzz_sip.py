"""Bad input, fuzzed: SIP stream framing and digest challenges (issue 14, item 5).

The SIP message parser itself is fuzzed in test_sip_message.py (arbitrary bytes,
mutated RFC 4475 torture messages, round trip) and the whole agent in
test_sip_agent.py; this file adds the framing of TCP/TLS streams and the digest
challenges a trunk sends. The properties are the checks of ``bench/fuzz.py``
(``python -m bench.fuzz --target framing``, ``digest``, ``sip``, ``agent`` for
the long campaign); the inputs each crash of that campaign left are kept in
``tests/data/fuzz/<target>/`` and run here as regression tests.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import TARGETS, check_of, strategy
from callhook.sip.digest import DigestError, authorization, parse_challenge
from callhook.sip.message import parse

# Deterministic (derandomize, no example database) and bounded: part of every run.
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

framing = check_of("framing")
digest = check_of("digest")


@FUZZ
@given(strategy(TARGETS["framing"], max_size=3000))
def test_fuzz_stream_framing(data: bytes) -> None:
    framing(data)


@FUZZ
@given(strategy(TARGETS["digest"], max_size=300))
def test_fuzz_digest_challenges(data: bytes) -> None:
    digest(data)


_VALUE = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12)


@FUZZ
@given(_VALUE, _VALUE, st.sampled_from(["MD5", "SHA-256", "md5-sess", "SHA-256-sess"]))
def test_any_realm_and_nonce_are_answered_in_a_header_that_parses(
    realm: str, nonce: str, algorithm: str
) -> None:
    """Whatever a (quoted) realm and nonce hold, our Authorization quotes them back
    so that they parse out again."""
    escaped = [v.replace("\\", "\\\\").replace('"', '\\"') for v in (realm, nonce)]
    text = f'Digest realm="{escaped[0]}", nonce="{escaped[1]}", algorithm={algorithm}'
    try:
        challenge = parse_challenge(text)
    except DigestError:
        assert any((c < " " and c != "\t") or c == "\x7f" for c in realm + nonce)
        return
    assert (challenge.realm, challenge.nonce) == (realm, nonce)
    digest(text.encode())


def test_a_challenge_that_is_not_utf8_is_refused_not_a_crash() -> None:
    # The SIP parser decodes header values with surrogateescape; hashing such a nonce
    # raised UnicodeEncodeError while building every REGISTER, so the trunk's
    # registration was stuck. Found by bench/fuzz.py --target digest.
    message = parse(
        b"SIP/2.0 401 Unauthorized\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n"
        b'WWW-Authenticate: Digest realm="b", nonce="\xff\xfe"\r\n\r\n'
    )
    value = message.headers.get("WWW-Authenticate")
    assert value is not None
    with pytest.raises(DigestError, match="not UTF-8"):
        parse_challenge(value)


def test_an_unclosed_quote_is_refused() -> None:
    # It was read as the nonce 'ab' (the quote and the last character cut off).
    with pytest.raises(DigestError, match="unclosed quote"):
        parse_challenge('Digest realm="b", nonce="abc')


def test_quotes_in_a_realm_are_sent_back_escaped() -> None:
    # They were sent bare, ending the quoted-string early: realm="a "b" \ c".
    challenge = parse_challenge(r'Digest realm="a \"b\" \\ c", nonce="n"')
    assert challenge.realm == r'a "b" \ c'
    value = authorization(challenge, "REGISTER", "sip:h", "u", "p", cnonce="c")
    assert r'realm="a \"b\" \\ c"' in value
