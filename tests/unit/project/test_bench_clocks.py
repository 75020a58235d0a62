"""bench/clocks.py: the loop thread's CPU by function, counted on a clock the test moves."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from bench.clocks import FUNCTIONS, Clocks, resolve, table


class Ticks:
    """A CPU clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_function_counts_its_own_cpu_on_the_loop_thread_only() -> None:
    ticks = Ticks()
    clocks = Clocks(ticks)

    def work(seconds: float) -> str:
        ticks.now += seconds
        return "done"

    timed = clocks.timed(work, "work")
    assert timed(2.0) == "done" and timed(3.0) == "done"
    assert clocks.counts["work"] == [2, 5.0]
    elsewhere = threading.Thread(target=timed, args=(7.0,))
    elsewhere.start()
    elsewhere.join()
    assert clocks.counts["work"] == [2, 5.0]  # another thread's CPU is not the loop's


async def test_a_coroutine_counts_its_steps_and_not_what_runs_while_it_waits() -> None:
    ticks = Ticks()
    clocks = Clocks(ticks)
    loop = asyncio.get_running_loop()
    clocks.thread = threading.get_ident()
    reply: asyncio.Future[int] = loop.create_future()

    async def page() -> int:
        ticks.now += 1.0  # building the request
        answer = await reply
        ticks.now += 2.0  # reading the answer
        return answer * 2

    task = asyncio.ensure_future(clocks.timed(page, "page")())
    await asyncio.sleep(0)  # the first step runs, then waits
    ticks.now += 100.0  # the rest of the loop's work meanwhile
    reply.set_result(21)
    assert await task == 42
    assert clocks.counts["page"] == [1, 3.0]  # one run of two steps, the wait not counted


async def test_an_error_thrown_in_reaches_the_coroutine_and_its_step_counts() -> None:
    ticks = Ticks()
    clocks = Clocks(ticks)
    clocks.thread = threading.get_ident()
    seen: list[str] = []

    async def waits() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            ticks.now += 0.5
            seen.append("cancelled")
            raise

    task = asyncio.ensure_future(clocks.timed(waits, "waits")())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
    assert clocks.counts["waits"] == [1, 0.5]


def test_the_table_is_per_call_largest_first(tmp_path: Path) -> None:
    ticks = Ticks()
    clocks = Clocks(ticks)
    clocks.counts = {
        "Inbound.incoming": [4, 0.004],
        "CallLog.write": [180, 0.0072],
    }
    path = tmp_path / "clocks.json"
    clocks.dump(path)
    lines = table(path).splitlines()
    assert any(line.startswith("loop thread, since the first tick") for line in lines)
    names = [line.split()[0] for line in lines[1:-1]]
    write = lines[1 + names.index("CallLog.write")]
    assert write.split() == ["CallLog.write", "180", "40.0", "1.800"]  # 40 µs, 1.8 ms a call
    assert names.index("CallLog.write") < names.index("Inbound.incoming")
    assert lines[-1] == "(calls: 4)"


def test_every_counted_function_is_where_the_bench_looks() -> None:
    # A renamed function would fail the bench at start; here it fails at once.
    for spec in FUNCTIONS:
        _, _, function = resolve(spec)
        assert callable(function), spec
