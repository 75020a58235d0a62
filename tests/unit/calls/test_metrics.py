"""The server's counters (``GET /api/stats``): page latency quantiles stay within what was
measured, however few the samples."""

from __future__ import annotations

import pytest

from callhook.calls.metrics import Metrics
from callhook.calls.runner import CallSummary


@pytest.mark.parametrize("count", [2, 3, 10, 99, 1000])
def test_page_latency_p50_and_p99_never_exceed_the_max(count: int) -> None:
    metrics = Metrics()
    seconds = [0.001 * (1 + i % 7) + (0.5 if i == count - 1 else 0.0) for i in range(count)]
    metrics.call_started("app", "in")
    metrics.call_ended("app", "in", CallSummary("i", "completed", page_seconds=seconds))
    latency = metrics.snapshot()["page_latency"]
    assert latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"], latency
    assert latency["max_ms"] == pytest.approx(max(seconds) * 1000)
    assert latency["p50_ms"] >= min(seconds) * 1000
