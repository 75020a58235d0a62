"""Speech recognition accuracy, latency, memory and capacity per engine, on the call's path.

    .venv/bin/python -m bench.asr [--engine sphinx|whisper|all] [--limit N] [--speaker S]
                                  [--fsdd ../shared/data/speech/fsdd] [--no-synth]
                                  [--model tiny.en|base|small|tiny.en+base] [--hints-only]

1. Spoken digits: the FSDD recordings (read from ``../shared``; the benchmark
   says so and exits when absent), each padded with 1 s of −50 dBFS Gaussian line noise on
   both sides (seeded per clip), through a G.711 µ-law round trip, then cut by exactly the
   path a call uses (:func:`callhook.media.utterances.cut_utterances`: 20 ms frames, the call's
   voice-activity detector, the utterance cutter). The longest utterance of a clip is
   recognised; a clip with none counts as wrong. Accuracy per speaker, exact match, with
   hints ``zero``..``nine`` and without hints (numerals and number words mapped: ``7`` and
   ``oh`` count as ``seven`` and ``zero``).
2. Synthesised round trip: :data:`IVR_ANSWERS` spoken by the default voice (piper, joe), the
   same line noise, µ-law and cutting, recognised with the 30 phrases as hints and without.
3. Latency: wall time of ``recognise()`` per utterance with hints, one thread (the time from
   the end of speech, i.e. the cutter's falling edge, to the result), p50/p95, and the
   real-time factor (decode time / utterance audio time).
4. Memory: RSS of the process after the engine's ``warm_up()`` (each engine is measured in
   its own child process when several are asked for).
5. Capacity: utterances per second with 2 worker threads over the digit utterances, and
   the concurrent ``get_input`` calls that keeps up with, assuming a caller gives one
   utterance every :data:`SECONDS_PER_UTTERANCE` s (prompt, thinking, speech; the utterance
   lengths are the benchmark's own, ~1.3–1.8 s with the cutter's pre-roll and hangover).
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import time
import wave
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt

from callhook.events import RecognitionOptions
from callhook.media import tones
from callhook.media.utterances import cut_utterances
from callhook.speech.asr import SAMPLE_RATE, Recogniser

Samples = npt.NDArray[np.int16]
FSDD = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "speech" / "fsdd"
ENGINES = ("sphinx", "whisper")
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: Typical answers to IVR prompts (the synthesised round trip).
IVR_ANSWERS = (
    "yes", "no", "sales", "support", "billing", "operator", "customer service",
    "speak to an agent", "one two three", "technical support", "account balance",
    "cancel", "repeat", "help", "main menu", "new order", "pay my bill", "representative",
    "four five six", "seven eight nine", "zero", "checking", "savings", "english",
    "spanish", "reservations", "order status", "returns", "yes please", "no thanks",
)  # fmt: skip
#: The capacity assumption: one utterance per caller in get_input every this many seconds.
SECONDS_PER_UTTERANCE = 5.0
NOISE_DBFS = -50.0

_NUMERALS = dict(zip("0123456789", DIGITS, strict=True))


def normalise(text: str) -> str:
    """Lower case words, punctuation dropped, numerals spelt digit by digit, ``oh`` → zero."""
    words: list[str] = []
    for token in re.findall(r"[a-z0-9']+", text.lower()):
        if token.isdigit():
            words.extend(_NUMERALS[c] for c in token)
        else:
            words.append("zero" if token == "oh" else token)
    return " ".join(words)


def load_wav(path: Path) -> Samples:
    with wave.open(str(path)) as w:
        assert w.getframerate() == SAMPLE_RATE and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


def on_the_line(speech: Samples, seed: int) -> Samples | None:
    """The longest utterance a call would hand its recogniser for ``speech`` (None: none)."""
    x = np.concatenate(
        [
            tones.white_noise(1.0, NOISE_DBFS, seed=2 * seed),
            speech,
            tones.white_noise(1.0, NOISE_DBFS, seed=2 * seed + 1),
        ]
    )
    utterances = cut_utterances(x, law="ulaw")
    return max(utterances, key=len) if utterances else None


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_engine(name: str, model: str = "tiny.en") -> Recogniser | None:
    """The engine (Whisper with ``model``), warmed up, or None (with a message) when it
    is absent or broken."""
    try:
        if name == "sphinx":
            from callhook.speech.sphinx import SphinxRecogniser

            engine: Recogniser = SphinxRecogniser()
        else:
            from callhook.edge.speechworkers import build_recogniser

            built = build_recogniser("whisper", model)  # a cascade for "tiny.en+base"
            if built is None:
                raise RuntimeError(f"whisper {model} is not installed (see the log above)")
            engine = built
        engine.warm_up()
    except Exception as exc:  # not installed (a model's optional packages), or broken
        print(f"{name}: skipped ({type(exc).__name__}: {exc})")
        return None
    return engine


def first_text(engine: Recogniser, audio: Samples | None, options: RecognitionOptions) -> str:
    if audio is None:
        return ""
    result = engine.recognise(audio, options)
    return normalise(result[0].text) if result else ""


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def digits(
    engine: Recogniser, clips: list[tuple[str, str, Samples | None]], free_too: bool = True
) -> list[Samples]:
    hints3 = RecognitionOptions(word_hints=DIGITS, max_alternatives=3)
    free = RecognitionOptions()
    right: dict[tuple[str, bool], int] = collections.Counter()
    total: dict[str, int] = collections.Counter()
    latencies: list[float] = []
    cpu: list[float] = []
    judged: list[tuple[float, bool]] = []  # (confidence, right) of every alternative
    tops: list[tuple[str, float, bool]] = []  # (speaker, confidence, right) of each answer
    utterances = [u for _, _, u in clips if u is not None]
    for speaker, word, audio in clips:
        total[speaker] += 1
        t, c = time.perf_counter(), time.process_time()
        alternatives = engine.recognise(audio, hints3) if audio is not None else ()
        if audio is not None:
            latencies.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        got = normalise(alternatives[0].text) if alternatives else ""
        judged += [(a.confidence, normalise(a.text) == word) for a in alternatives]
        tops.append((speaker, alternatives[0].confidence if alternatives else 0.0, got == word))
        right[speaker, True] += got == word
        if free_too:
            right[speaker, False] += first_text(engine, audio, free) == word
    print(f"\n{engine.name}: FSDD digits, {sum(total.values())} clips, exact match %")
    print(f"{'speaker':<10} {'clips':>6} {'hints':>7} {'no hints':>9}")
    for speaker in [*sorted(total), "all"]:
        n = sum(total.values()) if speaker == "all" else total[speaker]
        spk = sorted(total) if speaker == "all" else [speaker]
        h = sum(right[s, True] for s in spk) * 100 / n
        f = sum(right[s, False] for s in spk) * 100 / n
        print(f"{speaker:<10} {n:>6} {h:>7.1f} {f:>9.1f}")
    reliability(judged)
    calibration(tops)
    floors(tops)
    missing = sum(u is None for _, _, u in clips)
    print(f"(clips with no utterance from the cutter: {missing})")
    audio_s = sum(len(u) for u in utterances) / SAMPLE_RATE
    print(
        f"latency (recognise() with hints, 1 thread): p50 {quantile(latencies, 0.5) * 1000:.0f} ms"
        f", p95 {quantile(latencies, 0.95) * 1000:.0f} ms; RTF "
        f"{sum(latencies) / audio_s:.3f} (mean utterance {audio_s / len(utterances):.2f} s); "
        f"CPU per utterance p50 {quantile(cpu, 0.5) * 1000:.0f} ms, "
        f"mean {sum(cpu) / max(1, len(cpu)) * 1000:.0f} ms"
    )
    return utterances


def reliability(judged: list[tuple[float, bool]]) -> None:
    """How confidence relates to being right: every alternative (max_alternatives 3) by
    its confidence, and the share of them that was the word said."""
    print("confidence (all 3 alternatives)   n   right")
    for lo in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9):
        hi = {0.0: 0.1, 0.1: 0.3, 0.3: 0.5, 0.5: 0.7, 0.7: 0.9, 0.9: 1.01}[lo]
        inside = [ok for c, ok in judged if lo <= c < hi]
        share = f"{100 * sum(inside) / len(inside):5.1f} %" if inside else "    -"
        print(f"  {lo:.1f} .. {min(hi, 1.0):.1f}  {len(inside):>16} {share}")


#: Confidence bins of the calibration table: (low, high).
BINS = ((0.0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01))
#: Confidence floors tried (``[speech] min_confidence``): answers under one are asked again.
FLOORS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def calibration(tops: list[tuple[str, float, bool]]) -> None:
    """Of the answers (best alternatives) reported in each confidence bin, the share that
    was the word said, per speaker: calibrated when the share is within the bin."""
    speakers = sorted({s for s, _, _ in tops})
    print("calibration (answers: n, % right)  " + "".join(f"{s:>16}" for s in speakers))
    for lo, hi in BINS:
        cells = []
        for speaker in speakers:
            inside = [ok for s, c, ok in tops if s == speaker and lo <= c < hi]
            share = f"{100 * sum(inside) / len(inside):5.1f} %" if inside else "     -"
            cells.append(f"{len(inside):>7} {share:>8}")
        print(f"  {lo:.1f} .. {min(hi, 1.0):.1f}                     " + "".join(cells))


def floors(tops: list[tuple[str, float, bool]]) -> None:
    """At each confidence floor: per speaker, the share of answers accepted that was right,
    and the share of utterances under the floor (asked again)."""
    speakers = sorted({s for s, _, _ in tops})
    print("floor  " + "".join(f"{s + ' right/asked again':>28}" for s in speakers))
    for floor in FLOORS:
        cells = []
        for speaker in speakers:
            mine = [(c, ok) for s, c, ok in tops if s == speaker]
            kept = [ok for c, ok in mine if c >= floor]
            right = f"{100 * sum(kept) / len(kept):5.1f} %" if kept else "    -"
            again = 100 * (len(mine) - len(kept)) / max(1, len(mine))
            cells.append(f"{right:>18} {again:>7.1f} %")
        print(f"  {floor:.1f}" + "".join(cells))


def capacity(engine: Recogniser, utterances: list[Samples], threads: int = 2) -> None:
    options = RecognitionOptions(word_hints=DIGITS)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda u: engine.recognise(u, options), utterances[:threads]))  # warm
        t = time.perf_counter()
        list(pool.map(lambda u: engine.recognise(u, options), utterances))
        wall = time.perf_counter() - t
    rate = len(utterances) / wall
    print(
        f"capacity, {threads} worker threads: {rate:.1f} utterances/s → "
        f"~{rate * SECONDS_PER_UTTERANCE:.0f} concurrent get_input calls before recognition "
        f"falls behind (one utterance per caller every {SECONDS_PER_UTTERANCE:.0f} s)"
    )


def synthesised(engine: Recogniser) -> None:
    try:
        from callhook.speech.piper import PiperEngine

        tts = PiperEngine()
        voice = tts.voice_for("en-US")
        assert voice is not None, "no en-US piper voice installed"
        spoken = [tts.synthesize(text, voice) for text in IVR_ANSWERS]
    except Exception as exc:
        print(f"synthesised round trip skipped ({type(exc).__name__}: {exc})")
        return
    hints = RecognitionOptions(word_hints=IVR_ANSWERS)
    free = RecognitionOptions()
    ok_h = ok_f = 0
    misses: list[str] = []
    for i, (text, audio) in enumerate(zip(IVR_ANSWERS, spoken, strict=True)):
        utterance = on_the_line(audio, 10_000 + i)
        h, f = first_text(engine, utterance, hints), first_text(engine, utterance, free)
        ok_h += h == normalise(text)
        ok_f += f == normalise(text)
        if h != normalise(text) or f != normalise(text):
            misses.append(f"{text!r} → hints {h!r}, free {f!r}")
    print(f"synthesised IVR answers (piper {voice}): hints {ok_h}/30, no hints {ok_f}/30")
    for miss in misses:
        print(f"  {miss}")


def run_engine(name: str, args: argparse.Namespace, files: list[Path]) -> None:
    before = rss_mb()
    engine = load_engine(name, args.model)
    if engine is None:
        return
    if name == "whisper":
        name = f"whisper {args.model}"
    print(f"\n== {name}: RSS {rss_mb():.0f} MB after warm_up ({before:.0f} MB before)")
    clips = []
    for i, path in enumerate(files):
        digit, speaker, _ = path.stem.split("_")
        clips.append((speaker, DIGITS[int(digit)], on_the_line(load_wav(path), i)))
    utterances = digits(engine, clips, free_too=not args.hints_only)
    passes = getattr(engine, "second_passes", None)
    if passes is not None:
        share = 100 * passes / max(1, getattr(engine, "utterances", 0))
        print(f"cascade: the larger model scored {passes} utterances ({share:.1f} %)")
    if args.hints_only:
        print(f"RSS at the end: {rss_mb():.0f} MB")
        return
    capacity(engine, utterances)
    if not args.no_synth:
        synthesised(engine)
    print(f"RSS at the end: {rss_mb():.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=[*ENGINES, "all"], default="all")
    parser.add_argument("--limit", type=int, default=0, help="clips, spread over the set")
    parser.add_argument("--speaker", default=None)
    parser.add_argument("--fsdd", type=Path, default=FSDD)
    parser.add_argument("--no-synth", action="store_true", help="skip the TTS round trip")
    parser.add_argument(
        "--hints-only",
        action="store_true",
        help="digits with hints only: accuracy, confidence table, latency (no free "
        "transcription, capacity or TTS round trip; the 'no hints' column reads 0)",
    )
    parser.add_argument(
        "--model", default="tiny.en", help="Whisper's: tiny.en, base, small, tiny.en+base"
    )
    args = parser.parse_args()
    if not args.fsdd.is_dir():
        print(f"no FSDD recordings at {args.fsdd}: nothing to measure")
        return
    if args.engine == "all":  # one child per engine, so each RSS is the engine's own
        for name in ENGINES:
            argv = [a for a in sys.argv[1:] if a not in ("--engine", "all")]
            subprocess.run([sys.executable, "-m", "bench.asr", "--engine", name, *argv])
        return
    files = sorted(args.fsdd.glob("*_*_*.wav"))
    if args.speaker:
        files = [f for f in files if f.stem.split("_")[1] == args.speaker]
    if args.limit:
        files = files[:: max(1, len(files) // args.limit)][: args.limit]
    started = time.perf_counter()
    run_engine(args.engine, args, files)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
