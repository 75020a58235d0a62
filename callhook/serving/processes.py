"""How ``serve --workers``'s supervisor starts and stops its processes (Kamailio, the
fork server and, through it, the workers): the interpreter command, a process group of
their own, and an end within a grace."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from pathlib import Path

import callhook
from callhook.serving.forkserver import ForkedProcess

#: A worker (forked) or Kamailio (a new process).
Running = ForkedProcess | asyncio.subprocess.Process


def python_command() -> list[str]:
    """The interpreter command the fork server (and so the workers) runs ``-m callhook``
    with, so that it imports the callhook this supervisor runs: ``python -m`` puts the
    working directory first on the module path, where a checkout (or any folder named
    callhook) would shadow the installed package; ``-P`` leaves it out unless the
    supervisor's own callhook came from there."""
    here = Path(callhook.__file__).resolve().parent.parent
    return [sys.executable] if here == Path.cwd().resolve() else [sys.executable, "-P"]


def own_group() -> None:
    """In the child before exec (Kamailio, the fork server): a process group of its own,
    and SIGTERM when the supervisor dies, even by SIGKILL (Linux prctl PR_SET_PDEATHSIG),
    so no Kamailio outlives it unsupervised, nor any worker (the fork server sends each
    its farewell, SIGTERM, and ends).

    A group, not a session: where the kernel groups tasks by session for the scheduler
    (``kernel.sched_autogroup_enabled``, on in Debian's kernels), a session of its own
    made each worker a scheduling group of its own, and under a CPU hog the workers,
    Kamailio and the callers' side stalled for seconds (bench/RESULTS.md: 22 of 500 calls
    at 100 calls with two workers beside ``stress-ng --cpu 2``, 500 of 500 in the
    supervisor's session). (A worker then ignores SIGTTOU itself, serve.py: the loop's
    spawn resets the signals a child inherits.)"""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    os.setpgid(0, 0)


async def terminate(processes: list[Running | None], timeout: float) -> None:
    """SIGTERM to each of ``processes`` still running; SIGKILL to the process groups of
    those that have not ended within ``timeout``, and of all, for what they left behind."""
    running = [p for p in processes if p is not None and p.returncode is None]
    for p in running:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in running)), timeout)
    except TimeoutError:
        for p in running:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)  # each is its own process group
        await asyncio.gather(*(p.wait() for p in running))
    for p in running:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)  # anything it left behind
