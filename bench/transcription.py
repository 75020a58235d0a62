"""Live transcription (``start_transcription``) on the call's path: accuracy, latency and
capacity of the method callhook uses (speech/transcription.py: phrases cut by the call's
voice-activity detector, each decoded whole when it ends; interim decodes of the phrase so
far while it goes on).

    .venv/bin/python -m bench.transcription [--model tiny.en|base|small] [--interim 1.0]

The script (:data:`SENTENCES`) is spoken by the default voice (piper), with a pause
between sentences, in −50 dBFS line noise, through a G.711 µ-law round trip, and fed
20 ms at a time to a :class:`~callhook.media.transcriber.TranscriptStream`. Each final
phrase is decoded without hints (free speech) by the default recogniser, one thread.

Printed:

* word error rate of the final phrases against the script (words, case and punctuation
  aside; substitutions + deletions + insertions over the script's words);
* latency from the end of a sentence's speech to its final result: the detector's
  hangover (media time, until the phrase is cut) plus the decode's wall time, p50/p95;
* interim results: how many, and their decode time (each is a decode of the phrase so
  far, so their cost grows with the phrase);
* capacity: decode seconds per second of speech (finals alone, and with interims), and
  the transcriptions one process keeps up with in real time on 2 decoding threads,
  assuming the speaker talks half of the time.
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np
import numpy.typing as npt

from callhook.events import RecognitionOptions
from callhook.media import g711, tones
from callhook.media.player import FRAME
from callhook.media.transcriber import Final, Interim, TranscriptStream
from callhook.media.vad import new_detector
from callhook.speech.asr import Recogniser

Samples = npt.NDArray[np.int16]
NOISE_DBFS = -50.0
PAUSE = 1.2  # seconds between sentences
SENTENCES = (
    "I would like to check the balance of my savings account.",
    "My order number is four five six and it has not arrived yet.",
    "Please call me back tomorrow morning after nine o'clock.",
    "The parcel was left outside the front door in the rain.",
    "Can you tell me when the next train to Manchester leaves?",
    "I need to change the delivery address for my new phone.",
)


DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def words(text: str) -> list[str]:
    """Lower-case words, punctuation aside, numerals said digit by digit ("456": four five
    six), as the script says them (WER normalisation, as Whisper's evaluations do)."""
    out: list[str] = []
    for word in re.findall(r"[a-z0-9']+", text.lower()):
        out += [DIGITS[int(c)] for c in word] if word.isdigit() else [word]
    return out


def wer(reference: list[str], hypothesis: list[str]) -> tuple[int, int]:
    """(errors, reference words): the edit distance over words."""
    previous = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        current = [i]
        for j, h in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1], len(reference)


def script_audio() -> tuple[Samples, list[float]]:
    """The script spoken, in line noise, through µ-law; and when each sentence's speech
    ends (seconds into the audio)."""
    from callhook.speech.piper import PiperEngine

    tts = PiperEngine()
    voice = tts.voice_for("en-US")
    assert voice is not None, "no en-US piper voice installed"
    parts: list[Samples] = [tones.white_noise(1.0, NOISE_DBFS, seed=1)]
    ends: list[float] = []
    at = 1.0
    for i, sentence in enumerate(SENTENCES):
        spoken = tts.synthesize(sentence, voice)
        # The voice's own leading/trailing quiet is not speech: the end is its last loud sample.
        loud = np.nonzero(np.abs(spoken.astype(np.int32)) > 300)[0]
        ends.append(at + (loud[-1] + 1 if len(loud) else len(spoken)) / 8000)
        noise = tones.white_noise(len(spoken) / 8000, NOISE_DBFS, seed=10 + i)
        parts += [np.clip(spoken.astype(np.int32) + noise, -32768, 32767).astype(np.int16)]
        parts += [tones.white_noise(PAUSE, NOISE_DBFS, seed=100 + i)]
        at += len(spoken) / 8000 + PAUSE
    audio = np.concatenate(parts)
    whole = len(audio) // FRAME * FRAME
    return g711.decode("ulaw", g711.encode("ulaw", audio[:whole])), ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--interim", type=float, default=1.0, help="seconds between interims")
    args = parser.parse_args()
    from callhook.edge.speechworkers import build_recogniser

    engine: Recogniser | None = build_recogniser("whisper", args.model)
    if engine is None:
        raise SystemExit(f"whisper {args.model} is not installed")
    engine.warm_up()
    audio, ends = script_audio()
    speech_seconds = sum(
        e - s for e, s in zip(ends, [1.0, *[x + PAUSE for x in ends[:-1]]], strict=True)
    )
    stream = TranscriptStream(new_detector(), interim=True, interim_every=args.interim)
    options = RecognitionOptions()
    finals: list[tuple[float, str, float]] = []  # (cut at, text, decode seconds)
    interim_times: list[float] = []
    for i in range(len(audio) // FRAME):
        now = (i + 1) * FRAME / 8000
        for piece in stream.feed(audio[i * FRAME : (i + 1) * FRAME]):
            started = time.perf_counter()
            result = engine.recognise(piece.audio, options)
            took = time.perf_counter() - started
            if isinstance(piece, Final):
                finals.append((now, result[0].text if result else "", took))
            elif isinstance(piece, Interim):
                interim_times.append(took)
    for piece in stream.flush():
        result = engine.recognise(piece.audio, options)
        finals.append((len(audio) / 8000, result[0].text if result else "", 0.0))

    heard = " ".join(text for _, text, _ in finals)
    errors, total = wer(words(" ".join(SENTENCES)), words(heard))
    print(f"model {args.model}, {len(SENTENCES)} sentences, {total} words, "
          f"{speech_seconds:.1f} s of speech")  # fmt: skip
    print(f"word error rate: {100 * errors / total:.1f} % ({errors} errors)")
    for _, text, _ in finals:
        print(f"  final: {text!r}")
    # Each sentence's final is the first final cut after its speech ended.
    latencies = []
    for end in ends:
        after = [(cut, took) for cut, _, took in finals if cut >= end]
        if after:
            cut, took = after[0]
            latencies.append(cut - end + took)
    p50, p95 = np.percentile(latencies, 50), np.percentile(latencies, 95)
    print(f"end of speech to final result: p50 {1000 * p50:.0f} ms, p95 {1000 * p95:.0f} ms "
          f"({len(latencies)} sentences; hangover + decode)")  # fmt: skip
    final_decode = sum(took for _, _, took in finals)
    interim_decode = sum(interim_times)
    print(f"interim results: {len(interim_times)} (every {args.interim:g} s of a phrase), "
          f"decode p50 {1000 * np.median(interim_times or [0]):.0f} ms")  # fmt: skip
    for label, seconds in (
        ("finals only", final_decode),
        ("with interims", final_decode + interim_decode),
    ):
        per_speech = seconds / speech_seconds
        # 2 decoding threads; a speaker talks half of the time.
        keeps_up = 2 / (per_speech * 0.5) if per_speech else float("inf")
        print(f"capacity, {label}: {per_speech:.3f} decode s per speech s; "
              f"~{keeps_up:.0f} transcriptions in real time on 2 threads")  # fmt: skip


if __name__ == "__main__":
    main()
