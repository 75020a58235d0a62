"""One call's media: RTP in (digits, voice activity, recording), RTP out (prompts). Sans-IO.

(Past 600 lines: one call's media is one state machine whose receive, detection and send
share its fields, which ``_inlet.c`` and ``_outlet.c`` read by name; docs/architecture.md.)

Theory of operation
-------------------
The adapter feeds :meth:`MediaSession.receive` every datagram that arrives on
the call's RTP port, and calls :meth:`MediaSession.tick` once per 20 ms media
tick (one tick drives every call: docs/architecture.md). ``tick`` returns the RTP
datagram to send for that 20 ms — the next frame of the playing prompt, or
silence — or None while the call's media is on hold. Media commands of the
actions arrive as :meth:`play`, :meth:`stop_prompt`, :meth:`start_recording`,
:meth:`stop_recording`; what happened comes out in :attr:`events`
(``DigitReceived``, ``VoiceActivity``, ``PromptFinished``, ``RecorderFailed``).

Receive path, per packet: rate limit (an RTP flood is dropped above
:data:`MAX_PACKETS_PER_SECOND`, logged once); parse; symmetric RTP (RFC 4961:
the first valid packet fixes where we send, so a caller behind NAT hears us;
packets from anywhere else are dropped); sequence/SSRC tracking and a small
reorder window (``rtp.RtpReceiver``); then RFC 4733 events to the digit
receiver (also those the reorder window dropped as late: a key press that
arrives late still counts), or audio to G.711 decode, the voice-activity
detector, the in-band DTMF detector (only when the peer did not negotiate
telephone-event: docs/telephony.md) and the recording. In the media tick
(:attr:`MediaSession.batched`) decoding and detection wait for the end of the
tick's receive step, where every call's frames are decoded and measured at once
(:mod:`callhook.media.frames`); and the usual packet (plain header, the call's
codec, next in sequence) is read as header fields, with no packet object. Where the
native module was built the tick takes that packet in C, with no Python code run
for it (:mod:`callhook.media.inlet`: the session's fields it uses live in its C base,
:class:`~callhook.media.inlet.Inlet`); the path here is the reference it follows.

Speech: while an action listens (a recording, a recognition stream, the
record action's :meth:`detect_voice`) the detector's speech model runs, and
its edges are ``VoiceActivity`` events; while a recognition stream runs the
frames are also cut into utterances (:mod:`callhook.media.utterances`):
``SpeechStarted`` in :attr:`events`, finished utterances in :attr:`utterances`
for the leg to hand to a recogniser.

Send path: the call's :class:`~callhook.media.player.Player` gives each tick's
audio (prompts of audio and digits, growing while they play) or the RFC 4733
event packet that goes instead; the session numbers them, encrypts them (SRTP)
and ignores in-band digits heard while its own tones may still echo back.

Recording: frames are written as they arrive (those the media thread takes, every
200 ms: :meth:`MediaSession._recorded`), in the file's companding (the
call's, or transcoded); a gap in RTP timestamps (loss, silence suppression), the time
before the caller's first frame and the time between one source and the next (by
arrival) are filled with silence so the file keeps real time
(:mod:`callhook.media.recorder`), and the last
:data:`PREROLL_FRAMES` frames are kept so a recording can start a little
before the voice-activity detector noticed the caller, also when the action that
starts it comes later than that on the wire (the event loop behind the media thread).
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from callhook.clock import TickClock
from callhook.events import (
    ClassifyOptions,
    DigitReceived,
    FarEndClassified,
    GreetingEnded,
    MediaEvent,
    PromptFinished,
    SpeechStarted,
    VoiceActivity,
)
from callhook.media import g711, rtcp
from callhook.media.bridge import Feed
from callhook.media.callrecording import CallRecording
from callhook.media.classify import CalleeClassifier
from callhook.media.dtmf import Rfc4733Receiver, ToneDetector
from callhook.media.dtmfsend import Digits
from callhook.media.inlet import Inlet, Preroll
from callhook.media.meter import LevelMeter
from callhook.media.player import FRAME, RELAY, Player, Segment
from callhook.media.recorder import CallerRecording, opening, runs
from callhook.media.reporting import CallReports, Wire
from callhook.media.rtp import RtpError, RtpPacket, RtpReceiver, RtpSender
from callhook.media.sink import Sink
from callhook.media.srtp import SrtpContext, SrtpError
from callhook.media.transcriber import CallTranscriber
from callhook.media.utterances import Utterance, UtteranceCutter, UtterancePiece
from callhook.media.vad import VoiceActivityDetector, new_detector

logger = logging.getLogger("callhook.media")

#: The fixed RTP header after its first byte (RFC 3550 §5.1): M/PT, sequence, timestamp, SSRC.
_FIXED = struct.Struct("!BHII")
_PLAIN_HEADER = 12

Law = Literal["ulaw", "alaw"]
Address = tuple[str, int]

#: An RTP flood is cut here: a call sends 50 packets a second (plus DTMF events).
MAX_PACKETS_PER_SECOND = 150
#: Frames kept for a recording's pre-roll (1 s: the action's 0.3 s, and as much again
#: and more for an action that comes late on the wire's time).
PREROLL_FRAMES = 50
#: The last frames of the pre-roll the voice detector goes over when it wakes (0.4 s).
REPLAY_FRAMES = 20
#: After this long without audio packets the caller is taken to be silent.
SILENT_AFTER = 0.1
#: Half a slot (seconds): a slot's time as the media thread has it and as Python has it
#: may differ in their last bit.
HALF_SLOT = 0.01
#: A frame's length in seconds.
FRAME_SECONDS = FRAME / 8000


class MediaSession(Inlet):
    """The media of one call (see the module docstring)."""

    def __init__(
        self,
        codec: Literal["PCMU", "PCMA"],
        payload_type: int,
        event_payload_type: int | None,
        remote: Address | None,
        *,
        label: str = "",
        sending: bool = True,
    ) -> None:
        self.law: Law = "ulaw" if codec == "PCMU" else "alaw"
        self.payload_type = payload_type
        self.event_payload_type = event_payload_type
        self.remote = remote
        self.offered = remote  # the address the SDP named
        self.label = label
        self.sending = sending
        self.latched = False
        self.events: deque[MediaEvent] = deque()
        self.sender: RtpSender = RtpSender(payload_type)
        self.receiver = RtpReceiver()
        self.rfc4733 = Rfc4733Receiver()
        # In-band DTMF only when telephone-event was not negotiated (docs/telephony.md).
        self.tones: ToneDetector | None = ToneDetector() if event_payload_type is None else None
        self.vad: VoiceActivityDetector = new_detector()
        self.vad.paused = True  # until a recording or a recognition stream listens
        #: The caller's speech cut into utterances while ``recognising``; utterances
        #: waiting for a recogniser queue here (and, for a recogniser that streams,
        #: the pieces of the one in progress: ``start_recognition(piece_frames)``).
        self._piece_frames = 0
        self.cutter = UtteranceCutter()
        self.recognising = False
        self.detecting = False  # an action wants voice activity (DetectVoice)
        self.utterances: deque[Utterance | UtterancePiece] = deque()
        #: Set by the media engine: a received frame's detection (voice activity, in-band
        #: digits, transcription) waits in :attr:`undetected` for the engine's call of
        #: :meth:`detect`, which decodes every call's frames of the tick at once
        #: (media/frames.py). Unset, each frame is decoded and looked at as it comes.
        self.batched = False
        self.undetected: list[bytes] = []
        self.player: Player = Player(self.law, events=event_payload_type is not None)
        #: The caller's audio level for the call's picture (the web phone's calls; None: off).
        self.meter: LevelMeter | None = None
        # A bridge (media/bridge.py): what this side hears from the other, where what it
        # receives goes, and the session digits received here are relayed to.
        self.hears: Feed | None = None
        self.tells: Feed | None = None
        self.tells_digits: MediaSession | None = None
        self._silence_pcm = np.zeros(FRAME, dtype=np.int16)
        self.echo_digits = 0  # in-band digits ignored as the echo of ours
        self._recording: CallerRecording | None = None
        self._call_recording: CallRecording | None = None  # the bridged call, both ways
        #: A live transcription (start_transcription): it is handed both directions' frames.
        self.transcriber: CallTranscriber | None = None
        #: Who answered (:meth:`classify`): it is handed the frames received until it is done.
        self.classifier: CalleeClassifier | None = None
        self._preroll = Preroll(PREROLL_FRAMES)
        #: The recording's frames the media thread took in slots Python has not worked
        #: yet (timestamp, payload, the slot's time): written once it has (:meth:`_recorded`).
        self._ahead: list[tuple[int, bytes, float]] = []
        self._source: int | None = None  # the SSRC the recording's timeline follows
        self._last_audio = 0.0
        #: When the last audio frame reached the host (its ``arrival``; ``now`` where none
        #: was given): the time between two sources is measured by it (:meth:`_audio`).
        self._last_heard = 0.0
        self._bucket_start = 0.0
        self._bucket_count = 0
        # (Read by the C fast paths, inlet.py and outlet.py.)
        self._flood_limit = MAX_PACKETS_PER_SECOND
        self._silent_after = SILENT_AFTER
        # Dead-call detection ([sip] rtp_timeout): seconds without an RTP packet of the
        # call before it is taken for dead (0: never); the clock runs from the answer
        # (:meth:`expect_rtp`) and from each packet, and not while the peer sends us
        # nothing by agreement (on hold: its SDP says sendonly from us, or inactive).
        self.rtp_timeout = 0.0
        self.expects_rtp = True
        self._rtp_since: float | None = None
        self.timed_out = False
        self.flood_dropped = 0
        self.foreign_dropped = 0
        #: Key presses received, by how they came (rfc4733, inband, sip_info).
        self.digits_by: dict[str, int] = {}
        #: SRTP (RFC 3711) keys of the call, when its SDP agreed on SDES keys (RFC 4568).
        self.srtp: SrtpContext | None = None
        self.malformed = 0
        self.reports: CallReports = CallReports(self.sender, self.receiver)  # RTCP
        #: Set by the media engine where the media thread may hold the usual receive's
        #: state (:attr:`rx_owned`): gives it back (see :meth:`reclaim`).
        self.reclaimer: Callable[[MediaSession], None] | None = None
        #: Set by the media engine while the call takes part in its tick: how far its
        #: media has been worked (None: not ticked, and the loop's clock stands in).
        self.media_clock: TickClock | None = None

    def reclaim(self) -> None:
        """Take the receive's state back from the media thread, if it holds it.

        While the call's detector runs no model and nothing but detection and a
        recording hear the caller, the media thread takes its usual packets itself
        (edge/_rx.h), keeping the fields they change (the receiver's counts, the pre-roll,
        the detector's, the audio and dead-call clocks, the recording's frames: written
        here every 200 ms and when it gives the call back, :meth:`_recorded`);
        meanwhile this object's copies of them are stale. Every method here that reads or
        changes receive state calls this first, and so does any other code that changes
        what the caller is heard by (a transcription, a re-INVITE)."""
        if self.rx_owned and self.reclaimer is not None:
            self.reclaimer(self)

    # --- receive ----------------------------------------------------------------------

    def receive(
        self, data: bytes, source: Address, now: float, arrival: float | None = None
    ) -> None:
        """One datagram from the call's RTP port, taken at ``now``; it reached the host at
        ``arrival`` (the media thread's kernel timestamp; ``now`` where None), which the
        flood limit counts by: datagrams read in a burst after a backlog came at the
        call's own pace.

        The usual packet's path here (latched peer, no SRTP, the flood limit, the
        plain header, :meth:`RtpReceiver.feed_next <callhook.media.rtp.RtpReceiver.feed_next>`,
        :meth:`_audio`) is what ``_inlet.c`` does in C (:mod:`callhook.media.inlet`): a
        change to it is made there too (``tests/unit/media/test_inlet.py`` compares them).
        """
        self.reclaim()
        if source != self.remote and self.latched and source != self.offered:
            self._foreign(source)
            return
        came = now if arrival is None else arrival
        if came - self._bucket_start >= 1.0:
            self._bucket_start, self._bucket_count = came, 0
        self._bucket_count += 1
        if self._bucket_count > self._flood_limit:
            if self.flood_dropped == 0:
                logger.warning(
                    "%s: RTP flood from %s:%s: dropping packets above %d/s",
                    self.label,
                    *source,
                    self._flood_limit,
                )
            self.flood_dropped += 1
            return
        if self.srtp is not None:
            # Authenticated before anything else, the latch included: a forged packet
            # must not move where we send (RFC 3711 §3.3).
            plain = self.srtp.unprotect(data)
            if plain is None:
                if self.srtp.dropped == 1:
                    logger.warning("%s: dropping SRTP that fails authentication", self.label)
                return
            data = plain
        if source != self.remote:
            # Symmetric RTP (RFC 4961): the first packet, or one from the address
            # the SDP named, fixes where we send, so a caller behind NAT hears us,
            # and a caller not behind NAT gets the stream back from whoever raced its
            # first packet (behind NAT it cannot: only SRTP protects that).
            logger.info("%s: sending RTP to %s:%s (where it comes from)", self.label, *source)
            self.remote = source
        self.latched = True
        if len(data) > _PLAIN_HEADER and data[0] == 0x80:
            # The usual packet (version 2, no CSRC, extension or padding), the caller's
            # audio, next in sequence: no packet object (this runs for every packet of
            # every call; RtpReceiver.feed_next counts it as feed would).
            second, seq, timestamp, ssrc = _FIXED.unpack_from(data, 1)
            if second & 0x7F == self.payload_type and self.receiver.feed_next(
                seq, timestamp, ssrc, now
            ):
                if self._rtp_since is not None:
                    self._rtp_since = now
                self._audio(data[_PLAIN_HEADER:], timestamp, now, None, came)
                return
        try:
            packet = RtpPacket.parse(data)
        except RtpError as exc:
            self._malformed(f"not RTP: {exc}")
            return
        if packet.payload_type not in (self.payload_type, self.event_payload_type, 13):
            self._malformed(f"payload type {packet.payload_type} was not negotiated")
            return
        late = self.receiver.late
        self._play(self.receiver.feed(packet, now), now, came)
        if self.receiver.late != late and packet.payload_type == self.event_payload_type:
            # A telephone-event that came after the reorder window gave up on it: too
            # late to play, not to count (under heavy jitter a whole press can be late).
            digit = self.rfc4733.feed_late(packet.payload, packet.timestamp, now)
            if digit is not None:
                self._count_digit("rfc4733")
                self.events.append(DigitReceived(digit))

    def _malformed(self, cause: str) -> None:
        """A packet that is dropped for what it is; the first one of the call is logged."""
        self.malformed += 1
        if self.malformed == 1:
            logger.warning("%s: dropping malformed media (%s)", self.label, cause)

    def _foreign(self, source: Address) -> None:
        if self.foreign_dropped == 0:
            logger.warning(
                "%s: dropping RTP from %s:%s, which is not the call's peer", self.label, *source
            )
        self.foreign_dropped += 1

    def _play(self, packets: Sequence[RtpPacket], now: float, came: float | None = None) -> None:
        """The packets the receiver gives for playout at ``now``, the last of them having
        reached the host at ``came`` (None: ``now``). Several at once (held for one
        missing, or a new source's first ones) were due one after another: each is timed
        a frame after the one before, the last at ``now`` (and ``came``), so the
        recording's timeline and the caller's last audio are what they were on the wire."""
        n = len(packets)
        heard = now if came is None else came
        for i, packet in enumerate(packets):
            back = (n - 1 - i) * FRAME_SECONDS
            self._packet(
                packet, max(now - back, self._last_audio), max(heard - back, self._last_heard)
            )

    def _packet(self, packet: RtpPacket, now: float, heard: float | None = None) -> None:
        if self._rtp_since is not None:
            self._rtp_since = now
        pt = packet.payload_type
        if pt == self.event_payload_type:
            digit = self.rfc4733.feed(packet.payload, packet.timestamp, now)
            if digit is not None:
                self._digit(digit)
        elif pt == self.payload_type:
            self._audio(packet.payload, packet.timestamp, now, packet.ssrc, heard)

    def _audio(
        self,
        payload: bytes,
        timestamp: int,
        now: float,
        ssrc: int | None = None,
        heard: float | None = None,
    ) -> None:
        """A frame of the caller's audio, of source ``ssrc`` (None: the receiver's current
        one, as the usual packet's is), taken at ``now``; it reached the host at ``heard``
        (None: ``now``)."""
        previous, self._last_audio = self._last_audio, now
        came = now if heard is None else heard
        heard_before, self._last_heard = self._last_heard, came
        if self.tells is not None:
            self.tells.push(payload)  # the other side of a bridge hears it
        if self._call_recording is not None:
            self._call_recording.hear_caller(payload)
        self._preroll.append((timestamp, payload))
        if self._recording is not None:
            if self._ahead:  # (the thread's, of slots before this one's)
                self._write_ahead(None)
            recording = self._recording
            if recording is not None:
                source = self.receiver.ssrc if ssrc is None else ssrc
                when = now
                if source != self._source:
                    # Another source (its first frame: the old one's held frames may come
                    # with it): its timestamps start afresh, the gap is by arrival: by
                    # when the two frames reached the host, not by the slots they were
                    # read in (a late slot reads two slots' packets, a stalled thread
                    # many: the slot's time is up to a frame off, or more).
                    if self._source is not None:
                        recording.restart(previous or None)
                        if previous and heard_before:
                            when = previous + (came - heard_before)
                    self._source = source
                recording.anchor(timestamp, when)
                self._record(payload, timestamp)
        if self.batched:
            self.undetected.append(payload)  # the engine's detect() comes this tick
        else:
            self._detect(g711.decode(self.law, payload))

    def detect(
        self,
        samples: Sequence[npt.NDArray[np.int16]],
        powers: Sequence[float],
        tones: Sequence[bool | None] | None = None,
    ) -> None:
        """Voice activity, in-band digits, transcription of the frames :attr:`undetected`
        held, decoded by the media tick for every call at once (media/frames.py), which
        has taken them out; ``tones``: the in-band DTMF prefilter's verdict on each."""
        alone = (
            self.tones is None
            and self.transcriber is None
            and self.meter is None
            and self.classifier is None
        )
        if alone and not self.recognising:
            # The usual case (digits come as events, nothing but voice activity
            # listens): _voice's work without its calls, for every call every tick.
            feed, events = self.vad.feed, self.events
            for frame, power in zip(samples, powers, strict=True):
                edge = feed(frame, power)
                if edge is not None:
                    events.append(VoiceActivity(edge))
            return
        verdicts = tones if tones is not None else [None] * len(samples)
        for frame, power, verdict in zip(samples, powers, verdicts, strict=True):
            self._detect(frame, power, verdict)

    def _detect(
        self, samples: npt.NDArray[np.int16], power: float | None = None, tone: bool | None = None
    ) -> None:
        self._voice(samples, power)
        if self.transcriber is not None:
            self.transcriber.caller(samples)
        if self.classifier is not None:
            self._classify(self.classifier, samples)
        if self.tones is not None:
            digit = self.tones.feed(samples, tone)
            if digit is not None and self.player.echo_ticks:
                self.echo_digits += 1  # the echo of the digits we are sending
            elif digit is not None:
                self._digit(digit, inband=True)

    def _voice(self, samples: npt.NDArray[np.int16], power: float | None = None) -> None:
        edge = self.vad.feed(samples, power)
        if self.meter is not None:
            self.meter.feed(samples, self.vad.active and not self.vad.paused)
        if edge is not None:
            self.events.append(VoiceActivity(edge))
        if not self.recognising:
            return  # (start_recognition rebuilds the cutter's pre-roll from _preroll)
        for item in self.cutter.feed(samples, edge):
            if isinstance(item, SpeechStarted):
                self.events.append(item)
            else:
                self.utterances.append(item)

    # --- RTCP (RFC 3550 §6) --------------------------------------------------------

    def rtcp_report(self, now: float, wall: float, wire: Wire | None = None) -> bytes | None:
        """The compound SR/RR + SDES packet to send now, if one is due (every ~5 s;
        media/reporting.py), as SRTCP when the call has SRTP. ``wall``: the Unix time;
        ``wire``: what the media thread sent for the call (its SR's counts)."""
        due = self.reports.due
        if due is not None and now >= due and self.sending:
            self.reclaim()  # (the report block says what was received)
        report = self.reports.report(now, wall, self.sending, wire)
        if report is None or self.srtp is None:
            return report
        return self.srtp.protect_rtcp(report)

    def rtcp_destination(self) -> Address | None:
        return self.reports.destination(self.remote)

    def rtcp_received(self, data: bytes, source: Address, now: float) -> None:
        """An RTCP packet on the call's RTCP port: the peer's SR and its view of our stream."""
        self.reclaim()
        if self.remote is not None and source[0] != self.remote[0]:
            self.foreign_dropped += 1
            return
        if self.srtp is not None:
            plain = self.srtp.unprotect_rtcp(data)
            if plain is None:
                return
            data = plain
        try:
            self.reports.received(rtcp.parse(data), source, now)
        except rtcp.RtcpError as exc:
            self._malformed(f"not RTCP: {exc}")

    def inject_digit(self, digit: str) -> None:
        """A digit that came another way (SIP INFO)."""
        self._digit(digit, transport="sip_info")

    def _count_digit(self, transport: str) -> None:
        self.digits_by[transport] = self.digits_by.get(transport, 0) + 1

    def _digit(self, digit: str, *, inband: bool = False, transport: str = "rfc4733") -> None:
        """A digit the caller pressed; across a bridge, relayed as the other side takes
        them (an in-band one already travels in the audio, unless it takes events)."""
        self._count_digit("inband" if inband else transport)
        self.events.append(DigitReceived(digit))
        other = self.tells_digits
        if other is not None and (not inband or other.event_payload_type is not None):
            other.relay_digits(digit)

    def join(self, other: MediaSession) -> None:
        """Bridge this call's media with ``other``'s, both ways (media/bridge.py)."""
        self.listen_to(other)
        other.listen_to(self)

    def listen_to(self, other: MediaSession) -> None:
        """One way: this side hears what ``other`` receives, and gets its digits (early
        media: the caller hears the far end before it answers)."""
        self.reclaim()
        other.reclaim()
        feed = Feed(other.law, self.law)
        other.tells, other.tells_digits = feed, self
        self.hears = feed

    def part(self, other: MediaSession) -> None:
        """Undo :meth:`join` (or :meth:`listen_to`, either way)."""
        self.reclaim()
        other.reclaim()
        for talker, listener in ((self, other), (other, self)):
            if talker.tells_digits is listener:
                talker.tells = talker.tells_digits = listener.hears = None

    def relay_digits(self, digits: str) -> None:
        """Send ``digits`` pressed across a bridge (RFC 4733 or in-band, as negotiated)."""
        self.player.relay(Digits(digits))

    # --- send -------------------------------------------------------------------------

    def expect_rtp(self, now: float, expects: bool | None = None) -> None:
        """The call is answered (or re-negotiated): RTP is due from now on.

        ``expects``: whether the peer is to send RTP at all (False on hold).
        """
        self.reclaim()
        if expects is not None:
            self.expects_rtp = expects
        self._rtp_since = now

    def _check_dead(self, now: float) -> None:
        since = self._rtp_since
        if self.timed_out or since is None or self.rtp_timeout <= 0 or not self.expects_rtp:
            return
        if now - since >= self.rtp_timeout:
            self.timed_out = True
            logger.warning(
                "%s: no RTP for %g s (rtp_timeout): the call is taken for dead",
                self.label,
                now - since,
            )

    def tick(self, now: float) -> bytes | None:
        """The 20 ms media tick: the datagram to send now, or None (on hold / no address).

        One datagram a tick: the prompt's next audio frame (or silence), or,
        while a digit is sent as an RFC 4733 event, the event's next packet;
        encrypted when the call has SRTP.

        The media tick makes the usual packet (the prompt's next frame but its last, or
        silence, with nothing else due on the call) in C instead (:mod:`callhook.media.outlet`):
        a change to this path is made there too (``tests/unit/media/test_outlet.py``).
        """
        datagram = self._tick(now)
        if datagram is None or self.srtp is None:
            return datagram
        try:
            return self.srtp.protect(datagram)
        except SrtpError as exc:  # a bug of ours; one call's packet, not the media tick
            logger.error("%s: SRTP protect failed: %s", self.label, exc)
            return None

    def _tick(self, now: float) -> bytes | None:
        self._play(self.receiver.poll(now), now)
        if self.undetected:
            # Frames the reorder window released now, after this tick's batch: at once.
            frames, self.undetected = self.undetected, []
            for payload in frames:
                self._detect(g711.decode(self.law, payload))
        # (Up to rx_until the media thread did these, while it held the receive: _rx.h.)
        if now > self.rx_until:
            self._check_dead(now)
            if now - self._last_audio > self._silent_after and self._last_audio:
                # No audio packets (silence suppression, a stalled stream): it is silence.
                self._detect(self._silence_pcm)
        bridged = self.hears is not None and self.player.idle
        payload, finished = self.player.next_frame(self.sender.timestamp)
        if finished is not None and finished != RELAY:
            self.events.append(PromptFinished(finished))
        event = self.player.event_packet()
        heard = None
        if event is None and bridged and self.hears is not None:
            heard = self.hears.frame()  # the other side's audio (None: silence)
        if self._call_recording is not None:
            self._record_call(self._call_recording, heard)
        if heard is not None:
            payload = heard
        if self.transcriber is not None:  # what the caller hears this tick (an event: silence)
            sent = payload if event is None else None
            self.transcriber.sent(g711.decode(self.law, sent) if sent else None)
        if event is not None:
            return self._send_event(*event)
        if not self.sending or self.remote is None:
            self.sender.advance(FRAME)
            return None
        return self.sender.frame(payload)

    def _send_event(self, payload: bytes, marker: bool, timestamp: int) -> bytes | None:
        """This tick's packet of the RFC 4733 event in progress (None on hold: time goes on)."""
        if not self.sending or self.remote is None or self.event_payload_type is None:
            self.sender.advance(FRAME)
            return None
        # RFC 4733 §2.5.1.6: the sequence number runs on; §2.5.1.2: the timestamp stays
        # at the event's start while the media clock goes on underneath it.
        data = self.sender.packet(payload, self.event_payload_type, timestamp, marker)
        self.sender.advance(FRAME, silence=False)
        return data

    # --- prompts (the player) -----------------------------------------------------------

    @property
    def underruns(self) -> int:
        """20 ms frames a prompt had to wait for its next synthesised sentence."""
        return self.player.underruns

    def play(self, prompt_id: int, samples: npt.NDArray[np.int16]) -> None:
        """Start playing ``samples`` (8 kHz) as prompt ``prompt_id``, replacing any prompt."""
        self.play_encoded(prompt_id, g711.encode(self.law, samples))

    def play_encoded(self, prompt_id: int, audio: bytes, *, more: bool = False) -> None:
        """Like :meth:`play`, with audio already in the call's law (from a cache).

        ``more``: the rest of the prompt follows through :meth:`append_prompt`
        and :meth:`close_prompt` (speech synthesised while it plays).
        """
        self.player.play(prompt_id, (audio,), more=more)

    def play_segments(
        self, prompt_id: int, segments: Sequence[Segment], *, more: bool = False
    ) -> None:
        """Start prompt ``prompt_id``, replacing any prompt: ``segments`` in order
        (:meth:`Player.play <callhook.media.player.Player.play>`)."""
        self.player.play(prompt_id, segments, more=more)

    def append_prompt(self, prompt_id: int, segment: Segment) -> None:
        """More of prompt ``prompt_id``: audio or digits (ignored if it was stopped or replaced)."""
        self.player.append(prompt_id, segment)

    def close_prompt(self, prompt_id: int) -> None:
        """Nothing more for prompt ``prompt_id``: it ends when what it has is played."""
        self.player.close(prompt_id)

    def stop_prompt(self, prompt_id: int) -> None:
        """Stop prompt ``prompt_id`` now (it does not report finishing); an RFC 4733 event
        in progress still ends properly (:meth:`Player.stop
        <callhook.media.player.Player.stop>`)."""
        self.player.stop(prompt_id)

    # --- who answered -----------------------------------------------------------------

    def classify(self, options: ClassifyOptions) -> None:
        """Classify the far end from the frames received from now on (media/classify.py);
        what it decides comes out in :attr:`events`."""
        self.reclaim()
        self.classifier = CalleeClassifier(options)

    def stop_classifying(self) -> None:
        """Stop classifying (the action gave up waiting: no audio came, say); what it
        decided and the action has not taken yet is dropped."""
        self.reclaim()
        self.classifier = None
        kept = [e for e in self.events if not isinstance(e, FarEndClassified | GreetingEnded)]
        if len(kept) != len(self.events):
            self.events.clear()
            self.events.extend(kept)

    def _classify(self, classifier: CalleeClassifier, samples: npt.NDArray[np.int16]) -> None:
        self.events.extend(classifier.feed(samples))
        if classifier.done:
            self.classifier = None  # its work is over: the usual fast paths again

    # --- speech recognition -----------------------------------------------------------

    def start_recognition(self, piece_frames: int = 0) -> None:
        """Start handing the caller's utterances to recognition (see ``speech.stream``);
        with ``piece_frames``, the utterance in progress too, in pieces of that many
        frames (:class:`~callhook.media.utterances.UtterancePiece`: a streaming engine).

        If the caller is already talking, that utterance counts from its start
        (up to 0.4 s back).
        """
        if self.recognising:
            return
        self.reclaim()
        self.recognising = True
        self._piece_frames = piece_frames
        self.cutter = UtteranceCutter(piece_frames=piece_frames)
        if self.vad.paused:
            self._listen()  # the detector wakes and replays the last 0.4 s into the cutter
            return
        # The detector is already running (a recording): give the cutter its pre-roll,
        # and if the caller is talking, the utterance starts now.
        for samples in self._recent():
            self.cutter.feed(samples, None)
        if self.vad.active:
            self.events.append(self.cutter.begin())

    def detect_voice(self, on: bool) -> None:
        """An action wants voice activity events (record), or no longer."""
        self.reclaim()
        self.detecting = on
        self._listen()

    def stop_recognition(self) -> None:
        """Stop the stream; utterances not yet decoded are dropped."""
        self.reclaim()
        self.recognising = False
        self.utterances.clear()
        self._listen()

    def _listen(self) -> None:
        """Run the speech model only while something uses voice activity.

        It is what voice activity costs (~0.1 ms per 32 ms of a talking
        caller), so it rests during prompts and digit entry. When it wakes it
        first goes over the last :data:`REPLAY_FRAMES` frames (0.4 s), so a
        caller who started talking just before a recording or a recognition
        stream began (during the record beep, say) is heard from the start.
        """
        paused = not (self.recognising or self.detecting or self._recording is not None)
        if self.vad.paused and not paused:
            self.vad.paused = False
            # (The replay rebuilds its pre-roll.)
            self.cutter = UtteranceCutter(piece_frames=self._piece_frames)
            for samples in self._recent():
                self._voice(samples)
        self.vad.paused = paused

    def _recent(self) -> list[npt.NDArray[np.int16]]:
        """The last :data:`REPLAY_FRAMES` frames the caller sent, decoded."""
        frames = list(self._preroll)[-REPLAY_FRAMES:]
        return [g711.decode(self.law, payload) for _, payload in frames]

    # --- recording --------------------------------------------------------------------

    def start_recording(
        self, sink: Sink, law: Law | None, preroll: float, at: float | None = None
    ) -> None:
        """Record what the caller sends into ``sink``, starting ``preroll`` seconds before
        media time ``at`` (None: the last frame received; media/recorder.py).

        The pre-roll is measured on the caller's RTP clock back from the last frame
        received (at ``_last_audio``), so a lost frame does not pull an older one in, and a
        call whose receive the media thread held up to the wire's time is caught up as
        far as it went; it stops at a change of source (another timestamp line)."""
        self.reclaim()
        self._ahead.clear()
        recording = self._recording = CallerRecording(sink, law or self.law, self.label)
        self._source = self.receiver.ssrc
        self._listen()
        frames = list(self._preroll)
        if not frames:
            # Nothing heard yet: the file begins now, silent up to the caller's first frame.
            clock = self.media_clock
            now = at if at is not None else clock.at if clock is not None else None
            recording.since = None if now is None else now - preroll
            return
        back = preroll if at is None else preroll + (self._last_audio - at)
        recording.since = self._last_audio - back
        recording.next_ts, first = opening(frames, round(back * 8000))
        for timestamp, payload in first:
            self._record(payload, timestamp)
            if self._recording is None:
                break  # the sink refused it (RecorderFailed noted): what was written is kept

    def stop_recording(self, now: float) -> None:
        """Finish the recording at media time ``now``, padding it with silence up to then
        if the caller went quiet. The frames the media thread took in slots Python has
        not worked (it runs behind the thread) are not the recording's."""
        self.reclaim()
        if self._recording is not None:
            clock = self.media_clock
            self._write_ahead(None if clock is None else clock.at)
        self._ahead.clear()
        recording, self._recording = self._recording, None
        self._listen()
        if recording is None:
            return
        # (A file whose caller sent nothing since it began is silent from its beginning.)
        last = max(self._last_audio, recording.since or 0.0)
        quiet = now - last if last else 0.0
        failed = recording.finish(quiet if quiet > SILENT_AFTER else 0.0)
        if failed is not None:
            self.events.append(failed)

    def _recorded(self, frames: list[tuple[int, bytes, float]]) -> None:
        """The recording's frames (timestamp, payload, the time of the slot it was taken in)
        the media thread took while it holds the receive (edge/_rx.h), in order: every
        200 ms while it goes on, and when it gives the call back, before anything else of
        the session runs. Each is written as :meth:`_audio` writes it once Python has
        worked its slot: where Python runs behind the thread, a frame of a slot to come
        waits for it, so a recording stopped meanwhile ends where it would have had Python
        taken every packet."""
        self._ahead.extend(frames)
        clock = self.media_clock
        self._write_ahead(None if clock is None else clock.at)

    def _write_ahead(self, until: float | None) -> None:
        """Write the frames of :attr:`_ahead` taken in slots up to media time ``until``
        (None: all of them)."""
        ahead = self._ahead
        n = len(ahead)
        if until is not None:
            limit = until + HALF_SLOT  # (the slot at ``until``, whatever its last bit)
            n = 0
            while n < len(ahead) and ahead[n][2] <= limit:
                n += 1
        frames = ahead[:n]
        del ahead[:n]
        if frames and self._recording is not None:
            self._recording.anchor(frames[0][0], frames[0][2])
        try:
            for timestamp, payload in runs(frames, self._recording):
                if self._recording is None:
                    ahead.clear()
                    return  # it failed on an earlier one: what was written is kept
                self._record(payload, timestamp)
        except Exception as exc:  # (not a sink's failure: those are events) a bug
            ahead.clear()
            recording, self._recording = self._recording, None
            if recording is None:
                raise
            self.events.append(recording.broke(exc))
            self.reclaim()
            self._listen()

    def _record(self, payload: bytes, timestamp: int) -> None:
        recording = self._recording
        assert recording is not None
        failed = recording.frame(payload, timestamp, self.law)
        if failed is not None:
            self._recording = None  # what was written so far is kept
            self.events.append(failed)
            # (Frames the media thread took, written while it holds the receive: the
            # detector is Python's again before it rests. Those it took after this one
            # it heard listening: the record action listens to the end anyway.)
            self.reclaim()
            self._listen()

    def start_call_recording(self, recording: CallRecording) -> None:
        """Record the bridged call, both directions (media/callrecording.py)."""
        self.reclaim()
        self._call_recording = recording

    def stop_call_recording(self) -> None:
        """Finish the bridged call's recording."""
        recording, self._call_recording = self._call_recording, None
        if recording is not None:
            recording.close(self.label)

    def _record_call(self, recording: CallRecording, heard: bytes | None) -> None:
        failed = recording.write(heard)
        if failed is not None:
            logger.error("%s: call recording stopped: %s", self.label, failed.detail)
            self._call_recording = None  # what was written so far is kept
            self.events.append(failed)
