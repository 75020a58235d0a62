"""Silero VAD (v6, ONNX) at the call's native 8 kHz: is this sound speech?

The model is the ``silero_vad.onnx`` file shipped in the ``silero-vad`` wheel
(installed with ``--no-deps``: the Python package imports torch, so it is never
imported here; only the file is located). It is a small recurrent network that
at 8 kHz takes windows of 256 samples (32 ms) preceded by the last 32 samples of
the previous window as context, plus a recurrent state of shape (2, 1, 128), and
returns the probability that the window is speech and the next state.

In ``docs``' measurements (``/work/shared/research/speech.md``: 100 speech clips
with noise/hum/clicks, 100 noise-only clips) it detected 99 clips with 4 false
alarms, against 95 and 33 for an energy detector, at ~150 µs per window. That
cost is why :mod:`callhook.media.vad` only runs it where its energy gate opens.

* :func:`session` loads the model once per process, lazily and under a lock:
  one ``onnxruntime.InferenceSession`` (one intra-op and one inter-op thread, so
  a call's inference never fans out over the cores the event loop needs) shared
  by every call; ``InferenceSession.run`` is safe to call concurrently.
* :class:`SileroStream` is one call's state (no asyncio; the event loop's runs of its
  model go to the model's own thread and are waited for, :mod:`.modelthread`):
  it takes 20 ms frames (160 samples), cuts them into 256-sample windows,
  carries context and recurrent state from window to window, and reports the
  probability of the latest complete window. Fed 160 samples at a time, the
  model runs on 5 frames out of 8 (every 32 ms). Frames given at once
  (:meth:`SileroStream.probabilities`: the audio a detector's gate skipped, heard when
  it opens) have their windows run in turn in one job on the model's thread: the
  caller waits once, not once a window.

Batching across calls: one run of the model costs about as much for a few calls'
windows as for one (its fixed cost per run is most of it: ~220 µs for one window, ~90
µs a window for four, ~60 for sixteen, on the 2-core test machine; in a loaded ``serve``,
where the model's weights are cold, a batch costs about what its windows cost alone:
bench/RESULTS.md). So the media tick asks the stream of each call whose detector's gate is
open, the model deciding, for the window its next frame will complete
(:meth:`SileroStream.upcoming`) and runs all of them at once (:func:`run_ahead`). A
stream then takes that result when, and only when, the window it completes is the one
that was run, from the state it was run from (both compared exactly); otherwise (the
detector reset the stream, or fed it other audio) it runs the window itself. The batched
run gives the same numbers as runs of one (tests/unit/media/test_silero.py), so a call's
verdicts do not depend on which other calls listen at the same time.

Reset policy: :meth:`SileroStream.reset` clears the state, the context and any
partial window. The stream never resets itself; its owner (the detector's gate)
resets it when it has skipped audio, i.e. when the gate stayed closed longer
than the detector's pre-roll (see :mod:`callhook.media.vad`), so the recurrent
state only ever describes contiguous audio and never carries a previous
utterance's state into a new one.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from callhook.media.modelthread import MODEL_THREAD, Pending

SAMPLE_RATE: Final = 8000
#: Samples per model window at 8 kHz, and samples of the previous window prepended as context.
WINDOW: Final = 256
CONTEXT: Final = 32
#: Shape of the recurrent state (the LSTM's h and c, batch 1, 128 units).
STATE_SHAPE: Final = (2, 1, 128)

_lock = threading.Lock()
_session: ort.InferenceSession | None = None


def model_path() -> Path:
    """Where the ``silero-vad`` wheel put ``silero_vad.onnx`` (found without importing it)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the silero-vad package is not installed (pip install --no-deps silero-vad)"
        )
    path = Path(spec.origin).parent / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"silero-vad is installed but {path} is missing")
    return path


def session() -> ort.InferenceSession:
    """The process's one inference session, loaded on first use (~20 ms, thread-safe)."""
    global _session
    if _session is None:
        with _lock:
            if _session is None:
                options = ort.SessionOptions()
                options.intra_op_num_threads = 1
                options.inter_op_num_threads = 1
                _session = ort.InferenceSession(
                    str(model_path()), sess_options=options, providers=["CPUExecutionProvider"]
                )
    return _session


class SileroStream:
    """One call's Silero VAD stream: 20 ms int16 frames in, speech probability out.

    Implements :class:`callhook.media.vad.SpeechModel`.
    """

    def __init__(self, inference: ort.InferenceSession | None = None) -> None:
        self._session = inference if inference is not None else session()
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        # The model's input: [context | window], filled in place as frames arrive.
        self._input = np.zeros((1, CONTEXT + WINDOW), dtype=np.float32)
        self._state = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._filled = 0  # samples of the current window received so far
        self._probability = 0.0
        #: Windows classified since creation (for the benchmark and tests).
        self.windows = 0
        #: Of those, the ones whose result came from a batched run (:func:`run_ahead`).
        self.windows_ahead = 0
        # A window run ahead: its input, the state it was run from, its probability and
        # the next state (taken by _run only if input and state are still those).
        self._ahead: tuple[np.ndarray, np.ndarray, float, np.ndarray] | None = None

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
        self._ahead = None

    def probability(self, frame: npt.NDArray[np.int16] | npt.NDArray[np.float32]) -> float:
        """Feed one frame (any length; 160 samples = 20 ms); the latest window's probability.

        Samples are on the int16 scale; floats past it (a gain, unclipped) are taken as
        they are.

        The model runs once for every 256 samples received, so a 20 ms frame
        completes zero or one window (two only for frames longer than 256).
        """
        for _ in self._fill(frame):
            self._run()
        return self._probability

    def _fill(self, frame: npt.NDArray[np.int16] | npt.NDArray[np.float32]) -> Iterator[None]:
        """Put ``frame``'s samples into the window, yielding each time it is complete: the
        caller runs or keeps it, shifts the context and empties it before going on."""
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
                yield

    def upcoming(self, frame: npt.NDArray[np.int16] | npt.NDArray[np.float32]) -> np.ndarray | None:
        """The model input (context and window) that :meth:`probability` of ``frame``
        would run the model on now; None if it would not complete exactly one window."""
        x = frame.ravel()
        take = WINDOW - self._filled
        if not take <= len(x) < take + WINDOW:
            return None
        window = self._input.copy()
        # The very expression probability() fills its window with: the same float32 bits.
        window[0, CONTEXT + self._filled :] = x[:take] * np.float32(1 / 32768)
        return window

    def probabilities(
        self, frames: Iterable[npt.NDArray[np.int16] | npt.NDArray[np.float32]]
    ) -> list[float]:
        """:meth:`probability` of each of ``frames`` in turn, the same numbers, with the
        windows they complete run one after the other in one job on the model's thread:
        the caller waits once, not once a window (a detector's gate opening goes over
        the audio it skipped, several windows of one call that no batch can hold)."""
        windows: list[np.ndarray] = []
        complete: list[int] = []  # after each frame, how many windows it had completed
        # As it was: a run that fails leaves the stream where probability() would (its
        # window still to run).
        was_input, was_filled = self._input.copy(), self._filled
        for frame in frames:
            for _ in self._fill(frame):
                windows.append(self._input.copy())
                self._input[0, :CONTEXT] = self._input[0, WINDOW:]
                self._filled = 0
            complete.append(len(windows))
        before = self._probability
        if not windows:
            return [before] * len(complete)
        try:
            found = self._run_chain(windows)
        except BaseException:
            self._input, self._filled = was_input, was_filled
            raise
        return [found[n - 1] if n else before for n in complete]

    def _run_chain(self, windows: list[np.ndarray]) -> list[float]:
        """Each of ``windows`` (one at least) run from the state the one before left, as
        :meth:`_run` would run them one by one (the first may be the one run ahead). If
        the run raises, the stream's state and the window run ahead are as they were."""
        ahead = self._ahead
        state = self._state
        found: list[float] = []
        rest = windows
        taken = (
            ahead is not None
            and np.array_equal(ahead[0], windows[0])
            and np.array_equal(ahead[1], state)
        )
        if taken:
            assert ahead is not None
            _, _, probability, state = ahead
            found.append(probability)
            rest = windows[1:]
        if rest:
            chained, state = MODEL_THREAD.run(
                _Chain(self._session, self._sr), {"windows": rest, "state": state}
            )
            found += chained
        self._ahead = None
        self._state = state
        self.windows_ahead += int(taken)
        self.windows += len(windows)
        self._probability = found[-1]
        return found

    def _run(self) -> None:
        ahead, self._ahead = self._ahead, None
        if (
            ahead is not None
            and np.array_equal(ahead[0], self._input)
            and np.array_equal(ahead[1], self._state)
        ):
            _, _, self._probability, self._state = ahead
            self.windows_ahead += 1
        else:
            out, state = MODEL_THREAD.run(
                self._session, {"input": self._input, "state": self._state, "sr": self._sr}
            )
            self._state = np.asarray(state, dtype=np.float32)
            self._probability = float(np.asarray(out).ravel()[0])
        self.windows += 1
        # The last CONTEXT samples of this window are the next window's context.
        self._input[0, :CONTEXT] = self._input[0, WINDOW:]
        self._filled = 0


class _Chain:
    """Windows of one stream run in turn (:meth:`SileroStream.probabilities`), each from
    the state the one before left: the model thread's job (``modelthread.Inference``)."""

    def __init__(self, session: ort.InferenceSession, sr: np.ndarray) -> None:
        self._session = session
        self._sr = sr

    def run(self, outputs: object, feeds: dict[str, Any]) -> tuple[list[float], np.ndarray]:
        state = feeds["state"]
        found = []
        for window in feeds["windows"]:
            # SileroStream._run's very steps, window after window.
            out, after = self._session.run(None, {"input": window, "state": state, "sr": self._sr})
            state = np.asarray(after, dtype=np.float32)
            found.append(float(np.asarray(out).ravel()[0]))
        return found, state


def run_ahead(windows: list[tuple[SileroStream, np.ndarray]]) -> None:
    """Run every stream's upcoming window (:meth:`SileroStream.upcoming`) in one batched
    run of the model per inference session; each stream keeps its result for when its
    frame completes that window (the module docstring)."""
    start_ahead(windows).finish()


class Ahead:
    """Batched runs of :func:`start_ahead` under way on the model thread."""

    def __init__(
        self, runs: list[tuple[list[tuple[SileroStream, np.ndarray]], np.ndarray, Pending]]
    ) -> None:
        self._runs = runs

    def finish(self) -> None:
        """Wait for the runs and give each stream its result (raises what a run raised).
        Until then, the streams given to :func:`start_ahead` must not be fed."""
        runs, self._runs = self._runs, []
        for group, states, pending in runs:
            out, after = pending.result()
            probabilities = np.asarray(out, dtype=np.float32).ravel()
            after = np.asarray(after, dtype=np.float32)
            for i, (stream, window) in enumerate(group):
                stream._ahead = (
                    window,
                    states[:, i : i + 1].copy(),  # the state it was run from
                    float(probabilities[i]),
                    after[:, i : i + 1].copy(),
                )


def start_ahead(windows: list[tuple[SileroStream, np.ndarray]]) -> Ahead:
    """:func:`run_ahead`'s runs, started on the model thread (:mod:`.modelthread`): the
    caller may do other work (not with these streams) until :meth:`Ahead.finish`."""
    groups: dict[int, list[tuple[SileroStream, np.ndarray]]] = {}
    for item in windows:
        groups.setdefault(id(item[0]._session), []).append(item)
    runs = []
    for group in groups.values():
        streams = [stream for stream, _ in group]
        inputs = np.concatenate([window for _, window in group])
        states = np.concatenate([stream._state for stream in streams], axis=1)
        feeds = {"input": inputs, "state": states, "sr": streams[0]._sr}
        runs.append((group, states, MODEL_THREAD.start(streams[0]._session, feeds)))
    return Ahead(runs)
