"""The caller id callhook presents: the From user part a ``call_from`` gives. Pure."""

from __future__ import annotations

import re

from callhook.sip.message import parse_uri


def call_from_user(call_from: str | None) -> str | None:
    """The From user part for ``call_from`` (a number, a ``sip:`` URI, or a name-addr such
    as ``"Alice" <sip:alice@host>``), or None when it has no usable one."""
    if not call_from:
        return None
    text = call_from.strip()
    if "<" in text and ">" in text:
        text = text[text.index("<") + 1 : text.index(">")]
    if text.lower().startswith(("sip:", "sips:")):
        try:
            text = parse_uri(text).user or ""
        except ValueError:
            return None
    return text if _USER.fullmatch(text) else None


#: A SIP user part callhook puts in a From (RFC 3261 §25.1 unreserved and user-unreserved,
#: no escapes): what a caller id can be.
_USER = re.compile(r"[A-Za-z0-9\-_.!~*'()&=+$,;?/]{1,64}")
