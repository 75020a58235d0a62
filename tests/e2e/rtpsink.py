"""The caller's ear for SIPp calls: a UDP socket in the test that keeps every RTP packet.

SIPp's INVITE names this socket as its media address, so callhook sends the
call's audio (and RFC 4733 events) here; the test then checks what a caller
would have heard, frame by frame, with the packets' own sequence numbers.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np
import numpy.typing as npt

from callhook.media import g711
from callhook.media.g711 import Law

EVENT_NAMES = "0123456789*#ABCD"


@dataclass(frozen=True)
class Packet:
    """One RTP packet as it arrived."""

    arrived: float
    payload_type: int
    marker: bool
    sequence: int
    timestamp: int
    payload: bytes


@dataclass(frozen=True)
class Event:
    """An RFC 4733 telephone-event packet (§2.3)."""

    arrived: float
    timestamp: int
    digit: str
    end: bool
    volume: int
    duration: int
    marker: bool


@dataclass
class RtpSink(asyncio.DatagramProtocol):
    """Collects the RTP packets sent to ``127.0.0.1:port``."""

    packets: list[Packet] = field(default_factory=list)
    port: int = 0
    _transport: asyncio.DatagramTransport | None = None

    async def __aenter__(self) -> RtpSink:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: self, local_addr=("127.0.0.1", self.port)
        )
        self._transport = transport
        self.port = transport.get_extra_info("sockname")[1]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._transport is not None:
            self._transport.close()

    def send(self, data: bytes, to: tuple[str, int]) -> None:
        """A datagram from this socket (a phone's RTP comes from where it hears)."""
        assert self._transport is not None
        self._transport.sendto(data, to)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        if len(data) < 12 or data[0] >> 6 != 2:
            return
        marker, pt = bool(data[1] & 0x80), data[1] & 0x7F
        seq, ts = struct.unpack_from("!HI", data, 2)
        offset = 12 + 4 * (data[0] & 0x0F)
        loop = asyncio.get_running_loop()
        self.packets.append(Packet(loop.time(), pt, marker, seq, ts, data[offset:]))

    def audio(self, law: Law = "ulaw", payload_type: int = 0) -> npt.NDArray[np.int16]:
        """The audio packets' samples, in sequence order (wrap-around aware)."""
        frames = [p for p in self.packets if p.payload_type == payload_type]
        if not frames:
            return np.zeros(0, dtype=np.int16)
        first = frames[0].sequence
        frames.sort(key=lambda p: (p.sequence - first) & 0xFFFF)
        return g711.decode(law, b"".join(p.payload for p in frames))

    def events(self, payload_type: int = 101) -> list[Event]:
        """The telephone-event packets received, in arrival order."""
        out = []
        for p in self.packets:
            if p.payload_type != payload_type or len(p.payload) < 4:
                continue
            code, flags, duration = struct.unpack_from("!BBH", p.payload)
            digit = EVENT_NAMES[code] if code < len(EVENT_NAMES) else f"?{code}"
            out.append(
                Event(
                    p.arrived,
                    p.timestamp,
                    digit,
                    bool(flags & 0x80),
                    flags & 0x3F,
                    duration,
                    p.marker,
                )
            )
        return out


def dominant_hz(samples: npt.NDArray[np.int16], window: float = 0.2) -> list[float]:
    """The loudest frequency of each ``window`` seconds of 8 kHz audio (0 for silence)."""
    n = int(8000 * window)
    out = []
    for start in range(0, len(samples) - n + 1, n):
        chunk = samples[start : start + n].astype(np.float64)
        if np.sqrt(np.mean(chunk**2)) < 300:
            out.append(0.0)
            continue
        spectrum = np.abs(np.fft.rfft(chunk * np.hanning(n)))
        out.append(float(np.argmax(spectrum)) * 8000 / n)
    return out
