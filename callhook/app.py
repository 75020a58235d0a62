"""The composition root: builds callhook's parts from :class:`~callhook.config.settings.Settings`.

The command (:mod:`callhook.cli`) asks here for what it runs; the parts it builds are
handed what they use, and none of them imports this module.
"""

from __future__ import annotations

import logging

from callhook.calls.services import Services
from callhook.clock import Clock, MonotonicClock
from callhook.config.settings import ConfigError, Settings, data_secret
from callhook.config.speechengines import RemoteEngine
from callhook.edge.doorbell import Doorbell
from callhook.edge.egress import Egress
from callhook.edge.egresspolicy import EgressPolicy
from callhook.edge.pages import HttpPages
from callhook.edge.remotemedia import RemoteMedia
from callhook.edge.speechworkers import SpeechService, build_recogniser, build_synthesiser
from callhook.store import wavfile
from callhook.store.database import Database, Membership, Ownership
from callhook.store.files import MediaStore
from callhook.store.journal import RecordingJournal
from callhook.store.outbox import Outbox, RetryPolicy, lease_for
from callhook.telephony.assembly import Assembly
from callhook.telephony.service import SipService

logger = logging.getLogger("callhook")


def build_services(settings: Settings, clock: Clock | None = None) -> Services:
    """The parts every call shares, built from ``settings``: the media store, the egress
    policy, page requests, speech, the database and who owns what in it, the outbox and
    the recordings journal (whose recovery of a crash's recordings runs here, before any
    call)."""
    # (Read at each write: a reload's [recordings] replaces settings.recordings.)
    store = MediaStore(
        settings.data_dir / "media", min_free=lambda: settings.recordings.min_free_bytes
    )
    egress = Egress(
        EgressPolicy(
            allow_private=settings.egress.allow_private,
            max_response_bytes=settings.egress.max_response_bytes,
            max_redirects=settings.egress.max_redirects,
        )
    )
    for endpoint in settings.egress.endpoints:
        egress.trust_url(f"http://{endpoint}")
    pages = HttpPages(
        timeout=settings.page_timeout,
        egress=egress,
        max_response_bytes=settings.egress.max_response_bytes,
        max_redirects=settings.egress.max_redirects,
    )
    remote_media = RemoteMedia(
        max_bytes=settings.media.remote_max_bytes,
        timeout=settings.media.remote_timeout,
        max_redirects=settings.egress.max_redirects,
        egress=egress,
    )
    remote = tuple(settings.speech.engines.values())
    speech = SpeechService(
        build_synthesiser(settings.speech.voice, remote),
        build_recogniser(settings.speech.recogniser, settings.speech.model, remote),
        workers=settings.speech.workers,
    )
    db: Database
    ownership: Membership
    lease_owner = None
    doorbell = None  # (PostgreSQL: every node delivers its own)
    if settings.database.url is not None:
        # Nodes sharing PostgreSQL: who is alive is a table, not lock files.
        try:
            from callhook.store.postgres import Nodes, connect
        except ModuleNotFoundError:
            raise ConfigError(
                "[database] url needs PostgreSQL's driver, psycopg:"
                " pip install 'callhook[postgresql]'"
            ) from None

        db = connect(settings.database.url)
        # The heartbeat on a connection of its own: no slow statement delays it.
        nodes = Nodes(connect(settings.database.url), settings.database.node_timeout, owns_db=True)
        ownership = nodes
        lease_owner = nodes.token
    else:
        db = Database(settings.data_dir / "state.sqlite3")
        ownership = Ownership(settings.data_dir)
        doorbell = Doorbell.for_directory(settings.data_dir)
    # (After the database: one that cannot be opened stops the start without a load.)
    if settings.speech.preload:
        speech.warm_up()
    retry = RetryPolicy(
        settings.notifications.first_retry,
        settings.notifications.max_retry,
        settings.notifications.give_up_after,
    )
    outbox = Outbox(
        db, retry, lease_owner=lease_owner, lease_seconds=lease_for(settings.page_timeout)
    )
    journal = RecordingJournal(db, ownership=ownership)
    services = Services(
        settings,
        store=store,
        pages=pages,
        egress=egress,
        remote_media=remote_media,
        secret=data_secret(settings.data_dir),
        speech=speech,
        db=db,
        ownership=ownership,
        journal=journal,
        outbox=outbox,
        clock=clock or MonotonicClock(),
        doorbell=doorbell,
    )
    services.app_speech = _app_speech(settings, speech, remote)
    services.trust_app_hosts(*settings.apps.values())
    # A recording queued for announcing is announced now, not at the notifier's next poll.
    journal.on_queued = services.notify_now
    # A recording deleted (delete_file, the REST API) is finished first, and is
    # never announced afterwards.
    store.before_delete = wavfile.finished
    store.after_delete = journal.deleted
    # Before any call: finish the recordings a crash interrupted. A database refusing for
    # a while (a full disk) must not stop the start: a worker restarted then would die at
    # once, again and again; they are looked for again as the process runs.
    try:
        recovered = journal.recover(store.path)
    except Exception as exc:
        if not db.passing(exc):
            raise
        logger.error(
            "could not finish the recordings interrupted by a restart (%s): looked for again"
            " while callhook runs",
            exc,
        )
        recovered = 0
    if recovered:
        logger.warning("recovered %d recording(s) interrupted by a restart", recovered)
    return services


def _app_speech(
    settings: Settings, default: SpeechService, remote: tuple[RemoteEngine, ...]
) -> dict[str, SpeechService]:
    """A speech service for each recogniser an application names other than
    ``[speech]``'s (the voices shared), and which application uses which."""
    by_engine = {settings.speech.recogniser: default}
    out: dict[str, SpeechService] = {}
    for app in settings.apps.values():
        if app.recogniser is None:
            continue
        if app.recogniser not in by_engine:
            service = SpeechService(
                default.synthesiser,
                build_recogniser(app.recogniser, settings.speech.model, remote),
                workers=settings.speech.workers,
            )
            if settings.speech.preload:
                service.warm_up()
            by_engine[app.recogniser] = service
        out[app.name] = by_engine[app.recogniser]
    return out


def build_sip_service(services: Services, host: str, port: int) -> SipService:
    """The telephony service on ``host``:``port`` over ``services`` (not started)."""
    return SipService(services, host, port, rtp_ports=services.settings.sip.rtp_ports)


class _Assembly:
    """:class:`~callhook.telephony.assembly.Assembly` by this module's builders."""

    def services(self, settings: Settings) -> Services:
        return build_services(settings)

    def sip_service(self, services: Services, host: str, port: int) -> SipService:
        return build_sip_service(services, host, port)


#: What the commands are handed to build their parts (``serve``, ``callhook test``).
ASSEMBLY: Assembly = _Assembly()
