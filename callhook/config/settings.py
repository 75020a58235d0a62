"""Settings: the applications callhook runs and how it serves them.

A config file is TOML::

    data_dir = "data"
    page_timeout = 10.0

    [http]                              # the REST API, demo app and web phone
    host = "127.0.0.1"
    port = 8080
    max_upload_mb = 50                  # largest media file the REST API takes

    [sip]
    host = "0.0.0.0"                    # all interfaces, so phones on the LAN can call
    port = 5060                         # UDP
    tcp_port = 5060                     # default: the UDP port; 0: no TCP listener
    tls_port = 5061                     # TLS listener when a certificate is set; 0: none
    tls_certificate = "cert.pem"        # PEM chain (the key in it, or in tls_key)
    tls_key = "key.pem"
    tls_ca = "ca.pem"                   # CAs TLS peers are checked against (default: the system's)
    rtp_ports = [20000, 29999]          # even ports for RTP, one per call
    shutdown_grace = 30                 # seconds running calls may go on after SIGTERM
    rtp_timeout = 30                    # seconds without RTP before a call is hung up (0: never)
    external_address = "203.0.113.7"    # behind NAT: the public address for Contact, Via, SDP
    domains = ["pbx.example.com"]       # other names phones know callhook by ([users]' domain)
    max_calls = 500                     # calls at once; more get 503 (0: no limit)
    proxies = ["10.0.0.5"]              # SIP proxies in front of callhook: trusted (no rate limit)

    [workers]                           # serve --workers: every core (docs/scaling.md)
    count = 4                           # worker processes; "auto" (default): one per core
    first_port = 5100                   # worker i: SIP on first_port + i (default: free ones)

    [security]                          # docs/security.md
    allow = ["127.0.0.0/8", "10.0.0.0/8", "192.168.0.0/16"]  # who may call in (+ trunks)
    unknown = "drop"                    # drop | reject (403): what other sources get
    rate = 20                           # SIP messages a second per source before a ban
    ban_seconds = 600                   # how long a ban lasts
    max_message_bytes = 8192            # larger SIP messages: dropped (UDP), 413 (TCP/TLS)
    digest_algorithms = ["MD5"]         # what [users] phones are challenged with: MD5, SHA-256

    [outbound]                          # toll fraud (docs/security.md)
    allow = ["sip:*@192.168.1.*", "+44"]  # what dial and the API may call (sip: globs, number
                                        # prefixes, "*"); empty: only this installation's numbers
    max_calls_per_app = 10              # outbound calls at once per application

    [egress]                            # URLs callhook fetches: pages, file_to_play, notifications
    allow_private = false               # private/loopback endpoints besides the applications' own
    endpoints = ["127.0.0.1:8765"]      # private endpoints trusted as well (a voice agent)
    max_response_mb = 5                 # largest page body
    max_redirects = 3

    [speech]
    voice = "piper:joe"                 # default TTS voice (engine:voice); "espeak:en-us" is light
    recogniser = "whisper"              # whisper | sphinx | none (digits only) | a remote engine
    model = "tiny.en"                   # tiny.en | base | small | tiny.en+base (docs/speech.md)
    workers = 2                         # threads for synthesis, and as many for recognition
    preload = true                      # load the models at start-up, not on the first call

    [speech.engines.farm]               # a remote engine (docs/speech.md, "Remote engines")
    protocol = "wyoming"                # wyoming-faster-whisper, wyoming-piper, ...
    uri = "tcp://10.0.0.5:10300"        # or unix:///run/wyoming.sock
    timeout = 5                         # seconds for each connect, send and read
    languages = ["en"]                  # what it recognises
    voices = ["en_US-amy-medium"]       # its voices (asked of the server when left out)

    [recordings]
    max_mb = 64                         # a recording stops at this size (reason filesize)
    min_free_mb = 64                    # no recording nor upload begins with less free (0: none)

    [retention]                         # days kept, then deleted; 0: for ever (docs/retention.md)
    call_logs_days = 90                 # logs/*.log (what callers pressed and said)
    recordings_days = 30                # recordings/* (never while a notification is due)
    call_records_days = 400             # GET /api/v1/calls/records
    notifications_days = 30             # notifications given up on (their results)

    [tracing]                           # one OpenTelemetry trace per call (docs/monitoring.md)
    endpoint = "http://127.0.0.1:4318/v1/traces"  # OTLP/HTTP; absent: off
    service_name = "callhook"

    [media]                             # file_to_play given as a web page request
    remote_max_mb = 16                  # a larger WAV is not played (logged)
    remote_timeout = 10                 # seconds a fetch may take
    thread = true                       # every call's RTP on a native thread (false: the loop)
    max_lag_ms = 60                     # new calls get 503 while the media runs this far behind
    thread_fifo = 0                     # SCHED_FIFO priority for the media thread (0: off)
    thread_nice = 0                     # nice level for the media thread (0: the process's)
    thread_receive = true               # the thread takes calls' usual packets itself

    [database]                          # shared state for several nodes (docs/scaling.md)
    url = "postgresql://callhook@db.example.com/callhook"  # default: SQLite in data_dir
    node_timeout = 30                   # seconds a silent node has before others take over
    node_address = "10.0.0.5"           # where other nodes reach this one's calls (private API)

    [conference]                        # connect_to_conference's rooms (docs/conferences.md)
    max_participants = 40               # the most in a room; one more is refused (busy)
    talker_dbov = -45                   # a talker quieter than this is left out of the mix
    talker_hangover_ms = 300            # ... after this long below it

    [notifications]                     # recording_available_page (docs/recordings.md)
    first_retry = 2                     # seconds before the first retry; doubles each time
    max_retry = 600                     # the longest wait between two tries
    give_up_after = 86400               # seconds; then the notification is abandoned

    [trunks.provider]                   # a SIP provider or PBX (docs/trunks.md)
    registrar = "sip.provider.example"  # host[:port]; absent: no registration
    transport = "udp"                   # udp | tcp | tls
    username = "me"
    password = "secret"
    caller_id = "+441234567890"         # From user of outbound calls through it
    srtp = "off"                        # off | offer | require
    addresses = ["198.51.100.0/24"]     # other addresses its calls come from

    [trunk]                             # the older form: credentials for challenged outbound calls
    username = "me"
    password = "secret"

    [apps.support]                      # calls to sip:support@... run this app
    first_page = "https://example.com/ivr/start"
    error_page = "https://example.com/ivr/error"     # optional
    final_page = "https://example.com/ivr/final"     # optional
    secret = "a long random string"                  # signs page requests
    api_key = "another long random string"           # its REST API key (docs/api.md)
    application_parameters = "anything"              # passed in this_call
    numbers = ["+441234567890"]                      # dialled numbers that run this app

    default_app = "support"             # calls to any other user run this app

    [users.alice]                       # a phone that registers with callhook (docs/behaviour.md)
    password = "a long random string"   # its digest password (at least 8 characters)
    app = "support"                     # optional: the application its calls run

With no config the built-in demo application is the default app.
"""

from __future__ import annotations

import ssl
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from callhook.config.apps import API_KEY_MIN as API_KEY_MIN
from callhook.config.apps import AppConfig as AppConfig
from callhook.config.apps import UserConfig as UserConfig
from callhook.config.apps import applications, users
from callhook.config.apps import check_api_key as check_api_key
from callhook.config.retention import retention
from callhook.config.secret import data_secret as data_secret
from callhook.config.speechengines import speech_engines
from callhook.config.tables import (
    MIN_CONFIDENCE,
    ConferenceSettings,
    DatabaseSettings,
    EgressSettings,
    HttpSettings,
    MediaSettings,
    NotificationsSettings,
    OutboundSettings,
    RecordingsSettings,
    RetentionSettings,
    SecuritySettings,
    SipSettings,
    SpeechSettings,
    TracingSettings,
    TrunkCredentials,
    WorkersSettings,
)
from callhook.config.tls import client_context, server_context
from callhook.config.values import ConfigError as ConfigError
from callhook.config.values import conference as _conference
from callhook.config.values import confidence as _confidence
from callhook.config.values import database as _database
from callhook.config.values import domains as _domains
from callhook.config.values import endpoints as _endpoints
from callhook.config.values import flag as _flag
from callhook.config.values import integer as _integer
from callhook.config.values import ip_address as _ip_address
from callhook.config.values import media_thread as _media_thread
from callhook.config.values import network_list as _network_list
from callhook.config.values import no_unknown as _no_unknown
from callhook.config.values import number as _number
from callhook.config.values import port as _port
from callhook.config.values import speech as _speech
from callhook.config.values import table as _table
from callhook.config.values import text as _text
from callhook.config.values import workers as _workers
from callhook.dialplan import trunks
from callhook.dialplan.numbers import app_for_number
from callhook.dialplan.outbound import MAX_CALLS_PER_APP, PatternError, check_pattern
from callhook.dialplan.trunks import Trunk
from callhook.sip.guard import networks
from callhook.speech.models import MODELS

#: Whisper's models ([speech] model): tiny.en, base, small (callhook/speech/models.py),
#: and "fast+large" cascades of two (callhook/speech/cascade.py).
SPEECH_MODELS = (*MODELS, "tiny.en+base", "tiny.en+small")
#: The speech recognisers callhook has (``none``: get_input takes digits only).
RECOGNISERS = ("whisper", "sphinx", "none")


@dataclass
class Settings:
    """Everything the composition root needs: the top-level keys, and one object per table."""

    data_dir: Path = Path("data")
    page_timeout: float = 10.0
    http: HttpSettings = field(default_factory=HttpSettings)
    sip: SipSettings = field(default_factory=SipSettings)
    workers: WorkersSettings = field(default_factory=WorkersSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    speech: SpeechSettings = field(default_factory=SpeechSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    outbound: OutboundSettings = field(default_factory=OutboundSettings)
    egress: EgressSettings = field(default_factory=EgressSettings)
    recordings: RecordingsSettings = field(default_factory=RecordingsSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    tracing: TracingSettings = field(default_factory=TracingSettings)
    media: MediaSettings = field(default_factory=MediaSettings)
    notifications: NotificationsSettings = field(default_factory=NotificationsSettings)
    conference: ConferenceSettings = field(default_factory=ConferenceSettings)
    trunk: TrunkCredentials = field(default_factory=TrunkCredentials)
    #: ``[trunks.NAME]`` (and ``[trunk]`` as ``trunk``), by name.
    trunks: dict[str, Trunk] = field(default_factory=dict)
    apps: dict[str, AppConfig] = field(default_factory=dict)
    default_app: str | None = None
    #: Dialled numbers (canonical, :mod:`callhook.dialplan.numbers`) and the application of each.
    numbers: dict[str, str] = field(default_factory=dict)
    #: ``[users.NAME]``: the phones callhook is the registrar of, by user name.
    users: dict[str, UserConfig] = field(default_factory=dict)

    def retention_of(self, app: str) -> RetentionSettings:
        """How long application ``app``'s things are kept: its own ``[apps.NAME.retention]``,
        else ``[retention]`` (an application no longer configured, the demo: that too)."""
        config = self.apps.get(app)
        own = config.retention if config is not None else None
        return own if own is not None else self.retention

    def app_for(self, user: str, to_user: str = "") -> AppConfig | None:
        """The application for a call to ``user`` (the request-URI's user part).

        An application of that name; else the one whose ``numbers`` has the dialled
        number, from the request-URI user, else from the To user (``to_user``); else
        the default application.
        """
        app = self.apps.get(user)
        if app is None:
            name = app_for_number(self.numbers, user, to_user)
            app = self.apps.get(name) if name is not None else None
        if app is None and self.default_app is not None:
            app = self.apps.get(self.default_app)
        return app


@dataclass(frozen=True)
class Serve:
    """A running ``callhook serve`` to call over SIP (``callhook test --sip HOST:PORT``): its
    SIP address, its web server's base URL and its installation secret (which reads its
    calls' logs)."""

    sip: tuple[str, int]
    http: str
    secret: str = field(repr=False)


def _transports(path: Path, sip: dict[str, Any], settings: Settings) -> None:
    """``[sip]`` tcp_port, tls_port and the TLS files, checked (the files are read once
    here so that a bad certificate is a config error, not a failure on the first call)."""
    if "tcp_port" in sip:
        settings.sip.tcp_port = _port(path, "tcp_port", sip["tcp_port"])
    if "tls_port" in sip:
        settings.sip.tls_port = _port(path, "tls_port", sip["tls_port"])
    for key in ("tls_certificate", "tls_key", "tls_ca"):
        if key in sip:
            file = Path(_text(path, "sip", key, sip, ""))
            if not file.is_file():
                raise ConfigError(f"{path}: [sip] {key}: no such file {file}")
            setattr(settings.sip, key, file)
    if settings.sip.tls_key is not None and settings.sip.tls_certificate is None:
        raise ConfigError(f"{path}: [sip] tls_key needs tls_certificate")
    try:
        if settings.sip.tls_certificate is not None:
            server_context(settings.sip.tls_certificate, settings.sip.tls_key)
        if settings.sip.tls_ca is not None:
            client_context(settings.sip.tls_ca)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"{path}: [sip] TLS files unusable: {exc}") from None


def _security(path: Path, values: dict[str, Any], settings: Settings) -> None:
    """``[security]``: allow (CIDR blocks), unknown (drop | reject), rate, ban_seconds."""
    _no_unknown(
        path,
        "security",
        values,
        {"allow", "unknown", "rate", "ban_seconds", "max_message_bytes", "digest_algorithms"},
    )
    if "digest_algorithms" in values:
        algorithms = values["digest_algorithms"]
        known = ("MD5", "SHA-256")
        if (
            not isinstance(algorithms, list)
            or not algorithms
            or not all(isinstance(a, str) and a.upper() in known for a in algorithms)
            or len({a.upper() for a in algorithms}) != len(algorithms)
        ):
            raise ConfigError(
                f"{path}: [security] digest_algorithms must list MD5 and/or SHA-256 "
                "(most preferred first), each once"
            )
        settings.security.digest_algorithms = tuple(a.upper() for a in algorithms)
    if "allow" in values:
        allow = values["allow"]
        if not isinstance(allow, list):
            raise ConfigError(f"{path}: [security] allow must be a list of CIDR blocks")
        try:
            networks(allow)
        except ValueError as exc:
            raise ConfigError(f"{path}: [security] allow: {exc}") from None
        settings.security.allow = tuple(str(a) for a in allow)
    settings.security.unknown = _text(path, "security", "unknown", values, "drop")
    if settings.security.unknown not in ("drop", "reject"):
        raise ConfigError(f"{path}: [security] unknown must be drop or reject")
    settings.security.rate = _number(path, "security", "rate", values, 20)
    settings.security.ban_seconds = _number(path, "security", "ban_seconds", values, 600)
    if not 1 <= settings.security.rate <= 100000:
        raise ConfigError(f"{path}: [security] rate must be 1 to 100000 messages a second")
    settings.security.max_message_bytes = _integer(
        path, "security", "max_message_bytes", values, 8192
    )
    if not 1300 <= settings.security.max_message_bytes <= 65536:
        raise ConfigError(f"{path}: [security] max_message_bytes must be 1300 to 65536")
    if not 0 < settings.security.ban_seconds <= 86400 * 7:
        raise ConfigError(f"{path}: [security] ban_seconds must be above 0 and at most a week")


def _outbound(path: Path, values: dict[str, Any], settings: Settings) -> None:
    """``[outbound]``: allow (sip: URI globs, number prefixes, "*"), max_calls_per_app."""
    _no_unknown(path, "outbound", values, {"allow", "max_calls_per_app"})
    allow = values.get("allow", [])
    if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
        raise ConfigError(f"{path}: [outbound] allow must be a list of strings")
    for pattern in allow:
        try:
            check_pattern(pattern)
        except PatternError as exc:
            raise ConfigError(f"{path}: [outbound] allow: {exc}") from None
    settings.outbound.allow = tuple(allow)
    limit = values.get("max_calls_per_app", MAX_CALLS_PER_APP)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100000:
        raise ConfigError(f"{path}: [outbound] max_calls_per_app must be 1 to 100000")
    settings.outbound.max_calls_per_app = limit


def _egress(path: Path, values: dict[str, Any], settings: Settings) -> None:
    """``[egress]``: allow_private, endpoints, max_response_mb, max_redirects."""
    known = {"allow_private", "endpoints", "max_response_mb", "max_redirects"}
    _no_unknown(path, "egress", values, known)
    private = values.get("allow_private", False)
    if not isinstance(private, bool):
        raise ConfigError(f"{path}: [egress] allow_private must be true or false")
    settings.egress.allow_private = private
    settings.egress.endpoints = _endpoints(path, "egress", "endpoints", values)
    if "max_response_mb" in values:
        settings.egress.max_response_bytes = _megabytes(path, "egress", "max_response_mb", values)
    redirects = values.get("max_redirects", 3)
    if not isinstance(redirects, int) or isinstance(redirects, bool) or not 0 <= redirects <= 20:
        raise ConfigError(f"{path}: [egress] max_redirects must be 0 to 20")
    settings.egress.max_redirects = redirects


def _tracing(path: Path, values: dict[str, Any]) -> TracingSettings:
    _no_unknown(path, "tracing", values, {"endpoint", "service_name"})
    endpoint = _text(path, "tracing", "endpoint", values, "") or None
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(
            f"{path}: [tracing] endpoint must be an OTLP/HTTP URL (http:// or https://, "
            f"e.g. http://127.0.0.1:4318/v1/traces), got {endpoint!r}"
        )
    service_name = _text(path, "tracing", "service_name", values, "callhook")
    if not service_name:
        raise ConfigError(f"{path}: [tracing] service_name must not be empty")
    return TracingSettings(endpoint, service_name)


def _megabytes(path: Path, table: str, key: str, values: dict[str, Any]) -> int:
    """A size given in MiB (above 0, at most 4096), in bytes."""
    mb = _number(path, table, key, values, 0)
    if not 0 < mb <= 4096:
        raise ConfigError(f"{path}: [{table}] {key} must be above 0 and at most 4096")
    return int(mb * 2**20)


#: What a config file may hold at its top level (a typo is an error, not ignored).
_TOP_LEVEL = frozenset(
    {
        "data_dir", "page_timeout", "default_app", "http", "sip", "workers", "database",
        "speech", "security", "outbound", "egress", "recordings", "retention", "media",
        "notifications", "conference", "trunk", "trunks", "apps", "users", "tracing",
    }
)  # fmt: skip
_SIP_KEYS = frozenset(
    {
        "host", "port", "rtp_ports", "rtp_timeout", "external_address", "domains",
        "max_calls", "proxies", "shutdown_grace", "tcp_port", "tls_port", "tls_certificate",
        "tls_key", "tls_ca",
    }
)  # fmt: skip


def load(path: Path) -> Settings:
    """Read a TOML config file; raises :class:`ConfigError` naming the problem."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (TOML is UTF-8): {exc.reason}") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    unknown = set(raw) - _TOP_LEVEL
    if unknown:
        raise ConfigError(f"{path}: unknown keys or tables: {', '.join(sorted(unknown))}")
    settings = Settings()
    settings.data_dir = Path(_text(path, "", "data_dir", raw, "data"))
    settings.page_timeout = _number(path, "", "page_timeout", raw, 10.0)
    if not 0 < settings.page_timeout <= 600:
        raise ConfigError(f"{path}: page_timeout must be above 0 and at most 600 seconds")
    http = _table(path, raw, "http")
    _no_unknown(path, "http", http, {"host", "port", "max_upload_mb"})
    settings.http.host = _text(path, "http", "host", http, settings.http.host)
    settings.http.port = _integer(path, "http", "port", http, settings.http.port)
    if not 0 <= settings.http.port <= 65535:
        raise ConfigError(f"{path}: [http] port must be a port number")
    if "max_upload_mb" in http:
        settings.http.max_upload_bytes = _megabytes(path, "http", "max_upload_mb", http)
    sip = _table(path, raw, "sip")
    _no_unknown(path, "sip", sip, set(_SIP_KEYS))
    settings.sip.host = _text(path, "sip", "host", sip, settings.sip.host)
    settings.sip.port = _port(path, "port", sip.get("port", settings.sip.port))
    if "rtp_ports" in sip:
        ports = sip["rtp_ports"]
        ok = isinstance(ports, list) and len(ports) == 2
        first, last = ports if ok and all(type(p) is int for p in ports) else (0, 0)
        if not 1024 <= first < last <= 65535:
            raise ConfigError(f"{path}: [sip] rtp_ports must be two ports, low to high, above 1023")
        settings.sip.rtp_ports = (first, last)
    _transports(path, sip, settings)
    settings.sip.shutdown_grace = _number(
        path, "sip", "shutdown_grace", sip, settings.sip.shutdown_grace
    )
    settings.sip.rtp_timeout = _number(path, "sip", "rtp_timeout", sip, settings.sip.rtp_timeout)
    if "external_address" in sip:
        settings.sip.external_address = _ip_address(path, sip["external_address"])
    if "domains" in sip:
        settings.sip.domains = _domains(path, sip["domains"])
    if not 0 <= settings.sip.rtp_timeout <= 86400:
        raise ConfigError(f"{path}: [sip] rtp_timeout must be 0 (never) or up to 86400 seconds")
    settings.sip.max_calls = _integer(path, "sip", "max_calls", sip, settings.sip.max_calls)
    settings.sip.proxies = _network_list(path, "sip", "proxies", sip)
    settings.workers.count, settings.workers.first_port = _workers(
        path, _table(path, raw, "workers")
    )
    (
        settings.database.url,
        settings.database.node_timeout,
        settings.database.node_address,
        settings.database.node_port,
    ) = _database(path, _table(path, raw, "database"))
    recordings = _table(path, raw, "recordings")
    _no_unknown(path, "recordings", recordings, {"max_mb", "min_free_mb"})
    if "max_mb" in recordings:
        settings.recordings.max_bytes = _megabytes(path, "recordings", "max_mb", recordings)
    if "min_free_mb" in recordings:
        floor = _number(path, "recordings", "min_free_mb", recordings, 0.0)
        if floor < 0:
            raise ConfigError(f"{path}: [recordings] min_free_mb must be 0 (no floor) or more")
        settings.recordings.min_free_bytes = int(floor * 2**20)
    media = _table(path, raw, "media")
    _no_unknown(
        path,
        "media",
        media,
        {
            "remote_max_mb",
            "remote_timeout",
            "thread",
            "max_lag_ms",
            "thread_fifo",
            "thread_nice",
            "thread_receive",
        },
    )
    if "remote_max_mb" in media:
        settings.media.remote_max_bytes = _megabytes(path, "media", "remote_max_mb", media)
    settings.media.remote_timeout = _number(path, "media", "remote_timeout", media, 10.0)
    if not 0 < settings.media.remote_timeout <= 300:
        raise ConfigError(f"{path}: [media] remote_timeout must be above 0 and at most 300")
    (
        settings.media.thread,
        settings.media.max_lag,
        settings.media.thread_fifo,
        settings.media.thread_nice,
    ) = _media_thread(path, media, settings.media.max_lag)
    settings.media.thread_receive = _flag(path, "media", "thread_receive", media, True)
    notifications = _table(path, raw, "notifications")
    _no_unknown(path, "notifications", notifications, {"first_retry", "max_retry", "give_up_after"})
    settings.notifications.first_retry = _number(
        path, "notifications", "first_retry", notifications, 2
    )
    settings.notifications.max_retry = _number(
        path, "notifications", "max_retry", notifications, 600
    )
    settings.notifications.give_up_after = _number(
        path, "notifications", "give_up_after", notifications, 86400
    )
    if not 0 < settings.notifications.first_retry <= settings.notifications.max_retry:
        raise ConfigError(
            f"{path}: [notifications] first_retry must be above 0 and at most max_retry"
        )
    if settings.notifications.give_up_after <= 0:
        raise ConfigError(f"{path}: [notifications] give_up_after must be above 0")
    (
        settings.conference.max_participants,
        settings.conference.talker_dbov,
        settings.conference.talker_hangover,
    ) = _conference(path, _table(path, raw, "conference"))
    _security(path, _table(path, raw, "security"), settings)
    _outbound(path, _table(path, raw, "outbound"), settings)
    _egress(path, _table(path, raw, "egress"), settings)
    speech = _table(path, raw, "speech")
    settings.speech.engines = speech_engines(path, speech)
    # (A plug-in with only a voice is no recogniser.)
    recognisers = (*RECOGNISERS, *(n for n, e in settings.speech.engines.items() if e.recognises))
    (
        settings.speech.voice,
        settings.speech.recogniser,
        settings.speech.model,
        settings.speech.workers,
        settings.speech.preload,
    ) = _speech(path, speech, recognisers, SPEECH_MODELS)
    settings.speech.min_confidence = _confidence(path, "speech", speech, MIN_CONFIDENCE)
    trunk = _table(path, raw, "trunk")
    settings.trunk.username = trunk.get("username")
    settings.trunk.password = trunk.get("password")
    try:
        settings.trunks = trunks.load(path, raw)
    except trunks.TrunkError as exc:
        raise ConfigError(str(exc)) from None
    settings.retention = retention(path, "retention", raw.get("retention", {}), RetentionSettings())
    settings.tracing = _tracing(path, _table(path, raw, "tracing"))
    settings.apps, settings.numbers = applications(
        path, _table(path, raw, "apps"), settings.data_dir, settings.retention
    )
    for app in settings.apps.values():
        if app.recogniser is not None and app.recogniser not in recognisers:
            raise ConfigError(
                f"{path}: [apps.{app.name}] recogniser must be one of "
                f"{', '.join(recognisers)}, not {app.recogniser!r}"
            )
    if "default_app" in raw:
        settings.default_app = _text(path, "", "default_app", raw, "")
    if settings.default_app is not None and settings.default_app not in settings.apps:
        raise ConfigError(f"{path}: default_app {settings.default_app!r} is not in [apps]")
    settings.users = users(path, _table(path, raw, "users"), settings.apps)
    return settings
