"""The collector's full passes in serve (callhook/serving/collector.py): off automatically, run by
hand when due: between calls, or after the safety net's interval whatever the calls."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from callhook.calls.metrics import Metrics
from callhook.serving.collector import (
    NEVER,
    FullCollections,
    automatic_full_passes_off,
    collect_young,
    young_pass,
)


def test_a_full_pass_is_due_between_calls_or_after_the_safety_nets_interval() -> None:
    policy = FullCollections(last=100.0, idle_after=60.0, max_interval=900.0)
    # (seconds since the last pass, calls up) -> due
    table = {
        (30.0, 0): False,  # idle, but one ran just now
        (60.0, 0): True,  # idle, and the last is a minute old
        (60.0, 1): False,  # a call is up: not for it
        (899.0, 400): False,
        (900.0, 400): True,  # the safety net, whatever the calls
    }
    for (age, calls), due in table.items():
        assert policy.due(100.0 + age, calls) is due, (age, calls)
    policy.ran(1000.0)
    assert not policy.due(1030.0, 0) and policy.due(1060.0, 0)


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def generations_run(keep: int) -> set[int]:
    """The generations the collector ran on its own while ``keep`` containers (kept
    alive: they reach the oldest generation) were made, in small batches."""
    seen: set[int] = set()

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.add(info["generation"])

    gc.collect()
    gc.callbacks.append(callback)
    try:
        kept = [[i] for i in range(keep)]
        assert len(kept) == keep
    finally:
        gc.callbacks.remove(callback)
    return seen


def test_without_automatic_full_passes_only_the_young_generations_run(thresholds: None) -> None:
    # Enough survivors for CPython's own rule (a full pass when the objects that reached
    # the oldest generation since the last one are a quarter of those in it).
    keep = len(gc.get_objects()) + 200_000
    gc.set_threshold(700, 10, 10)  # the defaults: full passes happen
    assert 2 in generations_run(keep)
    automatic_full_passes_off()
    assert gc.get_threshold() == (700, 10, NEVER)
    seen = generations_run(keep)
    assert 0 in seen and 1 in seen and 2 not in seen


def test_the_start_ups_own_collections_are_not_counted_as_pauses() -> None:
    metrics = Metrics()
    metrics.watch_gc()
    try:
        metrics.gc_quiet = True
        gc.collect()
        metrics.gc_quiet = False
        assert list(metrics.gc_pauses) == []
        gc.collect()
        assert [generation for generation, _ in metrics.gc_pauses] == [2]
        assert metrics.snapshot()["gc_pauses"]["gen2"]["count"] == 1
        # Every pass and its time, for the collector's share of the loop's CPU.
        snapshot = metrics.snapshot()
        assert snapshot["gc_passes"] == 1
        assert snapshot["gc_seconds"] == pytest.approx(metrics.gc_pauses[0][1] / 1000)
        assert snapshot["gc_seconds"] > 0
    finally:
        gc.callbacks.pop()


def test_the_young_pass_after_a_tick_takes_generation_1_before_the_collector_would() -> None:
    thresholds = (700, 10, NEVER)
    # (gc.get_count()) -> the generation to collect after the tick
    table = {
        (0, 3, 1): None,  # nothing made since the last pass
        (-2, 3, 1): None,  # more freed than made
        (1, 0, 1): 0,
        (650, 8, 1): 0,
        (5, 9, 1): 1,  # the next generation-0 pass would bring generation 1 on
        (5, 10, 4): 1,
    }
    for counts, generation in table.items():
        assert young_pass(counts, thresholds) == generation, counts


async def test_the_media_tick_collects_the_young_generations_once_its_packets_are_out() -> None:
    from callhook.edge.mediaengine import MediaEngine

    engine = MediaEngine("127.0.0.1", 42100, 42200, thread=False)
    order: list[str] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            order.append(f"pass {info['generation']}")

    work = engine._work

    def working(now: float, received: Sequence[Any], slot: int | None = None) -> None:
        order.append("work")
        work(now, received, slot)
        if len(order) > 3:
            raise RuntimeError("a bug in the tick")

    engine._work = working  # type: ignore[method-assign]

    def after() -> None:
        order.append("after")
        collect_young()

    engine.after_tick = after
    gc.collect()
    kept = [[i] for i in range(100)]  # young objects, alive: the count is above 0
    gc.callbacks.append(watch)
    try:
        engine._tick()
        # The tick's work, then the pass: generation 0 (generation 1 is far).
        assert order == ["work", "after", "pass 0"]
        assert gc.get_count()[0] < len(kept)
        with pytest.raises(RuntimeError):
            engine._tick()  # a tick that fails still collects at its end
        assert order[3:5] == ["work", "after"]
    finally:
        gc.callbacks.remove(watch)
        engine.shutdown()
