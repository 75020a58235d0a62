"""RTCP (RFC 3550 §6): Sender and Receiver Reports, SDES CNAME, BYE; compound packets.

Sans-IO (docs/architecture.md): values in, bytes out, and back. No clock is read: the
NTP timestamp of a Sender Report is computed by the caller from wall-clock
time with :func:`ntp_timestamp`.

* :func:`parse` splits a compound packet (§6.1) into typed packets; packet
  types it does not know (APP, RTPFB, PSFB, XR, ...) come back as
  :class:`UnknownPacket` rather than failing. Profile-specific extensions
  after report blocks are ignored (§6.4.1). Malformed input raises
  :class:`RtcpError`.
* :func:`compound` builds the packet a participant sends every interval:
  an SR or RR first, then SDES with the CNAME, then BYE if leaving (§6.1).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

SR = 200
RR = 201
SDES = 202
BYE = 203
APP = 204

SDES_END = 0
SDES_CNAME = 1

#: Seconds between the NTP epoch (1900) and the Unix epoch (1970), RFC 868.
NTP_UNIX_OFFSET = 2_208_988_800

_HEADER = struct.Struct("!BBH")
_SSRC = struct.Struct("!I")
_SENDER_INFO = struct.Struct("!IQIII")  # ssrc, NTP, RTP timestamp, packets, octets
_BLOCK = struct.Struct("!IIIIII")  # ssrc, lost word, highest seq, jitter, LSR, DLSR
_CUMULATIVE_MIN = -(1 << 23)
_CUMULATIVE_MAX = (1 << 23) - 1


class RtcpError(ValueError):
    """An RTCP packet that cannot be parsed or built, and why."""


@dataclass(frozen=True)
class ReportBlock:
    """One reception report block (RFC 3550 §6.4.1).

    ``cumulative_lost`` is signed (24 bits on the wire): duplicates can make it
    negative. ``jitter`` is in timestamp units. ``lsr`` is the middle 32 bits
    of the NTP timestamp of the last SR from ``ssrc`` (0 if none), ``dlsr`` the
    delay since then in 1/65536 s.
    """

    ssrc: int
    fraction_lost: int
    cumulative_lost: int
    highest_sequence: int
    jitter: int
    lsr: int = 0
    dlsr: int = 0

    def to_bytes(self) -> bytes:
        lost = max(_CUMULATIVE_MIN, min(_CUMULATIVE_MAX, self.cumulative_lost)) & 0xFFFFFF
        return _BLOCK.pack(
            self.ssrc,
            ((self.fraction_lost & 0xFF) << 24) | lost,
            self.highest_sequence & 0xFFFFFFFF,
            max(0, self.jitter) & 0xFFFFFFFF,
            self.lsr & 0xFFFFFFFF,
            self.dlsr & 0xFFFFFFFF,
        )

    @classmethod
    def parse(cls, data: bytes, offset: int = 0) -> ReportBlock:
        ssrc, word, highest, jitter, lsr, dlsr = _BLOCK.unpack_from(data, offset)
        lost = word & 0xFFFFFF
        if lost & 0x800000:
            lost -= 1 << 24
        return cls(ssrc, word >> 24, lost, highest, jitter, lsr, dlsr)


@dataclass(frozen=True)
class SenderReport:
    """SR (RFC 3550 §6.4.1): sender info and up to 31 report blocks."""

    ssrc: int
    ntp_timestamp: int
    rtp_timestamp: int
    packet_count: int
    octet_count: int
    reports: tuple[ReportBlock, ...] = ()

    def to_bytes(self) -> bytes:
        body = _SENDER_INFO.pack(
            self.ssrc,
            self.ntp_timestamp & 0xFFFFFFFFFFFFFFFF,
            self.rtp_timestamp & 0xFFFFFFFF,
            self.packet_count & 0xFFFFFFFF,
            self.octet_count & 0xFFFFFFFF,
        )
        return _packet(SR, len(self.reports), body + _blocks(self.reports))


@dataclass(frozen=True)
class ReceiverReport:
    """RR (RFC 3550 §6.4.2): the reporter's SSRC and up to 31 report blocks."""

    ssrc: int
    reports: tuple[ReportBlock, ...] = ()

    def to_bytes(self) -> bytes:
        return _packet(RR, len(self.reports), _SSRC.pack(self.ssrc) + _blocks(self.reports))


@dataclass(frozen=True)
class SdesChunk:
    """One SSRC and its SDES items as (type, value) (RFC 3550 §6.5)."""

    ssrc: int
    items: tuple[tuple[int, bytes], ...]

    @property
    def cname(self) -> str | None:
        for kind, value in self.items:
            if kind == SDES_CNAME:
                return value.decode("utf-8", "replace")
        return None


@dataclass(frozen=True)
class SourceDescription:
    """SDES (RFC 3550 §6.5)."""

    chunks: tuple[SdesChunk, ...]

    @classmethod
    def cname(cls, ssrc: int, cname: str) -> SourceDescription:
        """The SDES every compound packet carries: our SSRC and CNAME (§6.5.1)."""
        return cls((SdesChunk(ssrc, ((SDES_CNAME, cname.encode("utf-8")),)),))

    def to_bytes(self) -> bytes:
        body = bytearray()
        for chunk in self.chunks:
            body += _SSRC.pack(chunk.ssrc)
            for kind, value in chunk.items:
                if not 1 <= kind <= 255 or len(value) > 255:
                    raise RtcpError(f"SDES item type {kind} / length {len(value)} out of range")
                body += bytes((kind, len(value))) + value
            # END item, then null octets to the next 32-bit boundary (at least one)
            body += b"\x00" * (4 - len(body) % 4)
        return _packet(SDES, len(self.chunks), bytes(body))


@dataclass(frozen=True)
class Bye:
    """BYE (RFC 3550 §6.6): the sources leaving, and an optional reason."""

    sources: tuple[int, ...]
    reason: str | None = None

    def to_bytes(self) -> bytes:
        body = b"".join(_SSRC.pack(s) for s in self.sources)
        if self.reason is not None:
            text = self.reason.encode("utf-8")[:255]
            body += bytes((len(text),)) + text
            body += b"\x00" * (-len(body) % 4)
        return _packet(BYE, len(self.sources), body)


@dataclass(frozen=True)
class UnknownPacket:
    """A packet type this module does not interpret (APP, feedback, XR...), kept raw."""

    packet_type: int
    count: int
    payload: bytes

    def to_bytes(self) -> bytes:
        return _packet(self.packet_type, self.count, self.payload)


RtcpPacket = SenderReport | ReceiverReport | SourceDescription | Bye | UnknownPacket


def _packet(packet_type: int, count: int, body: bytes) -> bytes:
    """Common header (§6.4.1): V=2, P=0, count, PT, length in 32-bit words minus one."""
    if count > 31:
        raise RtcpError(f"at most 31 items in one RTCP packet, got {count}")
    if len(body) % 4:
        raise RtcpError("an RTCP packet body is a multiple of 32 bits")
    return _HEADER.pack(0x80 | count, packet_type, len(body) // 4) + body


def _blocks(reports: tuple[ReportBlock, ...]) -> bytes:
    return b"".join(block.to_bytes() for block in reports)


def compound(packets: Iterable[RtcpPacket]) -> bytes:
    """Concatenate packets into one compound packet (RFC 3550 §6.1).

    The first must be an SR or RR; BYE, if any, must be last.
    """
    items = list(packets)
    if not items or not isinstance(items[0], SenderReport | ReceiverReport):
        raise RtcpError("a compound RTCP packet starts with an SR or RR")
    for item in items[:-1]:
        if isinstance(item, Bye):
            raise RtcpError("BYE must be the last packet of a compound packet")
    return b"".join(item.to_bytes() for item in items)


def report(first: SenderReport | ReceiverReport, cname: str, bye: Bye | None = None) -> bytes:
    """The usual compound packet: SR/RR, SDES CNAME of the reporter, then BYE if given."""
    packets: list[RtcpPacket] = [first, SourceDescription.cname(first.ssrc, cname)]
    if bye is not None:
        packets.append(bye)
    return compound(packets)


def parse(data: bytes) -> list[RtcpPacket]:
    """Split and parse a compound RTCP packet (RFC 3550 §6.1, validity checks of A.2)."""
    packets: list[RtcpPacket] = []
    pos = 0
    total = len(data)
    if total < 4:
        raise RtcpError(f"RTCP packet of {total} bytes is shorter than a header")
    while pos < total:
        if total - pos < 4:
            raise RtcpError(f"{total - pos} trailing bytes after the last RTCP packet")
        first, packet_type, words = _HEADER.unpack_from(data, pos)
        if first >> 6 != 2:
            raise RtcpError(f"RTCP version {first >> 6}, expected 2")
        end = pos + 4 + 4 * words
        if end > total:
            raise RtcpError(
                f"RTCP packet type {packet_type} claims {end - pos} bytes, {total - pos} left"
            )
        body = bytes(data[pos + 4 : end])
        if first & 0x20:  # padding: only legal on the last packet (§6.4.1)
            if end != total or not body or not 0 < body[-1] <= len(body):
                raise RtcpError("invalid RTCP padding")
            body = body[: -body[-1]]
        packets.append(_parse_one(packet_type, first & 0x1F, body))
        pos = end
    return packets


def _parse_one(packet_type: int, count: int, body: bytes) -> RtcpPacket:
    if packet_type == SR:
        if len(body) < 24 + 24 * count:
            raise RtcpError(f"SR with {count} blocks is {len(body)} bytes")
        ssrc, ntp, rtp_ts, packets, octets = _SENDER_INFO.unpack_from(body, 0)
        blocks = tuple(ReportBlock.parse(body, 24 + 24 * i) for i in range(count))
        return SenderReport(ssrc, ntp, rtp_ts, packets, octets, blocks)
    if packet_type == RR:
        if len(body) < 4 + 24 * count:
            raise RtcpError(f"RR with {count} blocks is {len(body)} bytes")
        blocks = tuple(ReportBlock.parse(body, 4 + 24 * i) for i in range(count))
        return ReceiverReport(_SSRC.unpack_from(body, 0)[0], blocks)
    if packet_type == SDES:
        return SourceDescription(_parse_sdes(count, body))
    if packet_type == BYE:
        if len(body) < 4 * count:
            raise RtcpError(f"BYE with {count} sources is {len(body)} bytes")
        sources = struct.unpack_from(f"!{count}I", body, 0)
        reason = None
        if len(body) > 4 * count:
            size = body[4 * count]
            text = body[4 * count + 1 : 4 * count + 1 + size]
            if len(text) != size:
                raise RtcpError("BYE reason is truncated")
            reason = text.decode("utf-8", "replace")
        return Bye(sources, reason)
    return UnknownPacket(packet_type, count, body)


def _parse_sdes(count: int, body: bytes) -> tuple[SdesChunk, ...]:
    chunks: list[SdesChunk] = []
    pos = 0
    for _ in range(count):
        if pos + 4 > len(body):
            raise RtcpError("SDES chunk is truncated")
        ssrc = _SSRC.unpack_from(body, pos)[0]
        pos += 4
        items: list[tuple[int, bytes]] = []
        while True:
            if pos >= len(body):
                raise RtcpError("SDES chunk has no END item")
            kind = body[pos]
            if kind == SDES_END:
                pos = (pos + 4) & ~3  # skip the null octets to the next 32-bit boundary
                break
            if pos + 2 > len(body) or pos + 2 + body[pos + 1] > len(body):
                raise RtcpError("SDES item is truncated")
            size = body[pos + 1]
            items.append((kind, body[pos + 2 : pos + 2 + size]))
            pos += 2 + size
        chunks.append(SdesChunk(ssrc, tuple(items)))
    return tuple(chunks)


def ntp_timestamp(unix_seconds: float) -> int:
    """64-bit NTP timestamp (RFC 3550 §4) of a wall-clock time given in Unix seconds."""
    seconds = int(unix_seconds)
    fraction = int((unix_seconds - seconds) * (1 << 32)) & 0xFFFFFFFF
    return ((seconds + NTP_UNIX_OFFSET) & 0xFFFFFFFF) << 32 | fraction


def ntp_middle(ntp: int) -> int:
    """The middle 32 bits of an NTP timestamp: the LSR of a report block (§6.4.1)."""
    return (ntp >> 16) & 0xFFFFFFFF
