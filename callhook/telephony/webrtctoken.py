"""The tokens a web client signs in with to receive calls (``webrtc:`` destinations). Pure.

Aculab's web service ``webrtc_generate_token`` gives a back end a time-limited token
for one client id, which the back end hands to its web page; the page registers with
it. callhook's tokens are JSON Web Tokens (RFC 7519) signed with HMAC-SHA256 (RFC 7518
§3.2) under a key derived from the issuing application's API key, so every worker and
node checks them with no shared state, and changing the key revokes them. The claims:
``sub`` the client id, ``aud`` the application, ``iat``/``nbf``/``exp``,
``scope`` ``["webrtcclient"]`` (Aculab's example token carries the same), ``incoming``
(``enable_incoming``) and ``call_client`` (kept; callhook's web clients do not call each
other).
"""

from __future__ import annotations

from dataclasses import dataclass

import jwt

#: ``ttl``'s bounds and default, in seconds (Aculab's WebRTC Clients page).
TTL_MIN, TTL_MAX, TTL_DEFAULT = 600, 86400, 3600
SCOPE = "webrtcclient"
#: Seconds a token may come before its ``nbf`` (another node's clock a little ahead).
LEEWAY = 60
ALGORITHM = "HS256"


class BadToken(ValueError):
    """The token does not let this client sign in (the message says why)."""


@dataclass(frozen=True)
class Grant:
    """What a valid token allows."""

    app: str
    client_id: str
    incoming: bool
    expires: float


def mint(
    key: bytes,
    app: str,
    client_id: str,
    now: float,
    ttl: int = TTL_DEFAULT,
    *,
    incoming: bool = True,
    call_client: tuple[str, ...] = (),
) -> str:
    """A token for ``client_id`` of ``app``, valid from ``now`` for ``ttl`` seconds."""
    if not TTL_MIN <= ttl <= TTL_MAX:
        raise ValueError(f"ttl must be between {TTL_MIN} and {TTL_MAX} seconds")
    issued = int(now)
    claims = {
        "sub": client_id,
        "aud": app,
        "iat": issued,
        "nbf": issued,
        "exp": issued + ttl,
        "scope": [SCOPE],
        "incoming": incoming,
        "call_client": list(call_client),
    }
    return jwt.encode(claims, key, algorithm=ALGORITHM)


def audience(token: str) -> str:
    """The application a token says it is of (unverified: to find the key to check it)."""
    try:
        aud = jwt.decode(token, options={"verify_signature": False}).get("aud")
    except jwt.InvalidTokenError as exc:
        raise BadToken(f"the token is malformed: {exc}") from None
    if not isinstance(aud, str) or not aud:
        raise BadToken("the token names no application")
    return aud


def check(token: str, key: bytes, app: str, now: float) -> Grant:
    """The grant of ``token`` for ``app`` at ``now``; :class:`BadToken` if it gives none
    (wrong signature, another application, expired, not yet valid, not a client's)."""
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[ALGORITHM],
            audience=app,
            options={
                "require": ["sub", "exp", "nbf"],
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
            },
        )
    except jwt.InvalidTokenError as exc:
        raise BadToken(f"the token is not valid: {exc}") from None
    # Times checked against the clock given, not the system's (tests run a virtual one).
    if not isinstance(claims["exp"], int | float) or now >= claims["exp"]:
        raise BadToken("the token has expired")
    if not isinstance(claims["nbf"], int | float) or now + LEEWAY < claims["nbf"]:
        raise BadToken("the token is not valid yet")
    scope = claims.get("scope")
    if not isinstance(scope, list) or SCOPE not in scope:
        raise BadToken("the token is not a web client's")
    if not isinstance(claims["sub"], str):
        raise BadToken("the token names no client id")
    return Grant(app, claims["sub"], claims.get("incoming") is True, float(claims["exp"]))
