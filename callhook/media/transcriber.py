"""Live transcription (``start_transcription``): one direction's audio cut into phrases,
with interim snapshots while a phrase goes on. Sans-IO.

Theory of operation
-------------------
Whisper decodes a whole stretch of audio; it does not stream. Live transcription is
built on the same voice-activity path as ``get_input`` (:mod:`callhook.media.utterances`):

* every 20 ms frame of the direction transcribed goes through a voice-activity detector
  of the stream's own and an :class:`~callhook.media.utterances.UtteranceCutter`; the
  cutter's finished utterance is a **phrase**, decoded once, its result ``final``;
* with interim results on, while a phrase goes on, every :data:`INTERIM_EVERY` seconds
  of it the audio so far is handed out as an :class:`Interim` snapshot; its decode is an
  interim result (``final: false``). Its ``stability`` (Aculab: 0 unstable .. 1 stable)
  is measured by local agreement: the share of this interim's words that the previous
  interim of the same phrase already had, in order, from the start (words two decodes
  agree on seldom change again);
* a phrase that goes on for the cutter's limit (10 s) is cut there and decoded, and the
  next begins at once, so a speaker who never pauses still gets final results.

Each piece carries the phrase's number, so results decoded out of order (interim
decodes are dropped when the phrase's final one is already out) are put right by
:class:`PhraseResults`. The bodies posted to ``results_page`` are
:func:`result_body`'s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, Transcribe
from callhook.media.player import FRAME
from callhook.media.utterances import MAX_FRAMES, Utterance, UtteranceCutter
from callhook.media.vad import VoiceActivityDetector

Direction = Literal["inbound", "outbound"]

#: Seconds of a phrase between two interim snapshots.
INTERIM_EVERY = 1.0


@dataclass(frozen=True, slots=True)
class Interim:
    """The audio of phrase ``phrase`` so far, for an interim decode (``seq``: the
    phrase's snapshots in order, from 1)."""

    phrase: int
    audio: npt.NDArray[np.int16]
    seq: int = 1


@dataclass(frozen=True, slots=True)
class Final:
    """Phrase ``phrase``, whole (``truncated``: cut at the length limit, not a pause)."""

    phrase: int
    audio: npt.NDArray[np.int16]
    truncated: bool = False


Piece = Interim | Final


class TranscriptStream:
    """One direction's audio (or both, mixed) cut into phrases (see the module docstring)."""

    def __init__(
        self,
        detector: VoiceActivityDetector,
        *,
        interim: bool = False,
        interim_every: float = INTERIM_EVERY,
        max_frames: int = MAX_FRAMES,
    ) -> None:
        self.detector = detector
        self.cutter = UtteranceCutter(max_frames=max_frames)
        self.interim = interim
        self._every = max(1, round(interim_every / 0.02))  # frames between snapshots
        self._phrase = 0  # number of the phrase in progress (or the next)
        self._spoken = 0  # frames of the phrase in progress since it began

    def feed(self, frame: npt.NDArray[np.int16]) -> list[Piece]:
        """One 20 ms frame (160 samples, 8 kHz); the pieces it completes."""
        edge = self.detector.feed(frame)
        out: list[Piece] = []
        for item in self.cutter.feed(frame, edge):
            if isinstance(item, Utterance):
                out.append(Final(self._phrase, item.audio, item.truncated))
                self._phrase += 1
                self._spoken = 0
        if self.interim and self.cutter.in_utterance:
            self._spoken += 1
            so_far = self.cutter.current()
            if self._spoken % self._every == 0 and so_far is not None:
                out.append(Interim(self._phrase, so_far, self._spoken // self._every))
        return out

    def flush(self) -> list[Piece]:
        """The phrase in progress, as a final piece (the transcription is stopping)."""
        last = self.cutter.flush()
        self._spoken = 0
        if last is None or len(last.audio) < 10 * FRAME:  # under 0.2 s: nothing said
            return []
        piece = Final(self._phrase, last.audio, truncated=True)
        self._phrase += 1
        return [piece]


def stability(previous: str, current: str) -> float:
    """Local agreement: the share of ``current``'s words that ``previous`` had, in order,
    from the start (1.0: all of them; 0.0: none, or no words)."""
    now = current.lower().split()
    if not now:
        return 0.0
    before = previous.lower().split()
    agreed = 0
    for a, b in zip(before, now, strict=False):
        if a != b:
            break
        agreed += 1
    return round(agreed / len(now), 2)


def phrase(
    alternatives: list[Alternative],
    *,
    final: bool,
    direction: Direction | None,
    stability_value: float | None = None,
) -> dict[str, Any]:
    """A phrase object as Aculab's transcription results have it: ``alternatives``
    (``text``, ``confidence`` on final results), ``final``, ``stability`` on interim ones,
    ``direction`` unless mixed."""
    out: dict[str, Any] = {
        "alternatives": [
            {"text": a.text, "confidence": round(a.confidence, 2)} if final else {"text": a.text}
            for a in alternatives
        ],
        "final": final,
    }
    if not final and stability_value is not None:
        out["stability"] = stability_value
    if direction is not None:
        out["direction"] = direction
    return out


def result_body(
    instance_id: str,
    log_filename: str,
    transcription_id: str,
    phrases: list[dict[str, Any]],
    *,
    completed: bool,
) -> dict[str, Any]:
    """What ``results_page`` is sent: instance info with an empty token, no ``this_call``,
    and the ``start_transcription`` action result (``transcription``, ``id``,
    ``completed``)."""
    return {
        "application_instance_id": instance_id,
        "token": "",
        "log_filename": log_filename,
        "is_notification": True,
        "action_result": {
            "action": "start_transcription",
            "result": {"transcription": phrases, "id": transcription_id, "completed": completed},
        },
    }


class PhraseResults:
    """Orders a stream's decoded results: an interim result of a phrase whose final result
    (or a later interim one) is already out is dropped, and each interim's stability is
    measured against the one before it."""

    def __init__(self) -> None:
        self._last_final = -1
        self._interim_text: dict[int, str] = {}
        self._interim_seq: dict[int, int] = {}

    def interim(self, piece_phrase: int, seq: int, text: str) -> float | None:
        """An interim decode of ``piece_phrase`` (``seq``: its snapshot's order): its
        stability, or None when it is stale and must not be sent."""
        if piece_phrase <= self._last_final or seq <= self._interim_seq.get(piece_phrase, -1):
            return None
        value = stability(self._interim_text.get(piece_phrase, ""), text)
        self._interim_text[piece_phrase] = text
        self._interim_seq[piece_phrase] = seq
        return value

    def final(self, piece_phrase: int) -> None:
        """Phrase ``piece_phrase``'s final result is out: its interims are over."""
        self._last_final = max(self._last_final, piece_phrase)
        self._interim_text.pop(piece_phrase, None)
        self._interim_seq.pop(piece_phrase, None)


TranscriptionMode = Literal["separate", "mixed", "inbound", "outbound"]
#: The streams of each mode, by the direction their phrases carry (None: mixed).
DIRECTIONS: dict[TranscriptionMode, tuple[Direction | None, ...]] = {
    "separate": ("inbound", "outbound"),
    "inbound": ("inbound",),
    "outbound": ("outbound",),
    "mixed": (None,),
}


class CallTranscriber:
    """A call's transcription in ``mode`` (Aculab's ``transcription_mode``): the caller's
    audio (*inbound*) and what the call sends the caller (*outbound*: prompts, or the far
    end of a bridge) each in a stream of its own (``separate``), or one of them, or both
    summed into one stream whose phrases have no direction (``mixed``).

    The media session hands it the caller's frames as they arrive (:meth:`caller`) and the
    frame it sends each 20 ms tick (:meth:`sent`); the pieces, with their direction
    (None: mixed), collect in :attr:`pieces`."""

    def __init__(
        self,
        mode: TranscriptionMode,
        detector: Callable[[], VoiceActivityDetector],
        *,
        interim: bool = False,
        interim_every: float = INTERIM_EVERY,
    ) -> None:
        self.mode = mode
        directions = DIRECTIONS[mode]
        self.streams: dict[Direction | None, TranscriptStream] = {
            d: TranscriptStream(detector(), interim=interim, interim_every=interim_every)
            for d in directions
        }
        self.pieces: deque[tuple[Direction | None, Piece]] = deque()
        # Mixed: the caller's frames wait here for the tick that sums them with ours (a
        # packet's jitter is not a reason to lose one: a few are kept).
        self._waiting: deque[npt.NDArray[np.int16]] = deque(maxlen=5)

    def caller(self, frame: npt.NDArray[np.int16]) -> None:
        """A 20 ms frame of the caller's audio (silence included, as the session has it)."""
        if self.mode == "mixed":
            self._waiting.append(frame)
        elif "inbound" in self.streams:
            self._feed("inbound", frame)

    def sent(self, frame: npt.NDArray[np.int16] | None) -> None:
        """The 20 ms frame sent to the caller this tick (None: silence)."""
        ours = frame if frame is not None else np.zeros(FRAME, dtype=np.int16)
        if self.mode == "mixed":
            theirs = self._waiting.popleft() if self._waiting else None
            if theirs is not None:
                summed = ours.astype(np.int32) + theirs.astype(np.int32)
                ours = np.clip(summed, -32768, 32767).astype(np.int16)
            self._feed(None, ours)
        elif "outbound" in self.streams:
            self._feed("outbound", ours)

    def stop(self) -> None:
        """The transcription ends: each stream's phrase in progress is finished."""
        for direction, stream in self.streams.items():
            self.pieces.extend((direction, p) for p in stream.flush())

    def _feed(self, direction: Direction | None, frame: npt.NDArray[np.int16]) -> None:
        for piece in self.streams[direction].feed(frame):
            self.pieces.append((direction, piece))


def command_result(
    command: Transcribe, phrases: list[dict[str, Any]], *, completed: bool = False
) -> dict[str, Any]:
    """:func:`result_body` for the transcription ``command`` started."""
    return result_body(
        command.instance_id,
        command.log_filename,
        command.transcription_id,
        phrases,
        completed=completed,
    )
