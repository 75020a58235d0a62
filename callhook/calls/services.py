"""The long-lived parts every call shares: the media store, page requests, speech, the
database, the recordings journal and the notifications' outbox.

:func:`callhook.app.build_services` builds them from the settings; the telephony service,
``serve``, ``callhook test`` and the terminal phone are handed the result. Calls are run
through :meth:`Services.run_call`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from opentelemetry.trace import Span, SpanKind
from prometheus_client.core import Metric

from callhook.actions.machine import ActionContext
from callhook.calls.calllog import CallLog, Listener
from callhook.calls.metrics import Metrics
from callhook.calls.pagetiming import TimedPages
from callhook.calls.runner import CallRunner, CallSummary, new_instance_id
from callhook.clock import Clock, MonotonicClock
from callhook.config.settings import AppConfig, Settings
from callhook.edge.doorbell import Doorbell
from callhook.edge.egress import Egress
from callhook.edge.notifier import Notifier
from callhook.edge.pages import HttpPages
from callhook.edge.remotemedia import RemoteMedia
from callhook.edge.speechworkers import SpeechService
from callhook.events import CallEnded, MediaCommand, MediaEvent, PlayFile, StartRecording
from callhook.httpserver import server as web_adapter
from callhook.httpserver.restapi import Api
from callhook.media import wav
from callhook.media.simulated import PromptTimer
from callhook.monitoring import prometheus, tracing
from callhook.ports import CallInfo, Leg, Pages
from callhook.store import crypto, wavfile
from callhook.store.callrecords import CallRecord, CallRecords
from callhook.store.database import Database, Membership
from callhook.store.diskspace import check_room
from callhook.store.files import MediaStore
from callhook.store.journal import RecordingJournal
from callhook.store.outbox import Outbox
from callhook.store.retention import Sweeper, Swept
from callhook.store.wavfile import WavWriter

logger = logging.getLogger("callhook")

#: How long closing waits for notifications that are due to be delivered.
CLOSE_FLUSH_SECONDS = 3.0
#: How often a process sharing a data directory looks for the recordings of processes
#: that died (with PostgreSQL: a third of ``[database] node_timeout``, its heartbeat).
KEEP_SECONDS = 10.0
#: How often what is past its retention is looked for, and the first time, after the
#: start (a server restarted more often than hourly still sweeps).
SWEEP_SECONDS = 3600.0
SWEEP_FIRST = 10.0


@dataclass
class Services:
    """The long-lived parts shared by all calls (built by :func:`callhook.app.build_services`)."""

    settings: Settings
    store: MediaStore
    pages: HttpPages
    #: The egress policy every page, media and notification fetch obeys (``[egress]``).
    egress: Egress
    remote_media: RemoteMedia
    #: The installation's own secret (``<data_dir>/secret``).
    secret: str
    speech: SpeechService
    db: Database
    ownership: Membership
    journal: RecordingJournal
    outbox: Outbox
    clock: Clock = field(default_factory=MonotonicClock)
    notifier: Notifier | None = None
    #: Rings the process that delivers when this one queues a notification (SQLite: one
    #: process delivers, :mod:`callhook.edge.doorbell`); None where every node delivers.
    doorbell: Doorbell | None = None
    _keeper: asyncio.Task[None] | None = None
    _recovering: asyncio.Task[None] | None = None
    _sweeping: asyncio.Task[None] | None = None
    _rounds: set[asyncio.Future[object]] = field(default_factory=set)
    metrics: Metrics = field(default_factory=Metrics)
    web_runner: web.AppRunner | None = None
    base_url: str = ""
    _calls: itertools.count[int] = field(default_factory=itertools.count)
    #: Every application that ran a call here (their secrets sign notifications).
    _apps: dict[str, AppConfig] = field(default_factory=dict)
    #: Applications whose ``recogniser`` is not ``[speech]``'s: the speech service with
    #: theirs (one per engine, shared by the applications that name it).
    app_speech: dict[str, SpeechService] = field(default_factory=dict)
    _outbox_unread: bool = False  # (said once while /metrics cannot read the outbox)
    #: The call records (in ``db``).
    records: CallRecords = field(init=False)

    def __post_init__(self) -> None:
        self.records = CallRecords(self.db)

    def speech_for(self, app: str) -> SpeechService:
        """The speech service an application's calls use."""
        return self.app_speech.get(app, self.speech)

    def trust_app_hosts(self, *apps: AppConfig) -> None:
        """Let fetches reach the endpoints of ``apps``' pages (host and port) even when they
        are private or loopback (``[egress]``: the configured applications' own)."""
        for app in apps:
            for url in (app.first_page, app.error_page, app.final_page):
                self.egress.trust_url(url)

    # --- notifications ----------------------------------------------------------------

    def start_notifier(self) -> Notifier:
        """Start delivering the outbox's notifications (needs the running event loop)."""
        if self.notifier is None:
            self.notifier = Notifier(
                self.outbox,
                self.pages,
                self.secret_for,
                may_deliver=self._may_deliver,
            )
            self.notifier.start()
        self.start_keeper()
        return self.notifier

    def start_keeper(self) -> None:
        """Start saying this process is alive and finishing the recordings of those that
        died (needs the running event loop; :meth:`start_notifier` starts it too)."""
        if self._keeper is None:
            every = KEEP_SECONDS
            if self.settings.database.url is not None:
                every = self.settings.database.node_timeout / 3
            loop = asyncio.get_running_loop()
            # Two tasks: a long recovery never holds up the heartbeat.
            self._keeper = loop.create_task(
                self._every(every, self.ownership.beat, "say this process is alive")
            )
            self._recovering = loop.create_task(
                self._every(every, self._recover, "look for the recordings of stopped processes")
            )
            self._sweeping = loop.create_task(
                self._every(
                    SWEEP_SECONDS, self.sweep, "delete what is past its retention", SWEEP_FIRST
                )
            )

    def recording_refused(self, app: str) -> str | None:
        """Why application ``app`` may not begin a recording now (its disk has less free
        than ``[recordings] min_free_mb``: logged), or None."""
        try:
            check_room(self.store.namespace(app), self.settings.recordings.min_free_bytes)
        except OSError as exc:
            why = f"a recording of application {app} is refused: {exc.strerror or exc}"
            logger.error("%s", why)
            return why
        return None

    def sweep(self, now: float | None = None) -> Swept | None:
        """Delete what is past its retention ([retention], [apps.NAME.retention]) as of
        ``now`` (the wall clock's); blocking. Only the process that delivers the
        notifications sweeps (None: another one does)."""
        if not self.ownership.deliver_notifications():
            return None
        return Sweeper(self.store, self.db, self.settings.retention_of).sweep(
            time.time() if now is None else now
        )

    def _recover(self) -> None:
        found = self.journal.recover(self.store.path, at_start=False)
        if found:
            logger.warning(
                "finished %d recording(s) of a process that stopped (a worker or node)", found
            )

    async def _every(
        self, seconds: float, work: Callable[[], object], doing: str, first: float | None = None
    ) -> None:
        """``work()`` on a thread every ``seconds``, the first time after ``first`` (the
        database is away: the next time)."""
        wait = seconds if first is None else first
        failing: str | None = None  # (said once per cause, not every round: a full disk)
        while True:
            await asyncio.sleep(wait)
            wait = seconds
            # Shielded: close() waits for a round to end rather than leave its thread
            # working on a database being closed.
            running = asyncio.ensure_future(asyncio.to_thread(work))
            self._rounds.add(running)
            running.add_done_callback(self._rounds.discard)
            try:
                await asyncio.shield(running)
            except Exception as exc:
                if str(exc) != failing:
                    logger.error("could not %s: %s (tried every %g s)", doing, exc, seconds)
                failing = str(exc)
            else:
                if failing is not None:
                    logger.warning("could %s again", doing)
                failing = None

    def _may_deliver(self) -> bool:
        """Whether this process delivers (it holds the notifier lock): it then answers the
        doorbell, waking its notifier when another process queues a notification."""
        if not self.ownership.deliver_notifications():
            return False
        if self.doorbell is not None and self.notifier is not None:
            self.doorbell.listen(self.notifier.wake)  # (once; a second call does nothing)
        return True

    def _notify_now(self) -> None:
        # (From any thread: the journal calls it on the database's.)
        if self.notifier is not None:
            self.notifier.wake()
        if self.doorbell is not None and not self.doorbell.listening:
            self.doorbell.ring()  # another process delivers

    def notify_now(self) -> None:
        """A notification was added to the outbox: deliver it now, not at the next poll."""
        self._notify_now()

    def secret_for(self, app: str) -> str:
        """The secret that signs requests to application ``app``."""
        known = self._apps.get(app) or self.settings.apps.get(app)
        # The demo (and an application no longer configured) signs with the installation's.
        return known.secret if known is not None else self.secret

    # --- recordings -------------------------------------------------------------------

    def record_silence(self, app: AppConfig, command: StartRecording, seconds: float) -> float:
        """Write ``seconds`` of silence as the recording ``command`` started (terminal phone)."""
        law = command.format or "ulaw"
        writer = WavWriter.for_recording(
            self.store.path(app.name, command.filename),
            law,
            command,
            on_durable=lambda w: self.journal.durable(app.name, command.filename, w.length),
        )
        writer.write(bytes([wav.SILENCE[law]]) * max(0, round(seconds * 8000)))
        writer.close()
        return writer.seconds

    async def outbox_metrics(self) -> list[Metric]:
        """The outbox's families for ``/metrics``, read now (none while the state database
        cannot be read: said once, until it can again)."""
        now = time.time()
        try:
            counts = await self.outbox.counts()
            due = await self.outbox.next_due(set(), now)
        except Exception as exc:  # the database is down or locked: the rest is still told
            if not self._outbox_unread:
                self._outbox_unread = True
                logger.warning("/metrics: the outbox cannot be read: %s", exc)
            return []
        self._outbox_unread = False
        oldest = max(0.0, now - due) if due is not None else 0.0
        return prometheus.outbox_families(counts["pending"], counts["abandoned"], oldest)

    async def start_web(
        self,
        host: str | None = None,
        port: int | None = None,
        dial: web_adapter.Dial | None = None,
        stats: web_adapter.Stats | None = None,
        api: Api | None = None,
        trunks: web_adapter.TrunkStates | None = None,
        users: web_adapter.Phones | None = None,
        bans: web_adapter.Bans | None = None,
        phone: web_adapter.Routes | None = None,
        call_log: web_adapter.CallLogOf | None = None,
        webservices: web_adapter.Routes | None = None,
        extra: tuple[web_adapter.Routes, ...] = (),
        reuse_port: bool = False,
        outer: Middleware | None = None,
        private: socket.socket | None = None,
    ) -> str:
        """Start the HTTP server (demo application, calls API, REST API, web phone); returns
        its base URL."""
        app = web_adapter.application(
            self.secret,
            dial,
            stats or self.metrics.snapshot,
            api=api,
            trunks=trunks,
            users=users,
            bans=bans,
            phone=phone,
            call_log=call_log,
            outer=outer,
            webservices=webservices,
            extra=extra,
            state=self.outbox_metrics,
        )
        self.web_runner, self.base_url = await web_adapter.start(
            app,
            host if host is not None else self.settings.http.host,
            port if port is not None else self.settings.http.port,
            reuse_port=reuse_port,
            private=private,
        )
        self.trust_app_hosts(self.demo_app())  # our own server: the demo's pages
        return self.base_url

    def demo_app(self) -> AppConfig:
        """The built-in demo application, served by our own HTTP server."""
        base = self.base_url + "/demo/"
        return AppConfig(
            name="demo",
            first_page=base + "start",
            error_page=base + "error",
            final_page=base + "final",
            secret=self.secret,
        )

    def prompt_timer(self, app: AppConfig) -> PromptTimer:
        """Prompt durations for simulated media, reading WAV headers from the app's namespace."""

        def file_seconds(item: PlayFile) -> float:
            try:
                path = self.store.path(app.name, item.name)
                if item.cipher is not None:  # the header is encrypted too: decrypt it all
                    key = crypto.Key.from_cipher(item.cipher)
                    return wav.read_info(crypto.decrypt_wav(path.read_bytes(), key)).seconds
                with path.open("rb") as f:
                    return wav.read_info(f.read(4096), path.stat().st_size).seconds
            except (OSError, ValueError) as exc:  # OutsideNamespace, WavError, DecryptionError
                raise FileNotFoundError(f"{item.name} ({exc})") from None

        return PromptTimer(file_seconds=file_seconds)

    def recording_path(self, app: AppConfig, filename: str) -> Path:
        return self.store.path(app.name, filename)

    def default_app(self) -> AppConfig | None:
        """The application for calls no configured one takes: the built-in demo, if served."""
        if self.settings.default_app is None and self.base_url:
            return self.demo_app()
        return None

    def runner(
        self,
        app: AppConfig,
        leg: Leg,
        listeners: list[Listener] | None = None,
        *,
        primary_call_id: str | None = None,
        on_ready: Callable[[tuple[str, str, str] | None], object] | None = None,
        dropped_calls: Callable[[], list[dict[str, Any]]] | None = None,
        pages: Pages | None = None,
        needs_cipher: bool = False,
        instance_id: str | None = None,
    ) -> CallRunner:
        """A call runner for ``app`` on ``leg``, with its log in the app's namespace
        (``primary_call_id``, ``on_ready``: a connect's far leg running its pages;
        ``pages``: the page requests go through it instead of straight to HTTP;
        ``instance_id``: the instance's id when it was given out before the call ran)."""
        instance_id = instance_id or new_instance_id()
        log_filename = f"logs/{instance_id}.log"
        # The log's lines are stamped on the call's media time, the clock its actions' timers
        # and events are on (``timers`` lines): while the loop runs behind the wire, the
        # loop's clock would stamp a key press later than the timer it started.
        log = CallLog(instance_id, _MediaTime(leg), self.store.path(app.name, log_filename))
        log.listeners.extend(listeners or [])
        floor = app.min_confidence
        ctx = ActionContext(
            new_recording_name=self.store.new_recording_name,
            recording_refused=lambda: self.recording_refused(app.name),
            min_confidence=self.settings.speech.min_confidence if floor is None else floor,
        )
        self._apps[app.name] = app
        return CallRunner(
            app,
            leg,
            TimedPages(pages or self.pages, app.name),
            self.clock,
            log,
            log_filename=log_filename,
            ctx=ctx,
            recordings=self.journal,
            files=self.store,
            primary_call_id=primary_call_id,
            on_ready=on_ready,
            dropped_calls=dropped_calls,
            needs_cipher=needs_cipher,
        )

    async def run_call(
        self,
        app: AppConfig,
        leg: Leg,
        listeners: list[Listener] | None = None,
        *,
        pages: Pages | None = None,
        started: Callable[[CallRunner], object] | None = None,
        instance_id: str | None = None,
        token: str | None = None,
        began: float | None = None,
    ) -> CallSummary:
        """Run ``app`` on ``leg`` until the call ends (``pages``: see :meth:`runner`;
        ``started`` is told the call's runner before it runs: its log, its instance id;
        ``began``: when the call began on the wall clock, its INVITE, for its record)."""
        direction = leg.info.direction
        self.metrics.call_started(app.name, direction)
        runner = self.runner(app, leg, listeners, pages=pages, instance_id=instance_id)
        runner.exchange.token = token  # an outbound service's token reaches its first page
        if started is not None:
            started(runner)
        info = leg.info
        with tracing.span(
            "call",
            kind=SpanKind.SERVER if direction == "in" else SpanKind.CLIENT,
            start_time=began,
            attributes=_call_attributes(app, info, runner.instance_id),
        ) as span:
            summary = await runner.run()
            self._traced(span, summary, began)
        self.metrics.call_ended(app.name, direction, summary)
        self.record(app, info, summary, started=began)
        return summary

    def _traced(self, span: Span, summary: CallSummary, began: float | None) -> None:
        """The call's span told how it ended; its SIP setup (INVITE to answer) added."""
        span.set_attribute("callhook.call_cause", summary.cause)
        span.set_attribute("callhook.call_raw_cause", summary.raw_cause)
        if summary.cause == "failed":
            tracing.failed(span, "; ".join(summary.errors) or "failed")
        offset = time.time() - self.clock.now()
        if began is not None and summary.answered_at is not None:
            answered = summary.answered_at + offset
            tracing.between("sip setup", began, max(began, answered), {})

    def record(
        self,
        app: AppConfig,
        info: CallInfo,
        summary: CallSummary,
        *,
        started: float | None = None,
        parent_call_id: str = "",
    ) -> None:
        """The call record of a call that ended (``started``: the wall clock's time the call
        began, when that was before the summary's start: an outbound call placed and never
        answered; ``parent_call_id``: a far leg's call)."""
        # The summary's times are on the calls' monotonic clock: the wall clock's now,
        # less how long ago each was.
        offset = time.time() - self.clock.now()
        ended = (summary.ended_at if summary.ended_at is not None else self.clock.now()) + offset
        begun = summary.started_at + offset if summary.started_at is not None else ended
        answered = summary.answered_at + offset if summary.answered_at is not None else None
        self.records.add(
            CallRecord(
                app=app.name,
                call_id=info.call_id,
                instance_id=summary.instance_id,
                leg="far" if parent_call_id else "call",
                parent_call_id=parent_call_id,
                direction=info.direction,
                call_from=info.call_from,
                call_to=info.call_to,
                trunk=info.trunk,
                worker=self.settings.workers.index,
                started=min(begun, started) if started is not None else begun,
                answered=answered,
                ended=ended,
                seconds=max(0.0, ended - answered) if answered is not None else 0.0,
                cause=summary.cause,
                raw_cause=summary.raw_cause,
                recordings=summary.recordings,
                pages=len(summary.pages),
                pages_failed=summary.pages_failed,
            )
        )

    async def unanswered(
        self,
        app: AppConfig,
        info: CallInfo,
        cause: str,
        raw: str,
        instance_id: str | None = None,
        token: str | None = None,
        *,
        placed: float | None = None,
    ) -> CallSummary:
        """An outbound call nobody answered: the application's final page says why
        (``placed``: when it was placed, on the wall clock, for its record)."""
        runner = self.runner(app, _NoLeg(info, self.clock), instance_id=instance_id)
        runner.exchange.token = token
        attributes = _call_attributes(app, info, runner.instance_id)
        with tracing.span(
            "call", kind=SpanKind.CLIENT, start_time=placed, attributes=attributes
        ) as span:
            summary = await runner.unanswered(cause, raw)
            self._traced(span, summary, placed)
        self.record(app, info, summary, started=placed)
        return summary

    async def close(self) -> None:
        for task in (self._keeper, self._recovering, self._sweeping):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await asyncio.gather(*self._rounds, return_exceptions=True)
        self._keeper = self._recovering = self._sweeping = None
        for speech in {id(s): s for s in (self.speech, *self.app_speech.values())}.values():
            await asyncio.to_thread(speech.close)
        # Recordings closed by the calls' end are made durable (and journaled) first.
        if not await asyncio.to_thread(wavfile.drain):
            logger.error("recordings still being finished at exit: start-up recovery will do it")
        if self.notifier is not None:
            await self.db.run(lambda conn: None)  # the journal's queued work is done
            # Notifications due now get a moment; what is left is sent after the next start.
            await self.notifier.flush(CLOSE_FLUSH_SECONDS)
            await self.notifier.close()
            self.notifier = None
        if self.doorbell is not None:
            self.doorbell.close()
        await self.pages.close()
        await self.remote_media.close()
        self.db.close()  # (the journal's held updates, if any, are given up before...)
        self.ownership.close()  # (...this process's recordings are others' to finish)
        if self.web_runner is not None:
            await self.web_runner.cleanup()
            self.web_runner = None


class _MediaTime:
    """A leg's media time as a :class:`~callhook.clock.Clock` (its call log's clock)."""

    def __init__(self, leg: Leg) -> None:
        self.now = leg.media_time


class _NoLeg:
    """The leg of an outbound call that was never answered: only the final page is sent."""

    def __init__(self, info: CallInfo, clock: Clock) -> None:
        self.info = info
        self.clock = clock

    def send(self, commands: Sequence[MediaCommand]) -> None:
        raise RuntimeError("an unanswered call has no media")

    def now(self) -> float:
        raise RuntimeError("an unanswered call has no media")

    def media_time(self) -> float:
        return self.clock.now()  # (no media: its log's lines are on the server's clock)

    async def next_event(self, deadline: float | None) -> tuple[MediaEvent | None, float]:
        raise RuntimeError("an unanswered call has no media")

    def take_pending(self) -> list[MediaEvent]:
        return []

    async def answer(self) -> None:
        raise RuntimeError("an unanswered outbound call cannot be answered by us")

    async def hang_up(self) -> str:
        return ""

    async def wait_ended(self) -> CallEnded:
        raise RuntimeError("an unanswered call has already ended")

    def recorded_seconds(self, filename: str) -> float | None:
        return None


def _call_attributes(app: AppConfig, info: CallInfo, instance_id: str) -> dict[str, str]:
    """A call span's attributes: its application, ids and parties."""
    return {
        "callhook.application": app.name,
        "callhook.application_instance_id": instance_id,
        "callhook.call_direction": info.direction,
        "sip.call_id": info.call_id,
        "callhook.call_from": info.call_from,
        "callhook.call_to": info.call_to,
    }
