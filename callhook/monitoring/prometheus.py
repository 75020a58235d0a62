"""callhook's Prometheus metrics, and their text for ``GET /metrics``.

The families are made once, when this module is imported, on prometheus-client's
default registry (which also has the process's ``process_*`` and ``python_*``
metrics). Names and labels follow Prometheus' naming guide
(https://prometheus.io/docs/practices/naming/): a ``callhook_`` prefix, base units
(seconds), ``_total`` on counters; no label takes unbounded values (applications are
the config's names, causes Aculab's call causes; never a call id or an address).

``serve --workers N`` runs N processes: the supervisor gives each worker
:data:`MULTIPROCESS_ENV` (a folder it empties at its start), so prometheus-client keeps
every worker's samples in files there (its multiprocess mode), and whichever worker
answers ``/metrics`` adds them up: counters and histograms summed over the workers that
ever ran, gauges of live workers summed. prometheus-client reads the variable when it
is first imported: it must be in the worker's environment from its start. Its files are
:mod:`callhook.monitoring.samplefiles`'s, whose blocks are allocated before they are used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from callhook.monitoring import samplefiles

# (Before any metric below makes a value: a full disk must not kill a worker by SIGBUS.)
samplefiles.install()

#: Where the workers' samples are kept (prometheus-client's own variable).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Page requests' buckets: an application answers in milliseconds, callhook waits up to
#: its page timeout (seconds).
PAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: A recognition: tens of milliseconds (pocketsphinx, a streamed answer) to seconds.
RECOGNITION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 2.0, 5.0, 20.0)

CALLS_ACTIVE = Gauge(
    "callhook_calls_active",
    "Calls in progress, by application and direction (in, out).",
    ["application", "direction"],
    multiprocess_mode="livesum",
)
CALLS_STARTED = Counter(
    "callhook_calls_started",
    "Calls an application started to run on, by direction (in, out).",
    ["application", "direction"],
)
CALLS_ENDED = Counter(
    "callhook_calls_ended",
    "Calls ended, by application and cause (Aculab's call causes: completed, busy, ...).",
    ["application", "cause"],
)
PAGE_REQUESTS = Histogram(
    "callhook_page_request_duration_seconds",
    "Requests to an application's pages while its call waits, by outcome: ok (an answer), "
    "failed (an error, a timeout, no connection), abandoned (the call ended first).",
    ["application", "outcome"],
    buckets=PAGE_BUCKETS,
)
#: A media tick's lateness: on time is under a millisecond; 20 ms is a frame missed.
TICK_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.1, 0.25, 1.0)
MEDIA_TICK_LATENESS = Histogram(
    "callhook_media_tick_lateness_seconds",
    "How late each 20 ms media tick began (every call's audio is sent and read in it): "
    "past 20 ms, callers' frames were late.",
    buckets=TICK_BUCKETS,
)
RECOGNITIONS = Histogram(
    "callhook_speech_recognition_duration_seconds",
    "From an utterance's end to the recogniser's answer (queued, decoded), by engine and "
    "outcome: ok, failed (crashed, hung, a remote engine down).",
    ["engine", "outcome"],
    buckets=RECOGNITION_BUCKETS,
)


#: Counted when a call's media ends (its counts are the media thread's until then).
RTP_RECEIVED = Counter(
    "callhook_rtp_packets_received",
    "RTP packets received from the calls' peers (those then dropped as late or duplicate "
    "included), counted when a call's media ends.",
)
RTP_LOST = Counter(
    "callhook_rtp_packets_lost",
    "RTP packets that never came (gaps in the sequence numbers, RFC 3550 A.3), counted "
    "when a call's media ends.",
)
PACKETS_DROPPED = Counter(
    "callhook_packets_dropped",
    "Packets dropped on purpose, by protocol and cause: sip (banned, rate_limited, "
    "not_allowed, too_large, malformed); rtp (late, duplicate, other_ssrc, wrong_source, "
    "flood, malformed, srtp_failed; counted when a call's media ends).",
    ["protocol", "cause"],
)
DTMF_DIGITS = Counter(
    "callhook_dtmf_digits_received",
    "Key presses received, by how they came: rfc4733 (RTP telephone events), inband (tones "
    "in the audio), sip_info; counted when a call's media ends.",
    ["transport"],
)
SPEECH_QUEUED = Gauge(
    "callhook_speech_recognitions_queued",
    "Utterances waiting for a recogniser thread (behind other calls' decodes), by engine.",
    ["engine"],
    multiprocess_mode="livesum",
)
JOURNAL_HELD = Gauge(
    "callhook_recording_journal_held_updates",
    "Updates of the recordings journal held in memory because the state database refused "
    "them (a full disk): written, in order, once it takes them again.",
    multiprocess_mode="livesum",
)
TRUNK_STATE = Gauge(
    "callhook_trunk_state",
    "1 for each trunk's present state (registered, registering, failing, unregistered, "
    "static: a trunk that does not register), 0 for the others.",
    ["trunk", "state"],
    multiprocess_mode="livemax",
)
#: The states :data:`TRUNK_STATE` has a series for (each trunk has every one, 0 or 1).
TRUNK_STATES = ("registered", "registering", "failing", "unregistered", "static")
SIP_CONNECTIONS = Gauge(
    "callhook_sip_connections",
    "SIP connections open (to and from peers), by transport (tcp, tls).",
    ["transport"],
    multiprocess_mode="livesum",
)


class Totals:
    """Running totals that a part keeps itself (the sans-IO core's counters), added to
    a Prometheus counter as they grow: each :meth:`add` adds what is new since the last."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, tuple[str, ...]], float] = {}

    def add(self, counter: Counter, total: float, *labels: str) -> None:
        """``total`` is the part's count now; a total that went down (the part was made
        again) starts over from it, adding nothing."""
        key = (id(counter), labels)  # (one Totals serves many counters)
        seen = self._seen.get(key, 0.0)
        self._seen[key] = total
        if total > seen:
            (counter.labels(*labels) if labels else counter).inc(total - seen)


def multiprocess_folder() -> Path | None:
    """The folder of the workers' samples, in a worker of ``serve --workers N``."""
    folder = os.environ.get(MULTIPROCESS_ENV)
    return Path(folder) if folder else None


def exposition(state: Sequence[Metric] = ()) -> tuple[bytes, str]:
    """The metrics in Prometheus' text format, and its content type: this process's, or
    in a worker, every worker's; with ``state``, families read for this scrape (what the
    workers share, such as the outbox: :func:`outbox_families`)."""
    folder = multiprocess_folder()
    if folder is None:
        text = generate_latest(REGISTRY)
    else:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(folder))  # type: ignore[no-untyped-call]
        text = generate_latest(registry)
    if state:
        read = CollectorRegistry(auto_describe=False)
        read.register(_Read(state))
        text += generate_latest(read)
    return text, CONTENT_TYPE_LATEST


class _Read:
    """Families already read, as a collector."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families

    def describe(self) -> list[Metric]:
        return []


def outbox_families(pending: int, abandoned: int, oldest_due: float) -> list[Metric]:
    """The notifications' outbox (recordings' and transcriptions' notifications to the
    applications): shared by the workers, so read when scraped, not counted by each."""
    notifications = GaugeMetricFamily(
        "callhook_notifications",
        "Notifications in the outbox: pending (to be delivered, or retried), abandoned "
        "(given up after failing for too long).",
        labels=["state"],
    )
    notifications.add_metric(["pending"], pending)
    notifications.add_metric(["abandoned"], abandoned)
    oldest = GaugeMetricFamily(
        "callhook_notification_oldest_due_seconds",
        "How long the longest-waiting notification that is due has waited (0: none is due).",
        value=oldest_due,
    )
    return [notifications, oldest]


def bans_family(count: int) -> Metric:
    """Addresses banned now (failed authentications, floods), as ``/api/bans`` lists them."""
    return GaugeMetricFamily(
        "callhook_bans", "Source addresses banned now (failed authentications, floods).", count
    )


def prepare_folder(folder: Path) -> None:
    """An empty folder for the workers' samples (a new ``serve``: an earlier run's counts
    must not be added to this one's)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("*.db"), *folder.glob("*.db.new")]:  # (.new: one being made)
        old.unlink()


def worker_ended(folder: Path, pid: int) -> None:
    """A worker ended: its calls are no longer in progress (its live gauges go); what it
    counted stays in the totals."""
    multiprocess.mark_process_dead(pid, path=str(folder))  # type: ignore[no-untyped-call]
