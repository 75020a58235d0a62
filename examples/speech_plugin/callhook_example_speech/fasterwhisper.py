"""A recogniser plug-in: faster-whisper with the model and settings of your choice.

callhook's embedded recogniser is Whisper tiny.en on the CPU; a team with a GPU, or a
larger model on disk, names this plug-in instead::

    [speech]
    recogniser = "gpu"

    [speech.engines.gpu]
    protocol = "plugin"
    plugin = "faster-whisper"

    [speech.engines.gpu.options]
    model = "large-v3"        # a size faster-whisper knows, or a CTranslate2 model's folder
    device = "cuda"           # cpu (the default), cuda, auto
    compute_type = "float16"  # int8 (the default), float16, ...
    beam_size = 5
    languages = ["en", "fr"]  # what the model recognises (a *.en model: English only)

callhook gives :meth:`FasterWhisperRecogniser.recognise` one utterance at a time, on a
worker thread, as 8 kHz int16 audio; it answers callhook's ``Alternative`` objects.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr
from faster_whisper import WhisperModel

from callhook.events import Alternative, RecognitionOptions

#: The confidence of a transcript that says none of the hints it was asked with, as a share
#: of its own (it is an answer the application did not expect).
UNHINTED = 0.25


class FasterWhisperRecogniser:
    """``factory(name, options)`` for ``callhook.recognisers``: the options table above."""

    def __init__(self, name: str, options: Mapping[str, Any]) -> None:
        unknown = set(options) - {"model", "device", "compute_type", "beam_size", "languages"}
        if unknown:  # (said at start-up, in callhook's log)
            raise ValueError(f"unknown options: {', '.join(sorted(unknown))}")
        self.name = name
        self.model_name = str(options.get("model", "tiny.en"))
        self.device = str(options.get("device", "cpu"))
        self.compute_type = str(options.get("compute_type", "int8"))
        self.beam_size = int(options.get("beam_size", 5))
        self.languages = frozenset(
            str(tag).split("-")[0].lower() for tag in options.get("languages", ["en"])
        )
        if self.model_name.rstrip("/").endswith(".en") and self.languages != {"en"}:
            raise ValueError(f"{self.model_name} recognises English only")
        self._model: WhisperModel | None = None

    def warm_up(self) -> None:
        """Load the model (callhook calls this once, off its event loop, at start-up)."""
        if self._model is None:
            self._model = WhisperModel(
                self.model_name, device=self.device, compute_type=self.compute_type
            )

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        """The transcript of one utterance; with word hints, the hint it says."""
        self.warm_up()
        assert self._model is not None
        # Whisper listens at 16 kHz.
        samples = soxr.resample(audio.astype(np.float32) / 32768, 8000, 16000)
        hints = list(options.word_hints)
        segments, _ = self._model.transcribe(
            samples,
            language=(options.language or "en").split("-")[0].lower(),
            beam_size=self.beam_size,
            hotwords=" ".join(hints) or None,  # a bias towards the hints' words
            without_timestamps=True,
            condition_on_previous_text=False,
        )
        heard = [s for s in segments if s.no_speech_prob < 0.6 and s.text.strip()]
        if not heard:
            return ()  # noise, a cough: callhook asks again
        text = " ".join(s.text.strip() for s in heard)
        confidence = math.exp(sum(s.avg_logprob for s in heard) / len(heard))
        if not hints:
            return (Alternative(text, confidence),)
        said = f" {_words(text)} "
        for hint in sorted(hints, key=len, reverse=True):
            if f" {_words(hint)} " in said:
                return (Alternative(hint, confidence),)
        return (Alternative(text, confidence * UNHINTED),)


def _words(text: str) -> str:
    return " ".join(re.findall(r"[\w']+", text.lower()))
