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

from dataclasses import dataclass, field
from functools import lru_cache

from callhook.sip.grammar import (
    NameAddr,
    SipUri,
    Via,
    parse_cseq,
    parse_name_addr,
    parse_uri,
    parse_via,
    show,
    unescape,
)
from callhook.sip.headers import CANON, Headers, SipMessageError, is_token

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

_SCHEME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-."


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
        known = CANON.get(name.lower())
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
