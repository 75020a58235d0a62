"""The speech model's own thread: runs there, results and errors to the caller."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from callhook.media import modelthread, silero
from callhook.media.modelthread import ModelThread
from callhook.media.silero import SileroStream


class Recording:
    """An inference that says which thread ran it, and may wait to be let go."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.threads: list[str] = []
        self.gate = gate

    def run(self, outputs: Any, feeds: dict[str, Any]) -> Any:
        self.threads.append(threading.current_thread().name)
        if self.gate is not None:
            assert self.gate.wait(10)
        if feeds.get("fail"):
            raise ValueError("the model refused")
        return feeds["x"] * 2


def test_a_run_is_made_on_the_named_thread_and_its_result_returned() -> None:
    thread, inference = ModelThread(), Recording()
    assert thread.run(inference, {"x": 21}) == 42
    assert inference.threads == [modelthread.NAME]
    assert thread.runs == 1


def test_what_the_run_raises_is_raised_to_the_caller_and_the_thread_goes_on() -> None:
    thread, inference = ModelThread(), Recording()
    with pytest.raises(ValueError, match="the model refused"):
        thread.run(inference, {"x": 1, "fail": True})
    assert thread.run(inference, {"x": 2}) == 4


def test_start_returns_while_the_run_goes_on_and_result_waits_for_it() -> None:
    gate = threading.Event()
    thread, inference = ModelThread(), Recording(gate)
    pending = thread.start(inference, {"x": 5})
    # The caller got its handle back while the run is held on the thread.
    assert thread.runs == 0
    gate.set()
    assert pending.result() == 10
    assert pending.result() == 10  # a second call returns at once


def test_a_thread_other_than_the_loops_runs_the_model_itself() -> None:
    """The speech recognition pool's threads never wait behind the calls' runs."""
    thread, inference = ModelThread(), Recording()
    got: list[Any] = []
    other = threading.Thread(target=lambda: got.append(thread.run(inference, {"x": 1})))
    other.start()
    other.join()
    assert got == [2]
    assert inference.threads == [other.name]
    assert thread.runs == 0


def test_the_threads_cpu_is_what_its_runs_took() -> None:
    class Busy:
        def run(self, outputs: Any, feeds: dict[str, Any]) -> Any:
            until = time.thread_time() + 0.05
            while time.thread_time() < until:
                pass
            return None

    thread = ModelThread()
    assert thread.cpu() == 0.0
    thread.run(Busy(), {})
    assert 0.05 <= thread.cpu() < 1.0


def test_without_a_usable_thread_the_caller_runs_the_model_itself() -> None:
    thread, inference = ModelThread(), Recording()
    thread.usable = False
    assert thread.run(inference, {"x": 3}) == 6
    assert inference.threads == [threading.current_thread().name]
    assert thread.runs == 0


def test_a_thread_that_cannot_start_leaves_runs_on_the_caller_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    thread, inference = ModelThread(), Recording()
    assert thread.run(inference, {"x": 4}) == 8
    assert thread.run(inference, {"x": 5}) == 10
    assert not thread.usable
    errors = [r.getMessage() for r in caplog.records if r.name == "callhook.media"]
    assert errors == [
        f"the speech model runs on the event loop's thread: {modelthread.NAME} "
        "(can't start new thread)"
    ]


def test_a_stream_gets_the_same_probabilities_from_the_thread_as_from_its_own_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model thread changes where the model runs, never what it computes."""

    class Watched:
        def __init__(self) -> None:
            self.threads: set[str] = set()

        def run(self, outputs: Any, feeds: dict[str, Any]) -> Any:
            self.threads.add(threading.current_thread().name)
            return silero.session().run(outputs, feeds)

    rng = np.random.default_rng(7)
    speechy = (np.sin(np.arange(160 * 60) * 0.3) * 8000).astype(np.int16)
    noisy = rng.integers(-3000, 3000, 160 * 60).astype(np.int16)
    audio = np.concatenate([noisy[: 160 * 20], speechy, noisy])

    def probabilities(usable: bool) -> tuple[list[float], set[str]]:
        monkeypatch.setattr(modelthread.MODEL_THREAD, "usable", usable)
        inference = Watched()
        stream = SileroStream(inference)
        got = [stream.probability(audio[i : i + 160]) for i in range(0, len(audio), 160)]
        assert stream.windows > 0
        return got, inference.threads

    threaded, on = probabilities(True)
    inline, off = probabilities(False)
    assert on == {modelthread.NAME} and off == {threading.current_thread().name}
    assert threaded == inline
    assert len(set(threaded)) > 10  # (the model said many things, not one)
