"""Silero VAD (v6) at the call's native 8 kHz: is this sound speech?

The model is the ``silero_vad.onnx`` file shipped in the ``silero-vad`` wheel
(installed with ``--no-deps``: the Python package imports torch, so it is never
imported here; only the file is located). It is a small recurrent network that
at 8 kHz takes windows of 256 samples (32 ms) preceded by the last 32 samples of
the previous window as context, plus a recurrent state of shape (2, 1, 128), and
returns the probability that the window is speech and the next state. callhook runs
the network itself, in C, with the file's weights (:mod:`.sileronet` says how and why).

Measured before callhook adopted it (100 speech clips with noise, hum and clicks, 100
clips of noise alone), it detected 99 clips with 4 false alarms, against 95 and 33 for
an energy detector. A window costs a few tens of microseconds, so
:mod:`callhook.media.vad` only runs it where its energy gate opens.

:class:`SileroStream` is one call's state (no asyncio, no thread: a window runs on the
caller's thread, the media tick's): it takes 20 ms frames (160 samples), cuts them into
256-sample windows, carries context and recurrent state from window to window, and
reports the probability of the latest complete window. Fed 160 samples at a time, the
model runs on 5 frames out of 8 (every 32 ms). Every call shares the process's one
network (its weights); each stream has its own state.

Reset policy: :meth:`SileroStream.reset` clears the state, the context and any
partial window. The stream never resets itself; its owner (the detector's gate)
resets it when it has skipped audio, i.e. when the gate stayed closed longer
than the detector's pre-roll (see :mod:`callhook.media.vad`), so the recurrent
state only ever describes contiguous audio and never carries a previous
utterance's state into a new one.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from callhook.media.sileronet import Network, network

#: Samples per model window at 8 kHz, and samples of the previous window prepended as context.
WINDOW: Final = 256
CONTEXT: Final = 32
#: Shape of the recurrent state (the LSTM's h and c, batch 1, 128 units).
STATE_SHAPE: Final = (2, 1, 128)


@functools.cache
def model_path() -> Path:
    """Where the ``silero-vad`` wheel put ``silero_vad.onnx`` (found without importing it).

    Found once: every call's detector asks, and the search of ``sys.path`` costs a few
    hundred microseconds of the event loop each time."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the silero-vad package is not installed (pip install --no-deps silero-vad)"
        )
    path = Path(spec.origin).parent / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"silero-vad is installed but {path} is missing")
    return path


class SileroStream:
    """One call's Silero VAD stream: 20 ms int16 frames in, speech probability out.

    Implements :class:`callhook.media.vad.SpeechModel`.
    """

    def __init__(self, net: Network | None = None) -> None:
        self._net = net if net is not None else network(model_path())
        # The model's input: [context | window], filled in place as frames arrive.
        self._input = np.zeros((1, CONTEXT + WINDOW), dtype=np.float32)
        self._state = np.zeros(STATE_SHAPE, dtype=np.float32)  # replaced in place by a run
        self._filled = 0  # samples of the current window received so far
        self._probability = 0.0
        #: Windows classified since creation (for the benchmark and tests).
        self.windows = 0

    @property
    def last(self) -> float:
        """The probability of the latest complete window (0.0 before the first one)."""
        return self._probability

    def reset(self) -> None:
        """Forget everything: recurrent state, context, partial window, last probability."""
        self._input[:] = 0.0
        self._state[:] = 0.0
        self._filled = 0
        self._probability = 0.0

    def probability(self, frame: npt.NDArray[np.int16] | npt.NDArray[np.float32]) -> float:
        """Feed one frame (any length; 160 samples = 20 ms); the latest window's probability.

        Samples are on the int16 scale; floats past it (a gain, unclipped) are taken as
        they are.

        The model runs once for every 256 samples received, so a 20 ms frame
        completes zero or one window (two only for frames longer than 256).
        """
        x = frame.ravel()
        i = 0
        while i < len(x):
            take = min(WINDOW - self._filled, len(x) - i)
            start = CONTEXT + self._filled
            # int16 -> [-1, 1), as the model was trained (torchaudio's normalisation).
            self._input[0, start : start + take] = x[i : i + take] * np.float32(1 / 32768)
            self._filled += take
            i += take
            if self._filled == WINDOW:
                self._run()
        return self._probability

    def _run(self) -> None:
        self._probability = self._net.window(self._input, self._state)
        self.windows += 1
        # The last CONTEXT samples of this window are the next window's context.
        self._input[0, :CONTEXT] = self._input[0, WINDOW:]
        self._filled = 0
