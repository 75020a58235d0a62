"""HTTP digest for SIP (callhook/sip/digest.py): RFC 7616 vectors, RFC 8760 choice, parse errors."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import pytest

from callhook.sip.digest import (
    Challenge,
    DigestError,
    authorization,
    best_challenge,
    parse_challenge,
)

# RFC 7616 §3.9.1: "Mufasa" / "Circle of Life" against http-auth@example.org.
RFC7616 = {
    "realm": "http-auth@example.org",
    "nonce": "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
    "opaque": "FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS",
    "cnonce": "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ",
    "uri": "/dir/index.html",
}
RFC7616_MD5_RESPONSE = "8ca523f5e9506fed4657c9700eebdbec"
RFC7616_SHA256_RESPONSE = "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"


def fields(header: str) -> dict[str, str]:
    """The auth-params of an Authorization value, quotes removed."""
    assert header.startswith("Digest ")
    out = {}
    for name, quoted, bare in re.findall(r'([a-zA-Z-]+)=(?:"([^"]*)"|([^,\s]+))', header[7:]):
        out[name] = quoted or bare
    return out


def rfc7616_challenge(algorithm: str) -> str:
    return (
        f'Digest realm="{RFC7616["realm"]}", qop="auth, auth-int", algorithm={algorithm}, '
        f'nonce="{RFC7616["nonce"]}", opaque="{RFC7616["opaque"]}"'
    )


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [("MD5", RFC7616_MD5_RESPONSE), ("SHA-256", RFC7616_SHA256_RESPONSE)],
)
def test_rfc7616_example_vectors(algorithm: str, expected: str) -> None:
    challenge = parse_challenge(rfc7616_challenge(algorithm))
    assert challenge.realm == RFC7616["realm"]
    assert challenge.nonce == RFC7616["nonce"]
    assert challenge.opaque == RFC7616["opaque"]
    assert challenge.algorithm == algorithm
    assert challenge.qop == ("auth", "auth-int")
    value = authorization(
        challenge, "GET", RFC7616["uri"], "Mufasa", "Circle of Life", cnonce=RFC7616["cnonce"]
    )
    got = fields(value)
    assert got["response"] == expected
    assert got["username"] == "Mufasa"
    assert got["realm"] == RFC7616["realm"]
    assert got["nonce"] == RFC7616["nonce"]
    assert got["uri"] == RFC7616["uri"]
    assert got["qop"] == "auth"
    assert got["nc"] == "00000001"
    assert got["cnonce"] == RFC7616["cnonce"]
    assert got["opaque"] == RFC7616["opaque"]
    assert got["algorithm"] == algorithm
    # qop and nc are tokens, never quoted (RFC 7616 §3.4).
    assert "qop=auth" in value
    assert "nc=00000001" in value


def test_rfc2617_example_vector() -> None:
    # RFC 2617 §3.5 (MD5, qop=auth).
    challenge = parse_challenge(
        'Digest realm="testrealm@host.com", qop="auth,auth-int", '
        'nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"'
    )
    assert challenge.algorithm == "MD5"  # the default
    value = authorization(
        challenge, "GET", "/dir/index.html", "Mufasa", "Circle Of Life", cnonce="0a4f113b"
    )
    assert fields(value)["response"] == "6629fae49393a05397450978507c4ef1"


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_md5_without_qop_is_rfc2069_style() -> None:
    challenge = parse_challenge('Digest realm="sip.example.com", nonce="abc123"')
    assert challenge.qop == ()
    value = authorization(challenge, "INVITE", "sip:bob@example.com", "alice", "s3cret")
    got = fields(value)
    ha1 = md5("alice:sip.example.com:s3cret")
    ha2 = md5("INVITE:sip:bob@example.com")
    assert got["response"] == md5(f"{ha1}:abc123:{ha2}")
    # Without qop there is no qop, nc or cnonce (RFC 2617 §3.2.2).
    assert "qop" not in got
    assert "nc" not in got
    assert "cnonce" not in got
    assert "opaque" not in got


@pytest.mark.parametrize(
    ("algorithm", "h"),
    [("MD5-sess", md5), ("SHA-256-sess", sha256)],
)
def test_sess_variants(algorithm: str, h: Callable[[str], str]) -> None:
    challenge = parse_challenge(
        f'Digest realm="r.example", nonce="n0nce", qop="auth", algorithm={algorithm}'
    )
    value = authorization(
        challenge, "INVITE", "sip:x@r.example", "user", "pw", cnonce="c1", nonce_count=3
    )
    got = fields(value)
    # RFC 7616 §3.4.2: A1 for -sess = H(user:realm:pw):nonce:cnonce.
    ha1 = h(f"{h('user:r.example:pw')}:n0nce:c1")
    ha2 = h("INVITE:sip:x@r.example")
    assert got["response"] == h(f"{ha1}:n0nce:00000003:c1:auth:{ha2}")
    assert got["nc"] == "00000003"
    assert got["algorithm"] == algorithm


def test_random_cnonce_is_used_consistently() -> None:
    challenge = parse_challenge('Digest realm="r", nonce="n", qop=auth, algorithm=SHA-256')
    one = fields(authorization(challenge, "INVITE", "sip:a@b", "u", "p"))
    two = fields(authorization(challenge, "INVITE", "sip:a@b", "u", "p"))
    assert one["cnonce"] != two["cnonce"]
    for got in (one, two):
        ha1 = sha256("u:r:p")
        ha2 = sha256("INVITE:sip:a@b")
        assert got["response"] == sha256(f"{ha1}:n:00000001:{got['cnonce']}:auth:{ha2}")


def test_parse_quoted_values_with_commas_and_escapes() -> None:
    challenge = parse_challenge(
        'Digest realm="a, \\"quoted\\" realm", nonce="x,y", stale=TRUE, opaque="o"'
    )
    assert challenge.realm == 'a, "quoted" realm'
    assert challenge.nonce == "x,y"
    assert challenge.stale is True
    assert challenge.opaque == "o"


def test_parse_is_case_insensitive_for_scheme_and_names() -> None:
    challenge = parse_challenge('digest REALM="r", Nonce="n", Algorithm=sha-256')
    assert challenge == Challenge(realm="r", nonce="n", algorithm="sha-256")


@pytest.mark.parametrize(
    "value",
    [
        'Digest nonce="n"',  # no realm
        'Digest realm="r"',  # no nonce
        'Digest realm="r", nonce="n", algorithm=SHA-512-256',  # unknown to us
        'Digest realm="r", nonce="n", algorithm=FOO',
        'Digest realm="r", nonce="n", qop="auth-int"',  # only auth-int
        'Basic realm="r"',
        "",
    ],
)
def test_parse_errors(value: str) -> None:
    with pytest.raises(DigestError):
        parse_challenge(value)


@pytest.mark.parametrize("sha_first", [True, False])
def test_rfc8760_sha256_preferred_over_md5(sha_first: bool) -> None:
    sha = 'Digest realm="r", nonce="n1", algorithm=SHA-256, qop="auth"'
    md = 'Digest realm="r", nonce="n2", algorithm=MD5, qop="auth"'
    values = [sha, md] if sha_first else [md, sha]
    best = best_challenge(values)
    assert best.algorithm == "SHA-256"
    assert best.nonce == "n1"


def test_best_challenge_skips_unusable_and_fails_when_none_usable() -> None:
    usable = 'Digest realm="r", nonce="n3"'
    assert best_challenge(['Basic realm="x"', usable]).nonce == "n3"
    with pytest.raises(DigestError):
        best_challenge(['Basic realm="x"', 'Digest realm="r", nonce="n", qop="auth-int"'])
    with pytest.raises(DigestError):
        best_challenge([])
