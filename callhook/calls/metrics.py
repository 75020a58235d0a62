"""Counters of a running server, for operators and benchmarks (``GET /api/stats``, and
the call families of ``GET /metrics``: :mod:`callhook.monitoring.prometheus`)."""

from __future__ import annotations

import gc
import statistics
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from callhook.calls.runner import CallSummary
from callhook.monitoring import prometheus

#: Page latencies kept for the percentiles (the most recent ones).
SAMPLES = 20_000


@dataclass
class Metrics:
    """What happened so far: calls by cause, page latency, media tick lateness."""

    calls: Counter[str] = field(default_factory=Counter)
    active: int = 0
    page_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    page_errors: int = 0
    gc_pauses: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=2000))
    #: While True, the collector's passes are not counted (start-up's own, before calls).
    gc_quiet: bool = False
    _gc_started: float = 0.0
    #: The collector's passes so far and the seconds they took, every generation's.
    gc_passes: int = 0
    gc_seconds: float = 0.0

    def watch_gc(self) -> None:
        """Time the collector's pauses (they stop every call's audio while they run)."""

        def callback(phase: str, info: dict[str, int]) -> None:
            if self.gc_quiet:
                return
            if phase == "start":
                self._gc_started = time.perf_counter()
            else:
                took = time.perf_counter() - self._gc_started
                self.gc_pauses.append((info["generation"], took * 1000))
                self.gc_passes += 1
                self.gc_seconds += took

        gc.callbacks.append(callback)

    def call_started(self, application: str, direction: str) -> None:
        self.active += 1
        prometheus.CALLS_STARTED.labels(application, direction).inc()
        prometheus.CALLS_ACTIVE.labels(application, direction).inc()

    def call_ended(self, application: str, direction: str, summary: CallSummary) -> None:
        self.active -= 1
        self.calls[summary.cause] += 1
        prometheus.CALLS_ACTIVE.labels(application, direction).dec()
        prometheus.CALLS_ENDED.labels(application, summary.cause).inc()
        self.page_seconds.extend(summary.page_seconds)
        self.page_errors += len(summary.errors)

    def snapshot(self, **extra: Any) -> dict[str, Any]:
        pages = sorted(self.page_seconds)
        latency: dict[str, float] = {}
        if len(pages) >= 2:
            # Inclusive: within what was measured (the default extrapolates: with a few
            # samples the "p99" came out above the max).
            q = statistics.quantiles(pages, n=100, method="inclusive")
            latency = {"p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "max_ms": pages[-1] * 1000}
        gc_stats = {}
        for generation in (0, 1, 2):
            pauses = [p for g, p in self.gc_pauses if g == generation]
            if pauses:
                gc_stats[f"gen{generation}"] = {"count": len(pauses), "max_ms": max(pauses)}
        return {
            "gc_pauses": gc_stats,
            "gc_passes": self.gc_passes,
            "gc_seconds": self.gc_seconds,
            "calls_active": self.active,
            "calls_ended": dict(self.calls),
            "page_requests": len(pages),
            "page_latency": latency,
            "call_errors": self.page_errors,
            **extra,
        }
