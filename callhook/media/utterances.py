"""A call's speech recognition stream: the caller's frames cut into utterances. Sans-IO.

Theory of operation
-------------------
While an action wants speech (``StartRecognition`` .. ``StopRecognition``),
every 20 ms frame the caller sends goes through the call's voice-activity
detector (the same one that times ``record``'s silences) and then into an
:class:`UtteranceCutter`. The cutter follows the detector's edges:

* on the rising edge it reports :class:`~callhook.events.SpeechStarted` (the
  input action stops its initial timer; speech barge-in begins here) and
  starts an utterance with the last :data:`PREROLL_FRAMES` frames before the
  edge, because the detector needs to hear a syllable before it reports it;
* while the caller speaks, frames are appended;
* on the falling edge (after the detector's hangover of quiet frames, which
  therefore end the utterance as trailing context) the utterance is complete:
  :class:`Utterance` goes to a recogniser on a worker thread, whose answer
  becomes ``SpeechRecognised`` or ``SpeechRejected``;
* an utterance that goes on for :data:`MAX_FRAMES` is cut there and a new one
  begins, so a caller who never stops (or a loud line) cannot hold the
  recogniser forever.

For a recogniser that streams (:class:`~callhook.speech.asr.RecognitionStream`), the
cutter also hands out an :class:`UtterancePiece` every ``piece_frames`` frames while the
caller speaks (the first with the pre-roll), so the engine decodes during the speech;
the :class:`Utterance` at the end is still the whole of it, and the piece not yet handed
out is its tail.

End-of-speech timing follows: the reference's ``milliseconds_inter_speech_timeout``
runs in the input action from the *result* of an utterance, so a caller who
pauses between words longer than the detector's hangover gives two phrases,
joined in ``speech_input`` (timeout mode), while ``auto`` mode returns with
the first phrase.

:func:`cut_utterances` runs a whole recording through exactly this path, for
benchmarks and tests.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from callhook.events import SpeechStarted
from callhook.media import g711
from callhook.media.vad import VoiceActivityDetector, new_detector

FRAME = 160  # 20 ms at 8 kHz
#: Frames before the detector's rising edge included in an utterance (300 ms).
PREROLL_FRAMES = 15
#: Longest utterance handed to a recogniser (10 s, Whisper's scoring window).
MAX_FRAMES = 500
#: Frames in a piece handed to a streaming recogniser (200 ms: what cloud services'
#: streaming APIs advise, 20-250 ms; shorter would wake the call more for no gain).
PIECE_FRAMES = 10


@dataclass(frozen=True, slots=True)
class Utterance:
    """One stretch of the caller's speech, ready for a recogniser (8 kHz int16)."""

    audio: npt.NDArray[np.int16]
    #: True when :data:`MAX_FRAMES` cut it, not the caller's pause.
    truncated: bool = False
    #: Samples of it already handed out as :class:`UtterancePiece` (the rest: its tail).
    streamed: int = 0


@dataclass(frozen=True, slots=True)
class UtterancePiece:
    """The next part of the utterance in progress, for a streaming recogniser."""

    audio: npt.NDArray[np.int16]
    #: The first piece of an utterance (a new stream begins with it).
    first: bool


class UtteranceCutter:
    """Cuts frames into utterances along voice-activity edges (see the module docstring)."""

    def __init__(
        self,
        *,
        preroll_frames: int = PREROLL_FRAMES,
        max_frames: int = MAX_FRAMES,
        piece_frames: int = 0,
    ):
        """``piece_frames``: hand out the utterance in progress in pieces of that many
        frames (0: only whole utterances)."""
        self.max_frames = max_frames
        self.piece_frames = piece_frames
        self._before: deque[npt.NDArray[np.int16]] = deque(maxlen=preroll_frames)
        self._frames: list[npt.NDArray[np.int16]] | None = None
        # Frames (and samples) of the utterance in progress handed out in pieces.
        self._handed = 0
        self._handed_samples = 0

    @property
    def in_utterance(self) -> bool:
        return self._frames is not None

    def feed(
        self, frame: npt.NDArray[np.int16], edge: bool | None
    ) -> list[SpeechStarted | Utterance | UtterancePiece]:
        """One frame and the detector's edge for it (True: speech began, False: it ended)."""
        out: list[SpeechStarted | Utterance | UtterancePiece] = []
        frames = self._frames
        if frames is None:
            if edge is True:
                self._frames = [*self._before, frame]
                self._before.clear()
                out.append(SpeechStarted())
            else:
                self._before.append(frame)
            return out
        frames.append(frame)
        if edge is False:
            out.append(self._whole(truncated=False))
            self._frames = None
        elif len(frames) >= self.max_frames:
            out.append(self._whole(truncated=True))
            self._frames = []
        elif self.piece_frames and len(frames) - self._handed >= self.piece_frames:
            piece = np.concatenate(frames[self._handed :])
            out.append(UtterancePiece(piece, self._handed == 0))
            self._handed = len(frames)
            self._handed_samples += len(piece)
        return out

    def _whole(self, *, truncated: bool) -> Utterance:
        """The utterance in progress, complete (and the next one starts unhanded)."""
        assert self._frames is not None
        handed, self._handed, self._handed_samples = self._handed_samples, 0, 0
        return Utterance(np.concatenate(self._frames), truncated=truncated, streamed=handed)

    def current(self) -> npt.NDArray[np.int16] | None:
        """The utterance in progress so far, pre-roll included (None: no speech now)."""
        return np.concatenate(self._frames) if self._frames else None

    def begin(self) -> SpeechStarted:
        """Start an utterance now, with the pre-roll (the caller is already talking)."""
        if self._frames is None:
            self._frames = list(self._before)
            self._before.clear()
        return SpeechStarted()

    def flush(self) -> Utterance | None:
        """The utterance in progress, if any (the stream is being stopped mid-speech)."""
        frames, self._frames = self._frames, None
        handed, self._handed, self._handed_samples = self._handed_samples, 0, 0
        self._before.clear()
        if not frames:
            return None
        return Utterance(np.concatenate(frames), truncated=True, streamed=handed)


def cut_utterances(
    samples: npt.NDArray[np.int16],
    *,
    detector: VoiceActivityDetector | None = None,
    law: g711.Law | None = None,
) -> list[npt.NDArray[np.int16]]:
    """The utterances a call's recognition stream would hand a recogniser for ``samples``.

    ``samples`` (8 kHz int16) are cut into 20 ms frames, optionally passed
    through a G.711 round trip (``law``), and fed to ``detector`` (by default
    the one a call uses) and an :class:`UtteranceCutter`; speech still going
    at the end is flushed as a last utterance, as when a call's stream stops.
    """

    vad = detector if detector is not None else new_detector()
    cutter = UtteranceCutter()
    whole = len(samples) // FRAME * FRAME
    pcm = samples[:whole]
    if law is not None:
        pcm = g711.decode(law, g711.encode(law, pcm))
    out: list[npt.NDArray[np.int16]] = []
    for start in range(0, whole, FRAME):
        frame = pcm[start : start + FRAME]
        for item in cutter.feed(frame, vad.feed(frame)):
            if isinstance(item, Utterance):
                out.append(item.audio)
    last = cutter.flush()
    if last is not None:
        out.append(last.audio)
    return out
