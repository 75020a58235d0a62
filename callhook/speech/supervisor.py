"""Watching the speech recogniser: a deadline on every decode, restarts after faults (sans-IO).

A recogniser is a library running on a worker thread (``edge/speechworkers.py``);
it can raise (a crash: its state is then not to be trusted) or never return
(a hang: the thread is lost). Neither may hold up a call: the ``get_input``
that waits for the utterance gets "nothing recognised" with the cause
(issue 14, docs/behaviour.md "Faults"), the call goes on, and the engine is
replaced by a fresh instance on fresh threads.

:class:`RecogniserSupervisor` decides, given the time, without any IO:

* each decode that *started running* (time queued behind other calls' decodes
  does not count) has a deadline of :attr:`~RecogniserSupervisor.base_timeout`
  plus :attr:`~RecogniserSupervisor.per_audio_second` per second of audio (a
  Whisper tiny decode takes a small fraction of its audio's length on one core),
  or the engine's own timeout plus that base where it has one and it is longer
  (a remote engine gives up by itself: a slow server is its timeout's to judge);
* the time the machine's tasks waited for a CPU meanwhile (its CPU pressure, as
  the caller measures it) is added, up to :attr:`~RecogniserSupervisor.max_stall`:
  a decode starved by an overloaded machine is slow, not hung, and restarting
  the engine would only load its model again on the busy CPU;
* a fault is answered with a restart at once, but more than
  :attr:`~RecogniserSupervisor.free_restarts` faults within
  :attr:`~RecogniserSupervisor.window` seconds (an engine that breaks again at
  once) wait 2, 4, 8 ... up to :attr:`~RecogniserSupervisor.max_backoff` seconds
  before the next one, so a broken installation does not spend its CPU loading
  models; meanwhile utterances are "nothing recognised" at once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RecogniserSupervisor:
    """Deadlines of running decodes, and when to restart the engine (see the module doc)."""

    base_timeout: float = 5.0
    per_audio_second: float = 2.0
    #: The most waiting for the CPU added to a decode's deadline (seconds).
    max_stall: float = 30.0
    window: float = 60.0
    free_restarts: int = 3
    max_backoff: float = 60.0
    #: Running decodes: job id -> its deadline, and the CPU stall figure at its start.
    _running: dict[int, tuple[float, float]] = field(default_factory=dict)
    _faults: deque[float] = field(default_factory=deque)
    #: The engine is down (being restarted, or waiting to be) until this time.
    down_until: float | None = None

    def started(
        self,
        job: int,
        now: float,
        audio_seconds: float,
        *,
        engine_timeout: float = 0.0,
        stall: float = 0.0,
    ) -> float:
        """Decode ``job`` began running at ``now``; returns its deadline before any stall.

        ``engine_timeout``: the engine's own limit on an answer (0: none); ``stall``: the
        machine's cumulative seconds of waiting for a CPU, read now (any monotonic figure:
        only its growth counts)."""
        allowed = self.base_timeout + self.per_audio_second * audio_seconds
        # (An engine's own timeout bounds its wait for an answer; the rest of its work,
        # sending the audio and reading the result, has base_timeout more.)
        deadline = now + max(allowed, engine_timeout + self.base_timeout)
        self._running[job] = (deadline, stall)
        return deadline

    def _due(self, job: int, stall: float) -> float:
        deadline, since = self._running[job]
        return deadline + min(self.max_stall, max(0.0, stall - since))

    def finished(self, job: int) -> None:
        """Decode ``job`` returned or raised (whichever: it no longer runs)."""
        self._running.pop(job, None)

    @property
    def running(self) -> list[int]:
        """The decodes running now."""
        return list(self._running)

    def next_deadline(self, stall: float = 0.0) -> float | None:
        """The earliest deadline of a running decode, with the stall so far (``stall``: the
        figure read now); None: nothing runs."""
        return min((self._due(job, stall) for job in self._running), default=None)

    def expired(self, now: float, stall: float = 0.0) -> list[int]:
        """The decodes past their deadline at ``now`` (``stall``: the figure read now):
        hung (they are forgotten here)."""
        late = [job for job in self._running if self._due(job, stall) <= now]
        for job in late:
            del self._running[job]
        return late

    def fault(self, now: float) -> float:
        """The engine crashed or hung at ``now``: returns when to restart it (>= now).

        Every running decode belongs to the engine being replaced: they are forgotten.
        """
        self._running.clear()
        while self._faults and now - self._faults[0] >= self.window:
            self._faults.popleft()
        self._faults.append(now)
        extra = len(self._faults) - self.free_restarts
        wait = 0.0 if extra <= 0 else min(self.max_backoff, 2.0**extra)
        self.down_until = now + wait
        return now + wait

    def restarted(self) -> None:
        """A fresh engine is in place."""
        self.down_until = None

    def available(self, now: float) -> bool:
        """Whether utterances go to the engine (False while it waits to be restarted)."""
        return self.down_until is None or now >= self.down_until
