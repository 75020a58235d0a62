"""Running ``callhook serve`` for a test: a real process on free ports of 127.0.0.1."""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer
from callhook.serving.forkserver import ForkedProcess, ForkServer
from tests import leaks

CALLHOOK = [sys.executable, "-m", "callhook"]
#: This checkout's callhook, which the fork server has imported (a test may set ``CALLHOOK``
#: to run it otherwise: in a network namespace, say).
_THIS_CHECKOUT = CALLHOOK

#: Where this test process forks its serves from: the fork server ``serve --workers``
#: forks its workers from (callhook/serving/forkserver.py), started at the first serve,
#: with the environment the tests started with. It kills its serves when this process
#: goes. ``CALLHOOK_TEST_FRESH=1`` starts every serve as a new process instead.
_ZYGOTE: ForkServer | None = None
if os.environ.get("CALLHOOK_TEST_FRESH", "") in ("", "0"):
    _ZYGOTE = ForkServer(
        [*CALLHOOK, "serve", "--fork-server", "KILL"],
        {**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    atexit.register(_ZYGOTE.close)


#: Ports these helpers handed out in this process: the kernel may give a port that was
#: just closed to the next bind, so two ports chosen for one test (baresip's control port,
#: then serve's HTTP port) could otherwise be the same (baresip then exits with 98,
#: EADDRINUSE, seen once in a full run).
_issued: set[int] = set()


#: Under pytest-xdist each worker is a process of its own: the ports are dealt in blocks
#: of 128, round robin, so two workers never pick the same one (a port probed free and
#: closed could otherwise be bound by the other worker before it is used). Only the
#: first 64 of a block are picked, so a peer's ports above its own (baresip's RTP range,
#: a TLS port beside a TCP one) stay in the block.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
# (a worker that crashed is replaced by one numbered past the count: it takes a slot)
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % max(
    _WORKERS, 1
)


def worker_owns(port: int) -> bool:
    """Whether this test process may use ``port`` (always, without pytest-xdist)."""
    if _WORKERS <= 1:
        return True
    return (port // 128) % _WORKERS == _WORKER and port % 128 < 64


def _unissued(port: int) -> bool:
    if port in _issued or not worker_owns(port):
        return False
    _issued.add(port)
    return True


def _ephemeral() -> tuple[int, int]:
    """The kernel's ephemeral ports, which any outgoing connection or unbound socket may
    take at any moment (Linux's default where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _listening_span() -> tuple[int, int] | None:
    """Where the servers' own ports are picked: the larger of the spans above SIPp's media
    and serve's RTP spans (below 30000) that the ephemeral ports leave, or None (then
    the kernel's own choice). A port probed free in the ephemeral range could be taken by
    another test's outgoing connection before the server binds it (serve then exits:
    address already in use, seen in full runs)."""
    low, high = _ephemeral()
    spans = [(30000, min(low, 65536) - 1), (max(high, 29999) + 1, 65535)]
    best = max(spans, key=lambda span: span[1] - span[0])
    return best if best[1] - best[0] >= 1024 else None


_SPAN = _listening_span()
#: Ports are handed out 4 apart: the ports just above one are its peer's (baresip listens
#: for TLS on its SIP port + 1; two serves side by side take a port and the next).
_STRIDE = 4
_listen_next = (
    0 if _SPAN is None else (_SPAN[0] + os.getpid() * 64 % (_SPAN[1] - _SPAN[0])) & ~(_STRIDE - 1)
)


def _candidates() -> Iterator[int]:
    """Ports to try for a server, this worker's only (:func:`worker_owns`): in
    :data:`_SPAN` from where the last search stopped, or the kernel's choice."""
    global _listen_next
    if _SPAN is None:
        for _ in range(400):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                yield s.getsockname()[1]
        return
    first, last = _SPAN[0] + -_SPAN[0] % _STRIDE, _SPAN[1] - _STRIDE + 1
    for _ in range(2 * (last - first + 1) // _STRIDE + 2):
        port = max(_listen_next, first)
        if port + _STRIDE <= last:
            _listen_next = port + _STRIDE
        else:
            # Round again: a port handed out a whole round ago is long closed (or still
            # bound, which the probe finds).
            _listen_next = first
            _issued.difference_update(range(first, _SPAN[1] + 1))
        if worker_owns(port) and port not in _issued:
            yield port


def _bindable(port: int, kinds: tuple[int, ...]) -> bool:
    try:
        for kind in kinds:
            with socket.socket(socket.AF_INET, kind) as s:
                s.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def free_udp_port() -> int:
    """A UDP port that is free for TCP too (callhook serve listens on both by default)."""
    for port in _candidates():
        if _bindable(port, (socket.SOCK_DGRAM, socket.SOCK_STREAM)) and _unissued(port):
            return port
    raise RuntimeError("no port free for both UDP and TCP")


def free_udp_pair() -> int:
    """A port as :func:`free_udp_port` gives, whose next port is free for both too (and
    handed out with it): two serves side by side."""
    for _ in range(400):
        port = free_udp_port()
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, socket.socket() as t:
                s.bind(("127.0.0.1", port + 1))
                t.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        if port + 1 not in _issued:
            _issued.add(port + 1)
            return port
    raise RuntimeError("no two ports in a row free for both UDP and TCP")


def free_tcp_port() -> int:
    """A TCP port free now, and not handed out before by this process."""
    for port in _candidates():
        if _bindable(port, (socket.SOCK_STREAM,)) and _unissued(port):
            return port
    raise RuntimeError("no TCP port free")


#: SIPp's media ports: in 3000-10000, below serve's RTP spans (10000-30000) and the
#: kernel's ephemeral ports (32768 up, which any outgoing connection may take at any
#: moment), a span of their own per pytest-xdist worker, handed out in steps of 4.
_MEDIA_SPAN = 7000 // max(_WORKERS, 1) // 4 * 4
_media_next = 3000 + _WORKER * _MEDIA_SPAN + os.getpid() % (_MEDIA_SPAN // 8) * 4


def free_even_udp_port() -> int:
    """An even UDP port whose next three are free too: SIPp binds its audio RTP and RTCP
    there, and its video RTP and RTCP on the two after (errno 98 when one is taken)."""
    global _media_next
    first = 3000 + _WORKER * _MEDIA_SPAN
    for _ in range(_MEDIA_SPAN // 4):
        port = _media_next
        _media_next = port + 4 if port + 8 <= first + _MEDIA_SPAN else first
        if any(p in _issued for p in range(port, port + 4)):
            continue
        sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
        try:
            for offset, sock in enumerate(sockets):
                sock.bind(("127.0.0.1", port + offset))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        _issued.update(range(port, port + 4))
        return port
    raise RuntimeError("no free even UDP port")


async def wait_for_request(app: AppServer, path: str, timeout: float = 5.0, count: int = 1) -> bool:
    """Wait until ``app`` has received ``count`` requests for ``path`` (False if it did not
    in time)."""
    for _ in range(round(timeout / 0.05)):
        if len(app.bodies(path)) >= count:
            return True
        await asyncio.sleep(0.05)
    return False


def preload_off(config: str) -> str:
    """The TOML text ``config`` with ``[speech] preload = false``: into its own ``[speech]``
    table when it has one (a table is declared once); unchanged when it sets preload."""
    if re.search(r"^\s*preload\s*=", config, re.MULTILINE):
        return config
    table = re.compile(r"^\[speech\][ \t]*$", re.MULTILINE)
    if table.search(config):
        return table.sub("[speech]\npreload = false", config, count=1)
    return config + "\n[speech]\npreload = false\n"


class Server:
    """``callhook serve`` with one application (or the demo), stopped with SIGTERM at the end."""

    def __init__(
        self,
        data_dir: Path,
        *,
        app_url: str | None = None,
        secret: str | None = None,
        final_page: str | None = None,
        error_page: str | None = None,
        extra: tuple[str, ...] = (),
        start_timeout: float = 60.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.data_dir = data_dir
        #: The address serve's SIP (and RTP) listens on: another of 127.0.0.0/8 stands
        #: for another machine.
        self.host = host
        self.start_timeout = start_timeout
        self.sip_port = free_udp_port()
        self.http_port = free_tcp_port()
        # Below the kernel's ephemeral ports (32768 up), where the port helpers probe, and
        # a span of its own per pytest-xdist worker; serve skips a port in use.
        span = 20000 // max(_WORKERS, 1)
        base = 10000 + _WORKER * span + (os.getpid() * 37 + self.sip_port) % (span - 202)
        self.rtp_ports = (base & ~1, (base & ~1) + 200)
        self.args = [
            "serve",
            "--workers",
            "1",
            "--sip",
            f"{host}:{self.sip_port}",
            "--http",
            f"127.0.0.1:{self.http_port}",
            "--rtp-ports",
            f"{self.rtp_ports[0]}-{self.rtp_ports[1]}",
            "--data-dir",
            str(data_dir),
            *extra,
        ]
        for flag, value in (
            ("--app-url", app_url),
            ("--secret", secret),
            ("--final-page", final_page),
            ("--error-page", error_page),
        ):
            if value is not None:
                self.args += [flag, value]
        for flag in ("--secret", "--api-key"):
            if flag in self.args:
                leaks.used(self.args[self.args.index(flag) + 1])
        self.proc: asyncio.subprocess.Process | ForkedProcess | None = None
        self.output = ""
        self._reader: asyncio.Task[None] | None = None
        #: Added to serve's environment.
        self.env: dict[str, str] = {}
        #: What runs callhook: this checkout's, unless a test installed another.
        self.command: list[str] = CALLHOOK
        #: Whether serve starts as a new process of its own rather than forked from the
        #: test process's fork server (for a test that reads its /proc/<pid>/maps or environ).
        self.fresh = False
        #: Whether the speech models load at start-up (``[speech] preload``, the product's
        #: default). Off unless a test asks: most of the suite's serves never speak or
        #: listen, and loading both models is most of what a start costs in CPU (the models
        #: of a serve that does load when first used, as in every worker's serve).
        self.preload = False

    @classmethod
    def for_app(
        cls, data_dir: Path, app: AppServer, extra: tuple[str, ...] = (), host: str = "127.0.0.1"
    ) -> Server:
        """serve running ``app``: its /start, its /final, its secret."""
        return cls(
            data_dir,
            app_url=app.url("/start"),
            secret=app.secret,
            final_page=app.url("/final"),
            extra=extra,
            host=host,
        )

    @property
    def sip(self) -> tuple[str, int]:
        return (self.host, self.sip_port)

    async def __aenter__(self) -> Server:
        for _ in range(3):
            if await self._start():
                return self
            # A port this harness chose was taken meanwhile (it is in the kernel's range
            # of ephemeral ports, which any process's outgoing connection may get): the
            # same serve on other ports. A port the test chose is the test's business.
            taken = re.search(r"address \('[^']*', (\d+)\): address already in use", self.output)
            if taken is None or int(taken.group(1)) not in (self.http_port, self.sip_port):
                break
            old = (f":{self.sip_port}", f":{self.http_port}")
            self.sip_port, self.http_port = free_udp_port(), free_tcp_port()
            new = (f":{self.sip_port}", f":{self.http_port}")
            self.args = [
                a.replace(old[0], new[0]).replace(old[1], new[1]) if a.endswith(old) else a
                for a in self.args
            ]
            self.output = ""
        raise AssertionError(f"callhook serve did not start:\n{self.output}")

    def _without_preload(self) -> None:
        """``[speech] preload = false`` in serve's config file (one beside the data folder
        when it has none), unless the test asked for preload or set it itself."""
        if "--config" in self.args:
            config = Path(self.args[self.args.index("--config") + 1])
            text = config.read_text()
        else:
            config, text = self.data_dir.parent / f"preload-{self.sip_port}.toml", ""
            self.args += ["--config", str(config)]
        config.write_text(preload_off(text))

    async def _start(self) -> bool:
        """Start serve; True once it says where its web server is, False if it does not
        (stopped)."""
        if not self.preload:
            self._without_preload()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        if _ZYGOTE is not None and self.command is _THIS_CHECKOUT and not self.fresh:
            self.proc = await _ZYGOTE.spawn(self.args, env, os.getcwd())
        else:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command,
                *self.args,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
            )
        self._reader = asyncio.create_task(self._read())
        # Up to a minute: a start takes a second or two, far more on a loaded machine.
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if "web: " in self.output:
                return True
            if self.proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        await self._stop_unstarted()
        await asyncio.wait_for(self._reader, 5)  # (all it said, for the reason)
        return False

    async def _stop_unstarted(self) -> None:
        """Stop a serve that did not start in time (not left running past the test)."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.output += line.decode(errors="replace")

    async def api(self, method: str, path: str) -> tuple[int, Any]:
        """``method path`` on serve's HTTP server with the installation secret as bearer
        token (``/api/stats``, ``/api/trunks``, ``/api/bans``): status and JSON body."""
        import aiohttp

        secret = (self.data_dir / "secret").read_text().strip()
        async with (
            aiohttp.ClientSession() as http,
            http.request(
                method,
                f"http://127.0.0.1:{self.http_port}{path}",
                headers={"Authorization": f"Bearer {secret}"},
            ) as response,
        ):
            return response.status, await response.json()

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 40)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 5)
        return code

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.stop()
        finally:
            # Kept for the session's check that no secret reached a log (tests/leaks.py).
            (self.data_dir.parent / f"serve-{self.sip_port}.out").write_text(self.output)


def _kamailio_missing() -> bool:
    from callhook.cluster.workers import kamailio_binary, kamailio_modules

    return kamailio_binary() is None or kamailio_modules() is None


#: ``serve`` both ways a test of a capability runs it: one process, and its default
#: deployment, workers behind Kamailio (skipped where Kamailio is not installed).
WORKERS = [
    pytest.param(1, id="one-process"),
    pytest.param(
        2,
        id="workers-behind-kamailio",
        marks=pytest.mark.skipif(_kamailio_missing(), reason="Kamailio is not installed"),
    ),
]


def served(tmp_path: Path, app: AppServer, workers: int, config: str = "") -> Server:
    """``serve`` running ``app`` with the config file ``config`` (TOML text): one process,
    or ``workers`` behind Kamailio; the speech models loaded when first used unless the
    config or the test asks for them at start (:attr:`Server.preload`), either way."""
    extra: tuple[str, ...] = ()
    if workers > 1:
        config += f"\n[workers]\nfirst_port = {free_even_udp_port()}\n"
        extra = ("--workers", str(workers))
    path = tmp_path / "callhook.toml"
    path.write_text(config)
    server = Server.for_app(tmp_path / "data", app, extra=("--config", str(path), *extra))
    server.start_timeout = 150.0  # the workers load at once: slow on a loaded machine
    return server
