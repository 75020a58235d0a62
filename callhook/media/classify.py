"""Who answered: a live speaker, an answering machine or a fax machine; and, for a
machine, when its greeting ended (the beep). Sans-IO.

Aculab calls it classifying the callee (far-end classification, live speaker
detection); others call it answering-machine detection. :class:`CalleeClassifier`
is fed the callee's audio from the answer on, 20 ms frames (8 kHz int16), and
says what it decided as :class:`~callhook.events.FarEndClassified`, then, for a machine, when its
greeting is over as :class:`~callhook.events.GreetingEnded`. Its clock is the audio's: frame *n*
ends at ``(n + 1) * 0.02`` s; a caller that needs a wall-clock limit (no RTP at
all) calls :meth:`CalleeClassifier.finish` at it.

Theory of operation
-------------------
Three detectors run on every frame:

* **voice activity**: the calls' own detector (:mod:`callhook.media.vad`, energy
  gate and speech model), whose edges, less its onset and hangover, are where
  speech started and (at the latest) stopped; speech stopped with the last frame that
  was not quiet (below), since the model holds an utterance 0.1-0.3 s past its last
  sound, and a pause is over with the next frame that is not quiet, before the
  detector has confirmed the new onset (together, on the larger evaluation set, a
  live decision's p95 came 0.06-0.2 s sooner, no machine lost);
* **tones** (:mod:`callhook.media.tonality`): a 40 ms window is tonal when one
  peak (or two: a chord) holds :data:`TONAL` of the band's energy; tonal windows
  at one frequency (±:data:`DRIFT_HZ`) make a *piece*; pieces that follow one
  another within :data:`JOIN_WINDOWS` windows, each at another frequency, make one
  tone (the rising three-tone beeps of some voicemail systems);
* **quiet**: a frame less than :data:`QUIET_MARGIN_DB` over the line's noise floor:
  the quietest frame that was not a tone in the last :data:`FLOOR_FRAMES` (a fax's
  answer tone from the first moment, taken for the floor, made the tone itself quiet
  and the floor 12 dB under it the line).

Deciding (the first phase), after Twilio's and Asterisk's AMD (docs/behaviour.md):

==============================================  ===================================
what was heard                                  decision (``far_end_type``, reason)
==============================================  ===================================
2100 Hz (CED, V.25 answer tone) for 0.5 s, or   ``fax_machine``, ``fax_tone``
1100 Hz (CNG) for 0.4-0.8 s before any speech
speech that goes on (pauses shorter than        ``answering_machine``,
``milliseconds_after_greeting_silence``) for    ``long_greeting``
``milliseconds_greeting``
speech, then ``milliseconds_after_greeting_``   ``live``, ``short_greeting``
``silence`` of no speech, before that
a beep (below) and its silence, before a        ``answering_machine``, ``beep``
decision by speech (no greeting, or a short     (its greeting over: the beep)
one); meanwhile no decision on speech
a special information tone (three rising        ``unknown``,
tones, ~950/1400/1800 Hz: no one answered)      ``special_information_tone``
nothing for ``milliseconds_initial_silence``    ``unknown``, ``silence``
no decision by ``milliseconds_timeout``         ``unknown``, ``timeout``
==============================================  ===================================

For a machine, with ``wait_for_beep``, it then listens for the end of the
greeting (Aculab's ``wait_for_answer_machine``): a tone of at least
``milliseconds_min_beep_duration`` between :data:`BEEP_LOW_HZ` and
:data:`BEEP_HIGH_HZ` followed by ``milliseconds_post_beep_silence`` of quiet
(speech after it means it was part of the greeting, and it is forgotten);
or ``milliseconds_no_beep_silence`` of quiet with no beep; or, after
``seconds_beep_timeout``, it gives up. Why a tone must last, and be followed by
silence: on real speech (the 1500 spoken digits of tests/data/speech's source set)
a voice held a harmonic as tonal and steady as a beep's for 1 to 7 windows (20-160
ms) in a third of the words, and long enough for a beep in 16 of them (1.1 %):
each time inside the word, which went on after it, so none was followed by the
post-beep silence.

The audio's clock is the classifier's own; where none comes at all (no RTP) the
action that asked sets a wall-clock limit (:mod:`callhook.actions.classify`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from callhook.events import ClassifyOptions, FarEndClassified, GreetingEnded
from callhook.media import tonality
from callhook.media.tonality import Spectrum
from callhook.media.vad import VoiceActivityDetector, new_detector

#: A frame: 20 ms at 8 kHz.
FRAME: Final = 160
FRAME_SECONDS: Final = 0.02
#: A window is tonal when its strongest peak (or two: a chord) holds this share of the
#: band's energy.
TONAL: Final = 0.95
#: A piece of tone stays within this of its first window's frequency (Hz).
DRIFT_HZ: Final = 30.0
#: The next piece of a tone of several differs from the last by at least this (Hz).
STEP_HZ: Final = 40.0
#: Windows that are not tonal a tone of several may have between two of its pieces: the
#: change from one to the next (a phase jump is a click) spoils the two windows that
#: hold it.
JOIN_WINDOWS: Final = 2
#: Windows each piece of a tone of several holds at least.
MIN_PIECE_WINDOWS: Final = 2
#: Where a beep may lie (Hz): common voicemail beeps are 400-2000 Hz, with some margin.
BEEP_LOW_HZ: Final = 300.0
BEEP_HIGH_HZ: Final = 2600.0
#: A beep is at least this loud, and this far over the line's noise floor (dB).
BEEP_MIN_DBFS: Final = -45.0
BEEP_MARGIN_DB: Final = 12.0
#: Windows quieter than this are not looked at for tones (dBFS: below any beep's level).
ANALYSED_DBFS: Final = -50.0
#: Frames kept to place a tone's edges within them (6 s: a beep, its silence, and more),
#: in blocks of BLOCK samples (5 ms).
RECENT_FRAMES: Final = 300
BLOCK: Final = 40
#: The noise floor: the quietest of the last FLOOR_FRAMES frames less tonal than
#: FLOOR_TONALITY (1.6 s, as the voice detector's), FLOOR_PRIOR_DBFS before there is one.
FLOOR_FRAMES: Final = 80
FLOOR_TONALITY: Final = 0.8
FLOOR_PRIOR_DBFS: Final = -70.0
#: A frame is quiet when less than this over the noise floor (dB), or below QUIET_DBFS.
QUIET_MARGIN_DB: Final = 6.0
QUIET_DBFS: Final = -60.0
#: Fax tones (ITU-T T.30, V.25): CED 2100 Hz (answering), CNG 1100 Hz (calling; 0.5 s on,
#: 3 s off), each ±:data:`FAX_HZ`, heard for the seconds below.
CED_HZ: Final = 2100.0
CNG_HZ: Final = 1100.0
FAX_HZ: Final = 50.0
CED_SECONDS: Final = 0.5
CNG_SECONDS: Final = (0.4, 0.8)
#: A special information tone's three frequencies (Hz; ITU-T E.180 and Telcordia's
#: 913.8/985.2, 1370.6/1428.5, 1776.7 Hz), each ±25 Hz.
SIT_BANDS: Final = ((889.0, 1010.0), (1345.0, 1454.0), (1751.0, 1802.0))
#: Windows of another sound a fax tone may have in it (a V.25 phase reversal).
FAX_GAP_WINDOWS: Final = 2

FarEndType = Literal["live", "answering_machine", "fax_machine", "unknown"]
Reason = Literal[
    "short_greeting",
    "long_greeting",
    "fax_tone",
    "beep",
    "special_information_tone",
    "silence",
    "timeout",
    "not_classified",
]
GreetingEnd = Literal["beep", "silence", "timeout"]


#: What the classifier says: its decision, then a machine's greeting's end.
News = FarEndClassified | GreetingEnded


@dataclass
class _Piece:
    """Tonal windows at one frequency (or chord): window indices, inclusive."""

    first: int
    last: int
    hz: float
    second_hz: float | None
    level: float


@dataclass
class _Tone:
    """Pieces that follow one another: one tone, perhaps of several frequencies."""

    pieces: list[_Piece] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.pieces[0].first

    @property
    def last(self) -> int:
        return self.pieces[-1].last

    @property
    def level(self) -> float:
        return max(p.level for p in self.pieces)


def speech_detector() -> VoiceActivityDetector:
    """The voice-activity detector the classifier hears speech with: the calls' own, but
    with the speech model deciding the end of an utterance too (``model_holds``). The
    calls' usual detector lets the energy hold an utterance, which on a line of pink
    noise and hum (the set in tests/data/classify) held a live "Hello?" to the end of
    the clip: five of its six live answers were called machines. The model's cost is
    per second of speech, for the few seconds a call is classified."""
    try:
        from callhook.media.silero import SileroStream  # (its weights: loaded when needed)

        return VoiceActivityDetector(SileroStream(), model_holds=True)
    except (ImportError, OSError, ValueError):
        return new_detector()  # (which says once that there is no model)


def _is_sit(tone: _Tone) -> bool:
    """Whether ``tone`` is a special information tone (ITU-T E.180: three rising tones,
    about 950, 1400 and 1800 Hz, before a network's "the number you have dialled..."):
    no one answered, however beep-like it is."""
    if len(tone.pieces) != 3:
        return False
    return all(
        low <= piece.hz <= high for piece, (low, high) in zip(tone.pieces, SIT_BANDS, strict=True)
    )


def _dbfs(power: float) -> float:
    """The level of a mean square ``power`` (int16 scale) in dBFS (-120 for silence)."""
    if power <= 1e-3:
        return -120.0
    return 10.0 * math.log10(power / (tonality.FULL_SCALE * tonality.FULL_SCALE))


class CalleeClassifier:
    """Classifies the callee from its audio (see the module docstring)."""

    def __init__(
        self, options: ClassifyOptions, *, vad: VoiceActivityDetector | None = None
    ) -> None:
        self.options = options
        self.vad = vad if vad is not None else speech_detector()
        self.frames = 0
        self.decision: FarEndClassified | None = None
        self.ended: GreetingEnded | None = None
        # The last frames (the first is the window's other half), and the last's power.
        self._recent: deque[npt.NDArray[np.int16]] = deque(
            [np.zeros(FRAME, dtype=np.int16)], maxlen=RECENT_FRAMES
        )
        self._previous_power = 0.0
        self._pending: npt.NDArray[np.int16] | None = None  # samples short of a frame
        # Voice: where the first utterance began, whether one is going on, where the
        # last ended (seconds).
        self._speech_start: float | None = None
        self._speaking = False
        self._speech_end: float | None = None
        # The end of the last frame loud enough for speech (not quiet, not a tone): where
        # an utterance really stopped, and where a pause is broken (module docstring).
        self._loud_end = 0.0
        # Tones: the one being heard (its pieces), and a fax answer tone's windows.
        self._tone: _Tone | None = None
        self._ced = 0
        self._ced_gap = 0
        # The beep waiting for its silence (and where it began and ended), and quiet
        # frames in a row.
        self._beep: _Tone | None = None
        self._beep_edges = (0.0, 0.0)
        self._quiet = 0
        self._levels: deque[float] = deque(maxlen=FLOOR_FRAMES)  # of frames not tones
        self._decided_at = 0.0

    @property
    def done(self) -> bool:
        """Nothing more will come: decided, and for a machine its greeting is over (or
        not waited for)."""
        if self.decision is None:
            return False
        machine = self.decision.far_end_type == "answering_machine"
        return not (machine and self.options.wait_for_beep) or self.ended is not None

    @property
    def seconds(self) -> float:
        """The audio's time: the end of the last frame fed."""
        return self.frames * FRAME_SECONDS

    def feed(self, samples: npt.NDArray[np.int16]) -> list[News]:
        """Take the next samples (a 20 ms frame, usually: any length is cut into 20 ms
        frames, the rest kept for the next); what was decided with them."""
        if len(samples) != FRAME or self._pending is not None:
            held = self._pending if self._pending is not None else samples[:0]
            samples = np.concatenate((held, samples))
            whole = len(samples) - len(samples) % FRAME
            self._pending = samples[whole:] if whole < len(samples) else None
            samples = samples[:whole]
        news: list[News] = []
        for start in range(0, len(samples), FRAME):
            if self.done:
                break
            news += self._frame(samples[start : start + FRAME])
        return news

    def _frame(self, frame: npt.NDArray[np.int16]) -> list[News]:
        index = self.frames
        self.frames += 1
        now = self.seconds
        news: list[News] = []
        samples = frame.astype(np.float64)
        power = float(samples @ samples) / FRAME
        # Speech decides the first phase only: a machine's greeting ends by tones and quiet,
        # and the speech model is most of what a long greeting would cost.
        edge = self.vad.feed(frame, power) if self.decision is None else None
        if edge is True:
            start = now - self.vad.onset_frames * FRAME_SECONDS
            if self._speech_start is None:
                self._speech_start = start
            self._speaking = True
        elif edge is False:
            self._speaking = False
            held = now - self.vad.hangover_frames * FRAME_SECONDS
            self._speech_end = max(min(held, self._loud_end), self._speech_start or 0.0)
        self._recent.append(frame.copy())  # (a row of the tick's array: not kept whole)
        level = _dbfs(power)
        window_level = _dbfs((power + self._previous_power) / 2)
        if window_level >= ANALYSED_DBFS:
            spectrum = tonality.analyse(np.concatenate((self._recent[-2], frame)))
        else:  # (too quiet for a beep or a fax tone: no spectrum needed)
            spectrum = Spectrum(window_level, 0.0, 0.0, 0.0, None)
        self._previous_power = power
        floor = self._floor(level, spectrum)
        quiet = level < max(QUIET_DBFS, floor + QUIET_MARGIN_DB)
        self._quiet = self._quiet + 1 if quiet else 0
        if not quiet and spectrum.tonality < FLOOR_TONALITY:
            self._loud_end = now
        finished = self._tones(index, spectrum, floor)
        if self.decision is None:
            news += self._decide(now, finished, quiet)
        if self.decision is not None and not self.done and not news:
            news += self._greeting(now, finished, quiet)
        return news

    def _floor(self, level: float, s: Spectrum) -> float:
        """The line's noise floor (dBFS), this frame taken into account unless a tone."""
        if s.tonality < FLOOR_TONALITY:
            self._levels.append(level)
        return min(self._levels) if self._levels else FLOOR_PRIOR_DBFS

    def finish(self) -> list[News]:
        """The audio is over (a recording's end, in the benchmark and the tests): decide
        with what was heard."""
        news: list[News] = []
        if self.decision is None:
            reason: Reason = "silence" if self._speech_start is None else "timeout"
            news.append(self._classify("unknown", reason))
        if not self.done:
            news.append(self._end("timeout"))
        return news

    # --- the first phase ----------------------------------------------------------

    def _decide(self, now: float, finished: _Tone | None, quiet: bool) -> list[News]:
        o = self.options
        if self._ced >= CED_SECONDS / FRAME_SECONDS:
            return [self._classify("fax_machine", "fax_tone")]
        if finished is not None and _is_sit(finished):
            return [self._classify("unknown", "special_information_tone")]
        if finished is not None and self._speech_start is None and self._is_cng(finished):
            return [self._classify("fax_machine", "fax_tone")]
        if self._follow_beep(finished, quiet):
            # A beep, then quiet: a machine (with no greeting, or one too short to tell
            # by its length), whose greeting is over.
            return [self._classify("answering_machine", "beep"), self._beep_ended(now)]
        if now * 1000 >= o.milliseconds_timeout:
            return [self._classify("unknown", "timeout")]
        if self._beep is not None or self._tone is not None:
            return []  # a tone, or a beep waiting for its silence: not decided on speech
        start = self._speech_start
        if start is not None:
            last = self._speech_end
            pause = 0.0 if self._speaking or last is None else now - max(last, self._loud_end)
            going_on = pause * 1000 < o.milliseconds_after_greeting_silence
            if going_on and (now - start) * 1000 >= o.milliseconds_greeting:
                return [self._classify("answering_machine", "long_greeting")]
            if not going_on:
                return [self._classify("live", "short_greeting")]
        elif now * 1000 >= o.milliseconds_initial_silence:
            return [self._classify("unknown", "silence")]
        return []

    def _classify(self, kind: FarEndType, reason: Reason) -> FarEndClassified:
        self.decision = FarEndClassified(kind, reason, round(self.seconds, 3))
        self._decided_at = self.seconds
        return self.decision

    def _follow_beep(self, finished: _Tone | None, quiet: bool) -> bool:
        """Note a beep that ``finished``; forget it when sound that is not a tone comes
        after it (it was not the greeting's end). Whether it has had its silence."""
        if finished is not None and self._is_beep(finished):
            self._beep = finished
            self._beep_edges = self._edges(finished)
        after = self._beep is not None and self._beep.last < self.frames - 1 - JOIN_WINDOWS
        if after and not quiet and self._tone is None:
            self._beep = None  # sound after the beep that is not a tone: the greeting
        quiet_ms = self._quiet * FRAME_SECONDS * 1000
        return self._beep is not None and quiet_ms >= self.options.milliseconds_post_beep_silence

    # --- the second phase: a machine's greeting ends ------------------------------

    def _greeting(self, now: float, finished: _Tone | None, quiet: bool) -> list[News]:
        o = self.options
        if self._follow_beep(finished, quiet):
            return [self._beep_ended(now)]
        quiet_ms = self._quiet * FRAME_SECONDS * 1000
        if self._beep is None and quiet_ms >= o.milliseconds_no_beep_silence:
            return [self._end("silence")]
        if now - self._decided_at >= o.seconds_beep_timeout:
            return [self._end("timeout")]
        return []

    def _beep_ended(self, now: float) -> GreetingEnded:
        beep = self._beep
        assert beep is not None
        start, end = self._beep_edges
        hz = tuple(
            float(round(h)) for p in beep.pieces for h in (p.hz, p.second_hz) if h is not None
        )
        self.ended = GreetingEnded("beep", round(now, 3), start, end, hz)
        return self.ended

    def _end(self, how: GreetingEnd) -> GreetingEnded:
        self.ended = GreetingEnded(how, round(self.seconds, 3))
        return self.ended

    # --- tones --------------------------------------------------------------------

    def _tones(self, index: int, s: Spectrum, floor: float) -> _Tone | None:
        """Follow the pieces of tone; the tone that ended with this window, if one did."""
        loud = s.level_dbfs >= max(BEEP_MIN_DBFS, floor + BEEP_MARGIN_DB)
        single = loud and s.tonality >= TONAL
        chord = loud and s.second_hz is not None and s.chord >= TONAL
        near = abs(s.hz - CED_HZ) <= FAX_HZ and loud and s.tonality >= TONAL - 0.05
        if near:
            self._ced, self._ced_gap = self._ced + 1, 0
        elif self._ced:
            self._ced_gap += 1
            if self._ced_gap > FAX_GAP_WINDOWS:
                self._ced = self._ced_gap = 0
        tone = self._tone
        if single or chord:
            if tone is not None and index - tone.last <= JOIN_WINDOWS + 1:
                piece = tone.pieces[-1]
                if self._same(piece, s):
                    piece.last, piece.level = index, max(piece.level, s.level_dbfs)
                    return None
                if abs(s.hz - piece.hz) >= STEP_HZ:  # the next tone of a sequence
                    tone.pieces.append(self._new_piece(index, s, single))
                    return None
            # A new tone; the last one (if any) is over.
            self._tone = _Tone([self._new_piece(index, s, single)])
            return tone
        if tone is not None and index - tone.last > JOIN_WINDOWS:
            self._tone = None
            return tone  # over: nothing followed it within JOIN_WINDOWS
        return None

    @staticmethod
    def _new_piece(index: int, s: Spectrum, single: bool) -> _Piece:
        return _Piece(index, index, s.hz, None if single else s.second_hz, s.level_dbfs)

    @staticmethod
    def _same(piece: _Piece, s: Spectrum) -> bool:
        """Whether window ``s`` goes on with ``piece``: one of its peaks near one of the
        piece's (a chord's two tones beat, and which is the stronger changes)."""
        heard = (s.hz,) if s.second_hz is None else (s.hz, s.second_hz)
        known = (piece.hz,) if piece.second_hz is None else (piece.hz, piece.second_hz)
        if not any(abs(h - k) <= DRIFT_HZ for h in heard for k in known):
            return False
        if piece.second_hz is None and s.second_hz is not None and s.chord >= TONAL:
            other = s.second_hz if abs(s.hz - piece.hz) <= DRIFT_HZ else s.hz
            if abs(other - piece.hz) > DRIFT_HZ:
                piece.second_hz = other  # a chord after all
        return True

    def _is_beep(self, tone: _Tone) -> bool:
        # Its length by windows: n tonal windows span n + 1 frames (a window is two).
        seconds = (tone.last - tone.first + 2) * FRAME_SECONDS
        long_enough = seconds * 1000 >= self.options.milliseconds_min_beep_duration
        in_band = all(BEEP_LOW_HZ <= p.hz <= BEEP_HIGH_HZ for p in tone.pieces)
        # Each piece a few windows: a voice's tonal moments are not chained into a beep.
        held = min(p.last - p.first + 1 for p in tone.pieces) >= MIN_PIECE_WINDOWS
        return long_enough and in_band and held

    def _is_cng(self, tone: _Tone) -> bool:
        if any(abs(p.hz - CNG_HZ) > FAX_HZ for p in tone.pieces):
            return False
        seconds = (tone.last - tone.first + 2) * FRAME_SECONDS
        return CNG_SECONDS[0] <= seconds <= CNG_SECONDS[1]

    def _edges(self, tone: _Tone) -> tuple[float, float]:
        """Where ``tone`` began and ended (seconds), to the 5 ms block: from within its
        first and last windows, out while the blocks are within 10 dB of its level (at
        most a window's length: what is next to a beep may be as loud)."""
        kept = self.frames - len(self._recent) + 1  # the frame index of _recent[1]
        first_frame = max(kept, tone.first - 3)
        frames = list(self._recent)[1 + first_frame - kept : 1 + tone.last + 3 - kept]
        if not frames:  # (older than what is kept: not a beep's length)
            return round(tone.first * FRAME_SECONDS, 3), round((tone.last + 1) * FRAME_SECONDS, 3)
        x = np.concatenate(frames).astype(np.float64).reshape(-1, BLOCK)
        blocks = 10.0 * np.log10(np.maximum((x * x).mean(axis=1), 1e-3) / tonality.FULL_SCALE**2)
        base = 4 * first_frame  # (the block index of blocks[0])
        floor = tone.level - 10.0
        # Window w covers frames w-1 and w: a tone heard in it from its first window on
        # sounds at the end of that window, and from its last window back at the start.
        start = first = 4 * (tone.first + 1) - 1 - base
        start = max(start, 0)
        while start > max(0, first - 8) and blocks[start - 1] >= floor:
            start -= 1
        end = last = max(4 * (tone.last - 1) - base, 0)
        while end < min(len(blocks), last + 12) and blocks[end] >= floor:
            end += 1
        start, end = start + base, end + base
        return round(start * 0.005, 3), round(end * 0.005, 3)
