"""RTP (RFC 3550): packets, the per-call send state, and the per-call receive state.

Sans-IO (docs/architecture.md): bytes and ``now`` in, bytes and packets out; no
sockets, no clock reads, no timers. Hot paths (:meth:`RtpPacket.parse`,
:func:`pack_header`, :meth:`RtpSender.frame`, :meth:`RtpReceiver.feed` for an
in-order packet) do a fixed, small amount of work: one ``struct`` call, no
per-packet allocation beyond the bytes and, on receive, the packet and the
returned list; :meth:`RtpReceiver.feed_next` takes the usual packet (the next
of the current source) as its header fields, with no packet object at all.
``bench/rtp_micro.py`` measures them.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

from callhook.media.inlet import ReceiverCore
from callhook.media.outlet import SenderCore
from callhook.media.rtcp import ReportBlock, SenderReport, ntp_middle

RTP_VERSION = 2
HEADER_SIZE = 12
#: Samples per 20 ms frame at 8 kHz (RFC 3551 §4.5: G.711 is one octet per sample).
SAMPLES_PER_FRAME = 160

_HEADER = struct.Struct("!BBHII")
_pack = _HEADER.pack
_unpack = _HEADER.unpack_from
_EXTENSION = struct.Struct("!HH")

# RFC 3550 Appendix A.1
RTP_SEQ_MOD = 1 << 16
MAX_DROPOUT = 3000
MAX_MISORDER = 100
_HISTORY_BITS = 64
_HISTORY_MASK = (1 << _HISTORY_BITS) - 1


class RtpError(ValueError):
    """Bytes that are not an RTP packet (RFC 3550 §5.1), and why."""


class RtpPacket:
    """One RTP packet (RFC 3550 §5.1).

    ``payload`` excludes the header, CSRC list, header extension and padding.
    ``extension`` is ``(profile, data)`` when the X bit was set (§5.3.1).
    """

    __slots__ = (
        "csrc",
        "extension",
        "marker",
        "payload",
        "payload_type",
        "sequence_number",
        "ssrc",
        "timestamp",
    )

    def __init__(
        self,
        payload_type: int,
        marker: bool,
        sequence_number: int,
        timestamp: int,
        ssrc: int,
        payload: bytes,
        csrc: tuple[int, ...] = (),
        extension: tuple[int, bytes] | None = None,
    ) -> None:
        self.payload_type = payload_type
        self.marker = marker
        self.sequence_number = sequence_number
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.payload = payload
        self.csrc = csrc
        self.extension = extension

    def __repr__(self) -> str:
        return (
            f"RtpPacket(pt={self.payload_type}, m={int(self.marker)}, "
            f"seq={self.sequence_number}, ts={self.timestamp}, ssrc={self.ssrc:#010x}, "
            f"{len(self.payload)} bytes)"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RtpPacket):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable

    @classmethod
    def parse(cls, data: bytes) -> RtpPacket:
        """Parse a datagram (RFC 3550 §5.1, §5.3.1, A.1 validity: version 2, lengths)."""
        if len(data) < HEADER_SIZE:
            raise RtpError(f"RTP packet of {len(data)} bytes is shorter than the header")
        first, second, seq, ts, ssrc = _unpack(data)
        if first == 0x80:  # V=2, no padding, no extension, no CSRC: the common case
            return cls(second & 0x7F, second > 0x7F, seq, ts, ssrc, data[HEADER_SIZE:])
        if first >> 6 != RTP_VERSION:
            raise RtpError(f"RTP version {first >> 6}, expected 2")
        end = len(data)
        pos = HEADER_SIZE + 4 * (first & 0x0F)
        if pos > end:
            raise RtpError("RTP packet truncated in the CSRC list")
        csrc = struct.unpack_from(f"!{first & 0x0F}I", data, HEADER_SIZE)
        extension = None
        if first & 0x10:
            if pos + 4 > end:
                raise RtpError("RTP packet truncated in the header extension")
            profile, words = _EXTENSION.unpack_from(data, pos)
            pos += 4
            if pos + 4 * words > end:
                raise RtpError("RTP header extension longer than the packet")
            extension = (profile, bytes(data[pos : pos + 4 * words]))
            pos += 4 * words
        if first & 0x20:
            padding = data[-1]
            if padding == 0 or pos + padding > end:
                raise RtpError(f"invalid RTP padding count {padding}")
            end -= padding
        return cls(second & 0x7F, second > 0x7F, seq, ts, ssrc, data[pos:end], csrc, extension)

    def serialize(self) -> bytes:
        """The packet on the wire (no padding is added)."""
        first = 0x80 | len(self.csrc)
        extra = b""
        if self.csrc:
            extra = struct.pack(f"!{len(self.csrc)}I", *self.csrc)
        if self.extension is not None:
            profile, data = self.extension
            if len(data) % 4:
                raise RtpError("an RTP header extension is a multiple of 32 bits")
            first |= 0x10
            extra += _EXTENSION.pack(profile, len(data) // 4) + data
        second = self.payload_type | (0x80 if self.marker else 0)
        head = _pack(first, second, self.sequence_number, self.timestamp, self.ssrc)
        return head + extra + bytes(self.payload)


def pack_header(pt: int, seq: int, ts: int, ssrc: int, marker: bool) -> bytes:
    """A 12-byte RTP header (RFC 3550 §5.1): V=2, no padding, extension or CSRC."""
    return _pack(0x80, pt | 0x80 if marker else pt, seq & 0xFFFF, ts & 0xFFFFFFFF, ssrc)


class RtpSender(SenderCore):
    """Send state of one stream (RFC 3550 §5.1, RFC 3551 §4.1).

    SSRC, first sequence number and first timestamp are random (§5.1, §8.1).
    :meth:`frame` sends an audio frame and advances the timestamp by its
    samples; the first frame of a talkspurt (the first of the stream, or the
    first after :meth:`advance` skipped time in silence) carries the marker
    bit (RFC 3551 §4.1). :meth:`packet` sends at an explicit timestamp, as
    RFC 4733 events do. ``packets`` and ``octets`` (payload octets) feed the
    Sender Report (§6.4.1).

    Its fields live in :class:`~callhook.media.outlet.SenderCore` (C, where it was
    built): the media tick makes the usual packet there (:mod:`callhook.media.outlet`),
    as :meth:`frame` does here; a change to :meth:`frame` is made there too.
    """

    def __init__(
        self,
        payload_type: int,
        *,
        ssrc: int | None = None,
        sequence: int | None = None,
        timestamp: int | None = None,
        rng: random.Random | None = None,
    ) -> None:
        draw = rng if rng is not None else random.SystemRandom()
        self.payload_type = payload_type
        self.ssrc = draw.getrandbits(32) if ssrc is None else ssrc
        self.sequence = draw.getrandbits(16) if sequence is None else sequence & 0xFFFF
        self.timestamp = draw.getrandbits(32) if timestamp is None else timestamp & 0xFFFFFFFF
        self.packets = 0
        self.octets = 0
        self._talkspurt = True

    def frame(self, payload: bytes, samples: int = SAMPLES_PER_FRAME) -> bytes:
        """The next audio packet (header + payload); then the timestamp moves on."""
        seq = self.sequence
        ts = self.timestamp
        second = self.payload_type
        if self._talkspurt:
            second |= 0x80
            self._talkspurt = False
        self.sequence = (seq + 1) & 0xFFFF
        self.timestamp = (ts + samples) & 0xFFFFFFFF
        self.packets += 1
        self.octets += len(payload)
        return _pack(0x80, second, seq, ts, self.ssrc) + payload

    def packet(self, payload: bytes, payload_type: int, timestamp: int, marker: bool) -> bytes:
        """A packet at an explicit timestamp (RFC 4733 §2.5.1: an event keeps its start
        timestamp); the sequence number and counters advance, the timestamp does not.

        A packet with the marker bit (an event's first, RFC 4733 §2.4.2) begins a
        talkspurt: the audio that follows it does not carry the marker again.
        """
        if marker:
            self._talkspurt = False
        seq = self.sequence
        self.sequence = (seq + 1) & 0xFFFF
        self.packets += 1
        self.octets += len(payload)
        return pack_header(payload_type, seq, timestamp, self.ssrc, marker) + payload

    def advance(self, samples: int = SAMPLES_PER_FRAME, *, silence: bool = True) -> None:
        """Let ``samples`` of media time pass without a :meth:`frame`.

        With ``silence`` (nothing sent: silence suppression, hold) the next
        frame starts a talkspurt and carries the marker bit; without it (the
        time was covered by :meth:`packet`, e.g. a telephone-event) it does not.
        """
        self.timestamp = (self.timestamp + samples) & 0xFFFFFFFF
        if silence:
            self._talkspurt = True

    def sender_report(
        self, ntp_timestamp: int, reports: tuple[ReportBlock, ...] = ()
    ) -> SenderReport:
        """An SR (RFC 3550 §6.4.1) for this stream; ``timestamp`` is taken as "now"."""
        return SenderReport(
            self.ssrc, ntp_timestamp, self.timestamp, self.packets, self.octets, reports
        )


class RtpReceiver(ReceiverCore):
    """Receive state of one call's stream: order for playout and reception statistics.

    * Source (RFC 3550 §8.2): the first SSRC is accepted; packets of another
      SSRC are dropped unless ``ssrc_switch_after`` of them arrive in sequence
      with none of the current source in between (the peer restarted its
      stream), and then the new SSRC replaces the old one, those packets
      included.
    * Sequence (Appendix A.1): extended highest sequence number across the
      65535→0 wrap, jumps beyond MAX_DROPOUT/MAX_MISORDER resynchronise only
      when two sequential packets confirm them. No probation for the first
      source: the first packet plays.
    * Playout order: in-order packets are returned at once. After a gap, later
      packets are held until the missing one arrives, until more than
      ``reorder_window`` packets beyond it have arrived, or until one has been
      held ``max_hold`` seconds; then the gap is skipped. Packets older than the
      playout point are dropped as ``late``, repeated ones as ``duplicates``.
    * Statistics (§6.4.1, A.3, A.8): cumulative and interval loss, interarrival
      jitter in timestamp units from ``now * clock_rate``. Packets that repeat
      the previous packet's timestamp (RFC 4733 event updates) are left out
      of the jitter estimate: their timestamp is not their sampling instant.

    Counters: ``received`` (A.1, duplicates and late packets included),
    ``duplicates`` and ``late`` (dropped from playout), ``foreign`` (packets of
    another SSRC that were not played), ``ssrc_changes``.

    The fields :meth:`feed_next` changes live in :class:`~callhook.media.inlet.ReceiverCore`
    (C, where it was built), so that the media tick can take the usual packet without
    Python (:mod:`callhook.media.inlet`); they are used here as any attribute.
    """

    def __init__(
        self,
        clock_rate: int = 8000,
        *,
        reorder_window: int = 3,
        max_hold: float = 0.06,
        ssrc_switch_after: int = 3,
    ) -> None:
        self.clock_rate = clock_rate
        self.reorder_window = reorder_window
        self.max_hold = max_hold
        self.ssrc_switch_after = ssrc_switch_after
        self.ssrc: int | None = None
        self.duplicates = 0
        self.late = 0
        self.foreign = 0
        self.ssrc_changes = 0
        self._candidates: list[tuple[RtpPacket, float]] = []
        self._reset()

    def _reset(self) -> None:
        self.ssrc = None
        self.received = 0
        self._base_seq = 0
        self._max_seq = 0
        self._cycles = 0
        self._bad_seq = RTP_SEQ_MOD + 1
        self._bad_packet: RtpPacket | None = None
        self._expected_prior = 0
        self._received_prior = 0
        self._jitter = 0.0
        self._last_ts = -1
        self._last_arrival = 0.0
        self._next = 0
        self._history = 0
        self._held: dict[int, tuple[RtpPacket, float]] = {}
        self._lsr = 0
        self._lsr_at = 0.0

    # ------------------------------------------------------------------ receive path

    def feed(self, packet: RtpPacket, now: float) -> list[RtpPacket]:
        """Take one received packet; return the packets now due for playout, in order."""
        if packet.ssrc != self.ssrc:
            if self.ssrc is not None:
                return self._foreign(packet, now)
            self._start(packet)
        elif self._candidates:  # the current source is alive: no switch
            self._candidates.clear()
        seq = packet.sequence_number
        max_seq = self._max_seq
        udelta = (seq - max_seq) & 0xFFFF
        if udelta < MAX_DROPOUT:  # in order, with a permissible gap (A.1)
            if seq < max_seq:
                self._cycles += RTP_SEQ_MOD
            self._max_seq = seq
            ext = self._cycles + seq
        elif udelta <= RTP_SEQ_MOD - MAX_MISORDER:  # a very large jump
            if seq != self._bad_seq:
                self._bad_seq = (seq + 1) & 0xFFFF
                self._bad_packet = packet
                return []
            return self._resync(packet, now)
        else:  # duplicate or reordered, behind the highest
            ext = self._cycles + max_seq - (RTP_SEQ_MOD - udelta)
        self.received += 1

        ts = packet.timestamp
        if ts != self._last_ts:
            self._arrived(ts, now)

        nxt = self._next
        if ext == nxt:
            self._next = nxt + 1
            self._history = ((self._history << 1) | 1) & _HISTORY_MASK
            if not self._held:
                return [packet]
            out = [packet]
            self._release(now, out)
            return out
        if ext < nxt:
            back = nxt - 1 - ext
            if back < _HISTORY_BITS and (self._history >> back) & 1:
                self.duplicates += 1
            else:
                self.late += 1
            return []
        if ext in self._held:
            self.duplicates += 1
            return []
        self._held[ext] = (packet, now)
        out = []
        self._release(now, out)
        return out

    def feed_next(self, seq: int, ts: int, ssrc: int, now: float) -> bool:
        """:meth:`feed` of the usual packet, with no packet object: the next one of the
        current source, nothing held. Counted as :meth:`feed` counts it, and True (it
        plays now); False and nothing changed when it is any other case (then
        :meth:`feed` it). The media tick's receive path calls this for every packet.

        ``_inlet.c`` does the same in C for the media tick (:mod:`callhook.media.inlet`):
        a change here is made there too (``tests/unit/media/test_inlet.py`` compares them)."""
        if ssrc != self.ssrc or self._held:
            return False
        max_seq = self._max_seq
        if (seq - max_seq) & 0xFFFF >= MAX_DROPOUT:
            return False
        wraps = seq < max_seq
        ext = self._cycles + seq + (RTP_SEQ_MOD if wraps else 0)
        if ext != self._next:
            return False
        if self._candidates:  # the current source is alive: no switch
            self._candidates.clear()
        if wraps:
            self._cycles += RTP_SEQ_MOD
        self._max_seq = seq
        self.received += 1
        if ts != self._last_ts:
            self._arrived(ts, now)
        self._next = ext + 1
        self._history = ((self._history << 1) | 1) & _HISTORY_MASK
        return True

    def _arrived(self, ts: int, now: float) -> None:
        """Interarrival jitter (RFC 3550 A.8) of a packet with a new timestamp."""
        arrival = now * self.clock_rate
        if self._last_ts >= 0:
            span = ((ts - self._last_ts + 0x80000000) & 0xFFFFFFFF) - 0x80000000
            d = arrival - self._last_arrival - span
            if d < 0:
                d = -d
            self._jitter += (d - self._jitter) * 0.0625
        self._last_arrival = arrival
        self._last_ts = ts

    def poll(self, now: float) -> Sequence[RtpPacket]:
        """Packets released because the one they wait for is overdue (``max_hold``)."""
        if not self._held:
            return ()  # (every call, every tick: no list to allocate)
        out: list[RtpPacket] = []
        self._release(now, out)
        return out

    def flush(self) -> list[RtpPacket]:
        """Every held packet, in order, giving up on the gaps (end of stream)."""
        out: list[RtpPacket] = []
        self._release(float("inf"), out)
        return out

    def _start(self, packet: RtpPacket) -> None:
        """A new source: init_seq of A.1; playout starts at this packet."""
        seq = packet.sequence_number
        self.ssrc = packet.ssrc
        self._base_seq = seq
        self._max_seq = seq
        self._cycles = 0
        self._bad_seq = RTP_SEQ_MOD + 1
        self._bad_packet = None
        self.received = 0
        self._expected_prior = 0
        self._received_prior = 0
        self._next = seq
        self._history = 0

    def _resync(self, packet: RtpPacket, now: float) -> list[RtpPacket]:
        """Two sequential packets after a jump: the sender restarted its sequence (A.1)."""
        out = self.flush()
        previous = self._bad_packet
        self._start(packet)
        if previous is not None:
            out.append(previous)
        self.received = 1
        self._next = packet.sequence_number + 1
        self._history = 1
        # the timestamps may have jumped too: restart jitter's reference point
        self._last_ts = packet.timestamp
        self._last_arrival = now * self.clock_rate
        out.append(packet)
        return out

    def _release(self, now: float, out: list[RtpPacket]) -> None:
        held = self._held
        while held:
            nxt = self._next
            entry = held.pop(nxt, None)
            if entry is not None:
                out.append(entry[0])
                self._next = nxt + 1
                self._history = ((self._history << 1) | 1) & _HISTORY_MASK
                continue
            waited = now - min(at for _, at in held.values())
            if max(held) - nxt <= self.reorder_window and waited < self.max_hold:
                return
            first = min(held)  # give up on nxt .. first - 1: they count as late if they come
            gap = first - nxt
            self._history = (self._history << gap) & _HISTORY_MASK if gap < _HISTORY_BITS else 0
            self._next = first

    def _foreign(self, packet: RtpPacket, now: float) -> list[RtpPacket]:
        """A packet of another SSRC: count towards a switch of source (RFC 3550 §8.2)."""
        candidates = self._candidates
        if candidates:
            last = candidates[-1][0]
            follows = (
                last.ssrc == packet.ssrc
                and packet.sequence_number == (last.sequence_number + 1) & 0xFFFF
            )
            if not follows:
                candidates.clear()
        candidates.append((packet, now))
        self.foreign += 1
        if len(candidates) < self.ssrc_switch_after:
            return []
        out = self.flush()
        pending = list(candidates)
        candidates.clear()
        self.foreign -= len(pending)  # they play after all
        self.ssrc_changes += 1
        self._reset()
        for queued, at in pending:
            out += self.feed(queued, at)
        return out

    # ------------------------------------------------------------------ statistics

    @property
    def extended_highest_sequence(self) -> int:
        """Highest sequence number received, with the wrap count in the high bits (A.1)."""
        return self._cycles + self._max_seq

    @property
    def expected(self) -> int:
        """Packets expected from the first to the highest sequence number (A.3)."""
        if self.ssrc is None:
            return 0
        return self._cycles + self._max_seq - self._base_seq + 1

    @property
    def cumulative_lost(self) -> int:
        """Expected minus received (A.3); negative when duplicates outnumber losses."""
        return self.expected - self.received

    @property
    def jitter(self) -> float:
        """Interarrival jitter estimate in timestamp units (A.8)."""
        return self._jitter

    def on_sender_report(self, ssrc: int, ntp_timestamp: int, now: float) -> None:
        """Remember an SR of our source, for LSR/DLSR in the next report (§6.4.1)."""
        if ssrc == self.ssrc:
            self._lsr = ntp_middle(ntp_timestamp)
            self._lsr_at = now

    def report_block(self, now: float) -> ReportBlock | None:
        """The reception report block for our source (§6.4.1, A.3); None before any packet.

        Starts a new interval: ``fraction_lost`` is since the previous call.
        """
        if self.ssrc is None:
            return None
        expected = self.expected
        expected_interval = expected - self._expected_prior
        received_interval = self.received - self._received_prior
        self._expected_prior = expected
        self._received_prior = self.received
        lost_interval = expected_interval - received_interval
        fraction = 0
        if expected_interval > 0 and lost_interval > 0:
            fraction = (lost_interval << 8) // expected_interval
        dlsr = 0
        if self._lsr:
            dlsr = max(0, int((now - self._lsr_at) * 65536))
        return ReportBlock(
            ssrc=self.ssrc,
            fraction_lost=fraction,
            cumulative_lost=self.cumulative_lost,
            highest_sequence=self.extended_highest_sequence & 0xFFFFFFFF,
            jitter=int(self._jitter),
            lsr=self._lsr,
            dlsr=dlsr,
        )
