"""Writes to files done on a thread of their own, in the order they were asked for.

Why: every call's control (SIP, its runner, its pages, its log) runs on the event
loop's thread, and a write to a file, even one the page cache takes at once, is a
system call whose cost comes out of that one thread's share of the CPU (under load, tens
of microseconds a line: bench/RESULTS.md), and all of the loop waits when the disk does.
Here the loop only hands the write over; the thread makes it (Python releases the GIL
during the system call, so the loop goes on meanwhile). A busy machine's scheduler also
gives this thread a share of its own, as the speech model's (``media/modelthread.py``).

The jobs run one at a time, first asked first done, so each file's writes stay in order.
:meth:`Appender.wait` returns once every job asked for before it is done (a call's log is
complete when its call ends). A thread that cannot be started (the process's limit)
leaves the jobs on the caller's thread, said once in the log; so does a job asked for on
the thread itself.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger("callhook.store")

#: The thread's name (``top -H``, ``ps -L``).
NAME = "callhook-appends"


class Appender:
    """One thread that runs the jobs it is given (writes to files), in order."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: False once a thread could not be started: jobs run on the caller's thread.
        self.usable = True
        #: Jobs that raised (a bug: each is logged).
        self.faults = 0

    def submit(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the thread, after every job submitted before it."""
        if threading.current_thread() is self._thread or not self._started():
            self._run(job)
            return
        self._jobs.put(job)

    def wait(self) -> None:
        """Return once every job submitted before is done."""
        if threading.current_thread() is self._thread or not self._started():
            return
        done = threading.Event()
        self._jobs.put(done.set)
        done.wait()

    def _started(self) -> bool:
        if self._thread is not None:
            return True
        with self._lock:
            if self._thread is None and self.usable:
                thread = threading.Thread(target=self._serve, name=NAME, daemon=True)
                try:
                    thread.start()
                except RuntimeError as exc:  # the process may start no more threads
                    self.usable = False
                    logger.error("files are written on the event loop's thread: %s (%s)", NAME, exc)
                    return False
                self._thread = thread
        return self._thread is not None

    def _serve(self) -> None:
        # (A daemon thread: it waits for work until the process ends.)
        while True:
            self._run(self._jobs.get())

    def _run(self, job: Callable[[], object]) -> None:
        try:
            job()
        except Exception:  # a bug of the job's: the others still run
            self.faults += 1
            logger.exception("writing to a file failed")


#: The process's one appender.
APPENDER = Appender()
