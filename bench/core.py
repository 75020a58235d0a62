"""Benchmark of the call-control core: runner overhead per action, simulated calls per second.

    .venv/bin/python -m bench.core [--actions 2000] [--calls 2000] [--concurrency 200]

1. Overhead per action: one call runs a chain of ``get_number`` actions, each
   completed by one key press; each completion requests the next page from a
   real local application server in another process (so its CPU is not
   counted). Reported: the time from the page request to the start of the
   next action (HTTP round trip on loopback + validation + dispatch), and
   this process's CPU per action.
2. Simulated calls per second: the load kit's IVR call (3 s prompt, beep,
   4 digits, record until 3 s of silence, hang up: 4 page requests with the
   final page) on the virtual clock, many calls at once, pages answered
   (a) in memory (the core alone) and (b) by the application server over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bench import ivr_app
from bench.ivr_load import start_app
from callhook.actions.machine import ActionContext
from callhook.calls.calllog import CallLog
from callhook.calls.runner import CallRunner
from callhook.config.settings import AppConfig
from callhook.devtools.harness import Caller, ScriptedLeg, StaticPages
from callhook.edge.pages import HttpPages
from callhook.media.simulated import PromptTimer
from callhook.ports import Pages

TIMER = PromptTimer(files={ivr_app.PROMPT: 3.0, ivr_app.BEEP: 0.25})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ivr_caller() -> Caller:
    # The load kit's caller: digits 1 2 3 4 at 4.5-6.0 s, speech 6.5-11.3 s, then silence.
    return Caller().press("1234", at=4.5, gap=0.5).say("message", at=6.5, seconds=4.8)


def runner_for(app: AppConfig, leg: ScriptedLeg, pages: Pages, n: int) -> CallRunner:
    log = CallLog(f"bench-{n}", leg.clock)
    ctx = ActionContext(new_recording_name=lambda: f"recordings/bench-{n}.wav")
    return CallRunner(app, leg, pages, leg.clock, log, log_filename="logs/bench.log", ctx=ctx)


async def overhead_per_action(base: str, actions: int) -> dict[str, float]:
    app = AppConfig("bench", base + "/chain/start", secret="bench")
    leg = ScriptedLeg(Caller().press("5" * actions, at=1.0, gap=1.0).hang_up(at=actions + 0.5))
    pages = HttpPages()
    runner = runner_for(app, leg, pages, 0)
    latencies: list[float] = []
    requested: list[float] = []

    def listen(kind: str, text: str) -> None:
        if kind == "page_request":
            requested.append(time.perf_counter())
        elif kind == "action_start" and requested:
            latencies.append(time.perf_counter() - requested.pop())

    runner.log.listeners.append(listen)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await runner.run()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    await pages.close()
    latencies = latencies[10:]  # warm-up: connection set-up, first imports
    q = statistics.quantiles(latencies, n=100)
    return {
        "actions": len(latencies),
        "p50_ms": q[49] * 1000,
        "p99_ms": q[98] * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000,
        "cpu_ms_per_action": cpu / (len(latencies) + 10) * 1000,
        "wall_s": wall,
    }


async def calls_per_second(
    pages_for: Callable[[], Pages], base: str, calls: int, concurrency: int
) -> dict[str, float]:
    app = AppConfig("bench", base + "/ivr/start", secret="bench", final_page=base + "/ivr/final")
    pages = pages_for()
    gate = asyncio.Semaphore(concurrency)
    causes: dict[str, int] = {}

    async def one(n: int) -> None:
        async with gate:
            leg = ScriptedLeg(ivr_caller(), timer=TIMER)
            summary = await runner_for(app, leg, pages, n).run()
            key = f"{summary.cause}/{len(summary.pages)} pages"
            causes[key] = causes.get(key, 0) + 1

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(calls)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    close = getattr(pages, "close", None)
    if close is not None:
        await close()
    return {
        "calls": calls,
        "calls_per_s": calls / wall,
        "cpu_ms_per_call": cpu / calls * 1000,
        "outcomes": causes,  # type: ignore[dict-item]
    }


def run(coro: Coroutine[Any, Any, dict[str, float]]) -> dict[str, float]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--actions", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    args = parser.parse_args()
    proc, base = start_app()
    try:
        loop = "uvloop" if _has_uvloop() else "asyncio"
        print(f"python {sys.version.split()[0]}, event loop: {loop}")
        r = run(overhead_per_action(base, args.actions))
        print(
            f"overhead per action (page request -> next action start, app server over HTTP): "
            f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, mean {r['mean_ms']:.2f} ms; "
            f"runner CPU {r['cpu_ms_per_action']:.2f} ms/action ({r['actions']:.0f} actions)"
        )
        memory = run(
            calls_per_second(
                lambda: StaticPages(ivr_app.page), "http://mem", args.calls, args.concurrency
            )
        )
        print(
            f"simulated IVR calls, pages in memory: {memory['calls_per_s']:.0f} calls/s, "
            f"{memory['cpu_ms_per_call']:.2f} ms CPU/call; outcomes {memory['outcomes']}"
        )
        http = run(calls_per_second(HttpPages, base, args.calls, args.concurrency))
        print(
            f"simulated IVR calls, pages over HTTP:   {http['calls_per_s']:.0f} calls/s, "
            f"{http['cpu_ms_per_call']:.2f} ms CPU/call (callhook side); "
            f"outcomes {http['outcomes']}"
        )
    finally:
        proc.terminate()
        proc.wait()


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
