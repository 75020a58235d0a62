"""Cost of text-to-speech per engine: load, memory, real-time factor, first-sentence latency.

    .venv/bin/python -m bench.tts [--engine piper|espeak] [--runs 3]

Each engine runs in its own child process pinned to one CPU, so its load time (imports
included) and resident memory are its own and synthesis uses one core, as on a busy
server. For ten typical IVR prompts (one word to five sentences) it measures:

- real-time factor: synthesis time of the whole prompt / duration of the audio;
- first sentence: time to synthesise the prompt's first sentence (split on . ! ? ; as
  the streaming synthesiser does), i.e. how long a caller waits before hearing anything;
- whole prompt: time to synthesise the whole prompt in one call.

Times are the median of ``--runs`` runs after one warm-up synthesis (onnxruntime's first
run is slower). Piper samples durations, so its audio length varies slightly per run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import TypedDict

from callhook.speech.tts import SAMPLE_RATE, SpeechEngine

PROMPTS = [
    "Yes.",
    "Please hold.",
    "Thank you for calling Acme.",
    "Please enter your four digit PIN, followed by the hash key.",
    "Welcome to Acme. Press one for sales, or two for support.",
    "Sorry, I didn't catch that. Please say yes or no.",
    "Your account balance is four hundred and twelve dollars and thirty cents.",
    "Your call is important to us. All our agents are busy. Please stay on the line; "
    "you will be connected shortly.",
    "For billing, press one. For technical support, press two. To hear these options "
    "again, press star. Or stay on the line for an operator.",
    "Thank you. Your appointment is booked for Tuesday the fourth of March at half past "
    "two. You will receive a text message to confirm. If you need to change it, please "
    "call us again. Goodbye!",
]
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


class Row(TypedDict):
    text: str
    whole: float  # s to synthesise the whole prompt
    cpu: float  # CPU s of it (wall time suffers when other processes share the core)
    audio: float  # s of audio it gives
    first: float  # s to synthesise its first sentence


class Result(TypedDict):
    engine: str
    voice: str
    voices: int
    load: float
    rss_before: float
    rss_loaded: float
    rss_after: float
    rows: list[Row]


def first_sentence(text: str) -> str:
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0]


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make(engine: str) -> SpeechEngine:
    if engine == "piper":
        from callhook.speech.piper import PiperEngine

        return PiperEngine()
    from callhook.speech.espeak import EspeakEngine

    return EspeakEngine()


def timed(tts: SpeechEngine, text: str, voice: str, runs: int) -> tuple[float, float, float]:
    """Medians of the wall and CPU seconds to synthesise ``text`` and of its audio seconds."""
    times, cpu, lengths = [], [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        audio = tts.synthesize(text, voice)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        lengths.append(audio.size / SAMPLE_RATE)
    return statistics.median(times), statistics.median(cpu), statistics.median(lengths)


def measure(engine: str, runs: int) -> Result:
    """Run in the child: every figure for one engine."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rss_before = rss_mb()
    start = time.perf_counter()
    tts = make(engine)
    tts.warm_up()
    voice = tts.voice_for("en-US")
    assert voice is not None, f"{engine} has no en-US voice"
    load_s = time.perf_counter() - start
    rss_loaded = rss_mb()
    tts.synthesize("Warming up.", voice)
    rows: list[Row] = []
    for text in PROMPTS:
        whole_s, cpu_s, audio_s = timed(tts, text, voice, runs)
        first_s, _, _ = timed(tts, first_sentence(text), voice, runs)
        rows.append(
            {"text": text, "whole": whole_s, "cpu": cpu_s, "audio": audio_s, "first": first_s}
        )
    return {
        "engine": engine,
        "voice": voice,
        "voices": len(tts.voices()),
        "load": load_s,
        "rss_before": rss_before,
        "rss_loaded": rss_loaded,
        "rss_after": rss_mb(),
        "rows": rows,
    }


def report(results: list[Result]) -> None:
    print(
        f"{'engine':8} {'voice':6} {'load s':>7} {'RSS MB':>7} {'RTF':>7} {'CPU RTF':>7} "
        f"{'first sentence ms p50/max':>26} {'whole prompt ms p50/max':>24} {'audio s':>8}"
    )
    for r in results:
        rows = r["rows"]
        audio = sum(x["audio"] for x in rows)
        rtf, cpu_rtf = sum(x["whole"] for x in rows) / audio, sum(x["cpu"] for x in rows) / audio
        first = [x["first"] * 1000 for x in rows]
        whole = [x["whole"] * 1000 for x in rows]
        print(
            f"{r['engine']:8} {r['voice']:6} {r['load']:7.2f} {r['rss_after']:7.0f} "
            f"{rtf:7.4f} {cpu_rtf:7.4f} {statistics.median(first):14.1f} / {max(first):8.1f} "
            f"{statistics.median(whole):12.1f} / {max(whole):8.1f} "
            f"{audio:8.1f}"
        )
    print("\nper prompt (ms: first sentence / whole prompt; audio s)")
    for i, text in enumerate(PROMPTS):
        cells = []
        for r in results:
            x = r["rows"][i]
            cells.append(f"{r['engine']}: {x['first'] * 1000:6.1f} / {x['whole'] * 1000:6.1f}")
        audio = results[0]["rows"][i]["audio"]
        print(f"  {text[:44]:44} {audio:5.1f}  " + "   ".join(cells))
    load = os.getloadavg()[0]
    print(f"\nload average {load:.1f} on {os.cpu_count()} CPUs during the run")
    for r in results:
        print(
            f"{r['engine']}: {r['voices']} voices; RSS {r['rss_before']:.0f} MB before import, "
            f"{r['rss_loaded']:.0f} MB loaded, {r['rss_after']:.0f} MB after the prompts"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--engine", choices=["piper", "espeak"], action="append")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    engines: list[str] = args.engine or ["piper", "espeak"]
    if args.child:
        print(json.dumps(measure(engines[0], args.runs)))
        return
    results: list[Result] = []
    for engine in engines:
        child = [sys.executable, "-m", "bench.tts", "--child", "--engine", engine]
        out = subprocess.run([*child, "--runs", str(args.runs)], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{engine} failed:\n{out.stderr}")
        results.append(json.loads(out.stdout))
    report(results)


if __name__ == "__main__":
    main()
