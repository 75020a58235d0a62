"""Checking that a page request came from callhook (``Callhook-Signature``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from callhook.signature import HEADER, verify


class Headers(Protocol):
    """Request headers as any framework has them: a dict, aiohttp's, Flask's, Starlette's."""

    def items(self) -> Iterable[tuple[str, str]]: ...


def verify_signature(
    headers: Headers,
    body: bytes | str,
    secret: str | bytes,
    max_age: float = 300,
    *,
    now: float | None = None,
) -> bool:
    """Whether a request is callhook's: its ``Callhook-Signature`` header (looked up
    whatever its case) is the HMAC-SHA256 of ``body`` under the application's ``secret``,
    made at most ``max_age`` seconds ago (an older one is a replay).

    ``body`` is the raw body of a POST page, as received (before any JSON parsing), or
    the ``instance_info`` query parameter of a GET page. ``now`` (Unix seconds) is for
    tests; it defaults to the clock."""
    header = next((v for k, v in headers.items() if k.lower() == HEADER.lower()), None)
    try:  # (a query parameter of bytes past UTF-8 comes as lone surrogates)
        raw = body.encode("utf-8", "surrogateescape") if isinstance(body, str) else body
    except UnicodeEncodeError:
        return False  # (a lone surrogate no byte gave: nothing callhook signed)
    return verify(secret, raw, header, now=now, tolerance=max_age)
