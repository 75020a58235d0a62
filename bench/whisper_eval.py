"""Whisper recogniser on spoken digits: accuracy per speaker, latency, out-of-set confidence.

    .venv/bin/python -m bench.whisper_eval [--fsdd ../shared/data/speech/fsdd] [--stride N]
                                           [--offset I] [--speaker S] [--no-free] [--no-oos]
                                           [--shortlist K [--shortlist 0 ...]]

1. FSDD (read from ``../shared``; says so and exits when absent): every clip
   padded with 1 s of −50 dBFS Gaussian noise on both sides (seeded per clip) and passed
   through a G.711 µ-law round trip, then recognised whole (no VAD cutting: that is
   ``bench/asr.py``'s job). Exact match per speaker with hints ``zero``..``nine``, and
   without hints (numerals and number words mapped, ``oh`` is zero). Latency of one
   ``recognise()`` on one thread, p50/p95, for each mode. How often a right and a wrong
   answer get confidence ≥ 0.5.
2. Out of set: words that are not digits, spoken by piper (joe) and espeak-ng, the same
   noise and µ-law, recognised with the digit hints: how many get confidence ≥ 0.5
   (ideally none), against the synthesised digits themselves (ideally all).
3. RSS of the process after ``warm_up()``.

``--stride 5 --no-free --shortlist 0 --shortlist 4 --shortlist 3`` (300 clips, modes
interleaved per clip): the same answers in all three (98 / 93 / 100 %), p50/p95 330/437,
209/253, 192/224 ms; confidence >= 0.5 on 252/291, 251/291, 251/291 right and 1/9, 0/9,
0/9 wrong answers; 0/48 out-of-set words in each.

Run before the shortlist (all 1500 clips, every hint aligned, shared 2-core machine): with
hints jackson 99.6 %, nicolas 90.0 %, theo 99.0 %, p50/p95 331/456 ms; without hints
81.6 / 32.8 / 72.6 %, 477/649 ms; confidence ≥ 0.5 on 1249/1443 right and 2/57 wrong
answers, on 0/48 out-of-set words and 13/20 synthesised digits; RSS +125 MB after
warm_up (CTranslate2 shares the weights between ``inter_threads`` replicas).
"""

from __future__ import annotations

import argparse
import re
import time
import wave
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from callhook.events import RecognitionOptions
from callhook.media import g711, tones
from callhook.speech.whisper import WhisperRecogniser

Samples = npt.NDArray[np.int16]
FSDD = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "speech" / "fsdd"
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
HINTS = RecognitionOptions(word_hints=DIGITS)
OUT_OF_SET = (
    "hello", "yes", "no", "sales", "support", "billing", "operator", "cancel", "help",
    "agent", "thank you", "ten", "eleven", "twenty", "hundred", "sorry", "repeat that",
    "I don't know", "customer service", "goodbye", "maybe", "what", "please", "fine",
)  # fmt: skip


def on_the_line(speech: Samples, seed: int) -> Samples:
    x = np.concatenate(
        [
            tones.white_noise(1.0, -50.0, seed=2 * seed),
            speech,
            tones.white_noise(1.0, -50.0, seed=2 * seed + 1),
        ]
    )
    return g711.ulaw_decode(g711.ulaw_encode(x))


def load_wav(path: Path) -> Samples:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


def as_digit(text: str) -> str:
    """The digit word a free transcript names (first one), or the transcript."""
    for word in re.sub(r"[^a-z0-9 ]", " ", text.lower()).split():
        if word in DIGITS:
            return word
        if len(word) == 1 and word.isdigit():
            return DIGITS[int(word)]
        if word == "oh":
            return "zero"
    return text


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def fsdd(
    engine: WhisperRecogniser, files: list[Path], free: bool, shortlists: list[int | None]
) -> None:
    """Each clip in every mode in turn (same load for all), then the tallies per mode."""
    right: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    latency: dict[str, list[float]] = defaultdict(list)
    confident: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    modes = {
        "hints" if k == engine.shortlist else f"hints, shortlist {k or 'off'}": (HINTS, k)
        for k in shortlists
    }
    if free:
        modes["no hints"] = (RecognitionOptions(), None)
    for i, path in enumerate(files):
        digit, speaker, _ = path.stem.split("_")
        audio = on_the_line(load_wav(path), i)
        for mode, (options, shortlist) in modes.items():
            engine.shortlist = shortlist
            t = time.perf_counter()
            result = engine.recognise(audio, options)
            latency[mode].append(time.perf_counter() - t)
            text = result[0].text if result else ""
            ok = (text if options.word_hints else as_digit(text)) == DIGITS[int(digit)]
            right[mode][speaker].append(ok)
            if options.word_hints:
                kind = "right" if ok else "wrong"
                confident[mode]["n_" + kind] += 1
                confident[mode][kind] += bool(result) and result[0].confidence >= 0.5
    for mode, per in right.items():
        cells = " ".join(
            f"{s} {100 * np.mean(v):5.1f}% ({sum(v)}/{len(v)})" for s, v in sorted(per.items())
        )
        ms = [1000 * t for t in latency[mode]]
        print(f"  {mode:9s} {cells}   latency p50 {pct(ms, 50):.0f} ms, p95 {pct(ms, 95):.0f} ms")
        if mode in confident:
            c = confident[mode]
            print(
                f"    confidence >= 0.5: {c['right']}/{c['n_right']} right answers,"
                f" {c['wrong']}/{c['n_wrong']} wrong answers"
            )


def out_of_set(engine: WhisperRecogniser) -> None:
    from callhook.speech.espeak import EspeakEngine
    from callhook.speech.piper import PiperEngine

    for tts in (PiperEngine(), EspeakEngine()):
        voice = tts.voice_for("en-US")
        if voice is None:
            print(f"  {tts.name}: no en-US voice, skipped")
            continue
        for label, words in (("out of set", OUT_OF_SET), ("digits", DIGITS)):
            high = []
            largest = 0.0
            for k, word in enumerate(words):
                result = engine.recognise(on_the_line(tts.synthesize(word, voice), 7000 + k), HINTS)
                if result and result[0].confidence >= 0.5:
                    high.append(f"{word}->{result[0].text} {result[0].confidence:.2f}")
                if result:
                    largest = max(largest, result[0].confidence)
            print(
                f"  {tts.name} {label}: confidence >= 0.5 on {len(high)}/{len(words)} {high}"
                f" (largest {largest:.2f})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fsdd", type=Path, default=FSDD)
    parser.add_argument("--stride", type=int, default=1, help="every Nth clip only")
    parser.add_argument("--offset", type=int, default=0, help="starting from this clip")
    parser.add_argument("--speaker", action="append", help="only these speakers")
    parser.add_argument("--no-free", action="store_true", help="skip decoding without hints")
    parser.add_argument("--no-oos", action="store_true", help="skip the out-of-set words")
    parser.add_argument(
        "--shortlist",
        type=int,
        action="append",
        help="hints aligned in full per clip (0: all); repeat to compare on the same clips",
    )
    args = parser.parse_args()
    engine = WhisperRecogniser(inter_threads=1)
    shortlists = [k or None for k in args.shortlist] if args.shortlist else [engine.shortlist]
    before = rss_mb()
    t = time.perf_counter()
    engine.warm_up()
    print(f"warm_up {time.perf_counter() - t:.1f} s, RSS {before:.0f} -> {rss_mb():.0f} MB")
    files = sorted(args.fsdd.glob("*.wav"))[args.offset :: args.stride]
    if args.speaker:
        files = [f for f in files if f.stem.split("_")[1] in args.speaker]
    if not files:
        print(f"FSDD: {args.fsdd} not found, skipped")
    else:
        print(f"FSDD, {len(files)} clips, 1 s -50 dBFS noise either side, µ-law:")
        fsdd(engine, files, not args.no_free, shortlists)
    if not args.no_oos:
        for k in shortlists:
            engine.shortlist = k
            print(f"Synthesised words with digit hints (shortlist {k or 'off'}):")
            out_of_set(engine)


if __name__ == "__main__":
    main()
