"""DTMF digits from the three transports of docs/telephony.md, each reported once per key press.

* :class:`Rfc4733Receiver`: RTP telephone-events (RFC 4733 §2.3 payload, §2.5.2 receiver).
* :class:`ToneDetector` / :class:`ToneDetectorBank`: in-band tones in 8 kHz audio, one call or
  many calls batched (ITU-T Q.23 frequencies, Q.24 receiver tolerances).
* :func:`parse_dtmf_relay`: SIP INFO bodies (``application/dtmf-relay``, ``application/dtmf``).

Sans-IO: bytes, timestamps and sample arrays in; digits (``"0"``-``"9"``, ``"*"``, ``"#"``,
``"A"``-``"D"``) out.
"""

from __future__ import annotations

import cmath
import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from callhook.media.tones import COLUMN_HZ, DBM0_DBFS, FULL_SCALE, KEYPAD, ROW_HZ

#: RFC 4733 §3.2: events 0-15 are the DTMF keys, in this order.
EVENT_DIGITS: Final = "0123456789*#ABCD"

# ---------------------------------------------------------------------------------------------
# RFC 4733 telephone-events


@dataclass
class _Press:
    event: int
    ended: bool
    duration: int
    last: float


class Rfc4733Receiver:
    """Key presses from RTP telephone-event payloads (RFC 4733), one digit per press.

    A press is identified by its RTP timestamp: every packet of an event
    carries the timestamp of the event's start (§2.3, §2.5.1), duration
    updates and the end packets included. The digit is reported at the
    *first* packet of a press that arrives, whichever it is, so a press whose
    end packets are all lost still counts, and so does one whose start
    packets are lost. Later packets of the same
    press report nothing: duration updates, the end packet and its (usually
    three, §2.5.1.4) retransmissions, packets repeated with the same sequence
    number (SIPp's ``dtmf_2833_*.pcap``), late or reordered copies.

    Also handled:

    * a long press split into segments (§2.5.1.3, §2.5.2.3): a segment whose
      timestamp is the previous segment's timestamp plus its duration,
      same event, previous not ended, continues the same press;
    * the same stream replayed (e.g. SIPp playing one pcap twice): after a
      press has ended, a non-end packet with the same timestamp whose duration
      is less than half the ended duration is a new press;
    * presses are forgotten after :attr:`FORGET_SECONDS` without packets, so
      a reused timestamp after that is a new press.

    Events 0-15 are digits (§3.2); others (16 flash, tones of RFC 4734) are
    ignored. Only the first 4-byte event block of the payload is read;
    several events in one packet (§2.5.1.5, §2.5.2.4) come with RFC 2198
    redundancy, which the RTP layer unwraps before calling :meth:`feed`.
    ``now`` is the media clock in seconds, used only for forgetting.
    """

    FORGET_SECONDS: Final = 5.0
    MAX_PRESSES: Final = 16

    def __init__(self) -> None:
        self._presses: dict[int, _Press] = {}

    def reset(self) -> None:
        """Forget all presses (a new RTP stream: new SSRC)."""
        self._presses.clear()

    def feed(self, payload: bytes, timestamp: int, now: float) -> str | None:
        """The digit of a new key press, or None (a later packet of a press, or not a digit)."""
        if len(payload) < 4:
            return None
        event = payload[0]
        if event >= len(EVENT_DIGITS):
            return None
        end = bool(payload[1] & 0x80)
        duration = (payload[2] << 8) | payload[3]
        ts = timestamp & 0xFFFFFFFF
        press = self._presses.get(ts)
        if (
            press is not None
            and press.event == event
            and now - press.last <= self.FORGET_SECONDS
            and not (press.ended and not end and duration < press.duration // 2)
        ):
            press.last = now
            press.ended = press.ended or end
            press.duration = max(press.duration, duration)
            return None
        if press is None and self._continues(event, ts, now):
            self._remember(ts, _Press(event, end, duration, now))
            return None
        self._remember(ts, _Press(event, end, duration, now))
        return EVENT_DIGITS[event]

    def feed_late(self, payload: bytes, timestamp: int, now: float) -> str | None:
        """:meth:`feed` for a packet the RTP layer's reorder window had given up on (it
        came after later packets were played): the key was still pressed, so its digit
        counts when no packet of the same press came before it. A known press is left as
        it is: the replay rule of :meth:`feed` (a short duration after the end) is for
        packets in order, and a late duration update would pass for a new press."""
        press = self._presses.get(timestamp & 0xFFFFFFFF)
        if press is not None and now - press.last <= self.FORGET_SECONDS:
            return None
        return self.feed(payload, timestamp, now)

    def _continues(self, event: int, ts: int, now: float) -> bool:
        for start, p in self._presses.items():
            if (
                p.event == event
                and not p.ended
                and p.duration > 0
                and (ts - start) & 0xFFFFFFFF == p.duration
                and now - p.last <= self.FORGET_SECONDS
            ):
                return True
        return False

    def _remember(self, ts: int, press: _Press) -> None:
        presses = self._presses
        presses.pop(ts, None)
        if len(presses) >= self.MAX_PRESSES:
            for old in [k for k, p in presses.items() if press.last - p.last > self.FORGET_SECONDS]:
                del presses[old]
            while len(presses) >= self.MAX_PRESSES:
                del presses[min(presses, key=lambda k: presses[k].last)]
        presses[ts] = press


# ---------------------------------------------------------------------------------------------
# SIP INFO


def parse_dtmf_relay(content_type: str, body: bytes) -> str | None:
    """The digit in a SIP INFO body, or None.

    ``application/dtmf-relay`` carries ``Signal=5`` and ``Duration=160`` lines
    (a de-facto format, Cisco's); ``application/dtmf`` carries the key alone
    (``5``). Either may give the key as its RFC 4733 event number (``10`` for
    ``*``, ``11`` for ``#``); flash (16) and anything else are None.
    """
    media_type = content_type.split(";", 1)[0].strip().lower()
    text = body.decode("latin-1")
    if media_type == "application/dtmf-relay":
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip().lower() == "signal":
                return _signal(value)
        return None
    if media_type == "application/dtmf":
        return _signal(text)
    return None


def _signal(value: str) -> str | None:
    v = value.strip().upper()
    if len(v) == 1 and v in EVENT_DIGITS:
        return v
    # ASCII digits only, and few: str.isdigit() is also true of "²" and of numbers
    # too long for int(), and the body is the peer's (latin-1 decoded) bytes.
    if v.isascii() and v.isdigit() and len(v) <= 3 and int(v) < len(EVENT_DIGITS):
        return EVENT_DIGITS[int(v)]
    return None


# ---------------------------------------------------------------------------------------------
# In-band tones

FS: Final = 8000
FRAME: Final = 160  # samples per 20 ms frame
SUB: Final = 40  # sub-block (5 ms): the hop between analysis windows
WINDOW: Final = 160  # analysis window (20 ms)
HOPS: Final = FRAME // SUB  # windows per frame
HISTORY: Final = WINDOW - SUB  # samples kept from the previous frame
BUFFER: Final = HISTORY + FRAME  # 7 sub-blocks

#: Q.24 frequency tolerance: accept ±1.5 %, reject beyond ±3.5 %; the cut is half-way.
TOLERANCE: Final = 0.025
#: Lowest accepted level per tone (Q.24: operate down to about -25 dBm0; margin below).
MIN_LEVEL_DBM0: Final = -32.0
#: Twist limits (Q.24): the low-group tone may be up to 8 dB louder than the high one
#: ("normal" twist) and up to 4 dB quieter ("reverse" twist).
NORMAL_TWIST_DB: Final = 8.0
REVERSE_TWIST_DB: Final = 4.0
#: Share of the window's energy the two tones must hold (rejects speech, noise, music).
PURITY: Final = 0.8
#: Each tone's weakest 80-sample block against its mean over the window: a tone must fill the
#: window (about 80 % of it or more), which makes durations count and rejects gliding speech.
STEADY: Final = 0.45
#: Valid windows (5 ms apart) in a row before a digit is reported: a tone of 38 ms or more is
#: reported, one of 32 ms or less is not, in between it depends on how the tone falls on the
#: frames (Q.24: a 40 ms tone must count; 30 ms is too short).
MIN_ON_HOPS: Final = 5
#: Invalid windows in a row that end a press: a drop-out of up to 22 ms (one lost 20 ms packet
#: played as silence) is bridged, a pause of 28 ms or more separates two presses of the same
#: key (Q.24: a 40 ms pause must count).
MIN_OFF_HOPS: Final = 8
#: Prefilter on the newest window (the frame itself): its energy at the 8 frequencies against
#: its total. When it fails, no window of the frame can hold 80 % of a tone (the newest window
#: holds most of one that is starting), so unless a key is being timed or is down, the frame
#: is skipped.
_GATE: Final = 0.35

_FREQS = np.array(ROW_HZ + COLUMN_HZ, dtype=np.float64)
_OMEGA = 2.0 * np.pi * _FREQS / FS
_KEYS: Final = "".join(KEYPAD)  # row * 4 + column


def _basis(n: int, scale: float) -> npt.NDArray[np.float64]:
    t = np.arange(n, dtype=np.float64)[:, None] * _OMEGA[None, :]
    return np.ascontiguousarray(np.hstack([np.cos(t), -np.sin(t)]) * scale)


# |window @ _B160|^2 (cos and sin halves summed) is the window energy of a tone exactly at each
# frequency: a sine of amplitude A gives |DFT160| = 80 A and energy 80 A^2.
_B160: Final = _basis(WINDOW, 1.0 / math.sqrt(80.0))
# Sub-block DFTs; two adjacent ones rotated and summed give an 80-point DFT Z with |Z|^2 equal
# to a tone's energy over 160 samples (|DFT80| = 40 A, energy 80 A^2).
_B40: Final = _basis(SUB, 1.0 / math.sqrt(20.0))
_ROT: Final = np.exp(-1j * _OMEGA * SUB)  # phase of each frequency over one sub-block
_ROT2: Final = _ROT * _ROT
_HZ_PER_RADIAN: Final = FS / (2.0 * math.pi * SUB)
_MIN_ENERGY: Final = WINDOW * FULL_SCALE**2 * math.pow(10.0, (MIN_LEVEL_DBM0 + DBM0_DBFS) / 10.0)
_NORMAL_TWIST: Final = math.pow(10.0, NORMAL_TWIST_DB / 10.0)
_REVERSE_TWIST: Final = math.pow(10.0, REVERSE_TWIST_DB / 10.0)
_FREQ_LIST: Final = [float(f) for f in _FREQS]


def _gain80(offset_hz: float) -> float:
    """Power gain of an 80-point DFT for a tone ``offset_hz`` from its frequency."""
    x = math.pi * offset_hz / FS
    if abs(x) < 1e-12:
        return 1.0
    return (math.sin(80.0 * x) / (80.0 * math.sin(x))) ** 2


def _classify(buf: npt.NDArray[np.float64]) -> list[int]:
    """Key index (row * 4 + column) or -1 for each of the frame's :data:`HOPS` windows.

    ``buf`` holds the last :data:`BUFFER` samples; window ``w`` is
    ``buf[40 w : 40 w + 160]``. The strongest row and column are picked on
    160-point DFTs (rows are only 73 Hz apart); the frequency of each is
    measured from the phase advance between 80-sample DFTs 40 samples apart
    (unambiguous within ±100 Hz); their energies are measured on those
    blocks and corrected for the measured offset; then the Q.24 tests apply:
    frequency, level, twist, purity, steadiness.
    """
    blocks = buf.reshape(BUFFER // SUB, SUB)
    m = blocks @ _B40
    y = m[:, :8] + 1j * m[:, 8:]  # sub-block DFTs (7, 8)
    z = y[:-1] + _ROT * y[1:]  # 80-sample DFTs, 40 apart (6, 8)
    full = z[:-2] + _ROT2 * z[2:]  # 160-sample DFTs of the windows (4, 8)
    power = (full.real**2 + full.imag**2).tolist()
    zz = z.real**2 + z.imag**2
    q = z[1:] * z[:-1].conj() * _ROT  # phase = frequency offset * 2 pi * 40 / FS (5, 8)
    advance = (q[:-1] + q[1:]).tolist()
    block_energy = ((zz[:-2] + zz[1:-1] + zz[2:]) / 3.0).tolist()
    block_min = np.minimum(np.minimum(zz[:-2], zz[1:-1]), zz[2:]).tolist()
    e = np.einsum("ij,ij->i", blocks, blocks).tolist()
    out = []
    for w in range(HOPS):
        pw = power[w]
        r = max(range(4), key=pw.__getitem__)
        c = max(range(4, 8), key=pw.__getitem__)
        total = e[w] + e[w + 1] + e[w + 2] + e[w + 3]
        out.append(_key(r, c, advance[w], block_energy[w], block_min[w], total))
    return out


def _key(
    r: int,
    c: int,
    advance: list[complex],
    block: list[float],
    block_min: list[float],
    total: float,
) -> int:
    er, ec = block[r], block[c]
    if block_min[r] < STEADY * er or block_min[c] < STEADY * ec or er <= 0.0 or ec <= 0.0:
        return -1
    dr = cmath.phase(advance[r]) * _HZ_PER_RADIAN
    dc = cmath.phase(advance[c]) * _HZ_PER_RADIAN
    if abs(dr) > TOLERANCE * _FREQ_LIST[r] or abs(dc) > TOLERANCE * _FREQ_LIST[c]:
        return -1
    er /= _gain80(dr)
    ec /= _gain80(dc)
    if er < _MIN_ENERGY or ec < _MIN_ENERGY:
        return -1
    if er > ec * _NORMAL_TWIST or ec > er * _REVERSE_TWIST:
        return -1
    if er + ec < PURITY * total:
        return -1
    return r * 4 + (c - 4)


class _Tracker:
    """Windows' verdicts -> key presses: on after MIN_ON_HOPS, off after MIN_OFF_HOPS."""

    __slots__ = ("candidate", "gap", "on", "run")

    def __init__(self) -> None:
        self.candidate = -1  # key seen in the last window(s)
        self.run = 0  # windows in a row with that key
        self.on = -1  # key reported and still down
        self.gap = 0  # windows in a row without the key that is down

    @property
    def rest(self) -> bool:
        return self.on < 0 and self.candidate < 0

    def hop(self, key: int) -> int | None:
        if key >= 0 and key == self.candidate:
            self.run += 1
        else:
            self.candidate = key
            self.run = 1 if key >= 0 else 0
        if self.on >= 0:
            if key == self.on:
                self.gap = 0
                return None
            self.gap += 1
            if self.gap < MIN_OFF_HOPS:
                return None
            self.on = -1
        if self.candidate >= 0 and self.run >= MIN_ON_HOPS:
            self.on = self.candidate
            self.gap = 0
            return self.on
        return None


class ToneDetector:
    """In-band DTMF on one call's 8 kHz audio, analysed in 20 ms frames of 160 samples.

    Every frame gives four analysis windows of 20 ms, 5 ms apart. A window
    holds a key when its strongest low-group and high-group tones are within
    ±2.5 % of their nominal frequencies (Q.24: accept ±1.5 %, reject ±3.5 %),
    each at least -32 dBm0 (Q.24 operates down to about -25 dBm0), with
    twist within +8/-4 dB, and together at least 80 % of the window's energy
    (speech, music and noise spread theirs), steadily over the window. A key
    is reported once, after 5 valid windows in a row (tones of 38 ms and
    more are reported, tones of 32 ms and less are not); it is released by 8
    windows in a row without it (a pause of 28 ms or more separates two
    presses of the same key; a drop-out of up to 22 ms, one lost packet,
    does not).

    Cost: a prefilter on the frame (its energy at the 8 frequencies against
    its total, one 160 x 16 matrix product) turns most frames away in about
    4 µs; frames that pass it, and frames while a key is down, take about
    25 µs. :class:`ToneDetectorBank` runs the prefilter for many calls at once.
    """

    def __init__(self) -> None:
        self._buf = np.zeros(BUFFER, dtype=np.float64)
        self._current = self._buf[HISTORY:]
        self._tracker = _Tracker()
        # Samples short of a whole frame, kept for the next call: a peer's packets need
        # not hold 20 ms (a 30 ms ptime, a short or odd-sized packet from anyone).
        self._partial: npt.NDArray[np.int16] = np.zeros(0, dtype=np.int16)

    @property
    def key_down(self) -> bool:
        """A key press was reported and its tone has not yet been gone long enough to end
        it (:data:`MIN_OFF_HOPS` windows after the tone, the press is over)."""
        return self._tracker.on >= 0

    def reset(self) -> None:
        self._buf[:] = 0.0
        self._tracker = _Tracker()
        self._partial = np.zeros(0, dtype=np.int16)

    def feed(self, frame: npt.NDArray[np.int16], candidate: bool | None = None) -> str | None:
        """The digit of a key press recognised in these samples, or None.

        Any number of samples is taken; they are analysed in 20 ms frames, and what
        is short of a frame waits for the next call (the last digit recognised is
        returned if one call completes several frames).

        ``candidate``: the prefilter's verdict on ``frame`` when it is one whole frame
        and was judged already, with every other call's (:func:`candidates`)."""
        if len(frame) == FRAME and not len(self._partial):
            return self._frame(frame, candidate)  # the usual case: one whole frame
        samples = np.concatenate((self._partial, frame)) if len(self._partial) else frame
        whole = len(samples) - len(samples) % FRAME
        digit = None
        for start in range(0, whole, FRAME):
            digit = self._frame(samples[start : start + FRAME]) or digit
        self._partial = np.array(samples[whole:], dtype=np.int16)
        return digit

    def _frame(self, frame: npt.NDArray[np.int16], candidate: bool | None = None) -> str | None:
        """The digit of a key press recognised in one 160-sample frame, or None."""
        buf = self._buf
        buf[:HISTORY] = buf[FRAME:]
        buf[HISTORY:] = frame
        if candidate is None:
            current = self._current
            m = current @ _B160
            candidate = float(m @ m) > _GATE * float(current @ current) + _MIN_ENERGY
        tracker = self._tracker
        if not candidate and tracker.rest:
            return None
        digit = None
        for key in _classify(buf):
            pressed = tracker.hop(key)
            if pressed is not None:
                digit = _KEYS[pressed]
        return digit


def candidates(frames: npt.NDArray[np.int16]) -> list[bool]:
    """The prefilter of :class:`ToneDetector` over many 20 ms frames at once (rows of
    ``frames``, shape ``(n, 160)``): which may hold a starting or sounding key press. A
    frame it turns away needs no more work unless its call has a key being timed."""
    current = frames.astype(np.float64)
    m = current @ _B160
    energy = np.einsum("ij,ij->i", current, current)
    passed: list[bool] = (np.einsum("ij,ij->i", m, m) > _GATE * energy + _MIN_ENERGY).tolist()
    return passed


class ToneDetectorBank:
    """:class:`ToneDetector` for ``calls`` calls at once: one frame of each per tick.

    :meth:`feed_many` takes a ``(calls, 160)`` int16 array (row ``i`` is call
    ``i``'s frame; give silence for idle slots) and returns the digits
    recognised, by row. Detection is the same as :class:`ToneDetector`'s;
    the prefilter runs over all calls in one matrix product, and only calls
    with a candidate window or a key down go through Python.
    """

    def __init__(self, calls: int) -> None:
        self._buf = np.zeros((calls, BUFFER), dtype=np.float64)
        self._trackers = [_Tracker() for _ in range(calls)]
        self._busy = np.zeros(calls, dtype=np.bool_)

    @property
    def calls(self) -> int:
        return len(self._trackers)

    def reset(self, call: int) -> None:
        """Make slot ``call`` fresh (a new call takes it)."""
        self._buf[call] = 0.0
        self._trackers[call] = _Tracker()
        self._busy[call] = False

    def feed_many(self, frames: npt.NDArray[np.int16]) -> dict[int, str]:
        """Digits recognised in this tick's frames: {row: digit}, usually empty."""
        buf = self._buf
        buf[:, :HISTORY] = buf[:, FRAME:]
        buf[:, HISTORY:] = frames
        current = buf[:, HISTORY:]
        m = current @ _B160
        gate = (
            np.einsum("ij,ij->i", m, m)
            > _GATE * np.einsum("ij,ij->i", current, current) + _MIN_ENERGY
        )
        busy = self._busy
        out: dict[int, str] = {}
        for i in np.flatnonzero(gate | busy).tolist():
            tracker = self._trackers[i]
            for key in _classify(buf[i]):
                pressed = tracker.hop(key)
                if pressed is not None:
                    out[i] = _KEYS[pressed]
            busy[i] = not tracker.rest
        return out
