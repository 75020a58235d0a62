"""Parsed SIP header values: URIs, name-addr, Via, CSeq (RFC 3261 §19.1, §20, §25.1).

Sans-IO and allocation-light: each value is parsed on demand with ``str`` methods, not
regular expressions. Every error is a :class:`~callhook.sip.headers.SipMessageError`
whose ``reason`` names what is wrong. :mod:`callhook.sip.message` re-exports everything public here.

Representation choices (all round-trip through ``str()``):

* URI user parts, passwords, parameters and headers keep their ``%HH`` escapes exactly as
  received (RFC 4475 §3.1.1.3/§3.1.1.4: unescaping is the application's job and must
  never shorten a user part at an escaped NUL); :func:`unescape` decodes them once.
* Parameter names are lower-cased (they are case-insensitive, RFC 3261 §7.3.1, §19.1.4);
  parameter values are kept verbatim, quotes included for quoted strings.
* IPv6 references keep their brackets in ``host`` (``"[::1]"``).
* A display name is stored decoded (quoted-pairs resolved) and re-quoted by ``str()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from callhook.sip.headers import SipMessageError, is_token, split_quoted

__all__ = [
    "NameAddr",
    "SipMessageError",
    "SipUri",
    "Via",
    "parse_cseq",
    "parse_name_addr",
    "parse_uri",
    "parse_via",
    "unescape",
]

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_DIGITS = "0123456789"
_HOST_CHARS = _ALNUM + "-._"  # hostname / IPv4address ("_" tolerated: seen in the wild)
_IPV6_CHARS = "0123456789abcdefABCDEF:."
_SCHEME_CHARS = _ALNUM + "+-."  # RFC 3986 §3.1
_WHITESPACE = " \t"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_CSEQ = 2**31 - 1  # RFC 3261 §8.1.1.5: the sequence number MUST be less than 2**31


_UNSAFE = frozenset('"#<>[]\\^`{|}\x7f')


def show(text: str, limit: int = 40) -> str:
    """``text`` clipped, with what a Reason-Phrase may not hold (RFC 3261 §25.1) as ``?``."""
    clipped = text if len(text) <= limit else text[:limit] + "..."
    return "".join(
        # (The surrogates by chr: mypyc compiles no surrogate in a string literal.)
        "?" if (c < " " or c in _UNSAFE or chr(0xD800) <= c <= chr(0xDFFF)) else c
        for c in clipped
    )


def unescape(text: str) -> str:
    """Decode ``%HH`` escapes once (never recursively: RFC 4475 §3.1.1.3), keeping NULs."""
    return unquote(text, errors="surrogateescape") if "%" in text else text


def _quoted_end(text: str, start: int) -> int:
    """Index of the quote closing the quoted-string opened at ``text[start]``."""
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i
        i += 1
    raise SipMessageError(f"unterminated quoted string in {show(text)}")


def _unquote_pairs(text: str) -> str:
    """Resolve the quoted-pairs of a quoted-string's contents (RFC 3261 §25.1)."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            i += 1
            c = text[i]
        out.append(c)
        i += 1
    return "".join(out)


def quote(text: str) -> str:
    """``text`` as a quoted-string: quotes, backslashes and controls become quoted-pairs."""
    out = ['"']
    for c in text:
        if c in "\r\n":
            out.append(" ")  # not representable, even as a quoted-pair
        elif c in '"\\' or (c < " " and c != "\t") or c == "\x7f":
            out.append("\\" + c)
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def parse_params(parts: list[str], what: str) -> dict[str, str | None]:
    """``;name[=value]`` parameters (already split at ``;``), names lower-cased.

    ``SEMI`` and ``EQUAL`` allow whitespace around them (RFC 3261 §25.1); an empty
    parameter (``;;``) or an empty value is a syntax error (RFC 4475 §3.1.2.1).
    """
    params: dict[str, str | None] = {}
    for part in parts:
        name, eq, value = part.partition("=")
        name = name.strip(_WHITESPACE)
        if not name:
            raise SipMessageError(f"{what} has an empty parameter")
        if not is_token(name):
            raise SipMessageError(f"{what} has a bad parameter name {show(name)}")
        if not eq:
            params[name.lower()] = None
            continue
        value = value.strip(_WHITESPACE)
        if not value:
            raise SipMessageError(f"{what} parameter {show(name)} has an empty value")
        if value[0] == '"':
            if _quoted_end(value, 0) != len(value) - 1:
                raise SipMessageError(f"{what} parameter {show(name)} has a bad quoted value")
        elif " " in value or "\t" in value:
            raise SipMessageError(f"{what} parameter {show(name)} has whitespace in its value")
        params[name.lower()] = value
    return params


def format_params(params: dict[str, str | None]) -> str:
    """``;name=value`` text for ``params`` (values verbatim)."""
    return "".join(f";{k}" if v is None else f";{k}={v}" for k, v in params.items())


# --- URIs (RFC 3261 §19.1, §25.1; RFC 3966 for tel) ----------------------------------


@dataclass
class SipUri:
    """A URI: SIP/SIPS in full, ``tel`` as number + parameters, any other scheme opaque.

    ``scheme`` is lower-cased. For ``tel`` the number is in ``user`` and ``host`` is
    empty. For other schemes (``isbn:``, ``http:``, ``soap.beep:``) everything after
    the colon is in ``opaque`` and the other fields are empty.
    """

    scheme: str
    user: str | None = None
    password: str | None = None
    host: str = ""
    port: int | None = None
    params: dict[str, str | None] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    opaque: str | None = None

    def __str__(self) -> str:
        if self.opaque is not None:
            return f"{self.scheme}:{self.opaque}"
        out = [self.scheme, ":"]
        if self.scheme == "tel":
            out.append(self.user or "")
        else:
            if self.user is not None:
                out.append(self.user)
                if self.password is not None:
                    out.append(":" + self.password)
                out.append("@")
            out.append(self.host)
            if self.port is not None:
                out.append(f":{self.port}")
        out.append(format_params(self.params))
        if self.headers:
            out.append("?" + "&".join(f"{k}={v}" for k, v in self.headers.items()))
        return "".join(out)


def _parse_port(text: str, what: str) -> int:
    if not text or text.strip(_DIGITS) or len(text) > 5 or int(text) > 65535:
        raise SipMessageError(f"{what} has a bad port {show(text)}")
    return int(text)


def parse_hostport(text: str, what: str) -> tuple[str, int | None]:
    """``host [":" port]`` with hostname, IPv4 or bracketed IPv6 (RFC 3261 §25.1)."""
    if text.startswith("["):
        end = text.find("]")
        inner = text[1:end] if end > 0 else ""
        if not inner or inner.strip(_IPV6_CHARS) or ":" not in inner:
            raise SipMessageError(f"{what} has a bad IPv6 reference {show(text)}")
        host, rest = text[: end + 1], text[end + 1 :]
        if not rest:
            return host, None
        if rest[0] != ":":
            raise SipMessageError(f"{what} has text after its IPv6 reference")
        return host, _parse_port(rest[1:], what)
    host, colon, port = text.partition(":")
    if not host or host.strip(_HOST_CHARS):
        raise SipMessageError(f"{what} has a bad host {show(host)}")
    return host, (_parse_port(port, what) if colon else None)


def parse_uri(text: str) -> SipUri:
    """Parse a URI; SIP/SIPS fully (user, password, host, port, params, headers).

    The user part may hold ``;``, ``?``, ``,`` and ``:`` (RFC 4475 §3.1.1.2, §3.1.1.9):
    the first ``@`` ends the userinfo. Whitespace or a control character anywhere is an
    error (§3.1.2.8).
    """
    scheme, colon, rest = text.partition(":")
    if not colon or not scheme or scheme.strip(_SCHEME_CHARS) or not scheme[0].isalpha():
        raise SipMessageError(f"URI {show(text)} has no valid scheme")
    if " " in text or "\t" in text:
        raise SipMessageError(f"URI {show(text)} contains whitespace")
    if _CONTROL.search(text):  # CR, LF, NUL, DEL...: never part of a URI (§25.1), and in a
        # header built from it they would end the header (header injection). (Bytes past
        # ASCII are a lenient peer's, tolerated: they reach the log escaped.)
        raise SipMessageError(f"URI {show(text)} contains a control character")
    if "<" in text or ">" in text or '"' in text:
        raise SipMessageError(f"URI {show(text)} contains an angle bracket or a quote")
    if not rest:
        raise SipMessageError(f"URI {show(text)} is empty after its scheme")
    scheme = scheme.lower()
    if scheme in ("sip", "sips"):
        return _parse_sip_uri(scheme, rest, text)
    if scheme == "tel":
        number, *param_parts = rest.split(";")
        if not number:
            raise SipMessageError(f"URI {show(text)} has a bad telephone number")
        return SipUri("tel", user=number, params=parse_params(param_parts, "tel URI"))
    return SipUri(scheme, opaque=rest)


def _parse_sip_uri(scheme: str, rest: str, text: str) -> SipUri:
    user: str | None = None
    password: str | None = None
    at = rest.find("@")
    if at >= 0:
        userinfo, rest = rest[:at], rest[at + 1 :]
        user, colon, pw = userinfo.partition(":")
        if not user:
            raise SipMessageError(f"URI {show(text)} has an empty user part")
        password = pw if colon else None
    rest, qmark, headers_text = rest.partition("?")
    hostport, *param_parts = rest.split(";")
    host, port = parse_hostport(hostport, "URI")
    params = parse_params(param_parts, "URI") if param_parts else {}
    headers: dict[str, str] = {}
    if qmark:
        for item in headers_text.split("&"):
            name, eq, value = item.partition("=")
            if not name or not eq:
                raise SipMessageError(f"URI {show(text)} has a bad header {show(item)}")
            headers[name] = value
    return SipUri(scheme, user, password, host, port, params, headers)


# --- name-addr / addr-spec (RFC 3261 §20.10, §20.20, §20.39, §25.1) ---------------------


@dataclass
class NameAddr:
    """``[display-name] <URI> *(;param)`` or ``addr-spec *(;param)``.

    ``display`` is decoded (``"J Rosenberg \\\\\\""`` becomes ``J Rosenberg \\"``);
    ``params`` are the header parameters (``tag``, ``expires``, ...), never the URI's.
    """

    display: str | None
    uri: SipUri
    params: dict[str, str | None] = field(default_factory=dict)

    @property
    def tag(self) -> str | None:
        """The ``tag`` parameter (From/To, RFC 3261 §19.3)."""
        return self.params.get("tag")

    def __str__(self) -> str:
        display = "" if self.display is None else quote(self.display) + " "
        return f"{display}<{self.uri}>{format_params(self.params)}"


def parse_name_addr(value: str) -> NameAddr:
    """Parse From/To/Contact/Route-style values.

    Both ``"Bob" <sip:b@x>;tag=1`` and bare ``sip:b@x;tag=1`` are accepted; in the bare
    form the parameters belong to the header (RFC 3261 §20.10, RFC 4475 §3.3.12) and a
    URI containing ``?`` or ``,`` is an error (RFC 4475 §3.1.2.13). Liberal where the RFCs
    allow it: no LWS needed before ``<`` (§3.1.1.6) and LWS inside ``<...>`` is ignored
    (§3.1.2.14). An unquoted display name must be tokens (§3.1.2.15); an unterminated
    quote is an error (§3.1.2.6).
    """
    text = value.strip(_WHITESPACE)
    if not text:
        raise SipMessageError("empty address")
    display: str | None = None
    if text[0] == '"':
        end = _quoted_end(text, 0)
        display = _unquote_pairs(text[1:end])
        rest = text[end + 1 :].lstrip(_WHITESPACE)
        if not rest.startswith("<"):
            raise SipMessageError(
                f"quoted display name not followed by a bracketed URI: {show(text)}"
            )
        uri_text, params_text = _angle(rest, text)
    else:
        lt = text.find("<")
        if lt >= 0:
            words = text[:lt].split()
            for word in words:
                if not is_token(word):
                    raise SipMessageError(
                        f"display name {show(text[:lt].strip())} must be quoted (RFC 3261 §25.1)"
                    )
            display = " ".join(words) if words else None
            uri_text, params_text = _angle(text[lt:], text)
        else:
            uri_text, semi, rest = text.partition(";")
            uri_text = uri_text.rstrip(_WHITESPACE)
            if "?" in uri_text or "," in uri_text:
                raise SipMessageError(
                    f"URI {show(uri_text)} with ? or , needs angle brackets (RFC 3261 §20.10)"
                )
            params_text = rest if semi else None
    uri = parse_uri(uri_text)
    params = {} if params_text is None else parse_params(split_quoted(params_text, ";"), "address")
    return NameAddr(display, uri, params)


def _angle(text: str, whole: str) -> tuple[str, str | None]:
    """Split ``<URI> [;params]`` into the URI text and the parameter text (or None)."""
    end = text.find(">")
    if end < 0:
        raise SipMessageError(f"missing closing angle bracket in {show(whole)}")
    uri_text = text[1:end].strip(_WHITESPACE)
    after = text[end + 1 :].strip(_WHITESPACE)
    if not after:
        return uri_text, None
    if after[0] != ";":
        raise SipMessageError(f"unexpected text after the bracketed URI in {show(whole)}")
    return uri_text, after[1:]


# --- Via (RFC 3261 §20.42) -------------------------------------------------------------


@dataclass
class Via:
    """One via-parm: ``SIP/2.0/UDP host:port;branch=...;received=...``.

    ``transport`` is upper-cased; ``protocol`` is the name/version part (``SIP/2.0``).
    """

    transport: str
    host: str
    port: int | None = None
    params: dict[str, str | None] = field(default_factory=dict)
    protocol: str = "SIP/2.0"

    @property
    def branch(self) -> str | None:
        """The ``branch`` parameter (the transaction id, RFC 3261 §8.1.1.7)."""
        return self.params.get("branch")

    def __str__(self) -> str:
        port = "" if self.port is None else f":{self.port}"
        return f"{self.protocol}/{self.transport} {self.host}{port}{format_params(self.params)}"


def parse_via(value: str) -> Via:
    """Parse one via-parm (split a Via field with ``Headers.get_all("Via")`` first).

    Whitespace is allowed around ``/``, ``:``, ``;`` and ``=`` (SLASH, COLON, SEMI and
    EQUAL are SWS-padded, RFC 3261 §25.1; RFC 4475 §3.1.1.1).
    """
    head, *param_parts = split_quoted(value.strip(_WHITESPACE), ";")
    pieces = head.split("/")
    if len(pieces) != 3:
        raise SipMessageError(f"Via {show(value)} has no protocol/version/transport")
    name, version, tail = (p.strip(_WHITESPACE) for p in pieces)
    transport, _, sent_by = tail.replace("\t", " ").partition(" ")
    sent_by = ":".join(p.strip(_WHITESPACE) for p in sent_by.split(":"))
    if not (is_token(name) and is_token(version) and is_token(transport)):
        raise SipMessageError(f"Via {show(value)} has a bad sent-protocol")
    if not sent_by or " " in sent_by or "\t" in sent_by:
        raise SipMessageError(f"Via {show(value)} has a bad sent-by")
    host, port = parse_hostport(sent_by, "Via")
    params = parse_params(param_parts, "Via") if param_parts else {}
    return Via(transport.upper(), host, port, params, f"{name.upper()}/{version}")


# --- CSeq (RFC 3261 §20.16) ------------------------------------------------------------


def parse_cseq(value: str) -> tuple[int, str]:
    """``(number, method)`` from a CSeq value; the number must be 0..2**31-1 (§8.1.1.5)."""
    parts = [p for p in value.replace("\t", " ").split(" ") if p]
    if len(parts) != 2:
        raise SipMessageError(f"CSeq {show(value)} is not a number and a method")
    number, method = parts
    if number.strip(_DIGITS) or len(number.lstrip("0")) > 10 or int(number) > MAX_CSEQ:
        raise SipMessageError(f"CSeq number {show(number)} is not in 0..2**31-1")
    if not is_token(method):
        raise SipMessageError(f"CSeq method {show(method)} is not a token")
    return int(number), method
