"""A SIP message's header fields (RFC 3261 §7.3, §20), the lexical rules they share with
the header values' grammar, and the error a message that cannot be read raises.

:class:`Headers` is the ordered, case-insensitive multi-map of a message's header fields:
names in their canonical spelling (compact forms expanded, §7.3.3), list-valued fields
split on demand (§7.3.1). :func:`is_token` and :func:`split_quoted` are the rules of
§25.1 and §7.3.1 that both the fields and their values (:mod:`callhook.sip.grammar`)
use. :class:`SipMessageError` is raised by both, and carries the fields that could be
read so that a UAS can answer a malformed request (§8.2.6.2). Sans-IO.
:mod:`callhook.sip.message` re-exports :class:`Headers` and :class:`SipMessageError`,
:mod:`callhook.sip.grammar` the error.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Headers", "SipMessageError", "is_token", "split_quoted"]

# RFC 3261 §25.1: token = 1*(alphanum / "-" / "." / "!" / "%" / "*" / "_" / "+" / "`" / "'" / "~")
TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.!%*_+`'~"


class SipMessageError(ValueError):
    """A SIP message, or one of its header values, that is not well formed.

    ``reason`` says what is wrong in words fit for a log line and for a Reason-Phrase
    (no quotes or control characters). ``status`` is the final response a UAS answers
    with (400 unless RFC 3261 / RFC 4475 name another, e.g. 505 for an unsupported
    SIP version). When :func:`~callhook.sip.message.parse` rejects a whole message,
    ``is_request`` tells whether it looked like a request (only requests are
    answered; a bad response is dropped, RFC 4475 §3.1.2.19) and ``headers`` holds
    the header fields that could be read, so that the response can copy Via, From,
    To, Call-ID and CSeq (RFC 3261 §8.2.6.2).
    """

    def __init__(
        self,
        reason: str,
        status: int = 400,
        *,
        headers: Headers | None = None,
        is_request: bool = False,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.headers = headers
        self.is_request = is_request


def is_token(text: str) -> bool:
    """Whether ``text`` is a non-empty RFC 3261 ``token``."""
    return bool(text) and not text.strip(TOKEN_CHARS)


def split_quoted(text: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` outside quoted strings and ``<...>`` (RFC 3261 §7.3.1)."""
    if '"' not in text and "<" not in text:
        return text.split(sep)
    parts: list[str] = []
    start = 0
    quoted = False
    angle = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1  # quoted-pair: the next character is literal
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "<":
            angle += 1
        elif c == ">" and angle:
            angle -= 1
        elif c == sep and not angle:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


_CANONICAL_NAMES = (
    "Accept Accept-Contact Accept-Encoding Accept-Language Accept-Resource-Priority Alert-Info "
    "Allow Allow-Events Authentication-Info Authorization Call-ID Call-Info Contact "
    "Content-Disposition Content-Encoding Content-Language Content-Length Content-Type CSeq "
    "Date Error-Info Event Expires Flow-Timer From Geolocation History-Info Identity "
    "Identity-Info In-Reply-To Join Max-Breadth Max-Forwards MIME-Version Min-Expires Min-SE "
    "Organization P-Asserted-Identity P-Preferred-Identity Path Priority Privacy "
    "Proxy-Authenticate Proxy-Authorization Proxy-Require RAck Reason Record-Route Refer-Sub "
    "Refer-To Referred-By Reject-Contact Replaces Reply-To Request-Disposition Require "
    "Resource-Priority Retry-After Route RSeq Security-Client Security-Server Security-Verify "
    "Server Service-Route Session-Expires SIP-ETag SIP-If-Match Subject Subscription-State "
    "Supported Target-Dialog Timestamp To Unsupported User-Agent Via Warning WWW-Authenticate"
).split()

# Compact forms: RFC 3261 §7.3.3 (i m e l c f s k t v), RFC 6665 (o u), RFC 3515 (r),
# RFC 3892 (b), RFC 4028 (x), RFC 3841 (a j d), RFC 4474 (y n).
_COMPACT = {
    "i": "Call-ID",
    "m": "Contact",
    "e": "Content-Encoding",
    "l": "Content-Length",
    "c": "Content-Type",
    "f": "From",
    "s": "Subject",
    "k": "Supported",
    "t": "To",
    "v": "Via",
    "o": "Event",
    "u": "Allow-Events",
    "r": "Refer-To",
    "b": "Referred-By",
    "x": "Session-Expires",
    "a": "Accept-Contact",
    "j": "Reject-Contact",
    "d": "Request-Disposition",
    "y": "Identity",
    "n": "Identity-Info",
}

#: Lower-cased name or compact form -> (lookup key, canonical spelling): the parser
#: (:func:`callhook.sip.message.parse`) looks each field's name up here.
CANON: dict[str, tuple[str, str]] = {n.lower(): (n.lower(), n) for n in _CANONICAL_NAMES}
CANON.update({c: (n.lower(), n) for c, n in _COMPACT.items()})

# Header fields whose grammar is a comma-separated list (RFC 3261 §7.3.1, §20 and the
# extensions above). Authorization-style fields and Date also contain commas but are not
# lists, so they are never split.
_LIST_KEYS = frozenset(
    n.lower()
    for n in (
        "Accept Accept-Contact Accept-Encoding Accept-Language Accept-Resource-Priority "
        "Alert-Info Allow Allow-Events Call-Info Contact Content-Encoding Content-Language "
        "Error-Info History-Info In-Reply-To P-Asserted-Identity P-Preferred-Identity Path "
        "Proxy-Require Reason Record-Route Reject-Contact Request-Disposition Require "
        "Resource-Priority Route Security-Client Security-Server Security-Verify "
        "Service-Route Supported Unsupported Via Warning"
    ).split()
)


def _key_name(name: str) -> tuple[str, str]:
    """(lookup key, canonical spelling) of a header name; unknown names keep theirs."""
    lower = name.lower()
    return CANON.get(lower) or (lower, name)


def _split_list(value: str) -> list[str]:
    """Elements of a list-valued field; empty elements are dropped (RFC 7230 §7 style)."""
    if value.strip() == "*":
        return ["*"]  # Contact: * (RFC 3261 §20.10)
    return [part for part in (p.strip(" \t") for p in split_quoted(value, ",")) if part]


class Headers:
    """Ordered, case-insensitive multi-map of header fields.

    Names are stored in canonical spelling (compact forms expanded, known names in their
    RFC spelling, unknown names as received); values are stored as received, with line
    folding replaced by a single space (RFC 3261 §7.3.1). ``get_all`` splits fields whose
    grammar is a comma-separated list, respecting quoted strings and ``<...>``.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str, str]] = []  # (key, canonical name, value)
        for name, value in items:
            self.add(name, value)

    @staticmethod
    def canonical(name: str) -> str:
        """The canonical spelling of ``name`` (``v`` → ``Via``, ``call-id`` → ``Call-ID``)."""
        return _key_name(name)[1]

    @staticmethod
    def _checked(name: str, value: str) -> tuple[str, str]:
        key, canonical = _key_name(name)
        if not is_token(canonical):
            raise ValueError(f"bad header name {name!r}")
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {canonical} value contains CR or LF")  # injection
        return key, canonical

    def get(self, name: str) -> str | None:
        """The first value of ``name`` (for list fields: the first list element), or None."""
        key = _key_name(name)[0]
        if key not in _LIST_KEYS:
            for k, _, value in self._items:
                if k == key:
                    return value
            return None
        found = False  # a list field: the first element, as get_all(name)[0]
        for k, _, value in self._items:
            if k == key:
                if value and "," not in value:
                    return value.strip(" \t")
                elements = _split_list(value)
                if elements:
                    return elements[0]
                found = True
        return "" if found else None

    def get_all(self, name: str) -> list[str]:
        """Every value of ``name`` in order, list fields split into their elements."""
        key = _key_name(name)[0]
        values = [value for k, _, value in self._items if k == key]
        if key not in _LIST_KEYS:
            return values
        out: list[str] = []
        for value in values:
            out.extend(_split_list(value))
        return out

    def count(self, name: str) -> int:
        """How many header field lines named ``name`` there are (lists not split)."""
        key = _key_name(name)[0]
        return sum(1 for k, _, _ in self._items if k == key)

    def set(self, name: str, value: str) -> None:
        """Replace every ``name`` field by one with ``value``, where the first one was."""
        key, canonical = self._checked(name, value)
        for i, (k, _, _) in enumerate(self._items):
            if k == key:
                self._items[i] = (key, canonical, value)
                self._items[i + 1 :] = [t for t in self._items[i + 1 :] if t[0] != key]
                return
        self._items.append((key, canonical, value))

    def add(self, name: str, value: str) -> None:
        """Append a ``name`` field (after any existing ones)."""
        key, canonical = self._checked(name, value)
        self._items.append((key, canonical, value))

    def remove(self, name: str) -> None:
        """Remove every ``name`` field."""
        key = _key_name(name)[0]
        self._items = [t for t in self._items if t[0] != key]

    def items(self) -> list[tuple[str, str]]:
        """``(canonical name, value)`` of every field line, in order."""
        return [(name, value) for _, name, value in self._items]

    def copy(self) -> Headers:
        """An independent copy."""
        new = Headers()
        new._items = list(self._items)
        return new

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        key = _key_name(name)[0]
        return any(k == key for k, _, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Headers):
            return NotImplemented
        return [(k, v) for k, _, v in self._items] == [(k, v) for k, _, v in other._items]

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Headers({self.items()!r})"
