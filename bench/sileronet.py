"""The speech model's network, a window at a time: callhook's C network, its numpy
reference and onnxruntime's run of the model file, in the same run.

    .venv/bin/python -m bench.sileronet [--windows 3000]

Each runs the same windows of a recorded clip (tests/data/speech) in turn from the
state the one before left, on this thread, as a listening call's detector does. Prints
µs a window (best of three passes: the weights warm in the caches) and once more with
the caches made cold between windows (a 16 MB buffer read between them, as a loaded
``serve``'s other work does), and the largest difference from onnxruntime's
probabilities.
"""

from __future__ import annotations

import argparse
import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime

from callhook.media import silero
from callhook.media._silero import Network
from callhook.media.sileronet import ReferenceNetwork, read_weights

CLIP = Path(__file__).parents[1] / "tests" / "data" / "speech" / "0_jackson_0.wav"

Step = Callable[[npt.NDArray[np.float32], npt.NDArray[np.float32]], float]


def inputs(count: int) -> list[npt.NDArray[np.float32]]:
    with wave.open(str(CLIP)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    x = np.resize(pcm, 256 * count).astype(np.float32) * np.float32(1 / 32768)
    made: list[npt.NDArray[np.float32]] = []
    context = np.zeros(32, np.float32)
    for k in range(count):
        window = x[k * 256 : (k + 1) * 256]
        made.append(np.concatenate([context, window])[None, :])
        context = window[-32:]
    return made


def timed(
    step: Step, windows: list[npt.NDArray[np.float32]], cold: bool
) -> tuple[float, list[float]]:
    """µs a window (the best of three passes) and the probabilities."""
    sweep = np.ones(4 * 1024 * 1024, np.float32)  # 16 MB: more than the caches hold
    best, got = float("inf"), list[float]()
    for _ in range(3):
        state = np.zeros((2, 1, 128), np.float32)
        got, spent = [], 0.0
        for window in windows:
            if cold:
                sweep.sum()
            start = time.perf_counter()
            got.append(step(window, state))
            spent += time.perf_counter() - start
        best = min(best, spent / len(windows) * 1e6)
    return best, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3000)
    args = parser.parse_args()
    arrays = read_weights(silero.model_path())
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(silero.model_path()), sess_options=options)
    rate = np.array(8000, np.int64)

    def file_run(window: npt.NDArray[np.float32], state: npt.NDArray[np.float32]) -> float:
        out, after = session.run(None, {"input": window, "state": state, "sr": rate})
        state[:] = after
        return float(out[0, 0])

    steps: dict[str, Step] = {
        "onnxruntime (the file)": file_run,
        "C network": Network(*arrays).window,
        "numpy reference": ReferenceNetwork(arrays).window,
    }
    windows = inputs(args.windows)
    print(f"{len(windows)} windows of {CLIP.name}, one thread")
    print(f"{'':24} {'warm µs':>8} {'cold µs':>8} {'max |p - onnxruntime|':>22}")
    reference: list[float] = []
    for name, step in steps.items():
        few = windows if name != "numpy reference" else windows[:300]
        warm, got = timed(step, few, cold=False)
        cold, _ = timed(step, few[:300], cold=True)
        if not reference:
            reference = got
        diff = max(abs(a - b) for a, b in zip(got, reference, strict=False))
        print(f"{name:24} {warm:8.1f} {cold:8.1f} {diff:22.2e}")


if __name__ == "__main__":
    main()
