"""The ``/metrics`` families of the parts that keep their own counts, sampled.

The SIP guard, the SIP core, the recognition threads, the recordings journal, the trunks'
registrations and the connections keep plain counters and states (the sans-IO core must not
reach for a metrics library, and the guard's hot path stays a dict increment); once a
second, :class:`Sampler` adds what their counters gained to the Prometheus counters and
sets the gauges. A scrape sees them at most a second old.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from callhook.dialplan.trunks import ELSEWHERE
from callhook.edge.connections import Connections
from callhook.edge.speechworkers import SpeechService
from callhook.monitoring import prometheus
from callhook.sip.agent import Agent
from callhook.sip.guard import Guard
from callhook.store.journal import RecordingJournal
from callhook.telephony.trunking import Trunks

logger = logging.getLogger("callhook.metrics")

#: Seconds between samples (well under Prometheus' usual scrape interval of 15 s).
SAMPLE_SECONDS = 1.0


class Sampler:
    """Reads the parts' counts into the Prometheus families (:meth:`sample`), every
    :data:`SAMPLE_SECONDS` once :meth:`start` ed."""

    def __init__(
        self,
        guard: Guard,
        agent: Callable[[], Agent | None],
        connections: Callable[[], Connections | None],
        trunks: Trunks,
        speech: Callable[[], Iterable[SpeechService]],
        journal: RecordingJournal,
    ) -> None:
        self.guard = guard
        self._agent = agent
        self._connections = connections
        self.trunks = trunks
        self._speech = speech
        self.journal = journal
        self._totals = prometheus.Totals()
        self._handle: asyncio.TimerHandle | None = None
        self._failed = False

    def sample(self, now: float) -> None:
        """Read every part now (``now``: the loop's clock, for the trunks' timers)."""
        dropped = prometheus.PACKETS_DROPPED
        for cause, count in self.guard.dropped_by.items():
            self._totals.add(dropped, count, "sip", cause)
        agent = self._agent()
        if agent is not None:
            self._totals.add(dropped, agent.malformed, "sip", "malformed")
        connections = self._connections()
        open_by = {"tcp": 0, "tls": 0}
        for target in connections.streams if connections is not None else ():
            open_by[target.transport] = open_by.get(target.transport, 0) + 1
        for transport, count in open_by.items():
            prometheus.SIP_CONNECTIONS.labels(transport).set(count)
        queued: dict[str, int] = {}
        for service in self._speech():
            if service.recogniser is not None:
                name = service.recogniser.name
                queued[name] = queued.get(name, 0) + service.queued
        for name, count in queued.items():
            prometheus.SPEECH_QUEUED.labels(name).set(count)
        prometheus.JOURNAL_HELD.set(self.journal.held_back)
        for trunk in self.trunks.status(now):
            if trunk.get(ELSEWHERE):
                continue  # the registering process tells its state
            for state in prometheus.TRUNK_STATES:
                prometheus.TRUNK_STATE.labels(trunk["name"], state).set(
                    1 if trunk["state"] == state else 0
                )

    def start(self) -> None:
        """Sample now and every :data:`SAMPLE_SECONDS` until :meth:`stop`."""
        loop = asyncio.get_running_loop()
        try:
            self.sample(loop.time())
        except Exception:  # a bug: /metrics goes stale, the calls go on
            if not self._failed:
                self._failed = True
                logger.exception("/metrics: sampling failed (logged once)")
        self._handle = loop.call_later(SAMPLE_SECONDS, self.start)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
