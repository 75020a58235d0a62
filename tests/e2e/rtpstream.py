"""Caller audio for SIPp: one continuous RTP stream written as a pcap for ``play_pcap_audio``.

A stream is silence with things placed on it at given times: RFC 4733
telephone-events (as a phone sends them: 5 packets, then the end packet 3
times), in-band DTMF tones in the audio, or speech from a WAV file; stalls,
where the sender is held up and then sends what it held all at once; quiet spells,
where a phone with silence suppression sends nothing (its timestamps run on); and a
new source (another SSRC, its timestamps elsewhere), as a transfer or a relay gives. SIPp
replays the packets with their pcap timing from its media port to the media
address in our SDP answer (it rewrites the addresses).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from callhook.media import g711, tones

PT_DTMF = 101
SSRC = 0x5EED1234
FRAME = 160
EVENT_CODES = {
    **{str(d): d for d in range(10)},
    "*": 10,
    "#": 11,
    "A": 12,
    "B": 13,
    "C": 14,
    "D": 15,
}


@dataclass
class Stream:
    """What the caller sends, on a 20 ms grid."""

    seconds: float
    law: str = "ulaw"
    payload_type: int = 0
    events: list[tuple[float, str]] = field(default_factory=list)  # (time, digit) RFC 4733
    audio: list[tuple[float, npt.NDArray[np.int16]]] = field(default_factory=list)
    stalls: list[tuple[float, float]] = field(default_factory=list)  # (time, seconds)
    quiet: list[tuple[float, float]] = field(default_factory=list)  # (time, seconds) unsent
    switch: tuple[float, int] | None = None  # (time, timestamp offset): another SSRC from then

    def rfc4733(self, digits: str, at: float, spacing: float = 0.5) -> Stream:
        for i, digit in enumerate(digits):
            self.events.append((at + i * spacing, digit))
        return self

    def inband(self, digits: str, at: float, spacing: float = 0.3, tone: float = 0.1) -> Stream:
        for i, digit in enumerate(digits):
            self.audio.append((at + i * spacing, tones.dtmf_tone(digit, tone, level_dbfs=-12.0)))
        return self

    def speech(self, samples: npt.NDArray[np.int16], at: float) -> Stream:
        self.audio.append((at, samples))
        return self

    def stall(self, at: float, seconds: float) -> Stream:
        """The packets due from ``at`` for ``seconds`` are sent at its end, in one burst
        (a phone or a link held up), their RTP timestamps and numbers unchanged."""
        self.stalls.append((at, seconds))
        return self

    def suppress(self, at: float, seconds: float) -> Stream:
        """No packet is sent from ``at`` for ``seconds`` (silence suppression: nothing is
        placed there); the RTP timestamps after it run on from before."""
        self.quiet.append((at, seconds))
        return self

    def new_source(self, at: float, offset: int) -> Stream:
        """From ``at`` the packets come from another SSRC, their timestamps ``offset`` from
        where the first source's would be, their sequence numbers elsewhere."""
        self.switch = (at, offset)
        return self

    def _sent_at(self, t: float) -> float:
        for at, seconds in self.stalls:
            if at <= t < at + seconds:
                return at + seconds
        return t

    def pcm(self) -> npt.NDArray[np.int16]:
        """The audio part of the stream (what a recording of it should hold)."""
        total = np.zeros(round(self.seconds * 8000), dtype=np.int32)
        for at, samples in self.audio:
            start = round(at * 8000)
            end = min(len(total), start + len(samples))
            total[start:end] += samples[: end - start]
        return np.clip(total, -32768, 32767).astype(np.int16)

    def sent(self) -> npt.NDArray[np.int16]:
        """The audio as the caller's packets carry it, decoded (what a recording can hold).

        That is :meth:`pcm` quantised by the stream's G.711 law, with silence
        in the 20 ms slots that carry telephone-events instead of audio.
        """
        law: g711.Law = "alaw" if self.law == "alaw" else "ulaw"
        codes = g711.encode_array(law, self.pcm())
        for slot in self._event_slots():
            codes[slot * FRAME : (slot + 1) * FRAME] = g711.SILENCE_CODE[law]
        return g711.decode_array(law, codes)

    def _event_slots(self) -> dict[int, tuple[str, int, int]]:
        """slot -> (digit, packet index in the press, first slot of the press)."""
        slots: dict[int, tuple[str, int, int]] = {}
        for at, digit in self.events:
            first = round(at / 0.02)
            for k in range(6):
                slots[first + k] = (digit, k, first)
        return slots

    def packets(self) -> list[tuple[float, bytes]]:
        encoded = g711.encode(self.law, self.pcm())  # type: ignore[arg-type]
        slots = self._event_slots()
        out: list[tuple[float, bytes]] = []
        seq, ts0 = 1000, 80000
        for slot in range(round(self.seconds / 0.02)):
            t = self._sent_at(slot * 0.02)
            if slot in slots:
                digit, k, first = slots[slot]
                code = EVENT_CODES[digit]
                ts = ts0 + first * FRAME
                if k < 5:
                    payload = struct.pack("!BBH", code, 10, FRAME * (k + 1))
                    out.append((t, _rtp(PT_DTMF, k == 0, seq, ts) + payload))
                    seq += 1
                else:
                    payload = struct.pack("!BBH", code, 0x80 | 10, FRAME * 5)
                    for r in range(3):  # the end packet three times, same sequence number
                        out.append((t + r * 0.0005, _rtp(PT_DTMF, False, seq, ts) + payload))
                    seq += 1
                continue
            if any(at <= slot * 0.02 < at + seconds - 1e-9 for at, seconds in self.quiet):
                continue
            chunk = encoded[slot * FRAME : (slot + 1) * FRAME]
            ts, ssrc, number = ts0 + slot * FRAME, SSRC, seq
            if self.switch is not None and slot * 0.02 >= self.switch[0] - 1e-9:
                ts, ssrc, number = ts + self.switch[1], SSRC ^ 0xFFFF, seq + 20_000
            out.append((t, _rtp(self.payload_type, slot == 0, number, ts, ssrc) + chunk))
            seq += 1
        return out

    def write_pcap(self, path: Path) -> Path:
        with path.open("wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
            for t, rtp in self.packets():
                frame = _frame(rtp)
                sec, usec = 1_700_000_000 + int(t), round((t - int(t)) * 1e6)
                if usec >= 1_000_000:
                    sec, usec = sec + 1, usec - 1_000_000
                f.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)
        return path


def _rtp(pt: int, marker: bool, seq: int, ts: int, ssrc: int = SSRC) -> bytes:
    return struct.pack(
        "!BBHII", 0x80, (0x80 if marker else 0) | pt, seq & 0xFFFF, ts & 0xFFFFFFFF, ssrc
    )


def _frame(rtp: bytes) -> bytes:
    udp = struct.pack("!HHHH", 6000, 10000, 8 + len(rtp), 0) + rtp
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, bytes(4), bytes(4)
    )
    checksum = sum(struct.unpack("!10H", ip))
    checksum = (checksum >> 16) + (checksum & 0xFFFF)
    checksum = ~(checksum + (checksum >> 16)) & 0xFFFF
    ip = ip[:10] + struct.pack("!H", checksum) + ip[12:]
    return b"\x00" * 12 + b"\x08\x00" + ip + udp
