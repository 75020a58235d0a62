"""Cost of the media DSP per 20 ms frame (µs), and detector figures on the full speech set.

    .venv/bin/python -m bench.dsp [--calls 500] [--fsdd ../shared/data/speech/fsdd]

1. µs per 20 ms frame (160 samples, one call) for G.711, the DTMF tone detector, voice
   activity and the level meter, and per call-frame for the batched paths (``--calls`` calls
   in one numpy call); µs per RTP telephone-event packet and per SIP INFO body; ms to turn a
   5 s 44.1 kHz prompt into 8 kHz, and to decode 60 s of IMA and OKI ADPCM.
2. On the full FSDD set (read from ``../shared``, skipped when absent): DTMF
   digits falsely detected in speech (plain, µ-law, A-law), and speech clips in which the
   voice activity detector finds activity when padded with -50 dBFS line noise (µ-law).
"""

from __future__ import annotations

import argparse
import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from callhook.media import adpcm, g711, tones, wav
from callhook.media.dtmf import Rfc4733Receiver, ToneDetector, ToneDetectorBank, parse_dtmf_relay
from callhook.media.vad import VoiceActivityDetector, level_dbfs

Frames = npt.NDArray[np.int16]
FSDD = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "speech" / "fsdd"


def per_call(fn: Callable[[], object], n: int, repeat: int = 5) -> float:
    """Best of ``repeat`` runs of ``n`` calls: µs per call."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


def per_frame(feed: Callable[[Frames], object], frames: Frames, repeat: int = 5) -> float:
    """Best of ``repeat`` passes over ``frames``: µs per frame."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for f in frames:
            feed(f)
        best = min(best, time.perf_counter() - t)
    return best / len(frames) * 1e6


def to_frames(x: Frames) -> Frames:
    x = np.concatenate([x, np.zeros((-len(x)) % 160, np.int16)])
    return x.reshape(-1, 160)


def load(path: Path) -> Frames:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)


def speech_frames() -> Frames:
    here = Path(__file__).resolve().parent.parent / "tests" / "data" / "speech"
    return to_frames(np.concatenate([load(p) for p in sorted(here.glob("*.wav"))]))


def row(name: str, us: float, note: str = "") -> None:
    print(f"  {name:52} {us:8.2f} µs  {note}")


def frame_costs(calls: int) -> None:
    speech = speech_frames()
    noise = to_frames(tones.white_noise(20.0, -55.0))
    keys = to_frames(
        np.concatenate(
            [
                np.concatenate([tones.dtmf_tone(d, 0.1), tones.silence(0.1)])
                for d in "0123456789*#ABCD" * 4
            ]
        )
    )
    codes = g711.ulaw_encode(speech[0])
    acodes = g711.alaw_encode(speech[0])
    print("per 20 ms frame, one call:")
    row("g711.ulaw_decode", per_call(lambda: g711.ulaw_decode(codes), 20000))
    row("g711.ulaw_encode", per_call(lambda: g711.ulaw_encode(speech[0]), 20000))
    row("g711.alaw_decode", per_call(lambda: g711.alaw_decode(acodes), 20000))
    row("g711.alaw_encode", per_call(lambda: g711.alaw_encode(speech[0]), 20000))
    row("g711.decode('ulaw', ...)", per_call(lambda: g711.decode("ulaw", codes), 20000))
    row("ToneDetector.feed, speech", per_frame(ToneDetector().feed, speech), "(typical)")
    row("ToneDetector.feed, line noise -55 dBFS", per_frame(ToneDetector().feed, noise))
    row(
        "ToneDetector.feed, DTMF (half tone, half pause)",
        per_frame(ToneDetector().feed, keys),
        "(while keys are pressed)",
    )
    row("VoiceActivityDetector.feed, speech", per_frame(VoiceActivityDetector().feed, speech))
    row("level_dbfs", per_frame(level_dbfs, speech))

    print(f"batched over {calls} calls, per call-frame:")
    batch = np.stack([speech[i % len(speech)] for i in range(calls)])
    bcodes = g711.encode_array("ulaw", batch)
    row(
        "g711.decode_array('ulaw', (calls, 160))",
        per_call(lambda: g711.decode_array("ulaw", bcodes), 200) / calls,
    )
    row(
        "g711.encode_array('ulaw', (calls, 160))",
        per_call(lambda: g711.encode_array("ulaw", batch), 200) / calls,
    )
    for name, source in (("speech", speech), ("DTMF in every call", keys)):
        # Each call at its own place in the source, advancing one frame a tick.
        ticks = [
            np.stack([source[(t + 37 * i) % len(source)] for i in range(calls)]) for t in range(100)
        ]
        best = float("inf")
        for _ in range(3):
            bank = ToneDetectorBank(calls)
            t0 = time.perf_counter()
            for tick in ticks:
                bank.feed_many(tick)
            best = min(best, time.perf_counter() - t0)
        row(f"ToneDetectorBank.feed_many, {name}", best / len(ticks) / calls * 1e6)

    print("per packet / message / prompt:")
    rx = Rfc4733Receiver()
    payload = bytes([5, 10, 1, 64])
    presses = iter(range(10**9))  # a new press every 0.5 s of media time
    row(
        "Rfc4733Receiver.feed, update of a known press",
        per_call(lambda: rx.feed(payload, 4000, 0.5), 50000),
    )

    def new_press() -> None:
        n = next(presses)
        rx.feed(payload, n * 4000, n * 0.5)

    row("Rfc4733Receiver.feed, new press", per_call(new_press, 50000))
    body = b"Signal=5\r\nDuration=160\r\n"
    row(
        "parse_dtmf_relay",
        per_call(lambda: parse_dtmf_relay("application/dtmf-relay", body), 50000),
    )
    prompt = np.clip(np.random.default_rng(0).normal(0, 3000, 5 * 44100), -32768, 32767).astype(
        "<i2"
    )
    file = wav_file(prompt.tobytes(), 44100)
    row(
        "wav.decode_to_8k, 5 s at 44.1 kHz (soxr HQ)",
        per_call(lambda: wav.decode_to_8k(file), 50) / 1000,
        "ms, not µs",
    )
    # 60 s of 8 kHz ADPCM (random codes: the cost does not depend on the audio).
    codes = np.random.default_rng(1).integers(0, 256, 951 * 512, dtype=np.uint8).tobytes()
    for name, decode in [
        (
            "adpcm.ima_decode, 60 s at 8 kHz, mono",
            lambda: adpcm.ima_decode(codes[: 951 * 256], 1, 256),
        ),
        ("adpcm.ima_decode, 60 s at 8 kHz, stereo", lambda: adpcm.ima_decode(codes, 2, 512)),
        ("adpcm.oki_decode, 60 s at 8 kHz", lambda: adpcm.oki_decode(codes[:240000])),
    ]:
        row(name, per_call(decode, 5) / 1000, "ms, not µs")


def wav_file(pcm: bytes, rate: int) -> bytes:
    import struct

    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    body = (
        b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", len(pcm))
        + pcm
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


def full_set(fsdd: Path) -> None:
    files = sorted(fsdd.glob("*.wav"))
    if not files:
        print(f"full speech set: {fsdd} not found, skipped")
        return
    print(f"full speech set ({len(files)} clips, {fsdd}):")
    false_digits = {"plain": 0, "ulaw": 0, "alaw": 0}
    missed: list[str] = []
    in_padding: list[str] = []
    for i, path in enumerate(files):
        speech = load(path)
        variants = {
            "plain": speech,
            "ulaw": g711.ulaw_decode(g711.ulaw_encode(speech)),
            "alaw": g711.alaw_decode(g711.alaw_encode(speech)),
        }
        for name, x in variants.items():
            detector = ToneDetector()
            false_digits[name] += sum(detector.feed(f) is not None for f in to_frames(x))
        padded = np.concatenate(
            [
                tones.white_noise(1.0, -50.0, seed=2 * i),
                speech,
                tones.white_noise(1.0, -50.0, seed=2 * i + 1),
            ]
        )
        vad = VoiceActivityDetector()
        starts = [
            k * 0.02
            for k, f in enumerate(to_frames(g711.ulaw_decode(g711.ulaw_encode(padded))))
            if vad.feed(f) is True
        ]
        if not starts:
            missed.append(path.name)
        elif any(t < 1.0 or t > 1.0 + len(speech) / 8000 for t in starts):
            in_padding.append(path.name)
    print(f"  DTMF digits detected in speech: {false_digits}")
    quiet = ", ".join(f"{n} (loudest frames {max_level(fsdd / n):.1f} dBFS)" for n in missed)
    found = len(files) - len(missed)
    print(f"  VAD: speech found in {found}/{len(files)} clips; missed: {quiet or 'none'}")
    print(f"  VAD: activity starting in the -50 dBFS padding: {len(in_padding)} clips {in_padding}")


def max_level(path: Path) -> float:
    return max(level_dbfs(f) for f in to_frames(load(path)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--fsdd", type=Path, default=FSDD)
    args = parser.parse_args()
    frame_costs(args.calls)
    full_set(args.fsdd)


if __name__ == "__main__":
    main()
