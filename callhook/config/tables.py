"""The config file's tables, one small typed object each (``[sip]`` is :class:`SipSettings`).

:class:`~callhook.config.settings.Settings` holds one of each; a part is handed the
table it uses (the guard gets ``[security]``, the egress policy ``[egress]``), not the
whole. Their defaults are the embedded defaults ``serve`` runs on; the keys, their
ranges and what each does are in docs/configuration.md, and the loader that checks
them in :mod:`callhook.config.settings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from callhook.config.speechengines import RemoteEngine
from callhook.dialplan.outbound import MAX_CALLS_PER_APP
from callhook.sip.front import Front
from callhook.sip.guard import PRIVATE


@dataclass
class HttpSettings:
    """``[http]``: the REST API, the demo application and the web phone."""

    host: str = "127.0.0.1"
    port: int = 8080
    #: The largest media file the REST API takes.
    max_upload_bytes: int = 50 * 2**20


@dataclass
class SipSettings:
    """``[sip]``: where SIP listens, RTP ports, the call limits and the TLS files."""

    host: str = "0.0.0.0"
    port: int = 5060
    #: TCP listener port: None is "the UDP port", 0 none.
    tcp_port: int | None = None
    #: TLS listener port (when a certificate is set): 0 none.
    tls_port: int = 5061
    tls_certificate: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    rtp_ports: tuple[int, int] = (20000, 29999)
    shutdown_grace: float = 30.0
    rtp_timeout: float = 30.0
    external_address: str | None = None
    #: ``domains``: names (and addresses) phones know callhook by besides its own
    #: address; an INVITE from one of them (its From host) is challenged as a user's.
    domains: tuple[str, ...] = ()
    max_calls: int = 500
    #: SIP proxies in front of callhook (Kamailio): trusted like trunks.
    proxies: tuple[str, ...] = ()


@dataclass
class WorkersSettings:
    """``[workers]``: ``serve``'s worker processes behind Kamailio, and what a worker is told.

    ``count`` None: one per core when it can (``callhook.serving.workerplan.workers_for``);
    ``first_port`` None: the first free run of ports from the SIP port + 40.
    """

    count: int | None = None
    first_port: int | None = None
    #: Not config keys: set by ``serve --workers`` for each worker (docs/scaling.md): the
    #: proxy in front (``sip/front.py``); whether it is worker 0 (trunks, REGISTERs).
    front: Front | None = None
    lead: bool = True
    #: And its index (None: not a worker).
    index: int | None = None


@dataclass
class DatabaseSettings:
    """``[database]``: PostgreSQL shared by nodes (``url`` None: ``<data_dir>/state.sqlite3``)."""

    url: str | None = None
    node_timeout: float = 30.0
    node_address: str = "127.0.0.1"
    node_port: int = 0


#: The default confidence floor (``[speech] min_confidence``): none. What a confidence
#: means is each engine's and language's own (the embedded English model's suggested floor,
#: from ``bench.asr``'s table of floors, is in docs/speech.md).
MIN_CONFIDENCE = 0.0


@dataclass
class SpeechSettings:
    """``[speech]``: the default voice, the recogniser and its model, their threads."""

    voice: str = "piper:joe"
    recogniser: str = "whisper"
    model: str = "tiny.en"
    workers: int = 2
    preload: bool = True
    #: An answer to word hints less sure than this is not understood: the caller is asked
    #: again (docs/speech.md, "The confidence floor").
    min_confidence: float = MIN_CONFIDENCE
    #: ``[speech.engines.NAME]``: remote engines.
    engines: dict[str, RemoteEngine] = field(default_factory=dict)


@dataclass
class SecuritySettings:
    """``[security]``: who may send SIP requests, what others get, the flood limits."""

    allow: tuple[str, ...] = PRIVATE
    unknown: str = "drop"
    rate: float = 20.0
    ban_seconds: float = 600.0
    #: Larger SIP messages are refused (dropped over UDP, 413 and closed over TCP/TLS).
    max_message_bytes: int = 8192
    #: The digest algorithms ``[users]`` phones are challenged with, most preferred first.
    digest_algorithms: tuple[str, ...] = ("MD5",)


@dataclass
class OutboundSettings:
    """``[outbound]``: the destinations outbound calls may reach, the calls per application."""

    allow: tuple[str, ...] = ()
    max_calls_per_app: int = MAX_CALLS_PER_APP


@dataclass
class EgressSettings:
    """``[egress]``: what page, media and notification fetches may reach, and their limits."""

    allow_private: bool = False
    #: ``endpoints``: private endpoints (host:port) trusted as the applications' are.
    endpoints: tuple[str, ...] = ()
    max_response_bytes: int = 5 * 2**20
    max_redirects: int = 3


@dataclass
class RecordingsSettings:
    """``[recordings]``: a recording stops at ``max_bytes`` (reason ``filesize``); no
    recording begins, and no upload is kept, while its disk has less than
    ``min_free_bytes`` free (0: no floor)."""

    max_bytes: int = 64 * 2**20
    #: (As much as one recording may take: one begun with this free fills no disk.)
    min_free_bytes: int = 64 * 2**20


@dataclass(frozen=True)
class TracingSettings:
    """``[tracing]``: one OpenTelemetry trace per call, to the OTLP/HTTP ``endpoint``
    (None: off), as ``service_name`` (callhook.monitoring.tracing)."""

    endpoint: str | None = None
    service_name: str = "callhook"


@dataclass(frozen=True)
class RetentionSettings:
    """``[retention]`` (and an application's ``[apps.NAME.retention]``): days each kind is
    kept before it is deleted, 0 for ever (callhook.store.retention)."""

    call_logs_days: float = 0.0
    recordings_days: float = 0.0
    call_records_days: float = 0.0
    notifications_days: float = 0.0


@dataclass
class MediaSettings:
    """``[media]``: ``file_to_play`` given as a web page request; the media thread and
    the admission it guards (docs/scaling.md)."""

    remote_max_bytes: int = 16 * 2**20
    remote_timeout: float = 10.0
    #: Every call's RTP on a native thread of its own (False: on the event loop's timer).
    thread: bool = True
    #: New calls get 503 while the media tick runs this far behind (seconds; 0: never).
    max_lag: float = 0.06
    #: SCHED_FIFO priority for the media thread (1-99; 0: the normal scheduler).
    thread_fifo: int = 0
    #: Nice level for the media thread (-20 to 19; 0: the process's).
    thread_nice: int = 0
    #: The media thread takes the usual packets of calls whose voice detector runs no model.
    thread_receive: bool = True


@dataclass
class ConferenceSettings:
    """``[conference]``: the rooms' size and who is mixed (docs/behaviour.md "Conferences")."""

    #: The most participants in a room (Aculab's unreserved rooms: 40).
    max_participants: int = 40
    #: A talker quieter than this (dBov) is left out of the mix, so line noise does not
    #: add up over many participants.
    talker_dbov: float = -45.0
    #: How long a talker stays in the mix after it falls below that (seconds).
    talker_hangover: float = 0.3


@dataclass
class NotificationsSettings:
    """``[notifications]``: the retries of ``recording_available_page`` and its kin."""

    first_retry: float = 2.0
    max_retry: float = 600.0
    give_up_after: float = 86400.0


@dataclass
class TrunkCredentials:
    """``[trunk]``, the older form: credentials for challenged outbound calls."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
