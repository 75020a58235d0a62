"""HTTP digest authentication for SIP requests: RFC 3261 §22, RFC 8760 (SHA-256), RFC 2617 (MD5).

When a trunk answers an INVITE with 401 (``WWW-Authenticate``) or 407
(``Proxy-Authenticate``), the UAC sends the request again with
``Authorization`` / ``Proxy-Authorization`` computed from the challenge and
its credentials. RFC 8760 lets a server offer several challenges, one per
algorithm; the strongest one we support wins (SHA-256 before MD5).

The server side (callhook challenging its registered users' phones,
``authentication.py``) uses the same pieces: :func:`challenge` writes a
challenge, :func:`parse_credentials` reads an ``Authorization`` and
:func:`response` computes the digest either side compares.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from callhook.sip.grammar import quote

ALGORITHMS = {"SHA-256": hashlib.sha256, "MD5": hashlib.md5}
PREFERENCE = ["SHA-256", "SHA-256-sess", "MD5", "MD5-sess"]


class DigestError(ValueError):
    """A challenge callhook cannot answer, and why."""


@dataclass(frozen=True)
class Challenge:
    realm: str
    nonce: str
    algorithm: str = "MD5"
    qop: tuple[str, ...] = ()
    opaque: str | None = None
    stale: bool = False


_PARAM = re.compile(r'\s*([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*,?')
# What a challenge must not hold: controls (a header value has no CR or LF, but may
# have others) and the lone surrogates that stand for bytes that are not UTF-8 (the
# SIP parser decodes with surrogateescape). The realm, nonce and opaque go back into
# our Authorization and into the hashes, which are over UTF-8 text (RFC 7616 §3.4.4).
_UNUSABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\ud800-\udfff]")


def _digest_params(value: str, what: str) -> dict[str, str]:
    """The parameters of a ``Digest`` challenge or credentials header value."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "digest":
        raise DigestError(f"unsupported authentication scheme {scheme[:40]!r}")
    bad = _UNUSABLE.search(value)
    if bad is not None:
        kind = "bytes that are not UTF-8" if bad.group() > "\x7f" else "control characters"
        raise DigestError(f"{what} with {kind}")
    params: dict[str, str] = {}
    for name, raw in _PARAM.findall(rest):
        if raw.startswith('"'):
            if len(raw) < 2 or not raw.endswith('"'):
                # The quoted form did not match: an unterminated quoted-string.
                raise DigestError(f"{what} parameter {name[:40]!r} has an unclosed quote")
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        params[name.lower()] = raw
    return params


def parse_challenge(value: str) -> Challenge:
    """Parse one ``WWW-Authenticate`` / ``Proxy-Authenticate`` header value."""
    params = _digest_params(value, "challenge")
    if "realm" not in params or "nonce" not in params:
        raise DigestError("challenge without realm or nonce")
    algorithm = params.get("algorithm", "MD5")
    if algorithm.upper().removesuffix("-SESS") not in ("MD5", "SHA-256"):
        raise DigestError(f"unsupported digest algorithm {algorithm!r}")
    qop = tuple(q.strip() for q in params.get("qop", "").split(",") if q.strip())
    if qop and "auth" not in qop:
        raise DigestError(f"unsupported qop {params['qop']!r} (only auth)")
    return Challenge(
        realm=params["realm"],
        nonce=params["nonce"],
        algorithm=algorithm,
        qop=qop,
        opaque=params.get("opaque"),
        stale=params.get("stale", "").lower() == "true",
    )


def best_challenge(values: list[str]) -> Challenge:
    """The strongest challenge we can answer among several (RFC 8760 §2.4)."""
    usable = []
    for value in values:
        try:
            usable.append(parse_challenge(value))
        except DigestError:
            continue
    if not usable:
        raise DigestError("no digest challenge callhook can answer: " + "; ".join(values))

    def rank(c: Challenge) -> int:
        upper = [p.upper() for p in PREFERENCE]
        return upper.index(c.algorithm.upper()) if c.algorithm.upper() in upper else 99

    return min(usable, key=rank)


def authorization(
    challenge: Challenge,
    method: str,
    uri: str,
    username: str,
    password: str,
    *,
    nonce_count: int = 1,
    cnonce: str | None = None,
    body: bytes = b"",
) -> str:
    """The ``Authorization`` header value answering ``challenge`` (RFC 7616 §3.4.1)."""
    cnonce = cnonce or secrets.token_hex(8)
    nc = f"{nonce_count:08x}"
    value = response(
        challenge.algorithm,
        username,
        challenge.realm,
        password,
        method,
        uri,
        challenge.nonce,
        qop="auth" if challenge.qop else None,
        nc=nc,
        cnonce=cnonce,
    )
    # quote(): a realm, nonce or opaque may hold quotes or backslashes (they came as
    # quoted-pairs); sent as they are they would end the quoted-string early.
    parts = [
        f"username={quote(username)}",
        f"realm={quote(challenge.realm)}",
        f"nonce={quote(challenge.nonce)}",
        f"uri={quote(uri)}",
        f'response="{value}"',
        f"algorithm={challenge.algorithm}",
    ]
    if challenge.qop:
        parts += ["qop=auth", f"nc={nc}", f"cnonce={quote(cnonce)}"]
    if challenge.opaque is not None:
        parts.append(f"opaque={quote(challenge.opaque)}")
    return "Digest " + ", ".join(parts)


def response(
    algorithm: str,
    username: str,
    realm: str,
    password: str,
    method: str,
    uri: str,
    nonce: str,
    *,
    qop: str | None,
    nc: str = "",
    cnonce: str = "",
) -> str:
    """The ``response`` digest (RFC 7616 §3.4.1; RFC 2069's form when ``qop`` is None)."""
    h = ALGORITHMS[algorithm.upper().removesuffix("-SESS")]

    def digest(text: str) -> str:
        return h(text.encode("utf-8", "surrogateescape")).hexdigest()

    ha1 = digest(f"{username}:{realm}:{password}")
    if algorithm.upper().endswith("-SESS"):
        ha1 = digest(f"{ha1}:{nonce}:{cnonce}")
    ha2 = digest(f"{method}:{uri}")
    if qop:
        return digest(f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}")
    return digest(f"{ha1}:{nonce}:{ha2}")


def challenge(realm: str, nonce: str, algorithm: str, *, stale: bool = False) -> str:
    """A ``WWW-Authenticate`` value: a ``qop=auth`` challenge with ``algorithm`` (RFC 8760)."""
    value = f"Digest realm={quote(realm)}, nonce={quote(nonce)}, algorithm={algorithm}"
    value += ', qop="auth"'
    return value + (", stale=true" if stale else "")


def parse_credentials(value: str) -> dict[str, str]:
    """The parameters of an ``Authorization`` / ``Proxy-Authorization`` value (names
    lower-cased); DigestError when it is not a usable digest answer."""
    params = _digest_params(value, "credentials")
    missing = [k for k in ("username", "realm", "nonce", "uri", "response") if k not in params]
    if missing:
        raise DigestError(f"credentials without {', '.join(missing)}")
    return params
