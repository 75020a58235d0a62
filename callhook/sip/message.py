"""SIP messages: framing, start line, header fields and body (RFC 3261 §7, §18.3, §20).

Sans-IO: :func:`parse` turns one UDP datagram into a :class:`Request` or
:class:`Response`, :func:`serialize` turns one back into bytes. Parsing is deliberately
shallow and fast: it frames the message (start line, header fields with folding undone,
Content-Length) and leaves header *values* as text, parsed on demand by the
:mod:`callhook.sip.grammar` functions re-exported here (``parse_via``, ``parse_uri``,
``parse_name_addr``, ``parse_cseq``) and by the convenience properties. What RFC 4475
says a parser must reject (bad start line, unsupported version, unframeable body) raises
:class:`SipMessageError`; what a UAS answers once the message is framed (missing or
malformed mandatory fields, unknown scheme or method, ``Require``) is
:func:`callhook.sip.checks.check_request`.

Header sections are decoded as UTF-8 (RFC 3261 §7.3.1) with ``surrogateescape``, so
bytes that are not UTF-8 survive unchanged through parse and serialize.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from callhook.sip.grammar import (
    NameAddr,
    SipMessageError,
    SipUri,
    Via,
    is_token,
    parse_cseq,
    parse_name_addr,
    parse_uri,
    parse_via,
    show,
    split_quoted,
    unescape,
)

__all__ = [
    "Headers",
    "NameAddr",
    "Request",
    "Response",
    "SipMessageError",
    "SipUri",
    "Via",
    "parse",
    "parse_cseq",
    "parse_name_addr",
    "parse_uri",
    "parse_via",
    "serialize",
    "unescape",
]

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

# lower-cased name or compact form -> (lookup key, canonical spelling)
_CANON: dict[str, tuple[str, str]] = {n.lower(): (n.lower(), n) for n in _CANONICAL_NAMES}
_CANON.update({c: (n.lower(), n) for c, n in _COMPACT.items()})

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
_SCHEME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-."


def _key_name(name: str) -> tuple[str, str]:
    """(lookup key, canonical spelling) of a header name; unknown names keep theirs."""
    lower = name.lower()
    return _CANON.get(lower) or (lower, name)


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


class _Message:
    """Properties shared by requests and responses, used by the transaction layer."""

    headers: Headers

    @property
    def call_id(self) -> str:
        """The Call-ID; raises :class:`SipMessageError` when missing."""
        value = self.headers.get("Call-ID")
        if not value:
            raise SipMessageError("missing Call-ID")
        return value

    @property
    def cseq(self) -> tuple[int, str]:
        """``(number, method)`` of the CSeq; raises :class:`SipMessageError` when bad."""
        value = self.headers.get("CSeq")
        if value is None:
            raise SipMessageError("missing CSeq")
        return parse_cseq(value)

    @property
    def top_via(self) -> Via:
        """The first Via value; raises :class:`SipMessageError` when missing or bad."""
        value = self.headers.get("Via")
        if value is None:
            raise SipMessageError("missing Via")
        return parse_via(value)

    @property
    def branch(self) -> str | None:
        """The top Via's branch, or None (no Via, unparseable Via, or RFC 2543 peer)."""
        value = self.headers.get("Via")
        return None if value is None else _branch(value)

    @property
    def from_tag(self) -> str | None:
        """The From tag, or None (missing, unparseable, or an RFC 2543 peer)."""
        return _tag(self.headers.get("From"))

    @property
    def to_tag(self) -> str | None:
        """The To tag, or None (missing, unparseable, or not yet in a dialog)."""
        return _tag(self.headers.get("To"))


# A call's messages carry the same From, To and Via values again and again, and the
# transaction and dialog layers ask for their tags and branch several times a message:
# those answers (strings, never changed) are kept for the values seen last.
@lru_cache(maxsize=1024)
def _tag_of(value: str) -> str | None:
    try:
        return parse_name_addr(value).tag
    except SipMessageError:
        return None


def _tag(value: str | None) -> str | None:
    return None if value is None else _tag_of(value)


@lru_cache(maxsize=1024)
def _branch(value: str) -> str | None:
    try:
        return parse_via(value).branch
    except SipMessageError:
        return None


@dataclass(eq=True)
class Request(_Message):
    """A SIP request. ``uri`` is the Request-URI as text (see :meth:`parsed_uri`)."""

    method: str
    uri: str
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""
    version: str = "SIP/2.0"

    @property
    def parsed_uri(self) -> SipUri:
        """The Request-URI parsed; raises :class:`SipMessageError` when bad."""
        return parse_uri(self.uri)


@dataclass(eq=True)
class Response(_Message):
    """A SIP response."""

    status: int
    reason: str
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""
    version: str = "SIP/2.0"


# --- parsing -----------------------------------------------------------------------------


def parse(data: bytes) -> Request | Response:
    """Parse one datagram into a :class:`Request` or :class:`Response`.

    * CRLFs before the start line are ignored (RFC 3261 §7.5); a datagram of nothing
      else (a keep-alive) raises. A datagram that ends after a complete header line
      without the empty line is taken as having no body (UDP frames it; RFC 4475
      §3.1.2.15's message is sent that way).
    * Request line: method token, Request-URI with a scheme and not in ``<>``
      (RFC 4475 §3.1.2.7), no whitespace inside it (§3.1.2.8); runs of SP between the
      elements and after the version are tolerated (§3.1.2.9, §3.1.2.10) and
      :func:`serialize` writes single SPs. A version other than SIP/2.0 raises with
      status 505 (§3.1.2.16). Status line: a 3-digit code 100..699 (§3.1.2.19); the
      reason phrase may be empty (§3.1.1.13) or UTF-8 (§3.1.1.12).
    * Header fields: names are tokens, case-insensitive, compact forms expanded; LWS
      around the colon and folded continuation lines are accepted (RFC 3261 §7.3.1).
    * Body: Content-Length is honoured; extra octets in the datagram are discarded
      (RFC 3261 §18.3, RFC 4475 §3.1.1.8); fewer octets than it announces
      (§3.1.2.2), a negative or non-numeric value (§3.1.2.3) or conflicting values
      (§3.3.9) raise with status 400; without Content-Length the body is the rest of
      the datagram (§18.3, RFC 4475 §3.4.1).

    Header values are not validated here; see :func:`callhook.sip.checks.check_request`.
    """
    data = data.lstrip(b"\r\n")
    if not data:
        raise SipMessageError("empty message")
    end, sep = data.find(b"\r\n\r\n"), 4
    bare = data.find(b"\n\n")
    if bare >= 0 and (end < 0 or bare < end):
        end, sep = bare, 2
    text = (data if end < 0 else data[:end]).decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    start_line = lines[0][:-1] if lines[0].endswith("\r") else lines[0]
    is_request = start_line[:4].upper() != "SIP/"
    headers, problem = _parse_header_lines(lines)
    if end < 0:
        # No empty line. A datagram that ends with a complete header line is framed by
        # UDP all the same (RFC 4475 §3.1.2.15's message is sent so): accept it with
        # an empty body; anything else is truncated.
        if data.endswith(b"\n"):
            end, sep = len(data), 0
        else:
            problem = problem or "no empty line after the header fields"
    if problem is not None:
        raise SipMessageError(problem, headers=headers, is_request=is_request)
    try:
        message = _parse_start_line(start_line, headers, is_request)
        message.body = _body(headers, data[end + sep :])
    except SipMessageError as exc:
        exc.headers, exc.is_request = headers, is_request
        raise
    return message


def _parse_header_lines(lines: list[str]) -> tuple[Headers, str | None]:
    """Header fields from ``lines[1:]``; bad lines are skipped and the first one reported."""
    headers = Headers()
    items = headers._items
    problem: str | None = None
    for raw in lines[1:]:
        line = raw[:-1] if raw.endswith("\r") else raw
        if "\r" in line:
            problem = problem or "bare CR in the header section"
            continue
        if not line:
            continue
        if line[0] in " \t":  # folded continuation of the previous field (§7.3.1)
            if not items:
                problem = problem or "continuation line before the first header field"
                continue
            more = line.strip(" \t")
            if more:
                key, name, value = items[-1]
                items[-1] = (key, name, f"{value} {more}" if value else more)
            continue
        name, colon, value = line.partition(":")
        if not colon:
            problem = problem or f"header line {show(line)} has no colon"
            continue
        name = name.rstrip(" \t")  # HCOLON = *( SP / HTAB ) ":" SWS
        known = _CANON.get(name.lower())
        if known is None:
            if not is_token(name):
                problem = problem or f"bad header field name {show(name)}"
                continue
            known = (name.lower(), name)
        items.append((known[0], known[1], value.strip(" \t")))
    return headers, problem


def _check_version(version: str) -> str:
    """``SIP/2.0`` (case-insensitive, RFC 3261 §7.1) or raise 505 / 400."""
    upper = version.upper()
    if upper == "SIP/2.0":
        return "SIP/2.0"
    number = upper[4:] if upper.startswith("SIP/") else ""
    major, dot, minor = number.partition(".")
    if dot and major and minor and not (major + minor).strip("0123456789"):
        raise SipMessageError(f"SIP version {show(version)} is not supported", 505)
    raise SipMessageError(f"bad SIP version {show(version)}")


def _parse_start_line(line: str, headers: Headers, is_request: bool) -> Request | Response:
    if "\r" in line:
        raise SipMessageError("bare CR in the start line")
    if not is_request:
        version, _, rest = line.partition(" ")
        code, _, reason = rest.lstrip(" ").partition(" ")
        version = _check_version(version)
        if len(code) != 3 or code.strip("0123456789") or not "100" <= code <= "699":
            raise SipMessageError(f"status code {show(code)} is not 100..699")
        return Response(int(code), reason.strip(" \t"), headers, b"", version)
    parts = [p for p in line.replace("\t", " ").split(" ") if p]
    if len(parts) != 3:
        if len(parts) > 3:
            raise SipMessageError("request line has whitespace inside the Request-URI")
        raise SipMessageError("request line is not Method SP Request-URI SP SIP-Version")
    method, uri, version = parts
    if not is_token(method):
        raise SipMessageError(f"method {show(method)} is not a token")
    if uri.startswith("<"):
        raise SipMessageError("Request-URI must not be enclosed in angle brackets")
    scheme, colon, _ = uri.partition(":")
    if not colon or not scheme or not scheme[0].isalpha() or scheme.strip(_SCHEME_CHARS):
        raise SipMessageError(f"Request-URI {show(uri)} has no scheme")
    return Request(method, uri, headers, b"", _check_version(version))


def _body(headers: Headers, rest: bytes) -> bytes:
    """The body framed by Content-Length (UDP rules, RFC 3261 §18.3)."""
    values = [v for k, _, v in headers._items if k == "content-length"]
    if not values:
        return rest
    lengths = set()
    for value in values:
        if not value or value.strip("0123456789") or len(value.lstrip("0")) > 10:
            raise SipMessageError(f"Content-Length {show(value)} is not a non-negative integer")
        lengths.add(int(value))
    if len(lengths) > 1:
        shown = " and ".join(str(n) for n in sorted(lengths))
        raise SipMessageError(f"conflicting Content-Length values {shown}")
    length = lengths.pop()
    if length > len(rest):
        raise SipMessageError(
            f"Content-Length {length} is larger than the body ({len(rest)} bytes)"
        )
    return rest[:length]


# --- serialisation -----------------------------------------------------------------------


def serialize(msg: Request | Response) -> bytes:
    """The message as bytes: CRLF line ends, Content-Length set to the body's length.

    An existing Content-Length keeps its place (duplicates are dropped); otherwise it is
    appended. Raises ``ValueError`` if the start line would contain CR or LF.
    """
    if isinstance(msg, Request):
        first = f"{msg.method} {msg.uri} {msg.version}"
    else:
        first = f"{msg.version} {msg.status:03d} {msg.reason}"
    if "\r" in first or "\n" in first:
        raise ValueError("start line contains CR or LF")
    length = str(len(msg.body))
    lines = [first]
    have_length = False
    for key, name, value in msg.headers._items:
        if key == "content-length":
            if have_length:
                continue
            have_length = True
            value = length
        lines.append(f"{name}: {value}")
    if not have_length:
        lines.append(f"Content-Length: {length}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("utf-8", "surrogateescape") + msg.body
