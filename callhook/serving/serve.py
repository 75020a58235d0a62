"""``callhook serve``: one engine (the SIP service, its web server) until SIGTERM or SIGINT.

With ``--workers N`` (N > 1) this process becomes the supervisor of N of them
behind Kamailio (:mod:`callhook.serving.supervisor`); each worker runs
:func:`serve` with ``--worker I``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from callhook import __version__
from callhook.calls.metrics import Metrics
from callhook.calls.services import Services
from callhook.cluster.frontbans import FrontBans
from callhook.cluster.siblings import Siblings
from callhook.cluster.workers import WORKERS_FIRST_PORT, WORKERS_TOKEN
from callhook.config.settings import AppConfig, ConfigError, Settings
from callhook.edge.connections import ListenError
from callhook.monitoring import tracing
from callhook.redact import redact
from callhook.serving import descriptors
from callhook.serving.collector import (
    CHECK_EVERY,
    FullCollections,
    automatic_full_passes_off,
    collect_young,
)
from callhook.serving.launch import Launch, api_keys, host_port
from callhook.serving.readiness import Readiness
from callhook.serving.reload import Reloader
from callhook.serving.supervised import when_unread
from callhook.serving.supervisor import READY
from callhook.telephony.users import registered_phones

logger = logging.getLogger("callhook.server")

if TYPE_CHECKING:  # (serve alone loads the telephony service: the CLI starts light)
    from callhook.httpserver.keys import KeyRing
    from callhook.httpserver.server import Routes
    from callhook.store.postgres import Nodes
    from callhook.telephony.assembly import Assembly
    from callhook.telephony.service import SipService


def apply_app_flags(args: argparse.Namespace, services: Services) -> None:
    """--app-url and friends: a default application given on the command line (its hosts
    are the operator's own for the egress policy)."""
    settings = services.settings
    if _flag_app(args, settings, services.secret):
        services.trust_app_hosts(settings.apps["default"])


def _flag_app(args: argparse.Namespace, settings: Settings, secret: str) -> bool:
    """Put --app-url's application into ``settings`` as the default one (True), if given."""
    if not getattr(args, "app_url", None):
        return False
    settings.apps["default"] = AppConfig(
        name="default",
        first_page=args.app_url,
        secret=args.secret or secret,
        error_page=args.error_page,
        final_page=args.final_page,
        application_parameters=args.parameters or "",
    )
    settings.default_app = "default"
    return True


async def _start_web(
    services: Services,
    sip: SipService,
    host: str,
    port: int,
    keys: KeyRing,
    *,
    siblings: Siblings | None,
    reuse_port: bool,
    private: socket.socket | None,
) -> str:
    """Serve the demo, the calls API and the REST API (``/api/v1``); the base URL."""
    from callhook.cluster.outboundshare import OutboundShare
    from callhook.cluster.sharedbans import SharedBans
    from callhook.httpserver.recordsapi import RecordsApi
    from callhook.httpserver.restapi import Api
    from callhook.telephony.webclients import WebClients
    from callhook.telephony.webphone import WebPhone
    from callhook.webservices.aculab import WebServices
    from callhook.webservices.conferences import ConferenceApi, RoomViews

    settings = services.settings

    def app_named(name: str) -> AppConfig | None:
        demo = services.default_app()  # the demo's pages are on this server: known once it runs
        if demo is not None and name == demo.name:
            return demo
        return settings.apps.get(name)

    def known_apps() -> dict[str, AppConfig]:
        demo = services.default_app()
        return {**({demo.name: demo} if demo is not None else {}), **settings.apps}

    api = Api(
        services.store, keys, app_named, calls=sip, max_upload_bytes=settings.http.max_upload_bytes
    )
    api.records = RecordsApi(services.records, api, services.secret).list_records
    sip.phone = WebPhone(
        services,
        lambda: sip.media,
        sip.prompts,
        keys,
        known_apps,
        bans=sip.control,
        far_legs=sip.lifecycle,
        sip_calls=lambda: len(sip.calls),  # ([sip] max_calls counts both)
    )
    # Pages signed in to receive calls: connect's webrtc: destinations ring them.
    sip.webclients = WebClients(keys, known_apps, bans=sip.control, siblings=siblings)
    extra: list[Routes] = [sip.webclients, _readiness(services, sip, siblings)]
    if siblings is not None:
        # Failed authentications and bans: one count and one ban for all the workers.
        sip.shared_bans = SharedBans(siblings, sip.guard, sip.loop.time)
        extra.append(sip.shared_bans)
        # Outbound calls: max_calls_per_app is the installation's.
        sip.outbound_share = OutboundShare(siblings, sip.outbound_calls)
        sip.outbound_share.start()
        extra.append(sip.outbound_share)
        # Conference rooms: each held by one worker, its callers on any.
        from callhook.telephony.roomlinks import RoomLinks

        sip.room_links = RoomLinks(sip.conferences, siblings, sip.loop.time)
        extra.append(sip.room_links)
    # The conference rooms, seen and steered: Aculab's services and /api/v1/conferences.
    rooms = RoomViews(sip.conferences)
    extra.append(ConferenceApi(rooms, api))
    # Aculab's web services: a number is called through the first trunk, as connect's are.
    webservices = WebServices(
        api,
        lambda: next(iter(sip.trunks.config), None),
        clients=sip.webclients,
        rooms=rooms,
        records=services.records,
    )
    return await services.start_web(
        host,
        port,
        dial=sip.dialler.dial_api,
        stats=sip.control.stats,
        api=api,
        trunks=sip.control.trunk_status,
        users=lambda: registered_phones(services.db),
        bans=sip.control,
        phone=sip.phone,
        call_log=sip.control.call_log,
        webservices=webservices,
        extra=tuple(extra),
        reuse_port=reuse_port,
        outer=siblings.middleware if siblings is not None else None,
        private=private,
    )


async def serve(
    args: argparse.Namespace, settings: Settings, assembly: Assembly, start: Launch
) -> int:
    """A worker of ``serve --workers``, or the one process that serves (``start``: what
    :func:`~callhook.serving.launch.launch` settled)."""
    manager, keys, count = start.manager, start.keys, start.workers
    siblings: Siblings | None = None
    front: FrontBans | None = None  # Kamailio's bans, in front of the workers
    if args.worker is not None:
        for handler in logging.getLogger().handlers:  # whose line it is, in the shared log
            handler.setFormatter(
                logging.Formatter(f"%(asctime)s %(levelname)s {args.worker}:%(name)s: %(message)s")
            )
        # In a background process group of the terminal's session (processes.py's
        # own_group), a log line written to a terminal set to `stty tostop` would stop
        # the worker: SIGTTOU ignored, the write goes through.
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        from callhook.serving.supervisor import rpc_socket
        from callhook.serving.workerplan import become_worker

        chosen = os.environ.get(WORKERS_FIRST_PORT)
        if settings.workers.first_port is None and chosen:
            settings.workers.first_port = int(chosen)  # the supervisor's choice
        layout = become_worker(settings, args.worker, count)
        front = FrontBans(
            rpc_socket(settings.data_dir), settings.security.rate, settings.security.ban_seconds
        )
        if settings.database.url is None:  # (with PostgreSQL: the nodes table, below)
            siblings = Siblings.of_workers(
                args.worker,
                [w.sip_port for w in layout.workers],
                os.environ.get(WORKERS_TOKEN),
                front=front,
            )
    # Before any socket: enough open files for the port range, their table grown once.
    descriptors.provide(descriptors.needed(settings.sip.rtp_ports))
    if settings.tracing.endpoint is not None:
        # One trace per call, exported over OTLP (monitoring/tracing.py); a worker's spans
        # say which worker made them.
        instance = "" if args.worker is None else f"worker {args.worker}"
        tracing.start(settings.tracing.endpoint, settings.tracing.service_name, instance)
    services = assembly.services(settings)
    services.start_notifier()
    services.metrics.watch_gc()
    apply_app_flags(args, services)
    host, port = host_port(args.http or f"{settings.http.host}:{settings.http.port}", 8080)
    sip = assembly.sip_service(services, settings.sip.host, settings.sip.port)
    # Nodes sharing PostgreSQL: one of them registers the trunks, for all.
    trunks_role = _trunks_role(services, settings)
    try:
        await sip.start(register=trunks_role is None or await _stand(trunks_role))
    except ListenError as exc:
        await services.close()  # (the speech models loading: a clean exit, status 2)
        raise ConfigError(f"{exc} (set by {_listen_key(exc, settings)})") from None
    following = None
    if trunks_role is not None:  # (from now: a role taken or lost meanwhile is followed)
        following = asyncio.get_running_loop().create_task(_follow_trunks_role(trunks_role, sip))
    if sip.media is not None:
        # The young generations between ticks, not in the middle of one (collector.py).
        sip.media.after_tick = collect_young
    # The private port, bound now: the middleware knows it before any request comes.
    private = private_socket("127.0.0.1", settings.sip.port) if siblings is not None else None
    nodes = None
    if settings.database.url is not None:
        # Every node alive is asked about live calls, on this machine or another.
        from callhook.store.postgres import Nodes

        assert isinstance(services.ownership, Nodes)
        nodes = services.ownership
        first = settings.database.node_port
        private = private_socket(
            settings.database.node_address, first + (args.worker or 0) if first else 0
        )
        bound = private.getsockname()[1]
        where = settings.database.node_address
        where = f"[{where}]:{bound}" if ":" in where else f"{where}:{bound}"
        siblings = Siblings(where, bound, nodes_of(nodes), token=nodes.token, front=front)
    try:
        base = await _start_web(
            services,
            sip,
            host,
            port,
            keys,
            siblings=siblings,
            reuse_port=args.worker is not None,
            private=private,
        )
    except OSError as exc:
        await services.close()
        why = exc.strerror or str(exc)
        raise ConfigError(
            f"the web address {host}:{port} cannot be used: {why} (set by --http, or [http])"
        ) from None
    if nodes is not None and siblings is not None:
        await asyncio.to_thread(nodes.advertise, f"http://{siblings.label}")
    app = services.settings.app_for("") or services.default_app()
    # Everything built so far (modules, schemas, the server) lives as long as the
    # process: keep it out of the collector's passes, so a full collection only
    # walks the calls' objects and stays short (it stops every call's audio).
    # (Not counted as pauses: no call is up yet.)
    services.metrics.gc_quiet = True
    gc.collect()
    gc.freeze()
    services.metrics.gc_quiet = False
    # Full passes only by hand, when due (collector.py): rarely, between calls if possible.
    automatic_full_passes_off()
    # The speech models load on worker threads meanwhile: freeze again once they are in.
    frozen = asyncio.get_running_loop().create_task(
        _freeze_after(services.speech.warming, services.metrics)
    )
    collecting = asyncio.get_running_loop().create_task(_collect_when_due(services.metrics))
    # Ready (serving/readiness.py) once the speech models asked for are in: only then
    # does serve say it serves (a worker: tells the supervisor).
    loading = [asyncio.wrap_future(f) for f in services.speech.warming]
    await asyncio.gather(*loading, return_exceptions=True)
    # SIGTERM stops it gracefully, SIGHUP reloads it, from before it says it serves: a
    # signal that follows the word at once (systemd's, the supervisor's) must not find
    # the default action, which ends the process.
    status = f"serving, SIP {settings.sip.host}:{sip.port}, web {base}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    reloader = Reloader(
        Path(args.config) if getattr(args, "config", None) else None,
        settings,
        services,
        keys=keys,
        make_keys=lambda new: api_keys(args, new),
        guard=sip.guard,
        outbound=sip.outbound,
        flags=lambda new: _flag_app(args, new, services.secret),
        trunks=lambda new: sip.trunks.reload(new, sip.trunks_changed),
    )

    def reload() -> None:
        manager.reloading()
        reloader.reload()
        manager.ready(status)

    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, reload)
    if args.worker is not None:

        def orphaned() -> None:  # (no SIGTERM comes when its fork server went first)
            logger.warning("worker %s: the supervisor has gone: shutting down", args.worker)
            stop.set()

        when_unread(sys.stdout.fileno(), orphaned)
        _say(READY)  # the supervisor prints where callhook is reached
    else:
        _banner(settings, sip, base, app)
    manager.ready(status)
    try:
        await stop.wait()
    finally:
        manager.stopping()
        _say("callhook: shutting down (new calls get 503)")
        frozen.cancel()
        collecting.cancel()
        if following is not None:
            following.cancel()
            await _resign(trunks_role)
        await sip.shutdown(settings.sip.shutdown_grace)
        if sip.outbound_share is not None:
            sip.outbound_share.close()
        if sip.shared_bans is not None:
            sip.shared_bans.close()
        await services.close()
        if siblings is not None:
            await siblings.close()
        tracing.stop()  # (the last calls' spans exported)
    return 0


def _readiness(services: Services, sip: SipService, siblings: Siblings | None) -> Readiness:
    """``/healthz`` and ``/readyz`` over this process's parts (serving/readiness.py)."""
    front = services.settings.workers.front

    async def database() -> object:
        return await services.db.run(lambda conn: conn.execute("SELECT 1").fetchone())

    return Readiness(
        accepting=lambda: sip.agent is not None and sip.agent.accepting,
        speech_loading=lambda: any(not f.done() for f in services.speech.warming),
        database=database,
        front=front.target if front is not None else None,
        # The workers of this machine are one server to a balancer; nodes on several
        # machines are not: one node down must not make the others unready.
        siblings=siblings if services.settings.database.url is None else None,
    )


def _say(line: str) -> None:
    """Print ``line``; a reader gone (a worker's supervisor killed: its pipe closed) must
    not stop the shutdown, whose calls are still to be hung up and reported."""
    try:
        print(line, flush=True)
    except OSError:  # BrokenPipeError: nothing reads standard output any more
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _trunks_role(services: Services, settings: Settings) -> Nodes | None:
    """This node, when it stands for registering the trunks among nodes sharing
    PostgreSQL (a lead worker, with a trunk that registers); None: the trunks are
    registered as in one process (or by worker 0), or there are none to register."""
    if settings.database.url is None or not settings.workers.lead:
        return None
    if not any(trunk.registers for trunk in settings.trunks.values()):
        return None
    from callhook.store.postgres import Nodes

    assert isinstance(services.ownership, Nodes)
    return services.ownership


async def _stand(nodes: Nodes) -> bool:
    """Whether this node registers the trunks at start (it stands for the role)."""
    try:
        return await asyncio.to_thread(nodes.stand)
    except Exception as exc:  # the database is away: its beats will try again
        logger.warning("the trunks' registration waits for the database: %s", exc)
        nodes.candidate = True
        return False


async def _resign(nodes: Nodes | None) -> None:
    """A clean stop: the trunks' role goes at once to the next node that stands."""
    if nodes is None:
        return
    try:
        await asyncio.to_thread(nodes.resign)
    except Exception as exc:  # (its row runs out instead)
        logger.warning("could not give the trunks' registration up: %s", exc)


async def _follow_trunks_role(nodes: Nodes, sip: SipService) -> None:
    """Take up or give up the trunks' registration as the role moves (each beat decides
    who holds it; see ``store/postgres.py``)."""
    failed = ""
    while True:
        await asyncio.sleep(1.0)
        try:
            sip.control.trunks_lead(nodes.leading)
            failed = ""
        except Exception as exc:  # (logged once per cause; the loop goes on)
            if str(exc) != failed:
                failed = str(exc)
                logger.error("could not follow the trunks' registration role: %s", exc)


def _listen_key(exc: ListenError, settings: Settings) -> str:
    """The setting that names the SIP port that could not be listened on."""
    if settings.workers.front is not None:
        return "[workers] first_port"  # a worker's own port (chosen free when not set)
    if exc.transport == "tls":
        return "[sip] tls_port"
    if exc.transport == "tcp" and settings.sip.tcp_port:
        return "[sip] tcp_port"
    return "--sip, or [sip] host and port"


def nodes_of(nodes: Nodes) -> Callable[[], Awaitable[list[tuple[str, str]]]]:
    """The other nodes' private API addresses and tokens, read from the database off the
    event loop."""

    async def peers() -> list[tuple[str, str]]:
        return await asyncio.to_thread(nodes.peers)

    return peers


def private_socket(host: str, port: int) -> socket.socket:
    """The listening socket of the private port (port 0: any free one); ConfigError, with
    the address, when it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise ConfigError(f"the private API port {host}:{port} cannot be used: {exc}") from None


def _banner(settings: Settings, sip: SipService, base: str, app: AppConfig | None) -> None:
    print(f"callhook {__version__} serving", flush=True)
    print(
        f"  SIP: udp {settings.sip.host}:{sip.port}  (call sip:anything@{sip.address}:{sip.port})",
        flush=True,
    )
    for transport, port in sip.ports.items():
        print(f"  SIP: {transport} {settings.sip.host}:{port}", flush=True)
    print(f"  web: {base}", flush=True)
    print(f"  web phone: {base}/phone", flush=True)
    print(f"  application: {redact(app.first_page) if app else '(none)'}", flush=True)
    if app is not None and app.name == "demo":
        print(f"  try it with no phone: {command()} call   (in another terminal)", flush=True)


def command() -> str:
    """How to run this ``callhook`` from the current folder: ``callhook`` when the shell
    finds this one by that name, else its path (``.venv/bin/callhook`` from a checkout:
    printed commands must work as printed)."""
    here = Path(sys.executable).parent / "callhook"
    found = shutil.which("callhook")
    if found is not None and Path(found).resolve() == here.resolve():
        return "callhook"
    if not here.exists():
        return f"{Path(sys.executable).name} -m callhook"
    try:
        relative = here.relative_to(Path.cwd())
    except ValueError:
        return str(here)
    return str(relative) if relative.parts[0] != ".." else str(here)


async def _freeze_after(loading: list[Future[None]], metrics: Metrics) -> None:
    """``gc.freeze()`` again when the models being loaded in the background are in."""
    if loading:
        await asyncio.gather(*(asyncio.wrap_future(f) for f in loading))
        quiet = metrics.active == 0  # a pause with calls up is counted, as any other
        metrics.gc_quiet = quiet
        gc.collect()
        gc.freeze()
        metrics.gc_quiet = False


async def _collect_when_due(metrics: Metrics) -> None:
    """Run the collector's full pass when :class:`~callhook.serving.collector.FullCollections`
    says it is due (it is off otherwise:
    :func:`~callhook.serving.collector.automatic_full_passes_off`)."""
    loop = asyncio.get_running_loop()
    policy = FullCollections(last=loop.time())
    while True:
        await asyncio.sleep(CHECK_EVERY)
        now = loop.time()
        if policy.due(now, metrics.active):
            started = time.perf_counter()
            found = gc.collect()
            policy.ran(loop.time())
            logger.debug(
                "full collection: %d objects freed in %.0f ms, %d calls up",
                found,
                (time.perf_counter() - started) * 1000,
                metrics.active,
            )
