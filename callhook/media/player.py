"""What one call plays, 20 ms at a time: prompts of audio and digits, RFC 4733 events. Sans-IO.

Theory of operation
-------------------
The call's media session (:mod:`callhook.media.session`) asks its player once
per media tick for the tick's audio (:meth:`Player.next_frame`) and then for
an RFC 4733 event packet (:meth:`Player.event_packet`), which, when there is
one, goes out *instead of* the audio: no audio is sent while an event is in
progress, and the RTP sequence numbers run on across audio and events (the
session's RTP sender numbers both).

A prompt is a sequence of segments (:data:`Segment`): audio in the call's law,
or DTMF digits to send (:class:`~callhook.media.dtmfsend.Digits`, the play
media ``digits_to_play``), played in order on one timeline. Prompts can grow
while they play (:meth:`Player.append`, :meth:`Player.close`): speech is
synthesised sentence by sentence, and a prompt that runs out before its next
sentence plays silence (an underrun). Each digit takes 200 ms (``dtmfsend``):
when the peer negotiated telephone-event it goes out as one RFC 4733 event
(:class:`~callhook.media.dtmfsend.EventTone`), otherwise as an in-band DTMF
tone in the audio. A prompt stopped or replaced in the middle of an event still
ends it properly: its end packet goes out three times (RFC 4733 §2.5.1.4)
before any other audio. While in-band digits are sent, and for
:data:`ECHO_TAIL_TICKS` after, :attr:`Player.echo_ticks` is above zero: the
session ignores in-band digits heard from the caller then, because an echo of
callhook's own tones must not count as the caller's key presses (and barge in
on the play that sends them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from callhook.media import g711
from callhook.media.dtmfsend import (
    DIGIT_TICKS,
    END_PACKETS,
    GAP_TICKS,
    Digits,
    EventTone,
    inband,
)
from callhook.media.outlet import PlayerCore

Law = Literal["ulaw", "alaw"]

FRAME = 160  # samples (and G.711 bytes) in 20 ms at 8 kHz
#: Ticks after in-band digits were sent during which in-band digits heard are still
#: taken for their echo (200 ms after the last digit's slot, 300 ms after its tone: a
#: far end's echo path, its jitter buffer and the detector's 40 ms fit well inside).
ECHO_TAIL_TICKS = 10

#: The prompt id of digits relayed across a bridge (actions' prompt ids start at 1): its
#: end is no action's business.
RELAY = 0

#: A part of a prompt: audio (G.711 in the call's law), or DTMF digits to send.
Segment: TypeAlias = bytes | Digits

#: Silent ticks after a digit's event: its gap, less the ticks its end packet's two
#: retransmissions take (RFC 4733 §2.5.1.4), so a digit takes 200 ms either way.
_GAP_AFTER_EVENT = GAP_TICKS - (END_PACKETS - 1)


#: Ticks a prompt may wait for Python to catch up before its first frame (where it cannot
#: begin with silence instead), or before each of its digits (Player.hold_start).
MAX_HOLD = 25


class PromptError(Exception):
    """An item that cannot be played, and why (the prompt ends there)."""


@dataclass
class _Prompt:
    prompt_id: int
    audio: bytes = b""  # the audio playing now (G.711 in the call's law)
    pos: int = 0
    # What plays after ``audio``, in order.
    rest: deque[Segment] = field(default_factory=deque)
    # More is coming (text being synthesised sentence by sentence): running out
    # plays silence instead of ending the prompt.
    open: bool = False
    # Ticks it waited before its first frame, or its next digits (Player.hold_start).
    held: int = 0

    @property
    def exhausted(self) -> bool:
        return self.pos >= len(self.audio) and not self.rest


class Player(PlayerCore):
    """One call's prompts and outgoing digits (see the module docstring).

    ``events``: the peer negotiated telephone-event, so digits go out as RFC 4733
    events (else as in-band tones). The fields the media tick's usual packet reads
    (``silence``, ``echo_ticks``, the prompt and the event) live in C where the
    extension was built (:class:`~callhook.media.outlet.PlayerCore`).
    """

    def __init__(self, law: Law, events: bool) -> None:
        self.law = law
        self.events = events
        self.silence = g711.silence(law, FRAME)
        #: 20 ms frames a prompt had to wait for its next synthesised sentence.
        self.underruns = 0
        #: Ticks left in which in-band digits heard are the echo of our own.
        self.echo_ticks = 0
        self._prompt: _Prompt | None = None
        self._event: EventTone | None = None  # the RFC 4733 event being sent
        self._relay: list[Digits] = []  # digits to relay once the playing prompt ends
        self._begun: _Prompt | None = None  # the prompt that has made a frame
        self._hold = False  # this tick, the prompt waits (hold_start)

    # --- the tick ---------------------------------------------------------------------

    def next_frame(self, timestamp: int) -> tuple[bytes, int | None]:
        """This tick's audio (the prompt's next 20 ms, or silence) and the id of the
        prompt that finished with it (None). ``timestamp``: the media time of this tick
        (an event starting now starts there, RFC 4733 §2.4.1). While an event is in
        progress, :meth:`event_packet` goes out instead of this audio."""
        if self.echo_ticks:
            self.echo_ticks -= 1
        prompt = self._prompt
        if self._event is not None or prompt is None or self._hold:
            return self.silence, None
        # (A prompt's first frame is made here, never in C: C makes the next ones.)
        if self._begun is not prompt:
            self._begun = prompt
            prompt.held = 0  # (its digits may wait for Python too: hold_start)
        payload = self._frame(prompt, timestamp)
        if prompt.exhausted and not prompt.open and self._event is None:
            self._prompt = self._begun = None  # (its audio is let go)
            if self._relay:
                self.play(RELAY, self._relay)
                self._relay = []
            return payload, prompt.prompt_id
        return payload, None

    def hold_start(self, lead: int = 0) -> bool:
        """This tick's frame is made too late for its slot (the media thread's, Python
        being behind): a prompt about to begin, or digits about to start, must not begin
        partway into it (a prompt's first words, a digit's event without its first
        packets, or its tone cut).

        ``lead`` (0: none): the frames from this tick's slot to one the thread has still
        to run. A prompt that has not begun begins now with that much silence before its
        audio: the thread's cover (:func:`~callhook.media.outlet.cover_all`) takes its
        first frame to a slot to come, so a Python that stays behind does not delay it
        further. Otherwise (digits, or no ``lead``) it is held back for the tick, silence
        going meanwhile, to start on a tick that is on time; at most :data:`MAX_HOLD`
        ticks each: Python that far behind would cut it anyway. Whether it held one;
        :meth:`resume` after the tick."""
        prompt = self._prompt
        if prompt is None or self._event is not None:
            return False
        digits_next = (
            prompt.pos >= len(prompt.audio)
            and bool(prompt.rest)
            and isinstance(prompt.rest[0], Digits)
        )
        if prompt is not self._begun and lead > 0 and not digits_next:
            prompt.audio, prompt.pos = self.silence * lead + prompt.audio[prompt.pos :], 0
            return False
        if prompt.held >= MAX_HOLD or (prompt is self._begun and not digits_next):
            return False  # (waited long enough; or playing, and not about to start digits)
        prompt.held += 1
        self._hold = True
        return True

    def resume(self) -> None:
        """The tick is over: the prompt :meth:`hold_start` held back may begin."""
        self._hold = False

    @property
    def idle(self) -> bool:
        """Nothing to play: no prompt, no event (a bridge's audio may go out instead)."""
        return self._prompt is None and self._event is None

    def relay(self, digits: Digits) -> None:
        """Send ``digits`` from across a bridge: now, or after the prompt that plays
        (its end is reported with the id :data:`RELAY`)."""
        prompt = self._prompt
        if prompt is None:
            self.play(RELAY, (digits,))
        elif prompt.prompt_id == RELAY:
            prompt.rest.append(digits)
        else:
            self._relay.append(digits)

    def event_packet(self) -> tuple[bytes, bool, int] | None:
        """This tick's packet of the RFC 4733 event in progress: its payload, marker bit
        and timestamp (the event's start, §2.5.1.2); None when no event is."""
        event = self._event
        if event is None:
            return None
        payload, marker = event.next_packet()
        if event.done:
            self._event = None
        return payload, marker, event.timestamp

    def _frame(self, prompt: _Prompt, timestamp: int) -> bytes:
        """The prompt's next 20 ms of audio; or the start of a digit's event."""
        while True:
            left = len(prompt.audio) - prompt.pos
            if left >= FRAME:
                prompt.pos += FRAME
                return prompt.audio[prompt.pos - FRAME : prompt.pos]
            following = prompt.rest[0] if prompt.rest else None
            if isinstance(following, bytes):
                prompt.rest.popleft()
                prompt.audio, prompt.pos = prompt.audio[prompt.pos :] + following, 0
                continue
            if following is None and prompt.open:
                self.underruns += 1  # the next sentence is not synthesised yet
                return self.silence
            if left or following is None:
                # The end of the audio (or of the prompt): padded with silence to a frame.
                frame = prompt.audio[prompt.pos :]
                prompt.pos = len(prompt.audio)
                return frame + self.silence[len(frame) :]
            prompt.rest.popleft()
            self._start_digits(prompt, following, timestamp)
            if self._event is not None:
                return self.silence  # not sent: the event's first packet goes instead

    def _start_digits(self, prompt: _Prompt, digits: Digits, timestamp: int) -> None:
        """Digits reach the head of the prompt: tones in the audio, or the first one's event."""
        prompt.held = 0  # (each digit may wait for Python: hold_start)
        if not self.events:
            prompt.audio = b"".join(inband(digit, self.law) for digit in digits.digits)
            prompt.pos = 0
            self.echo_ticks = len(digits.digits) * DIGIT_TICKS + ECHO_TAIL_TICKS
            return
        # RFC 4733: the event starts at this tick's media time (§2.4.1); after it, the
        # rest of the digit's gap in silence, then the next digit.
        self._event = EventTone(digits.digits[0], timestamp)
        prompt.audio, prompt.pos = self.silence * _GAP_AFTER_EVENT, 0
        if len(digits.digits) > 1:
            prompt.rest.appendleft(Digits(digits.digits[1:]))

    # --- what the actions ask -----------------------------------------------------------

    def play(self, prompt_id: int, segments: Sequence[Segment], *, more: bool = False) -> None:
        """Start prompt ``prompt_id``, replacing any prompt: ``segments`` in order.

        ``more``: the rest follows through :meth:`append` and :meth:`close`. An empty
        prompt plays one frame of silence and finishes. An RFC 4733 event of the prompt
        it replaces is ended first (its end packet, three times), then this one starts.
        """
        self._end_event()
        rest: deque[Segment] = deque(segment for segment in segments if segment)
        if not rest and not more:
            rest.append(self.silence)
        self._prompt = _Prompt(prompt_id, rest=rest, open=more)

    def append(self, prompt_id: int, segment: Segment) -> None:
        """More of prompt ``prompt_id``: audio or digits (ignored if it was stopped or replaced)."""
        prompt = self._prompt
        if prompt is None or prompt.prompt_id != prompt_id or not segment:
            return
        last = prompt.rest[-1] if prompt.rest else None
        if isinstance(segment, bytes) and last is None:
            prompt.audio, prompt.pos = prompt.audio[prompt.pos :] + segment, 0
        elif isinstance(segment, bytes) and isinstance(last, bytes):
            prompt.rest[-1] = last + segment
        else:
            prompt.rest.append(segment)

    def close(self, prompt_id: int) -> None:
        """Nothing more for prompt ``prompt_id``: it ends when what it has is played."""
        prompt = self._prompt
        if prompt is not None and prompt.prompt_id == prompt_id:
            prompt.open = False

    def stop(self, prompt_id: int) -> None:
        """Stop prompt ``prompt_id`` now (it does not report finishing).

        A digit being sent as an RFC 4733 event is not cut off: the event ends with the
        duration it has reached, its end packet sent three times over the next three
        ticks (§2.5.1.2, §2.5.1.4); only then is anything else sent.
        """
        if self._prompt is not None and self._prompt.prompt_id == prompt_id:
            self._prompt = self._begun = None
            self._end_event()

    def _end_event(self) -> None:
        """The prompt stops: an event in progress ends (its end packet, three times).

        In-band tones stop at once, but their echo may still come back for a while.
        """
        self.echo_ticks = min(self.echo_ticks, ECHO_TAIL_TICKS)
        if self._event is not None:
            self._event.stop()
            if self._event.done:
                self._event = None
