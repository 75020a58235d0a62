"""The speech model's inference, run on a thread of its own.

Why: the event loop's thread does all of Python's work for every call (SIP, the runners,
the media tick), and on a busy machine the kernel's fair scheduler gives each runnable
thread an equal share of a core. Every window of the speech model the loop ran itself
came out of that one share; run here, it comes out of this thread's (docs/scaling.md,
"A busy machine").

Only the event loop's thread (the main thread) hands its runs over: another thread
(the speech recognition pool's) runs the model itself, as before, and never waits
behind the calls'. The caller waits for the result: a call's verdicts come from exactly
the same computation, in the same order, as if it ran the model itself; only the thread
that runs it changes. ``onnxruntime`` releases the GIL while the model runs, so the loop's
other threads go on meanwhile. :meth:`ModelThread.start` returns at once and the
caller may do other work before :meth:`Pending.result` (the media tick runs the batched
windows of the calls that listen while it feeds the others' frames).

A thread that cannot be started (the process's limit) leaves inference on the caller's
thread, said once in the log.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Protocol

logger = logging.getLogger("callhook.media")

#: The thread's name (``top -H``, ``ps -L``).
NAME = "callhook-speech-model"


class Inference(Protocol):
    """What runs the model: ``onnxruntime.InferenceSession``'s ``run``."""

    def run(self, outputs: Any, feeds: dict[str, Any]) -> Any: ...


class Pending:
    """A run handed to the thread: :meth:`result` waits for it."""

    __slots__ = ("_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()  # released by the thread once the run is over
        self._value: Any = None
        self._error: BaseException | None = None

    def result(self) -> Any:
        """The run's outputs (waits for them; raises what the run raised)."""
        self._done.acquire()
        self._done.release()  # (a second call returns at once)
        if self._error is not None:
            raise self._error
        return self._value


class _Now(Pending):
    """A run made on the caller's thread (no model thread)."""

    def __init__(self, inference: Inference, feeds: dict[str, Any]) -> None:
        self._done = threading.Lock()
        self._error = None
        try:
            self._value = inference.run(None, feeds)
        except Exception as exc:
            self._value = None
            self._error = exc


class ModelThread:
    """One thread that runs the model for every call of the process, a run at a time."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Inference, dict[str, Any], Pending]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: False once a thread could not be started: runs stay on the caller's thread.
        self.usable = True
        #: Runs made on the thread.
        self.runs = 0

    def cpu(self) -> float:
        """The CPU seconds the thread has used (0.0 before it starts)."""
        thread = self._thread
        if thread is None or thread.ident is None:
            return 0.0
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # (it ended: it never does before the process)
            return 0.0

    def start(self, inference: Inference, feeds: dict[str, Any]) -> Pending:
        """Hand ``inference.run(None, feeds)`` to the thread; :meth:`Pending.result` waits
        for its outputs. Run on the caller's thread (done when this returns) where the
        caller is not the main thread, or there is no model thread."""
        if (
            threading.current_thread() is not threading.main_thread()
            or not self.usable
            or not self._started()
        ):
            return _Now(inference, feeds)
        pending = Pending()
        self._jobs.put((inference, feeds, pending))
        return pending

    def run(self, inference: Inference, feeds: dict[str, Any]) -> Any:
        """``inference.run(None, feeds)`` on the thread, waited for."""
        return self.start(inference, feeds).result()

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
                    logger.error(
                        "the speech model runs on the event loop's thread: %s (%s)", NAME, exc
                    )
                    return False
                self._thread = thread
        return self._thread is not None

    def _serve(self) -> None:
        # (A daemon thread: it waits for work until the process ends.)
        while True:
            inference, feeds, pending = self._jobs.get()
            try:
                pending._value = inference.run(None, feeds)
            except BaseException as exc:  # given to the caller, which raises it
                pending._error = exc
            self.runs += 1
            pending._done.release()


#: The process's model thread (started on the first run).
MODEL_THREAD = ModelThread()
