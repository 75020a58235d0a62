"""Voice activity: energy-only against energy gate + Silero VAD, on noise and on real speech.

    .venv/bin/python -m bench.vad [--clips 100] [--fsdd ../shared/data/speech/fsdd] [--limit N]
                                  [--margin DB] [--min-level DBFS] [--onset FRAMES]
                                  [--quieter 10,20,30]

1. False alarms: ``--clips`` noise-only clips (4 s, fixed seeds, kinds in turn: white and pink
   line noise, 50/60 Hz mains hum with harmonics and a slow wobble, clicks, pops, a mixture),
   each at −75, −65, −55, −45 and −35 dBFS (the quietest for the model's gain on quiet lines),
   G.711 µ-law round tripped. A clip is a false alarm when the
   detector reports any onset. For the impulsive kinds the level is that of the background
   hiss and each click or pop is ~25 dB louder than it (they are what trips detectors).
2. Speech: the FSDD clips (read from ``../shared``, skipped when absent) padded
   with 1 s of −50 dBFS white noise each side, µ-law round tripped; again with −45 dBFS hum
   and with −50 dBFS clicks mixed in. Reference speech = first to last frame of the clean clip
   within 25 dB of its loudest frame (and above −60 dBFS). Missed: no onset from the speech
   start to 300 ms after its end. Latency: first onset (end of its frame) minus speech start.
   Cut early: the last release minus the 300 ms hangover is >100 ms before the speech end.
   False: an onset in the noise before the speech.
   ``--quieter 10,20,30``: a quieter caller, two ways. ``-20 dB``: the whole line 20 dB down
   (the talker and the line's hiss together: a phone with a low microphone gain or a soft
   talker on a quiet digital line). ``-20 dB/h``: only the talker 20 dB down, under the
   same −50 dBFS hiss; a clip whose loudest frame is then below the hiss cannot be heard
   by any detector, so the clips whose loudest frame is at least 6 dB over the hiss are
   also counted apart (``audible missed``).
3. CPU per 20 ms frame (µs, this machine, one call): energy only; gated with the gate closed
   (−50 dBFS hiss) and open (speech; the model runs on 5 frames out of 8).
"""

from __future__ import annotations

import argparse
import statistics
import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from callhook.media import g711, tones
from callhook.media.silero import SileroStream
from callhook.media.vad import VoiceActivityDetector, level_dbfs

Samples = npt.NDArray[np.int16]
Floats = npt.NDArray[np.float64]
FS = 8000
FSDD = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "speech" / "fsdd"
LEVELS = (-75.0, -65.0, -55.0, -45.0, -35.0)
KINDS = ("white", "pink", "hum50", "hum60", "clicks", "pops", "mix")
Factory = Callable[[], VoiceActivityDetector]


# ----------------------------------------------------------------------------- signals


def at_level(x: Floats, dbfs: float) -> Floats:
    rms = float(np.sqrt(np.mean(x * x))) or 1.0
    return x * (32768.0 * 10 ** (dbfs / 20) / rms)


def pink(n: int, rng: np.random.Generator) -> Floats:
    """1/f noise (3 dB per octave down), DC removed."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / FS)
    spectrum[1:] /= np.sqrt(f[1:])
    spectrum[0] = 0
    return np.fft.irfft(spectrum, n)


def hum(n: int, rng: np.random.Generator, f0: float) -> Floats:
    """Mains hum: f0 and its harmonics to 3.5 kHz, random amplitudes, ±2 dB slow wobble."""
    t = np.arange(n) / FS
    x = np.zeros(n)
    for k in range(1, int(3500 / f0) + 1):
        x += rng.uniform(0.2, 1.0) / k**0.8 * np.sin(2 * np.pi * k * f0 * t + rng.uniform(0, 6.3))
    wobble = 10 ** (2 / 20 * np.sin(2 * np.pi * rng.uniform(0.2, 1.0) * t))
    return x * wobble


def impulses(n: int, rng: np.random.Generator, kind: str, background_rms: float) -> Floats:
    """Clicks (1–10 ms noise bursts, some in crackles of 3–6) or pops (damped 60–300 Hz thumps)."""
    x = np.zeros(n)
    count = int(rng.integers(2, 12))
    amp = background_rms * 10 ** (25 / 20) * 2.0  # ~25 dB over the hiss, frame-averaged
    for pos in rng.integers(0, n - 1200, size=count):
        if kind == "clicks":
            for _ in range(int(rng.integers(3, 7)) if rng.random() < 0.3 else 1):
                length = int(rng.integers(8, 80))
                burst = rng.standard_normal(length) * np.exp(-np.arange(length) / (length / 3))
                seg = x[pos : pos + length]  # a crackle may run past the end
                seg += (amp * rng.uniform(0.5, 2.0) * burst)[: len(seg)]
                pos += int(rng.integers(80, 300))
        else:
            length = int(rng.integers(16, 240))
            t = np.arange(length) / FS
            thump = np.sin(2 * np.pi * rng.uniform(60, 300) * t) * np.exp(-t / (length / FS / 3))
            x[pos : pos + length] += amp * rng.uniform(0.5, 2.0) * thump
    return x


def noise_clip(kind: str, dbfs: float, seed: int, seconds: float = 4.0) -> Floats:
    rng = np.random.default_rng(seed)
    n = round(seconds * FS)
    if kind == "white":
        return at_level(rng.standard_normal(n), dbfs)
    if kind == "pink":
        return at_level(pink(n, rng), dbfs)
    if kind in ("hum50", "hum60"):
        return at_level(hum(n, rng, 50.0 if kind == "hum50" else 60.0), dbfs)
    if kind in ("clicks", "pops"):
        hiss = at_level(rng.standard_normal(n), dbfs)
        return hiss + impulses(n, rng, kind, float(np.sqrt(np.mean(hiss * hiss))))
    # A mixture: pink hiss 3 dB down, hum at the level, clicks and pops over the hiss.
    hiss = at_level(pink(n, rng), dbfs - 3)
    rms = float(np.sqrt(np.mean(hiss * hiss)))
    mains = at_level(hum(n, rng, float(rng.choice([50.0, 60.0]))), dbfs)
    return hiss + mains + impulses(n, rng, "clicks", rms) + impulses(n, rng, "pops", rms)


def line(x: Floats | Samples) -> Samples:
    """What arrives: int16, through G.711 µ-law."""
    pcm = np.clip(np.rint(x), -32768, 32767).astype(np.int16)
    return g711.decode("ulaw", g711.encode("ulaw", pcm))


def frames(x: Samples) -> Samples:
    return np.concatenate([x, np.zeros((-len(x)) % 160, np.int16)]).reshape(-1, 160)


def edges(x: Samples, vad: VoiceActivityDetector) -> list[tuple[float, bool]]:
    out = []
    for i, frame in enumerate(frames(x)):
        edge = vad.feed(frame)
        if edge is not None:
            out.append((round((i + 1) * 0.02, 2), edge))
    return out


def load(path: Path) -> Samples:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)


def speech_bounds(x: Samples) -> tuple[float, float]:
    """(start, end) s of the speech in a clean clip: frames within 25 dB of the loudest."""
    levels = [level_dbfs(f) for f in frames(x)]
    floor = max(max(levels) - 25.0, -60.0)
    loud = [i for i, v in enumerate(levels) if v > floor]
    return loud[0] * 0.02, (loud[-1] + 1) * 0.02


# ----------------------------------------------------------------------------- measures


def false_alarms(detectors: dict[str, Factory], clips: int) -> None:
    print(f"\nnoise only: {clips} clips x 4 s, clips with any onset (kinds: {', '.join(KINDS)})")
    header = "  " + f"{'detector':14}" + "".join(f"{f'{d:.0f} dBFS':>11}" for d in LEVELS)
    print(header + "   worst kinds at -45")
    for name, make in detectors.items():
        counts = []
        worst: dict[str, int] = {}
        fed = total = 0
        for dbfs in LEVELS:
            n = 0
            for i in range(clips):
                kind = KINDS[i % len(KINDS)]
                vad = make()
                x = line(noise_clip(kind, dbfs, 1000 + i))
                fired = any(e for _, e in edges(x, vad))
                fed += vad.model_frames
                total += len(x) // 160
                n += fired
                if fired and dbfs == -45.0:
                    worst[kind] = worst.get(kind, 0) + 1
            counts.append(n)
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(worst.items(), key=lambda kv: -kv[1]))
        print(f"  {name:14}" + "".join(f"{c:>11}" for c in counts) + f"   {kinds or '-'}")
        if fed:
            print(f"  {'':14} (the model ran on {fed / total:.0%} of the noise frames)")


def speech(
    detectors: dict[str, Factory], fsdd: Path, limit: int | None, quieter: tuple[float, ...] = ()
) -> None:
    files = sorted(fsdd.glob("*.wav"))
    files = files[:: max(1, -(-len(files) // limit))] if limit else files  # all speakers, digits
    if not files:
        print(f"\nspeech: {fsdd} not found, skipped")
        return
    print(f"\nspeech: {len(files)} FSDD clips in 1 s of -50 dBFS hiss, µ-law ({fsdd})")
    print(
        f"  {'detector':14} {'condition':8} {'missed':>7} {'false':>6} {'cut early':>10}"
        f" {'onset ms p50/p95/max':>22} {'audible missed':>15}  missed clips"
    )
    clips = [(p, load(p)) for p in files]
    for name, make in detectors.items():
        quiet = [f"-{db:g} dB{kind}" for db in quieter for kind in ("", "/h")]
        for condition in ("clean", "hum", "clicks", *quiet):
            missed: list[str] = []
            audible = audible_missed = 0
            false = cut = 0
            latency: list[float] = []
            for i, (path, x) in enumerate(clips):
                start, end = speech_bounds(x)
                rng = np.random.default_rng(i)
                # Line hiss throughout (it does not stop while the caller speaks).
                said = x.astype(np.float64)
                hiss = -50.0
                heard = True
                if " dB" in condition:  # a quieter talker: the clip attenuated
                    down = float(condition.split()[0])
                    said *= 10 ** (down / 20)
                    if condition.endswith("/h"):
                        loudest = max(level_dbfs(f) for f in frames(x)) + down
                        heard = loudest >= hiss + 6.0
                        audible += heard
                    else:
                        hiss += down  # the whole line
                padded = np.concatenate([np.zeros(FS), said, np.zeros(FS)])
                padded += at_level(rng.standard_normal(len(padded)), hiss)
                if condition == "hum":
                    padded += at_level(hum(len(padded), rng, (50.0, 60.0)[i % 2]), -45.0)
                elif condition == "clicks":
                    padded += impulses(len(padded), rng, "clicks", 32768 * 10 ** (-50 / 20))
                got = edges(line(padded), make())
                start, end = 1.0 + start, 1.0 + end
                onsets = [t for t, e in got if e]
                releases = [t for t, e in got if not e]
                false += any(t < 1.0 for t in onsets)
                hits = [t for t in onsets if 1.0 <= t <= end + 0.3]
                if not hits:
                    missed.append(path.stem)
                    audible_missed += condition.endswith("/h") and heard
                    continue
                latency.append((hits[0] - start) * 1000)
                last = [t for t in releases if t > hits[0]]
                cut += bool(last) and last[-1] - 0.3 < end - 0.1
            lat = sorted(latency)
            figures = (
                f"{statistics.median(lat):.0f}/{lat[int(0.95 * (len(lat) - 1))]:.0f}/{lat[-1]:.0f}"
                if lat
                else "-"
            )
            shown = " ".join(missed[:4]) + (" ..." if len(missed) > 4 else "")
            of_audible = f"{audible_missed}/{audible}" if condition.endswith("/h") else "-"
            print(
                f"  {name:14} {condition:8} {len(missed):>7} {false:>6} {cut:>10}"
                f" {figures:>22} {of_audible:>15}  {shown}"
            )


def cpu() -> None:
    here = Path(__file__).resolve().parent.parent / "tests" / "data" / "speech"
    talk = frames(line(np.concatenate([load(p) for p in sorted(here.glob("*.wav"))])))
    hiss = frames(line(tones.white_noise(20.0, -50.0)))
    print("\nCPU per 20 ms frame (µs, best of 3):")

    def timed(make: Factory, source: Samples) -> dict[str, float]:
        best: dict[str, float] = {}
        for _ in range(3):
            vad = make()
            sums: dict[str, list[float]] = {"closed": [], "open": []}
            for f in source:
                t = time.perf_counter()
                vad.feed(f)
                dt = time.perf_counter() - t
                sums["open" if vad.gate_open else "closed"].append(dt)
            for k, v in sums.items():
                if v:
                    best[k] = min(best.get(k, 1e9), sum(v) / len(v) * 1e6)
        return best

    def show(label: str, figures: dict[str, float], key: str) -> None:
        # A gate that never closed (or opened) on this source has no figure for it.
        value = figures.get(key)
        shown = f"{value:7.1f}" if value is not None else f"      -  (the gate was never {key})"
        print(f"  {label:38} {shown}")

    show("energy only, speech", timed(VoiceActivityDetector, talk), "closed")
    gated: Factory = lambda: VoiceActivityDetector(SileroStream())  # noqa: E731
    show("gated, -50 dBFS hiss", timed(gated, hiss), "closed")
    opened = timed(gated, talk)
    share = sum(1 for f in talk if level_dbfs(f) > -60) / len(talk)
    show("gated, gate open (speech)", opened, "open")
    stream = SileroStream()
    t = time.perf_counter()
    for f in talk:
        stream.probability(f)
    per_window = (time.perf_counter() - t) / stream.windows * 1e6
    print(f"  silero, per 256-sample window          {per_window:7.1f}  ({share:.0%} speech)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=100)
    parser.add_argument("--fsdd", type=Path, default=FSDD)
    parser.add_argument("--limit", type=int, default=None, help="about N speech clips, evenly")
    parser.add_argument("--margin", type=float, default=None, help="gated: dB over the floor")
    parser.add_argument("--min-level", type=float, default=None, help="gated: minimum dBFS")
    parser.add_argument("--onset", type=int, default=None, help="gated: onset frames")
    parser.add_argument("--hysteresis", type=float, default=None, help="gated: gate dB")
    parser.add_argument(
        "--quieter",
        default="",
        help="also the speech clips this many dB below their recorded level, e.g. 10,20,30"
        " (the whole line, and the talker alone under the hiss)",
    )
    args = parser.parse_args()
    detectors: dict[str, Factory] = {
        "energy only": VoiceActivityDetector,
        "gated silero": lambda: VoiceActivityDetector(
            SileroStream(),
            margin_db=args.margin,
            min_level_dbfs=args.min_level,
            onset_frames=args.onset,
            hysteresis_db=args.hysteresis,
        ),
    }
    false_alarms(detectors, args.clips)
    quieter = tuple(float(d) for d in args.quieter.split(",") if d.strip())
    speech(detectors, args.fsdd, args.limit, quieter)
    cpu()


if __name__ == "__main__":
    main()
