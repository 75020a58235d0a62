"""The recogniser crashing or hanging (issue 14): deadlines and restarts.

The supervisor's decisions are checked on a virtual clock (sans-IO, every
timing row deterministic). The service around it is checked with a stand-in
engine, which is allowed here because this is a unit test of that one layer:
the real engines crashing and hanging are tested end to end in
``tests/e2e/test_faults.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import numpy.typing as npt
import pytest

from callhook.devtools.harness import VirtualClock
from callhook.edge.speechworkers import RecognitionFailed, SpeechService
from callhook.events import Alternative, RecognitionOptions
from callhook.speech import faults
from callhook.speech.supervisor import RecogniserSupervisor

OPTIONS = RecognitionOptions()
SECOND = np.zeros(8000, dtype=np.int16)

# --- the supervisor, on a virtual clock ------------------------------------------------------


def test_a_decode_has_a_deadline_from_when_it_starts_running() -> None:
    clock = VirtualClock(100.0)
    watch = RecogniserSupervisor(base_timeout=5.0, per_audio_second=2.0)
    assert watch.next_deadline() is None
    assert watch.started(1, clock.now(), audio_seconds=1.5) == 108.0
    clock.advance_to(103.0)  # a second decode started later (it was queued): its own deadline
    watch.started(2, clock.now(), audio_seconds=0.5)
    assert watch.next_deadline() == 108.0
    clock.advance_to(107.999)
    assert watch.expired(clock.now()) == []
    watch.finished(1)  # returned in time
    assert watch.next_deadline() == 109.0
    clock.advance_to(109.0)
    assert watch.expired(clock.now()) == [2]  # hung
    assert watch.next_deadline() is None and watch.running == []


def test_a_remote_engines_own_timeout_is_its_deadline_when_longer() -> None:
    watch = RecogniserSupervisor(base_timeout=5.0, per_audio_second=2.0)
    assert watch.started(1, 100.0, audio_seconds=1.0, engine_timeout=20.0) == 125.0
    assert watch.expired(124.9) == []
    assert watch.expired(125.0) == [1]
    # A short engine timeout leaves the usual deadline.
    assert watch.started(2, 200.0, audio_seconds=1.0, engine_timeout=1.0) == 207.0


def test_time_the_machine_waited_for_a_cpu_moves_the_deadline_up_to_a_limit() -> None:
    clock = VirtualClock(100.0)
    watch = RecogniserSupervisor(base_timeout=5.0, per_audio_second=2.0, max_stall=30.0)
    watch.started(1, clock.now(), audio_seconds=1.0, stall=500.0)  # due at 107
    clock.advance_to(107.0)
    # 4 s of the 7 the machine's tasks waited for a CPU: slow, not hung.
    assert watch.expired(clock.now(), stall=504.0) == []
    assert watch.next_deadline(504.0) == 111.0
    clock.advance_to(111.0)
    assert watch.expired(clock.now(), stall=504.0) == [1]  # (no more waiting since)
    # Under a machine that never lets up, hung at last: the stall counts 30 s at most.
    watch.started(2, 200.0, audio_seconds=1.0, stall=600.0)
    assert watch.expired(236.9, stall=1000.0) == []
    assert watch.expired(237.0, stall=1000.0) == [2]


def test_faults_restart_at_once_then_back_off_and_are_forgotten_after_the_window() -> None:
    clock = VirtualClock(0.0)
    watch = RecogniserSupervisor(window=60.0, free_restarts=3, max_backoff=10.0)
    waits = []
    for t in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0):
        clock.advance_to(t)
        waits.append(watch.fault(clock.now()) - clock.now())
        assert watch.available(clock.now()) is (waits[-1] == 0.0)
        watch.restarted()
    assert waits == [0.0, 0.0, 0.0, 2.0, 4.0, 8.0, 10.0]  # doubling, capped
    clock.advance_to(70.0)  # the faults before t=10 are out of the window
    assert watch.fault(clock.now()) == 70.0


def test_the_engine_is_unavailable_until_its_restart_time() -> None:
    watch = RecogniserSupervisor(free_restarts=0)
    at = watch.fault(10.0)
    assert at == 12.0
    assert not watch.available(11.9)
    assert watch.available(12.0)


def test_a_fault_forgets_the_running_decodes() -> None:
    watch = RecogniserSupervisor()
    watch.started(1, 0.0, 1.0)
    watch.fault(0.5)
    assert watch.running == [] and watch.next_deadline() is None


# --- fault injection -------------------------------------------------------------------------


class Engine:
    """A stand-in engine: says "seven"; counts its instances."""

    name = "stand-in"
    languages = frozenset({"en"})
    built = 0

    def __init__(self) -> None:
        Engine.built += 1
        self.warmed = False

    def warm_up(self) -> None:
        self.warmed = True

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        return (Alternative("seven", 0.9),)

    def restarted(self) -> Engine:
        return Engine()


def test_injection_is_off_unless_asked_and_refuses_unknown_faults() -> None:
    engine = Engine()
    assert faults.inject(engine, {}) is engine
    assert faults.inject(None, {faults.ENV: "crash"}) is None
    with pytest.raises(ValueError, match="crash"):
        faults.inject(engine, {faults.ENV: "explode"})
    broken = faults.inject(engine, {faults.ENV: "crash"})
    assert isinstance(broken, faults.FaultyRecogniser)
    with pytest.raises(faults.InjectedCrash):
        broken.recognise(SECOND, OPTIONS)
    assert isinstance(broken.restarted(), Engine)  # the restart is the real engine


# --- the service: crash and hang with a stand-in engine ----------------------------------------


async def test_a_crash_fails_the_decode_with_its_cause_and_a_fresh_engine_takes_over() -> None:
    broken = faults.FaultyRecogniser(Engine(), "crash")
    service = SpeechService(None, broken, workers=2)
    try:
        with pytest.raises(RecognitionFailed, match="crashed: InjectedCrash"):
            await service.recognise(SECOND, OPTIONS)
        assert service.faults == 1 and service.restarts == 1
        result = await asyncio.wait_for(service.recognise(SECOND, OPTIONS), 10)
        assert result[0].text == "seven"
        assert isinstance(service.recogniser, Engine) and service.recogniser.warmed
    finally:
        service.close()


def quick() -> RecogniserSupervisor:
    """A short deadline, with no time added for the machine's CPU stall (which, under the
    suite's load, would move it by up to 30 s)."""
    return RecogniserSupervisor(base_timeout=0.2, per_audio_second=0, max_stall=0)


class SlowServer(Engine):
    """A remote engine: answers after 0.5 s, and would wait up to its timeout."""

    timeout = 5.0

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        time.sleep(0.5)
        return super().recognise(audio, options)


async def test_a_remote_engine_slow_within_its_timeout_is_not_taken_for_hung() -> None:
    service = SpeechService(None, SlowServer(), workers=1, supervisor=quick())
    try:
        result = await asyncio.wait_for(service.recognise(SECOND, OPTIONS), 10)
        assert result[0].text == "seven"
        assert service.faults == 0 and service.restarts == 0
    finally:
        service.close()


async def test_a_hang_is_abandoned_at_its_deadline_and_the_next_decode_works() -> None:
    hung = faults.FaultyRecogniser(Engine(), "hang")
    # A short deadline: the decision itself is tested on the virtual clock above.
    service = SpeechService(None, hung, workers=1, supervisor=quick())
    try:
        with pytest.raises(RecognitionFailed, match="hung"):
            await asyncio.wait_for(service.recognise(SECOND, OPTIONS), 10)
        # One worker, and it is stuck for good: only a fresh pool can answer this.
        result = await asyncio.wait_for(service.recognise(SECOND, OPTIONS), 10)
        assert result[0].text == "seven"
        assert service.restarts == 1
        assert any(t.name.startswith("asr") and t.daemon for t in threading.enumerate())
    finally:
        service.close()
        hung._never.set()  # let the abandoned thread end with the test


def test_closing_waits_for_running_recogniser_work_but_not_for_a_hung_one() -> None:
    """Native code (a model loading) cut off by the interpreter's exit aborts the process,
    so a pool being closed is joined; one hung past the deadline is abandoned."""
    import threading
    import time

    from callhook.edge.speechworkers import DaemonPool

    pool = DaemonPool(1, "test")
    release, started = threading.Event(), threading.Event()

    def work() -> None:
        started.set()
        release.wait(10)

    pool.submit(work)
    assert started.wait(5)
    pool.shutdown(wait=False, cancel_futures=True)
    assert not pool.join(time.monotonic() + 0.05)  # still at work: not finished
    closer = threading.Thread(target=pool.join, args=(time.monotonic() + 10,))
    closer.start()
    release.set()
    closer.join(10)
    assert not closer.is_alive() and pool.join(time.monotonic())


async def test_a_restart_that_hangs_fails_decodes_instead_of_hanging_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh engine that never finishes loading: decodes waiting for it fail after
    READY_TIMEOUT (nothing heard, the call goes on), and closing releases them at once."""
    import callhook.edge.speechworkers as speech

    monkeypatch.setattr(speech, "READY_TIMEOUT", 0.3)
    stuck = threading.Event()

    class StuckRestart(Engine):
        def restarted(self) -> Engine:
            stuck.wait(30)  # the model load that never ends
            return Engine()

    broken = faults.FaultyRecogniser(StuckRestart(), "crash")
    service = SpeechService(None, broken, workers=2)
    try:
        with pytest.raises(RecognitionFailed, match="crashed"):
            await service.recognise(SECOND, OPTIONS)
        with pytest.raises(RecognitionFailed, match="still loading"):
            await asyncio.wait_for(service.recognise(SECOND, OPTIONS), 10)
    finally:
        stuck.set()
        service.close()


class SlowLoad(Engine):
    """Loads its model in warm_up, and a decode that comes meanwhile blocks on the load
    (as Whisper's does, on its lock) until it is done."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.lock = threading.Lock()

    def warm_up(self) -> None:
        with self.lock:
            self.release.wait(10)
            self.warmed = True

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        if not self.warmed:
            self.warm_up()  # (loaded at first use, as Whisper's model is)
        with self.lock:
            return super().recognise(audio, options)


async def test_a_decode_waits_for_the_first_model_load_without_its_deadline_running() -> None:
    """A call right after start-up: the load (slow on a busy machine) is not a hang."""
    engine = SlowLoad()
    service = SpeechService(
        None,
        engine,
        workers=2,
        supervisor=quick(),
    )
    try:
        service.warm_up()
        decode = asyncio.ensure_future(service.recognise(SECOND, OPTIONS))
        await asyncio.sleep(0.6)  # three deadlines' worth of loading
        assert not decode.done()
        engine.release.set()
        result = await asyncio.wait_for(decode, 10)
        assert result[0].text == "seven"
        assert service.faults == 0 and service.restarts == 0
    finally:
        engine.release.set()
        service.close()


async def test_an_utterance_gets_an_answer_within_the_answer_timeout_whatever_holds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A decode queued behind a busy engine (not hung: its deadline is far) still ends:
    nothing recognised, with the cause, and the engine is not restarted for it."""
    import callhook.edge.speechworkers as speech

    monkeypatch.setattr(speech, "ANSWER_TIMEOUT", 0.3)
    busy = threading.Event()

    class Busy(Engine):
        def recognise(
            self, audio: npt.NDArray[np.int16], options: RecognitionOptions
        ) -> tuple[Alternative, ...]:
            busy.wait(10)
            return super().recognise(audio, options)

    service = SpeechService(None, Busy(), workers=1)
    try:
        first = asyncio.ensure_future(service.recognise(SECOND, OPTIONS))
        with pytest.raises(RecognitionFailed, match="no answer from the speech recogniser"):
            await asyncio.wait_for(service.recognise(SECOND, OPTIONS), 10)
        with pytest.raises(RecognitionFailed, match="no answer"):
            await first
        assert service.faults == 0
        busy.set()
        result = await asyncio.wait_for(service.recognise(SECOND, OPTIONS), 10)
        assert result[0].text == "seven"
    finally:
        busy.set()
        service.close()


async def test_without_preload_the_first_decode_waits_for_the_load_without_its_deadline() -> None:
    """``[speech] preload = false``: the model loads at the first utterance, and that
    utterance's deadline does not run while it loads."""
    engine = SlowLoad()
    service = SpeechService(
        None,
        engine,
        workers=2,
        supervisor=quick(),
    )
    try:
        decode = asyncio.ensure_future(service.recognise(SECOND, OPTIONS))  # no warm_up
        await asyncio.sleep(0.6)
        assert not decode.done()
        engine.release.set()
        assert (await asyncio.wait_for(decode, 10))[0].text == "seven"
        assert engine.warmed and service.faults == 0
        assert service.warming == []  # (readiness is about what loads at start)
    finally:
        engine.release.set()
        service.close()


async def test_a_model_load_that_never_ends_is_a_fault_and_a_fresh_engine_takes_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A load hung past READY_TIMEOUT is taken as the engine hung: the next utterance
    restarts it (a fresh instance, fresh threads) and is recognised."""
    import callhook.edge.speechworkers as speech

    monkeypatch.setattr(speech, "READY_TIMEOUT", 0.3)
    monkeypatch.setattr(speech, "ANSWER_TIMEOUT", 0.2)
    never = threading.Event()

    class NeverLoads(Engine):
        def warm_up(self) -> None:
            never.wait(30)  # the model load that never ends

    service = SpeechService(None, NeverLoads(), workers=2)
    try:
        service.warm_up()
        with pytest.raises(RecognitionFailed, match="no answer"):
            await service.recognise(SECOND, OPTIONS)
        await asyncio.sleep(0.35)
        result = await asyncio.wait_for(service.recognise(SECOND, OPTIONS), 10)
        assert result[0].text == "seven"
        assert service.faults == 1 and service.restarts == 1
    finally:
        never.set()
        service.close()
