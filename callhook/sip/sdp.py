"""SDP (RFC 4566): parse any session description into values. Sans-IO.

Text in, values out (sans-IO: docs/architecture.md); what a call makes of an offer or an answer
(RFC 3264) is :mod:`callhook.sip.offeranswer`.

* Syntax: ``<type>=<value>`` lines, session part then media parts. The parser
  is tolerant of LF-only line ends, surrounding whitespace, blank lines and
  line types it does not know; it keeps every ``a=`` attribute, known or not,
  in order. It raises :class:`SdpError` only for SDP it cannot use: no ``v=0``
  first, no usable ``o=``, a malformed ``m=`` or ``c=`` line, or an active media
  stream with no connection address at either level (§5.7).
* Codecs: PCMU and PCMA by static payload type 0 and 8 (RFC 3551 §6, table 4)
  or by an ``a=rtpmap`` name with a dynamic payload type.
* SRTP with SDES keys (RFC 3711 ``RTP/SAVP``, RFC 4568 ``a=crypto``): the
  parser keeps each ``m=`` line's profile (``proto``) and its usable crypto
  lines as :class:`~callhook.media.srtp.Crypto` values (``crypto``; why the
  others were set aside in ``crypto_refused``); in ``attributes`` a crypto
  line's key is replaced by ``<hidden>``, so a logged description shows no key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, cast

from callhook.media.srtp import Crypto, redact
from callhook.sip import sdes

Direction = Literal["sendrecv", "sendonly", "recvonly", "inactive"]
Codec = Literal["PCMU", "PCMA"]

CLOCK_RATE = 8000

_DIRECTIONS: frozenset[str] = frozenset(("sendrecv", "sendonly", "recvonly", "inactive"))
_STATIC_NAMES = {0: "PCMU", 8: "PCMA"}
RTP_PROTOS = frozenset(("RTP/AVP", "RTP/AVPF"))
#: The SRTP profiles (RFC 3711 §12, RFC 5124); DTLS-SRTP's UDP/TLS/RTP/SAVP is not among them.
SRTP_PROTOS = frozenset(("RTP/SAVP", "RTP/SAVPF"))
ANY_RTP_PROTOS = RTP_PROTOS | SRTP_PROTOS
#: Old-style hold (RFC 3264 §8.4, RFC 2543): a connection address of all zeros.
HOLD_ADDRESSES = frozenset(("0.0.0.0", "::"))


class SdpError(ValueError):
    """A session description callhook cannot use; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Origin:
    """The ``o=`` line (RFC 4566 §5.2)."""

    username: str
    session_id: str
    session_version: str
    nettype: str
    addrtype: str
    address: str


@dataclass(frozen=True)
class Connection:
    """A ``c=`` line (RFC 4566 §5.7); ``address`` without any ``/ttl`` suffix."""

    nettype: str
    addrtype: str
    address: str

    @property
    def is_hold(self) -> bool:
        """The all-zeros address of RFC 2543 hold (RFC 3264 §8.4)."""
        return self.address in HOLD_ADDRESSES


@dataclass(frozen=True)
class RtpMap:
    """``a=rtpmap:<pt> <encoding>/<clock rate>[/<channels>]`` (RFC 4566 §6)."""

    payload_type: int
    encoding: str
    clock_rate: int
    channels: int = 1


@dataclass
class MediaDescription:
    """One ``m=`` section with the lines that follow it (RFC 4566 §5.14)."""

    media: str
    port: int
    proto: str
    formats: list[str]
    port_count: int = 1
    connection: Connection | None = None
    bandwidth: list[str] = field(default_factory=list)
    #: Every ``a=`` line of this section in order, as (name, value or None).
    attributes: list[tuple[str, str | None]] = field(default_factory=list)
    rtpmap: dict[int, RtpMap] = field(default_factory=dict)
    fmtp: dict[str, str] = field(default_factory=dict)
    ptime: int | None = None
    maxptime: int | None = None
    #: The direction attribute written in this section, if any.
    direction: Direction | None = None
    #: The usable ``a=crypto`` lines (RFC 4568 §9.1), in order; their keys are hidden from repr.
    crypto: list[Crypto] = field(default_factory=list)
    #: Why each other ``a=crypto`` line was set aside (its tag and the reason, never the key).
    crypto_refused: list[str] = field(default_factory=list)

    @property
    def savp(self) -> bool:
        """Whether the profile is RTP/SAVP or RTP/SAVPF (SRTP, RFC 3711 §12)."""
        return self.proto.upper() in SRTP_PROTOS

    def attribute(self, name: str) -> str | None:
        """The value of the first attribute called ``name`` ('' for a flag), or None."""
        for key, value in self.attributes:
            if key == name:
                return "" if value is None else value
        return None

    def encoding_of(self, payload_type: int) -> RtpMap | None:
        """What a payload type means here: its rtpmap, else the RFC 3551 static one."""
        mapped = self.rtpmap.get(payload_type)
        if mapped is not None:
            return mapped
        name = _STATIC_NAMES.get(payload_type)
        return RtpMap(payload_type, name, CLOCK_RATE) if name else None


@dataclass
class SessionDescription:
    """A parsed session description (RFC 4566 §5)."""

    origin: Origin
    version: int = 0
    name: str = "-"
    connection: Connection | None = None
    timing: str = "0 0"
    bandwidth: list[str] = field(default_factory=list)
    attributes: list[tuple[str, str | None]] = field(default_factory=list)
    #: The session-level direction attribute, if any.
    direction: Direction | None = None
    media: list[MediaDescription] = field(default_factory=list)

    def connection_for(self, media: MediaDescription) -> Connection | None:
        """The media-level ``c=``, else the session-level one (RFC 4566 §5.7)."""
        return media.connection if media.connection is not None else self.connection

    def direction_for(self, media: MediaDescription) -> Direction:
        """Media-level direction, else session-level, else sendrecv (RFC 3264 §5.1)."""
        return media.direction or self.direction or "sendrecv"


# --------------------------------------------------------------------------- parsing


def parse(text: str) -> SessionDescription:
    """Parse a session description (RFC 4566 §5); raise :class:`SdpError` if unusable."""
    lines: list[tuple[int, str, str]] = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        if len(line) < 2 or line[1] != "=" or not ("a" <= line[0] <= "z"):
            # redact(): a mangled a=crypto line must not put a key in a log.
            raise SdpError(f"line {number} is not <type>=<value>: {redact(line)[:60]!r}")
        lines.append((number, line[0], line[2:].strip()))
    if not lines or lines[0][1] != "v":
        raise SdpError("a session description starts with v=")
    if lines[0][2] != "0":
        raise SdpError(f"unsupported SDP version {lines[0][2]!r}")

    origin: Origin | None = None
    session = SessionDescription(origin=Origin("-", "0", "0", "IN", "IP4", "0.0.0.0"))
    media: MediaDescription | None = None
    for number, kind, value in lines[1:]:
        if kind == "m":
            media = _parse_media(number, value)
            session.media.append(media)
        elif kind == "c":
            conn = _parse_connection(number, value)
            if media is None:
                session.connection = conn
            else:
                media.connection = conn
        elif kind == "a":
            if media is None:
                name, attr = _split_attribute(value)
                if name == "crypto" and attr is not None:
                    attr = redact(attr)  # media-level only (RFC 4568 §9.1): not used here
                session.attributes.append((name, attr))
                if attr is None and name in _DIRECTIONS:
                    session.direction = cast(Direction, name)
            else:
                _media_attribute(media, value)
        elif kind == "b":
            (session.bandwidth if media is None else media.bandwidth).append(value)
        elif media is not None:
            continue  # i=, k= in a media section: not needed
        elif kind == "o":
            origin = _parse_origin(number, value)
        elif kind == "s":
            session.name = value
        elif kind == "t" and session.timing == "0 0":
            session.timing = value
        # u=, e=, p=, z=, k=, r=, and letters we do not know: ignored (RFC 4566 §5)
    if origin is None:
        raise SdpError("no o= line")
    session.origin = origin
    for index, m in enumerate(session.media):
        if m.port != 0 and session.connection_for(m) is None:
            raise SdpError(f"m= line {index} ({m.media}) has no connection address (c=)")
    return session


def _parse_origin(number: int, value: str) -> Origin:
    parts = value.split()
    if len(parts) != 6:
        raise SdpError(f"line {number}: o= needs 6 fields, got {len(parts)}")
    return Origin(*parts)


def _parse_connection(number: int, value: str) -> Connection:
    parts = value.split()
    if len(parts) != 3 or parts[0] != "IN" or parts[1] not in ("IP4", "IP6"):
        raise SdpError(f"line {number}: c= is not 'IN IP4|IP6 <address>': {value!r}")
    address = parts[2].split("/", 1)[0]
    if not address:
        raise SdpError(f"line {number}: c= has an empty address")
    return Connection(parts[0], parts[1], address)


def _parse_media(number: int, value: str) -> MediaDescription:
    parts = value.split()
    if len(parts) < 4:
        raise SdpError(f"line {number}: m= needs <media> <port> <proto> <fmt>...: {value!r}")
    port_text, _, count_text = parts[1].partition("/")
    try:
        port = int(port_text)
        count = int(count_text) if count_text else 1
    except ValueError:
        raise SdpError(f"line {number}: m= port is not a number: {parts[1]!r}") from None
    if not 0 <= port <= 65535:
        raise SdpError(f"line {number}: m= port {port} is out of range")
    return MediaDescription(parts[0], port, parts[2], parts[3:], port_count=count)


def _split_attribute(value: str) -> tuple[str, str | None]:
    name, colon, rest = value.partition(":")
    return (name.strip(), rest.strip()) if colon else (name.strip(), None)


def _media_attribute(media: MediaDescription, value: str) -> None:
    name, attr = _split_attribute(value)
    if name == "crypto":
        if attr is None:
            media.crypto_refused.append("a=crypto without a value")
        else:
            sdes.add_crypto_line(media.crypto, media.crypto_refused, attr)
            attr = redact(attr)
    media.attributes.append((name, attr))
    if attr is None:
        if name in _DIRECTIONS:
            media.direction = cast(Direction, name)
        return
    if name == "rtpmap":
        mapped = _parse_rtpmap(attr)
        if mapped is not None:
            media.rtpmap[mapped.payload_type] = mapped
    elif name == "fmtp":
        fmt, _, params = attr.partition(" ")
        media.fmtp[fmt] = params.strip()
    elif name in ("ptime", "maxptime"):
        try:
            millis = round(float(attr))
        except ValueError:
            return  # a broken ptime is ignored, as if absent
        if millis > 0:
            setattr(media, name, millis)


def _parse_rtpmap(value: str) -> RtpMap | None:
    """``<pt> <encoding>/<rate>[/<channels>]``; None when malformed (then ignored)."""
    pt_text, _, spec = value.partition(" ")
    pieces = spec.strip().split("/")
    try:
        pt = int(pt_text)
        rate = int(pieces[1])
        channels = int(pieces[2]) if len(pieces) > 2 and pieces[2] else 1
    except (ValueError, IndexError):
        return None
    if not 0 <= pt <= 127 or not pieces[0]:
        return None
    return RtpMap(pt, pieces[0], rate, channels)
