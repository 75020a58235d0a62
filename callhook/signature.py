"""Signing the requests callhook makes to applications, and verifying them.

Every page request carries ``Callhook-Signature: t=<unix seconds>,v1=<hex>``
where the hex is HMAC-SHA256, keyed by the application's secret, of
``"<t>." + raw body`` (for a GET page: of ``"<t>." + the instance_info JSON``).
An application recomputes it and rejects requests whose signature does not
match or whose ``t`` is too old (a replayed request)::

    from callhook.signature import verify
    if not verify(SECRET, request_body, request.headers["Callhook-Signature"]):
        return 403

The scheme is Stripe's webhook signature, so existing helpers port easily.
"""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "Callhook-Signature"
#: How old (or how far in the future) a signature may be, in seconds.
TOLERANCE = 300


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def _digest(secret: str | bytes, timestamp: int, body: bytes) -> str:
    return hmac.new(_key(secret), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, body: bytes, timestamp: int | None = None) -> str:
    """The ``Callhook-Signature`` header value for ``body``."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={_digest(secret, t, body)}"


def verify(
    secret: str | bytes,
    body: bytes,
    header: str | None,
    *,
    now: float | None = None,
    tolerance: float = TOLERANCE,
) -> bool:
    """Whether ``header`` is a valid, fresh signature of ``body`` under ``secret``."""
    if not header:
        return False
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        fields.setdefault(name, []).append(value)
    try:
        t = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - t) > tolerance:
        return False
    expected = _digest(secret, t, body).encode()
    # Compared as bytes: compare_digest refuses a str with a non-ASCII character (a forged
    # header's), which must be an invalid signature, not an error; "surrogatepass" encodes
    # any str, a lone surrogate included.
    return any(
        hmac.compare_digest(expected, v.encode("utf-8", "surrogatepass"))
        for v in fields.get("v1", [])
    )
