"""The Prometheus families: page requests timed by outcome, and the workers' samples
added up (prometheus-client's multiprocess mode, in real processes: it is chosen when the
library is first imported)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from callhook.calls.pagetiming import TimedPages
from callhook.monitoring import prometheus
from callhook.ports import PageError


def sample(text: str, name: str) -> float | None:
    """The value of the sample line ``name`` (with its labels) in the exposition."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


class Pages:
    def __init__(self, answer: bytes | Exception | None) -> None:
        self.answer = answer

    async def fetch(self, url: str, method: str, body: bytes, secret: str) -> bytes:
        if self.answer is None:
            await asyncio.sleep(10)  # the call ends first
        if isinstance(self.answer, Exception):
            raise self.answer
        assert isinstance(self.answer, bytes)
        return self.answer

    async def close(self) -> None:
        pass


async def test_page_requests_are_counted_by_application_and_outcome() -> None:
    def count(outcome: str) -> float:
        text = prometheus.exposition()[0].decode()
        name = "callhook_page_request_duration_seconds_count"
        return sample(text, f'{name}{{application="timed",outcome="{outcome}"}}') or 0.0

    before = {o: count(o) for o in ("ok", "failed", "abandoned")}
    assert await TimedPages(Pages(b"[]"), "timed").fetch("u", "POST", b"", "s") == b"[]"
    with pytest.raises(PageError):
        await TimedPages(Pages(PageError("status", "u", "HTTP 500", 500)), "timed").fetch(
            "u", "POST", b"", "s"
        )
    task = asyncio.ensure_future(TimedPages(Pages(None), "timed").fetch("u", "POST", b"", "s"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert {o: count(o) - before[o] for o in before} == {"ok": 1, "failed": 1, "abandoned": 1}


WORKER = """
import sys
from callhook.monitoring import prometheus
prometheus.CALLS_STARTED.labels("app", "in").inc(int(sys.argv[1]))
prometheus.CALLS_ACTIVE.labels("app", "in").inc(int(sys.argv[1]))
print(prometheus.exposition()[0].decode())
"""


def test_the_workers_samples_are_added_up_and_a_dead_workers_calls_are_not_active(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "samples"
    (folder).mkdir()
    (folder / "counter_999.db").write_bytes(b"an earlier run's")
    prometheus.prepare_folder(folder)
    assert not list(folder.iterdir())
    env = {**os.environ, prometheus.MULTIPROCESS_ENV: str(folder)}
    workers, outputs = [], []
    for n in (2, 3):  # (one after the other: the second's answer comes after both counted)
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(n)], env=env, stdout=subprocess.PIPE
        )
        outputs.append(worker.communicate(timeout=60)[0].decode())
        workers.append(worker)
    started = 'callhook_calls_started_total{application="app",direction="in"}'
    active = 'callhook_calls_active{application="app",direction="in"}'
    # The second worker's answer holds both workers' calls.
    assert sample(outputs[1], started) == 5 and sample(outputs[1], active) == 5
    # The first ended: what it counted stays, its calls are no longer in progress.
    prometheus.worker_ended(folder, workers[0].pid)
    reader = (
        "from callhook.monitoring import prometheus; print(prometheus.exposition()[0].decode())"
    )
    text = subprocess.run(
        [sys.executable, "-c", reader], env=env, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    assert sample(text, started) == 5
    assert sample(text, active) == 3


def test_totals_add_what_is_new_and_start_over_from_a_part_made_again() -> None:
    from prometheus_client import REGISTRY

    def dropped() -> float:
        labels = {"protocol": "sip", "cause": "totals-test"}
        return REGISTRY.get_sample_value("callhook_packets_dropped_total", labels) or 0.0

    totals = prometheus.Totals()
    before = dropped()
    for total in (3, 3, 5, 1, 4):  # (at 1 the part was made again: its count starts over)
        totals.add(prometheus.PACKETS_DROPPED, total, "sip", "totals-test")
    assert dropped() - before == 5 + 3
