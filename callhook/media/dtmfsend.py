"""DTMF out: the digits of a prompt (play media ``digits_to_play``) sent to the far end. Sans-IO.

Every digit takes the same slot of the prompt's timeline, :data:`DIGIT_SECONDS`
(200 ms, ten 20 ms ticks): :data:`TONE_TICKS` of tone (100 ms), then
:data:`GAP_TICKS` of silence (100 ms) before whatever comes next: the next
digit, more of the prompt, the end of the prompt. Both are well inside the
receiver tolerances of ITU-T Q.24 (a tone or a pause of 40 ms must count)
and what telephones send, so any receiver takes each digit exactly once.
The digit is sent one of two ways, as the call's SDP decided:

* **RFC 4733 telephone-events** when the peer negotiated them: one event per
  digit, tick by tick (:class:`EventTone`, driven by the media session);
* **in-band tones** otherwise: the ITU-T Q.23 pair in the audio
  (:func:`inband`), the low-group tone at :data:`LOW_DBM0`, the high-group
  tone :data:`TWIST_DB` louder, as telephone sets pre-emphasise it.

The event's volume field (:data:`VOLUME`) states the in-band level, so both
ways describe the same tone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from callhook.media import g711, tones
from callhook.media.dtmf import EVENT_DIGITS

#: Samples in one 20 ms tick at 8 kHz (the RTP timestamp units of telephone-event/8000).
TICK_SAMPLES: Final = 160
#: Ticks of tone per digit (100 ms; Q.24: at least 40 ms).
TONE_TICKS: Final = 5
#: Ticks of silence after each digit (100 ms; Q.24: a pause of at least 40 ms).
GAP_TICKS: Final = 5
#: One digit's slot in the prompt.
DIGIT_TICKS: Final = TONE_TICKS + GAP_TICKS
DIGIT_SECONDS: Final = DIGIT_TICKS * 0.02
#: The event's length in RTP timestamp units, the final value of its duration field.
TONE_SAMPLES: Final = TONE_TICKS * TICK_SAMPLES
#: RFC 4733 §2.5.1.4: the final packet of an event is sent three times in all.
END_PACKETS: Final = 3
#: Level of the low-group tone, and the event's volume field (RFC 4733 §2.3.4: the
#: tone's power in dBm0 with the sign dropped; 10 is -10 dBm0).
LOW_DBM0: Final = -10.0
VOLUME: Final = 10
#: The high-group tone is this much louder than the low-group one: the "reverse twist"
#: of telephone sets, well within what Q.24 receivers (callhook's accepts 4 dB) take.
TWIST_DB: Final = 2.0
#: Raised-cosine ramps at both ends of an in-band tone, so it starts and stops without a click.
RAMP_SECONDS: Final = 0.002


@dataclass(frozen=True, slots=True)
class Digits:
    """A part of a prompt: DTMF digits to send (``0-9 * # A-D``), one slot each."""

    digits: str

    def __post_init__(self) -> None:
        bad = [d for d in self.digits if d not in EVENT_DIGITS]
        if bad or not self.digits:
            raise ValueError(f"not DTMF digits: {self.digits!r}")

    @property
    def seconds(self) -> float:
        return len(self.digits) * DIGIT_SECONDS


def event_payload(digit: str, *, end: bool, duration: int, volume: int = VOLUME) -> bytes:
    """The 4-byte telephone-event payload (RFC 4733 §2.3): event, E bit, volume, duration."""
    return bytes(
        (EVENT_DIGITS.index(digit), (0x80 if end else 0) | volume, duration >> 8, duration & 0xFF)
    )


class EventTone:
    """One digit sent as an RFC 4733 telephone-event, one packet per 20 ms tick.

    The media session asks :meth:`next_packet` once per tick while
    :attr:`done` is false, and sends nothing else in those ticks (no audio
    while the event is in progress: the event stands for the tone, and the
    receiver plays it instead of the audio).

    The packets: all carry :attr:`timestamp`, the RTP timestamp of the tick
    the event started in (§2.4.1, §2.5.1.2); the first has the marker bit
    (§2.4.2); each gives the duration so far (§2.3.5: 160, 320, ... up to
    :data:`TONE_SAMPLES`, one update per 20 ms tick, the audio's packet
    interval, as §2.5.1.2 suggests); the last has the E bit (§2.5.1.2).
    §2.5.1.4: that end packet goes out :data:`END_PACKETS` times in all (this
    tick and the next two), always with the same final duration. §2.5.1.6:
    every packet, retransmissions included, takes the next RTP sequence
    number (the session's sender sees to that).

    :meth:`stop` ends the event early (the prompt was stopped or replaced):
    from the next tick the end packet is sent three times with the duration
    reached so far, as §2.5.1.2 and §2.5.1.4 say every event ends.
    """

    __slots__ = ("digit", "duration", "ending", "ends_sent", "timestamp")

    def __init__(self, digit: str, timestamp: int) -> None:
        self.digit = digit
        self.timestamp = timestamp
        self.duration = 0  # RTP timestamp units covered by the packets sent so far
        self.ending = False
        self.ends_sent = 0

    @property
    def done(self) -> bool:
        """All the event's packets have been produced (its three end packets included)."""
        return self.ends_sent >= END_PACKETS

    def next_packet(self) -> tuple[bytes, bool]:
        """This tick's payload and marker bit (call only while not :attr:`done`)."""
        first = self.duration == 0
        if not self.ending:
            self.duration += TICK_SAMPLES
            self.ending = self.duration >= TONE_SAMPLES
        if self.ending:
            self.ends_sent += 1
        payload = event_payload(self.digit, end=self.ending, duration=self.duration)
        return payload, first

    def stop(self) -> None:
        """End the event now: its next packets are the end packet (at most three)."""
        if self.duration == 0:
            self.ends_sent = END_PACKETS  # nothing was sent: there is no event to end
        self.ending = True


@lru_cache(maxsize=64)
def inband(digit: str, law: g711.Law) -> bytes:
    """One digit's slot as in-band audio in ``law``: 100 ms of its DTMF pair, 100 ms of silence."""
    tone = tones.dtmf_tone(
        digit,
        TONE_TICKS * 0.02,
        tones.dbm0_to_dbfs(LOW_DBM0),
        twist_db=TWIST_DB,
        ramp_seconds=RAMP_SECONDS,
    )
    return g711.encode(law, tone) + g711.silence(law, GAP_TICKS * TICK_SAMPLES)
