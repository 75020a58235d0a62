"""``serve --workers N``: start the workers and Kamailio, keep them running, stop them.

The layout and Kamailio's configuration are :mod:`callhook.cluster.workers`'s, how many
workers and what each one's settings become :mod:`callhook.serving.workerplan`'s; this is
the process work. The supervisor runs no calls itself:

1. it writes Kamailio's configuration and dispatcher list into
   ``<data_dir>/run/`` (again at every start, from the settings);
2. it starts the N workers (``callhook serve`` with the same arguments, plus
   ``--worker I``), forked from a fork server (:mod:`callhook.serving.forkserver`: one
   import of their modules for all of them, and for each one started again), each in a
   process group of its own so a terminal's Ctrl-C reaches them only through the
   supervisor (but in the supervisor's session: see
   :func:`callhook.serving.processes.own_group`), and waits until each says it is
   serving;
3. it starts Kamailio in front of them and prints where callhook is reached;
4. when a worker or Kamailio ends without being asked to, it says so and starts
   another in its place (:func:`callhook.cluster.workers.pause_before_restart`: at once,
   then after a pause that doubles while they keep ending soon after their start,
   so one that cannot run does not spin). One that ends at its very first start,
   before it ever took calls (a port taken, a bad configuration), stops everything
   with the reason: nothing a retry would change;
5. on SIGTERM or SIGINT it sends SIGTERM to every worker (each lets its calls
   run on for ``shutdown_grace``, refusing new ones with 503) and stops Kamailio
   only when the workers are done, so their calls' BYEs still pass through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from callhook.cluster.workerports import choose_first_port, front_ports_free
from callhook.cluster.workers import (
    RPC_SOCKET,
    WORKERS_FIRST_PORT,
    WORKERS_TOKEN,
    dispatcher_list,
    kamailio_binary,
    kamailio_config,
    kamailio_modules,
    pause_before_restart,
)
from callhook.config.settings import ConfigError, Settings, load
from callhook.monitoring import prometheus
from callhook.serving.forkserver import UNKNOWN, ForkServer, ForkServerError
from callhook.serving.processes import Running, own_group, python_command, terminate
from callhook.serving.sipprobe import answers_options
from callhook.serving.systemd import SILENT, ServiceManager
from callhook.serving.workerplan import layout_of
from callhook.sip.grammar import parse_hostport
from callhook.sip.transport import Target

logger = logging.getLogger("callhook.workers")

#: What a worker prints on standard output once it takes calls.
READY = "callhook worker ready"
#: How long a worker may take to start (its speech models load in the background).
START_TIMEOUT = 120.0


def run_dir(data_dir: Path) -> Path:
    """Where the supervisor keeps Kamailio's configuration, pid and RPC socket: one
    directory per machine (nodes may share a data directory, docs/scaling.md)."""
    return data_dir / "run" / socket.gethostname()


def rpc_socket(data_dir: Path) -> Path:
    """Kamailio's JSON-RPC socket: in the run directory, or in the system's temporary
    directory when that path would be too long for a Unix socket (108 bytes, less the
    room Kamailio needs)."""
    path = run_dir(data_dir) / RPC_SOCKET
    if len(os.fsencode(path)) <= 96:
        return path
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"callhook-{digest}.sock"


def trunk_sources(settings: Settings) -> tuple[str, ...]:
    """The networks the trunks' calls come from (their ``addresses``, and what their
    registrar and outbound proxy resolve to now): Kamailio admits them like ``[sip]
    proxies``, with no rate limit, as a worker's guard does the trunks."""
    found: list[str] = []
    for trunk in settings.trunks.values():
        found += [str(network) for network in trunk.addresses]
        for hostport in (trunk.registrar, trunk.outbound_proxy):
            if hostport is None:
                continue
            host = parse_hostport(hostport, "host")[0].strip("[]")
            try:
                infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_UDP)
            except OSError as exc:
                logger.warning("trunk %s: cannot resolve %s: %s", trunk.name, host, exc)
                continue
            found += [str(info[4][0]) for info in infos]
    return tuple(dict.fromkeys(found))


@dataclass
class _Child:
    """A process the supervisor keeps running."""

    name: str
    argv: list[str]
    process: Running | None = None
    started: float = 0.0
    pause: float = 0.0
    restarts: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    relay: asyncio.Task[None] | None = None  # passes its output on


class Supervisor:
    """The workers and Kamailio of one ``serve --workers N``."""

    def reload(self, config: Path | None) -> None:
        """SIGHUP: ``config`` checked here (an error: refused, said once, the workers not
        told), then SIGHUP to each worker, which reloads it (serving/reload.py); when
        ``[security]`` or the trunks (whose addresses it trusts) changed, Kamailio is
        started again on a new configuration (calls in progress go on: their media goes
        straight to the workers, their requests through the new Kamailio). (SIGHUP from a
        closed terminal does not reach the workers: they are in process groups of their
        own.)"""
        if config is None:
            logger.warning("SIGHUP: serve was started without --config: nothing to reload")
            return
        try:
            new = load(config)
        except (ConfigError, OSError) as exc:
            logger.error("SIGHUP: the config is refused; the running one stays: %s", exc)
            return
        self.manager.reloading()
        for worker in self.workers:
            if worker.process is not None and worker.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGHUP)
        settings = self.settings
        if (new.security, new.trunks) != (settings.security, settings.trunks):
            settings.security, settings.trunks = new.security, new.trunks
            task = asyncio.get_running_loop().create_task(self._new_front())
            self._tasks.append(task)
        self.manager.ready(self._status())

    async def _new_front(self) -> None:
        """Kamailio again, on a configuration of the reloaded settings."""
        await asyncio.to_thread(self.write_config)  # (the trunks' hosts resolved)
        process = self.kamailio.process
        if process is None or process.returncode is not None or self.stopping:
            return  # (the next one starts on the new configuration anyway)
        self._replacing = True
        logger.info("SIGHUP: Kamailio starts again with the reloaded [security] and trunks")
        with contextlib.suppress(ProcessLookupError):
            process.terminate()

    def __init__(
        self,
        settings: Settings,
        count: int,
        worker_argv: list[str],
        http: tuple[str, int],
        manager: ServiceManager = SILENT,
    ) -> None:
        self.settings = settings
        self.manager = manager
        self.layout = layout_of(settings, count)
        self.http = http
        self.run_dir = run_dir(settings.data_dir)
        self.metrics_dir = self.run_dir / "prometheus"
        kamailio, modules = kamailio_binary(), kamailio_modules()
        if kamailio is None or modules is None:
            raise ConfigError(
                "more than one worker needs Kamailio in front of them: apt install kamailio "
                "(or use --workers 1)"
            )
        self.modules = modules
        host, port = http
        self.workers = [
            _Child(
                f"worker {i}",
                [
                    *worker_argv,
                    "--workers",
                    str(count),
                    "--worker",
                    str(i),
                    "--http",
                    f"{host}:{port}",
                ],
            )
            for i in range(count)
        ]
        config = self.run_dir / "kamailio.cfg"
        self.kamailio = _Child(
            "kamailio",
            [
                kamailio,
                *("-f", str(config), "-DD", "-E", "-m", "64", "-M", "8"),
                *("-P", str(self.run_dir / "kamailio.pid"), "-Y", str(self.run_dir)),
            ],
        )
        # Where the workers are forked from, started with the first of them. Its
        # environment is the workers' (supervise() has completed it), with prometheus-
        # client's variable, which that reads when imported; its data folder is in its
        # command line to tell in `ps` which serve's it is.
        data = ["--data-dir", str(settings.data_dir)]
        self.forks = ForkServer(
            [*python_command(), "-m", "callhook", "serve", "--fork-server", "TERM", *data],
            {**os.environ, prometheus.MULTIPROCESS_ENV: str(self.metrics_dir)},
            preexec=own_group,
        )
        self.stopping = False
        self._quiet = False  # Kamailio was told to stop: its log is not passed on
        self._replacing = False  # Kamailio was told to stop for a reload: started again
        self._tasks: list[asyncio.Task[None]] = []
        self.failed: str | None = None
        self.exit_status = 1  # when it failed
        self._failed = asyncio.Event()

    def write_config(self) -> Path:
        """Kamailio's configuration and dispatcher list, from the settings."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dispatcher = self.run_dir / "dispatcher.list"
        dispatcher.write_text(dispatcher_list(self.layout))
        settings = self.settings
        config = self.run_dir / "kamailio.cfg"
        config.write_text(
            kamailio_config(
                self.layout,
                modules=self.modules,
                dispatcher=dispatcher,
                allow=settings.security.allow,
                trusted=(*settings.sip.proxies, *trunk_sources(settings)),
                unknown=settings.security.unknown,
                rate=settings.security.rate,
                ban_seconds=settings.security.ban_seconds,
                rpc_socket=rpc_socket(settings.data_dir),
            )
        )
        return config

    async def run(self, stop: asyncio.Event) -> int:
        """Start everything, keep it running until ``stop``; the exit status."""
        self.write_config()
        # The workers' Prometheus samples, added up by whichever answers /metrics (an
        # earlier run's are not this one's).
        prometheus.prepare_folder(self.metrics_dir)
        for child in self.workers:
            self._tasks.append(asyncio.create_task(self._keep(child, worker=True)))
        ready = asyncio.create_task(self._all_ready())
        failing = asyncio.create_task(self._failed.wait())
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait(
            [ready, failing, stopping],
            timeout=START_TIMEOUT,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if not done:
            self.failed = f"the workers did not start within {START_TIMEOUT:g} s"
        if self.failed is None and not stop.is_set():
            self._tasks.append(asyncio.create_task(self._keep(self.kamailio, worker=False)))
            probe = asyncio.create_task(asyncio.to_thread(self._answers_sip))
            await asyncio.wait([probe, failing, stopping], return_when=asyncio.FIRST_COMPLETED)
            if probe.done() and probe.result():
                self.kamailio.ready.set()  # it started: from now on it is replaced if it ends
            if self.failed is None and not stop.is_set():
                if probe.done() and not probe.result():
                    logger.warning(
                        "%s:%d did not answer an OPTIONS from this host within 10 s "
                        "(is loopback outside [security] allow?)",
                        self.layout.host,
                        self.layout.port,
                    )
                self._banner()
                self.manager.ready(self._status())
                await asyncio.wait([failing, stopping], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            self.manager.stopping()
        for task in (failing, stopping, ready):
            task.cancel()
        await self.shutdown()
        if self.failed is not None:
            if self.failed:
                print(f"callhook: {self.failed}", file=sys.stderr, flush=True)
            return self.exit_status
        return 0

    def _answers_sip(self, seconds: float = 10.0) -> bool:
        """Whether the SIP address answers an OPTIONS (Kamailio passes it to a worker)
        within ``seconds``: the banner is printed once callhook is reachable there."""
        layout = self.layout
        host = layout.worker_host if layout.host in ("0.0.0.0", "::", "") else layout.host
        return answers_options(
            Target(host, layout.port),
            seconds,
            stop=lambda: self.failed is not None or self.stopping,
        )

    async def _all_ready(self) -> None:
        for child in self.workers:
            await child.ready.wait()

    def _status(self) -> str:
        layout = self.layout
        return (
            f"serving with {len(self.workers)} workers behind Kamailio, "
            f"SIP {layout.host}:{layout.port}, web {self.http[0]}:{self.http[1]}"
        )

    def _banner(self) -> None:
        layout = self.layout
        host, port = self.http
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        print(f"callhook serving with {len(self.workers)} workers behind Kamailio", flush=True)
        print(
            f"  SIP: udp {layout.host}:{layout.port}  "
            f"(call sip:anything@{layout.advertised}:{layout.port})",
            flush=True,
        )
        if layout.tcp_port is not None:
            print(f"  SIP: tcp {layout.host}:{layout.tcp_port}", flush=True)
        if layout.tls is not None:
            print(f"  SIP: tls {layout.host}:{layout.tls[0]}", flush=True)
        for w in layout.workers:
            print(
                f"  worker {w.index}: SIP {layout.worker_host}:{w.sip_port}, "
                f"RTP {w.rtp_ports[0]}-{w.rtp_ports[1]}",
                flush=True,
            )
        print(f"  web: http://{shown}:{port}", flush=True)
        print(f"  web phone: http://{shown}:{port}/phone", flush=True)

    async def _start(self, child: _Child, worker: bool) -> Running:
        if child.restarts:
            child.ready.clear()
        process: Running
        if worker:  # forked (its standard error is the supervisor's)
            env = {**os.environ, prometheus.MULTIPROCESS_ENV: str(self.metrics_dir)}
            process = await self.forks.spawn(child.argv, env, os.getcwd(), stderr=2)
            stream = process.stdout
        else:
            process = await asyncio.create_subprocess_exec(
                *child.argv,
                # Kamailio prints its sockets on standard output; its log is standard
                # error, passed on by _relay.
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=own_group,
            )
            assert process.stderr is not None
            stream = process.stderr
        child.process = process
        child.started = time.monotonic()
        child.relay = asyncio.create_task(self._relay(child, stream, worker))
        self._tasks.append(child.relay)
        # (Kamailio is ready once it answered SIP: run's probe says so.)
        return process

    async def _relay(self, child: _Child, stream: asyncio.StreamReader, worker: bool) -> None:
        """A worker's standard output (its ready line noted), Kamailio's log: passed on.

        Once Kamailio is told to stop, its lines are not: its processes race to end, and
        some say CRITICAL about the sockets their siblings closed first."""
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # longer than the stream's limit: dropped, reading goes on
                await stream.read(2**16)
                continue
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\n")
            if not worker:
                if not self._quiet:
                    print(text, file=sys.stderr, flush=True)
                continue
            if text == READY:
                child.ready.set()
                if child.restarts:
                    logger.warning("%s is serving again", child.name)
                continue
            print(f"{child.name}: {text}", flush=True)

    async def _keep(self, child: _Child, *, worker: bool) -> None:
        """Run ``child``, and another in its place whenever it ends unasked."""
        while not self.stopping:
            try:
                process = await self._start(child, worker)
            except (OSError, ForkServerError) as exc:
                self._fail(f"{child.name} could not start: {exc}")
                return
            if self.stopping:  # shutdown began while it was starting: it missed the SIGTERM
                await terminate([process], self.settings.sip.shutdown_grace + 15.0)
                return
            code = await process.wait()
            # What it forked (Kamailio's children) goes with it, or they keep its ports.
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            if worker:  # its calls are over: no longer counted as in progress in /metrics
                prometheus.worker_ended(self.metrics_dir, process.pid)
            if child.relay is not None:
                # Its last lines (why it ended) are passed on before anything is said of it.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(child.relay), 2.0)
            if self.stopping:
                return
            if child is self.kamailio and self._replacing:
                self._replacing = False  # asked for: again at once, no back-off
                continue
            ran = time.monotonic() - child.started
            how = f"signal {-code}" if code < 0 else f"exit status {code}"
            if code == UNKNOWN:
                how = "a status unknown (its fork server had ended)"
            kamailio = child is self.kamailio
            pause = pause_before_restart(
                kamailio=kamailio,
                ready=child.ready.is_set(),
                restarts=child.restarts,
                ran=ran,
                pause=child.pause,
            )
            if pause is None:
                if code == 2 and not kamailio:
                    # A worker's configuration error: it said why in one line (a port it
                    # cannot listen on, ...); serve ends with the same status, saying no more.
                    self.exit_status = 2
                    self._fail("")
                else:
                    whose = "its lines" if kamailio else "its error"
                    self._fail(f"{child.name} ended at its start ({how}): see {whose} above")
                return
            child.pause = pause
            child.restarts += 1
            # A worker's calls end with it; Kamailio's do not (their RTP goes straight to
            # the workers, their requests through the next Kamailio).
            lost = "calls in progress go on" if kamailio else "its calls are lost"
            logger.error(
                "%s (pid %d) ended after %.0f s with %s: %s; starting another%s",
                child.name,
                process.pid,
                ran,
                how,
                lost,
                f" in {child.pause:g} s" if child.pause else "",
            )
            if child.pause:
                await asyncio.sleep(child.pause)

    def _fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
        self._failed.set()

    async def shutdown(self) -> None:
        """SIGTERM to the workers, wait for them (their grace), then stop Kamailio."""
        self.stopping = True
        grace = self.settings.sip.shutdown_grace + 15.0
        await terminate([c.process for c in self.workers], grace)
        await asyncio.to_thread(self.forks.close)
        self._quiet = True
        await terminate([self.kamailio.process], 10.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def http_port(host: str, port: int) -> int:
    """The web port the workers share (SO_REUSEPORT): a free one when ``port`` is 0."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"the web port {host}:{port} cannot be used: {exc}") from None
        bound: int = probe.getsockname()[1]
        return bound


async def supervise(
    settings: Settings,
    count: int,
    worker_argv: list[str],
    http: tuple[str, int],
    config: Path | None = None,
    manager: ServiceManager = SILENT,
) -> int:
    """Run ``count`` workers behind Kamailio until SIGTERM or SIGINT (the exit status);
    SIGHUP: ``config`` checked, then the workers told to reload it; ``manager`` (systemd)
    told when it serves, reloads and stops."""
    host, port = http
    # The workers' shared token (cluster/siblings.py) and first SIP port: each inherits
    # them from here.
    os.environ[WORKERS_TOKEN] = secrets.token_urlsafe(24)
    settings.workers.first_port = choose_first_port(settings, count)
    os.environ[WORKERS_FIRST_PORT] = str(settings.workers.first_port)
    front_ports_free(settings)
    address = (host, http_port(host, port))
    supervisor = Supervisor(settings, count, worker_argv, address, manager)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, lambda: supervisor.reload(config))
    return await supervisor.run(stop)
