"""Whisper on this CPU: does decoding several calls' utterances in one batch pay, and what
does the encoder window cost?

    .venv/bin/python -m bench.whisper_batch [--model tiny.en] [--threads 1,2]

One 3 s sentence of :mod:`bench.transcription`'s script (piper, line noise, µ-law) is
decoded freely (encode, then greedy generation) as a batch of B copies in one
CTranslate2 call, B = 1, 2, 4, 8, on encoder windows of 30 s (Whisper's own), 15 s
(callhook's free decoding) and 10 s (its closed-set scoring), with each thread count
(``intra_threads``: the cores one decode uses). Printed: milliseconds per utterance
(encode, and encode + generate), the best of three. Batching pays when the time per
utterance falls as B grows.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from bench.transcription import script_audio
from callhook.media.transcriber import Final, TranscriptStream
from callhook.media.vad import new_detector
from callhook.speech.asr import SAMPLE_RATE
from callhook.speech.models import model_path
from callhook.speech.whisper import _prompt

BATCHES = (1, 2, 4, 8)
WINDOWS = (3000, 1500, 1000)  # mel frames (10 ms)


def first_phrase() -> np.ndarray:
    """The script's first phrase as a call's transcriber cuts it."""
    audio, _ = script_audio()
    stream = TranscriptStream(new_detector())
    for i in range(len(audio) // 160):
        for piece in stream.feed(audio[i * 160 : (i + 1) * 160]):
            if isinstance(piece, Final):
                return piece.audio
    raise SystemExit("the script gave no phrase")


def timed(model: Any, mel: np.ndarray, prompt: list[int], batch: int) -> tuple[float, float]:
    """Seconds to encode ``batch`` copies of ``mel`` in one call, and to encode and decode."""
    import ctranslate2

    features = ctranslate2.StorageView.from_array(
        np.ascontiguousarray(np.repeat(mel[None], batch, 0), np.float32)
    )
    started = time.perf_counter()
    encoded = model.encode(features)
    encoding = time.perf_counter() - started
    model.generate(encoded, [prompt] * batch, beam_size=1, max_length=40)
    return encoding, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--threads", default="1,2", help="intra_threads values, comma-separated")
    args = parser.parse_args()
    import ctranslate2
    import soxr
    from faster_whisper.feature_extractor import FeatureExtractor
    from tokenizers import Tokenizer

    path = model_path(args.model)
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokens = _prompt(tokenizer, multilingual=False, language="en")  # as callhook decodes
    phrase = first_phrase()
    mel = FeatureExtractor()(soxr.resample(phrase.astype(np.float32) / 32768, SAMPLE_RATE, 16000))
    print(f"whisper {args.model}: one phrase of {len(phrase) / SAMPLE_RATE:.1f} s, free decoding")
    for threads in (int(t) for t in args.threads.split(",")):
        model = ctranslate2.models.Whisper(
            str(path), device="cpu", compute_type="int8", inter_threads=1, intra_threads=threads
        )
        for window in WINDOWS:
            padded = np.pad(mel[:, :window], ((0, 0), (0, window - min(window, mel.shape[1]))))
            timed(model, padded, tokens, 1)  # warm
            cells = []
            for batch in BATCHES:
                times = [timed(model, padded, tokens, batch) for _ in range(3)]
                encode = min(t[0] for t in times) / batch
                whole = min(t[1] for t in times) / batch
                cells.append(f"B={batch} {encode * 1000:4.0f} / {whole * 1000:4.0f}")
            print(
                f"  {threads} thread(s), {window // 100} s window, ms per utterance "
                f"(encode / encode + generate): " + ", ".join(cells)
            )


if __name__ == "__main__":
    main()
