"""Voice activity: is the caller speaking? An energy gate on every frame, a speech model behind it.

Used by ``record`` (stop after N seconds of silence) and ``get_input``
(barge-in, end of speech): they consume edges, ``VoiceActivity(active)``,
so :meth:`VoiceActivityDetector.feed` returns True or False only when the
state changes.

**The energy gate** (a classic method; see ITU-T G.729 Annex B and G.723.1
Annex A for fuller detectors of the same family):

* frame energy (mean square of the samples);
* noise floor: the minimum frame energy over the last ~1.6 s (minimum
  statistics, R. Martin 2001), so it follows line noise down at once and up
  within 1.6 s, while speech, which always has quieter frames between
  syllables, does not pull it up;
* a frame is loud when it is :attr:`margin_db` above the floor *and* above
  an absolute minimum; while open, the threshold is lower (hysteresis: 3 dB, gated 2 dB).

**Energy only** (no ``model``; the defaults of old: margin 8 dB, minimum
−47 dBFS, so comfort noise and hiss at −50..−60 dBFS never count): a loud
frame is speech. Onset after 3 loud frames in a row (60 ms: clicks do not
count), release after 15 quiet frames (300 ms hangover, so pauses between
words do not end an utterance). A steady sound (a tone, a hum) counts for about
the floor's window, then becomes the floor. Any loud enough sound is
"activity": on the benchmark (``bench/vad.py``) hum and clicks at −45 dBFS
fire it on most clips.

**Gated** (a :class:`SpeechModel`, e.g. :class:`callhook.media.silero.SileroStream`):
the gate only decides where the model runs; a frame is speech when it is loud
*and* the model says speech (probability ≥ 0.5 switches the model's verdict on,
< 0.35 off: hysteresis, so one doubtful window mid-word does not count). The
model rejects hiss and hum, so the gate can be lower (defaults: −75 dBFS and
3 dB over the floor to open, 1 dB to stay open, 2 dB to keep activity going),
which theo's very quiet recordings (peaks below −40 dBFS) need. Onset after 3
speech frames in a row (60 ms), and until then a frame needs the full margin:
Silero calls a pop or a crackle speech for a window or two (p up to 0.87).
Measured on theo's 500 clips on a line with −50 dBFS hiss and on the 100
noise-only clips per level of ``bench/vad.py`` (false alarms at −55 / −45 /
−35 dBFS):

=================================  ============  =============  ============
open / keep active (dB), onset     theo missed   late release   false alarms
=================================  ============  =============  ============
4 / 2, 2 frames (first tuning)     31            0              1 / 0 / 2
3 / 1 (model alone holds), 2       4             many           1 / 0 / 2
3 / 2, 2 frames                    1             0              1 / 0 / 2
3 / 2, 3 frames (the defaults)     1             0              0 / 0 / 0
=================================  ============  =============  ============

("late": released more than 340 ms after the speech ended; the model alone
holds on to the hiss after a quiet caller's last word, hence the 2 dB.) The
release is unchanged: 15 frames that are quiet or not speech (300 ms). The
floor's prior is replaced by the first measured block (200 ms) instead of
lasting its whole 1.6 s window, so a call that starts on loud noise does not
count it as loud.

**Quiet lines** (issue 16: a quiet caller's one short word was never heard).
Two things stopped it, both measured with ``bench/vad.py --quieter``: the
gate's absolute minimum (it was −55 dBFS: a phone whose whole signal is 20 dB
down puts a soft talker's loudest syllable near −60 dBFS, never loud enough to
wake the model, however quiet the line), and the model itself, which calls
speech at −60 dBFS noise even when it is clearly louder than the line (Silero
was trained on audio at ordinary levels). So the gated minimum is now
−75 dBFS (near µ-law's own quantisation noise; the floor-relative margin is
what rejects the line), and the model hears the line at a nominal level: its
input is amplified (unclipped) so that the noise floor sits at :attr:`MODEL_FLOOR_DBFS`
(−50 dBFS), by at most :attr:`MAX_GAIN_DB`. The gain is 0 dB until the floor
has been measured (the first block), follows the floor of the completed blocks
only (one quiet frame is often the pause just before a word: following it
restarted the model at the word's onset and lost three of theo's quiet "eight"s
in ``bench/asr.py``), only between utterances (never while the model is
confirming an onset: a restart there lost one of jackson's "six"), in steps of at least
:attr:`GAIN_STEP_DB` (a gain that drifted
frame by frame under a wobbling hum made the model call it speech: 2 false
alarms in 100 noise clips at −65 dBFS), and when it changes while the gate is
open the model restarts, so it never hears a level jump. Lines at an ordinary
level (floor at or above −50 dBFS) get no gain: nothing changes for them.
Speech under the line's hiss is not recoverable by any gain; the bench reports
those clips apart.

The gate opens on the first loud frame and closes after the hangover (15
quiet frames); the model sees every frame in between, so silent calls cost
nothing but the energy (~2 µs a frame) and the model's recurrent state follows
contiguous audio. While the gate is closed the last :attr:`PREROLL` frames are
kept: when it reopens within that time the model is fed the frames it missed
(the stream stays contiguous); after a longer closure it is reset and fed the
pre-roll, so it starts each utterance from a clean state with 160 ms of
background, never with a previous utterance's state.

Levels are dBFS as in :mod:`callhook.media.tones`: RMS relative to 32768
(a full-scale sine is −3 dBFS).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from callhook.media.frames import frame_power
from callhook.media.gate import GateCore

logger = logging.getLogger("callhook.media")

FULL_SCALE: Final = 32768.0
#: A frame of samples on the int16 scale (float: amplified for the model, unclipped).
Frame = npt.NDArray[np.int16] | npt.NDArray[np.float32]
#: What :func:`level_dbfs` returns for digital silence.
SILENCE_DBFS: Final = -120.0


class SpeechModel(Protocol):
    """A stateful per-call speech classifier fed contiguous 20 ms frames (8 kHz int16)."""

    def probability(self, frame: Frame) -> float:
        """Take the next frame; the probability (0..1) that the latest audio is speech.

        Samples are on the int16 scale; a float frame (the detector's gain on a quiet
        line) may go past it, unclipped.
        """
        ...

    def reset(self) -> None:
        """Forget all state: the next frame starts a new, unrelated stream."""
        ...


def _power(dbfs: float) -> float:
    """Mean square of a signal at ``dbfs``."""
    return FULL_SCALE * FULL_SCALE * math.pow(10.0, dbfs / 10.0)


def level_dbfs(frame: Frame) -> float:
    """RMS level of ``frame`` in dBFS (a full-scale square wave is 0), at least -120."""
    if frame.size == 0:
        return SILENCE_DBFS
    f = frame.astype(np.float64).ravel()
    mean_square = float(f @ f) / f.size
    if mean_square <= _power(SILENCE_DBFS):
        return SILENCE_DBFS
    return 10.0 * math.log10(mean_square / (FULL_SCALE * FULL_SCALE))


class VoiceActivityDetector(GateCore):
    """Edges of voice activity in a stream of frames (sans-IO; one per call).

    ``feed(frame)`` returns True when activity starts, False when it ends,
    None otherwise. Frames are int16 arrays (160 samples for 20 ms at 8 kHz;
    the frame counts below assume 20 ms frames).

    ``model=None`` is the energy detector alone; with a model, the parameters
    left as None take the gated defaults (see the module docstring).

    ``model_holds``: whether the model also decides, frame by frame, when an
    utterance it confirmed ends. By default it does not: the model confirms
    the onset, the energy (2 dB over the floor) holds the utterance, and the
    model is reset when it ends. A talking caller then costs the model a few
    windows per utterance instead of every 32 ms window (~3 ms of CPU per
    second of speech, which at a few hundred calls was more than all the rest
    of a call: ``bench/ivr_load.py``); the price is that a loud non-speech
    sound right after speech (music, a hum louder than the line) holds the
    utterance until the noise floor learns it (at most 1.6 s).
    """

    #: Frames per block of the noise-floor minimum, and blocks remembered (10 x 8 = 1.6 s).
    BLOCK_FRAMES: Final = 10
    BLOCKS: Final = 8
    #: Gated: dB over the noise floor a frame needs to keep activity going.
    RELEASE_MARGIN_DB: Final = 2.0
    #: Frames kept while the gate is closed, fed to the model when it opens (160 ms).
    PREROLL: Final = 8
    #: Gated: the model's input is amplified to put the noise floor here, by at most
    #: MAX_GAIN_DB, changed in steps of at least GAIN_STEP_DB (module docstring).
    MODEL_FLOOR_DBFS: Final = -50.0
    MAX_GAIN_DB: Final = 30.0
    #: Gated: the minimum level of a loud frame until the first block has measured the floor.
    START_LEVEL_DBFS: Final = -55.0
    GAIN_STEP_DB: Final = 3.0

    def __init__(
        self,
        model: SpeechModel | None = None,
        *,
        onset_frames: int | None = None,
        hangover_frames: int = 15,
        margin_db: float | None = None,
        min_level_dbfs: float | None = None,
        hysteresis_db: float | None = None,
        speech_on: float = 0.5,
        speech_off: float = 0.35,
        model_holds: bool = False,
    ) -> None:
        gated = model is not None
        self.model = model
        self.onset_frames = onset_frames if onset_frames is not None else 3
        self.hangover_frames = hangover_frames
        self.margin_db = margin_db if margin_db is not None else (3.0 if gated else 8.0)
        self.min_level_dbfs = (
            min_level_dbfs if min_level_dbfs is not None else (-75.0 if gated else -47.0)
        )
        self.speech_on = speech_on
        self.speech_off = speech_off
        self.model_holds = model_holds
        self._margin = math.pow(10.0, self.margin_db / 10.0)
        self.hysteresis_db = hysteresis_db if hysteresis_db is not None else (2.0 if gated else 3.0)
        self._hold = math.pow(10.0, -self.hysteresis_db / 10.0)
        # Gated: while active, a frame counts only this far over the floor (see _gated).
        self._release = math.pow(10.0, (self.RELEASE_MARGIN_DB - self.margin_db) / 10.0)
        self._min_power = _power(self.min_level_dbfs)
        self._start_power = max(self._min_power, _power(self.START_LEVEL_DBFS))
        # Until real blocks replace it, the floor is one that puts the threshold at the minimum.
        prior = self._min_power / self._margin
        self._blocks: deque[float] = deque([prior], maxlen=self.BLOCKS)
        self._history_floor = prior
        # Energy only keeps the prior for the whole window, as it always did (the quietest
        # test clips are only heard thanks to it); see feed() for the gated mode.
        self._prior = gated
        self._block_min = math.inf
        self._block_count = 0
        self._active = False
        self._run = 0
        # The gate (model mode only): open, quiet frames while open, frames since it closed.
        self._gate = False
        self._gate_quiet = 0
        self._closed_for = self.PREROLL + 1  # "long ago": the first opening resets the model
        # (For the C path of the usual frame, gate.py: the class constants it needs.)
        self._block_frames, self._closed_long = self.BLOCK_FRAMES, self.PREROLL + 1
        self._preroll: deque[npt.NDArray[np.int16]] = deque(maxlen=self.PREROLL)
        self._says_speech = False
        #: Gated: dB the model's input is amplified by, and the same as a factor.
        self.model_gain_db = 0.0
        self._gain = 1.0
        self._gain_floor = -1.0  # the floor the gain was last judged for (none yet)
        #: Frames the model was fed (pre-roll included), for the benchmark and tests.
        self.model_frames = 0
        #: Gated: while True the model is not run and no frame is speech (the energy and
        #: the noise floor are still tracked). A call pauses it when nothing listens for
        #: voice activity (no recording, no recognition): the model is what costs.
        self.paused = False

    @property
    def active(self) -> bool:
        return self._active

    @property
    def gate_open(self) -> bool:
        """Whether the model is being fed (always False without a model)."""
        return self._gate

    @property
    def noise_floor_dbfs(self) -> float:
        """The current noise floor estimate (minimum frame level over the floor's window)."""
        floor = min(self._history_floor, self._block_min)
        if floor <= _power(SILENCE_DBFS):
            return SILENCE_DBFS
        return 10.0 * math.log10(floor / (FULL_SCALE * FULL_SCALE))

    def feed(self, frame: npt.NDArray[np.int16], power: float | None = None) -> bool | None:
        """True: activity started; False: it ended (after the hangover); None: no change.

        ``power``: the frame's mean square if it is known already (the media tick
        measures every call's frame at once: :mod:`callhook.media.frames`).

        The media tick takes the usual frame (paused, a closed gate on a quiet line, an
        utterance the energy holds: no model run, no edge) in C instead
        (:mod:`callhook.media.gate`, ``_gate.c``), and so does the media thread where it
        holds the call's receive (``edge/_rx.h``, with :meth:`_follow_floor`): a change
        here is made there too (``tests/unit/media/test_gate.py`` and
        ``tests/unit/edge/test_plane_rx.py`` compare them).
        """
        if not len(frame):
            return None  # an RTP packet with no payload: no audio, no verdict (nor 0/0)
        if power is None:
            power = frame_power(frame)
        # Noise floor: running minimum over BLOCKS blocks of BLOCK_FRAMES frames.
        if power < self._block_min:
            self._block_min = power
        self._block_count += 1
        floor = min(self._history_floor, self._block_min)
        if self._block_count >= self.BLOCK_FRAMES:
            if self._prior:
                # Gated: the prior is a guess, the first measured block replaces it, so noise
                # louder than the prior is the floor after 200 ms, not after 1.6 s (1.6 s of
                # hiss counting as loud let the model's verdict on a pop carry over to the
                # hiss after it: 9 false alarms in 100 clips at -45 dBFS, bench/vad.py).
                self._blocks.clear()
                self._prior = False
            self._blocks.append(self._block_min)
            self._history_floor = min(self._blocks)
            self._block_min = math.inf
            self._block_count = 0
        # Gated: until the floor is measured, the old absolute minimum (a call that starts on
        # -60 dBFS hiss must not count it as loud while the prior stands).
        minimum = self._start_power if self._prior else self._min_power
        threshold = max(minimum, floor * self._margin)
        if self.model is None:
            held = self._active
            speech = power > (max(self._min_power, threshold * self._hold) if held else threshold)
        else:
            speech = self._gated(frame, power, threshold)
        edge = self._edge(speech)
        if edge is False and self.model is not None and not self.model_holds:
            # The model skipped the utterance's frames: start it afresh for the next one.
            self.model.reset()
            self._says_speech = False
        return edge

    def _gated(self, frame: npt.NDArray[np.int16], power: float, threshold: float) -> bool:
        """Run the gate, and the model where it is open: is this frame speech?"""
        assert self.model is not None
        if self.paused:
            # No pre-roll kept: whoever wakes the detector replays recent audio (session.py).
            self._gate = False
            self._closed_for = self.PREROLL + 1
            return False
        loud = power > (max(self._min_power, threshold * self._hold) if self._gate else threshold)
        if not self._active:
            self._follow_floor()
        # The frames the model is still to hear before this one (a gate opening's).
        missed: list[npt.NDArray[np.int16]] = []
        if not self._gate:
            if not loud:
                self._closed_for += 1
                self._preroll.append(frame.copy())  # the caller may reuse its buffer
                return False
            # Opening: keep the model's audio contiguous, or start it afresh (module docstring).
            missed = list(self._preroll)
            if self._closed_for > self.PREROLL:
                self.model.reset()
                self._says_speech = False
            else:
                missed = missed[len(missed) - self._closed_for :] if self._closed_for else []
            self._preroll.clear()
            self._gate = True
            self._gate_quiet = 0
        elif loud:
            self._gate_quiet = 0
        else:
            self._gate_quiet += 1
            if self._gate_quiet >= self.hangover_frames:
                if not (
                    self._active and not self.model_holds and self._run + 1 >= self.hangover_frames
                ):
                    # The model still sees this frame: the closing frame ends its
                    # contiguous audio.
                    self._classify(frame)
                # (Else this frame ends the utterance the energy holds, and the model is
                # reset after it, feed(): its verdict would go unused, its window wasted.)
                self._gate = False
                self._closed_for = 0
                return False
        # Speech needs the full margin until activity starts (as in the energy-only mode): the
        # gate's lower threshold would let hiss count once a pop has swayed the model. Once
        # active, a frame must stay RELEASE_MARGIN_DB over the floor: the model alone would
        # hold on to the hiss after a quiet caller's last word (on theo's clips it called it
        # speech for seconds), while the gate keeps feeding the model down to 1 dB.
        if self._active:
            held = power > max(self._min_power, threshold * self._release)
            if not self.model_holds:
                # The model confirmed the onset; the energy holds the utterance (see the
                # class docstring: this is what keeps the model's cost per call small).
                self._classify_all(missed)
                return loud and held
        else:
            held = power > threshold
        return self._classify_all([*missed, frame]) and loud and held

    def _follow_floor(self) -> None:
        """Between utterances: the model's gain for the current noise floor (docstring)."""
        assert self.model is not None
        if self._prior:
            return  # the floor is not measured yet: no gain
        if self._says_speech or self._run:
            return  # an onset is being confirmed: a restart now would lose the word
        floor = self._history_floor  # completed blocks only (module docstring)
        if floor == self._gain_floor:
            return  # judged already: the floor moves once a block (10 frames) at most
        self._gain_floor = floor
        floor_dbfs = (
            10.0 * math.log10(floor / (FULL_SCALE * FULL_SCALE))
            if floor > _power(SILENCE_DBFS)
            else SILENCE_DBFS
        )
        gain = min(self.MAX_GAIN_DB, max(0.0, self.MODEL_FLOOR_DBFS - floor_dbfs))
        if abs(gain - self.model_gain_db) < self.GAIN_STEP_DB and (gain or not self.model_gain_db):
            return  # a small change (but back to no gain at once when the line is loud again)
        self.model_gain_db = gain
        self._gain = math.pow(10.0, gain / 20.0)
        if self._gate:
            # The model must not hear a level jump inside its contiguous audio.
            self.model.reset()
            self._says_speech = False

    def _model_input(self, frame: npt.NDArray[np.int16]) -> Frame:
        """The frame as the model hears it: at the model's gain."""
        if self._gain != 1.0:
            # Unclipped floats: a line of digital silence gets the whole gain, and clipping a
            # loud talker's words kept Silero from confirming them (a word replayed when
            # the detector wakes, test_media_session.py).
            return frame.astype(np.float32) * np.float32(self._gain)
        return frame

    def _classify(self, frame: npt.NDArray[np.int16]) -> bool:
        """Feed the model one frame (at the model's gain); its verdict with hysteresis."""
        assert self.model is not None
        return self._hear(self.model.probability(self._model_input(frame)))

    def _classify_all(self, frames: list[npt.NDArray[np.int16]]) -> bool:
        """:meth:`_classify` of each of ``frames`` in turn; the last one's verdict (the
        one before, for none)."""
        for frame in frames:
            self._classify(frame)
        return self._says_speech

    def _hear(self, p: float) -> bool:
        """The model's probability for a frame: its verdict with hysteresis."""
        self.model_frames += 1
        if p >= self.speech_on:
            self._says_speech = True
        elif p < self.speech_off:
            self._says_speech = False
        return self._says_speech

    def _edge(self, speech: bool) -> bool | None:
        """Onset after ``onset_frames`` speech frames in a row; release after the hangover."""
        if self._active:
            if speech:
                self._run = 0
                return None
            self._run += 1
            if self._run >= self.hangover_frames:
                self._active = False
                self._run = 0
                return False
            return None
        if speech:
            self._run += 1
            if self._run >= self.onset_frames:
                self._active = True
                self._run = 0
                return True
        else:
            self._run = 0
        return None


_no_model_logged = False


def warm_up() -> None:
    """Load the speech model's weights now (at serve's start), not at the first call that
    listens; without them, said once in the log, as :func:`new_detector` says it."""
    new_detector()


def new_detector() -> VoiceActivityDetector:
    """The voice-activity detector a call uses (one definition for calls and benchmarks).

    The energy gate with the silero speech model behind it; without the model file,
    the energy detector alone, said once in the log.
    """
    global _no_model_logged
    try:
        from callhook.media.silero import SileroStream  # (its weights: loaded when needed)

        return VoiceActivityDetector(SileroStream())
    except (ImportError, OSError, ValueError) as exc:
        if not _no_model_logged:
            _no_model_logged = True
            logger.error("no speech model for voice activity (%s): energy alone decides", exc)
        return VoiceActivityDetector()
