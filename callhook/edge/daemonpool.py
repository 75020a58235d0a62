"""A pool of daemon threads, for work that may never return (a hung recogniser)."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, InvalidStateError
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class DaemonPool(Executor):
    """A thread pool whose threads are daemons, so that one stuck for good can be abandoned.

    ``concurrent.futures.ThreadPoolExecutor`` joins its threads at exit: a
    recogniser that never returns would keep ``serve`` from ever stopping.
    """

    def __init__(self, workers: int, name: str) -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if self._closed:
            raise RuntimeError("the pool is shut down")
        future: Future[T] = Future()
        call = (lambda: fn(*args, **kwargs)) if kwargs else fn
        self._queue.put((future, call, () if kwargs else args))
        return future

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:
                # InvalidStateError: the supervisor already failed it (a hang that ended).
                with contextlib.suppress(InvalidStateError):
                    future.set_exception(exc)
            else:
                with contextlib.suppress(InvalidStateError):
                    future.set_result(result)

    def take_queued(self) -> list[_Job]:
        """The jobs not started yet, taken out (to run them elsewhere)."""
        jobs: list[_Job] = []
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return jobs
            if job is not None:
                jobs.append(job)

    def put(self, job: _Job) -> None:
        """Queue a job taken from another pool."""
        self._queue.put(job)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
        if cancel_futures:
            for future, _, _ in self.take_queued():
                future.cancel()
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def join(self, deadline: float) -> bool:
        """Wait until the threads have finished their work, or until ``deadline`` (on
        ``time.monotonic``); whether they all did. After :meth:`shutdown`."""
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)
