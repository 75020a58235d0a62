"""``/healthz`` and ``/readyz`` of a real ``serve``, one process and workers behind
Kamailio: ready once it says it serves (every check ok; with workers, the front
answering SIP and every worker ready); draining on SIGTERM while a call finishes (not
ready, the call goes on to its end); with workers, a worker killed makes it not ready
until the supervisor's new one is up."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, served, wait_for_request
from tests.e2e.test_workers import worker_pids

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


async def probe(server: Server, path: str = "/readyz") -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(f"http://127.0.0.1:{server.http_port}{path}") as r,
    ):
        return r.status, await r.json()


async def until_status(server: Server, wanted: int, seconds: float = 30.0) -> Any:
    """Ask /readyz every 50 ms until it answers ``wanted``: that answer's body."""
    seen: list[Any] = []
    for _ in range(round(seconds / 0.05)):
        try:
            status, body = await probe(server)
        except (aiohttp.ClientError, TimeoutError) as exc:
            seen.append(repr(exc))
        else:
            if status == wanted:
                return body
            seen.append((status, body))
        await asyncio.sleep(0.05)
    raise AssertionError(f"/readyz never answered {wanted}: {seen[-3:]}\n{server.output}")


@pytest.mark.parametrize("workers", WORKERS)
async def test_ready_once_serving_and_draining_on_sigterm(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page("/start", [{"sleep": {"seconds": 6}}])
    app.page("/final", None)
    server = served(tmp_path, app, workers)
    server.preload = True  # (the product's default: one process loads the models at start)
    async with server:
        # The banner came: ready, at once.
        assert await probe(server, "/healthz") == (200, {"status": "alive"})
        status, body = await probe(server)
        assert status == 200, body
        assert set(body["checks"].values()) == {"ok"}, body
        if workers > 1:
            assert "front" in body["checks"]
            assert body["workers"] == {"0": "ready", "1": "ready"}, body
        bye = sipp.BYE_FROM_SERVER.format(timeout_ms=20000)
        call = asyncio.create_task(
            sipp.call(server.sip, tmp_path, sipp.invite("ivr"), sipp.ANSWERED, bye)
        )
        for _ in range(200):
            if app.bodies("/start"):
                break
            await asyncio.sleep(0.05)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)  # an upgrade: drain
        draining = await until_status(server, 503, 5)
        # (With workers: the one asked, or another, each told at once.)
        assert "sip: shutting down" in str(draining.get("workers")) or (
            draining["checks"]["sip"] == "shutting down"
        ), draining
        run = await call  # the call in progress goes on to its end
        assert run.returncode == 0, run.output + server.output
        assert await wait_for_request(app, "/final", timeout=10)
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"


@pytest.mark.parametrize("workers", WORKERS[1:])  # (with workers only)
async def test_a_killed_worker_is_not_ready_until_it_is_back(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    async with served(tmp_path, app, workers) as server:
        await until_status(server, 200, 10)
        pids = worker_pids(server.data_dir)
        os.kill(pids[1], signal.SIGKILL)
        missing = await until_status(server, 503, 10)
        assert missing["workers"]["1"] in ("not answering", "not ready: speech: loading"), missing
        back = await until_status(server, 200, 60)  # the supervisor started another
        assert back["workers"] == {"0": "ready", "1": "ready"}, back
        assert worker_pids(server.data_dir)[1] != pids[1]


@pytest.mark.parametrize("workers", WORKERS)
async def test_systemd_is_told_when_it_serves_reloads_and_stops(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Under a unit of ``Type=notify``: ``READY=1`` once it serves, ``RELOADING=1`` then
    ``READY=1`` around a reload, ``STOPPING=1`` on SIGTERM, on the socket systemd names
    (an abstract one here, as systemd's own); the workers do not inherit it."""
    name = f"callhook-test-notify-{os.getpid()}-{workers}"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind("\0" + name)
    receiver.setblocking(False)
    loop = asyncio.get_running_loop()

    async def told(seconds: float = 30.0) -> set[str]:
        data = await asyncio.wait_for(loop.sock_recv(receiver, 4096), seconds)
        return set(data.decode().splitlines())

    app.page("/start", [{"hang_up": {}}])
    server = served(tmp_path, app, workers)
    server.env["NOTIFY_SOCKET"] = "@" + name
    try:
        async with server:
            assert server.proc is not None
            ready = await told()
            assert "READY=1" in ready and any(f.startswith("STATUS=serving") for f in ready)
            assert (await probe(server))[0] == 200  # as it said
            if workers > 1:
                for pid in worker_pids(tmp_path / "data").values():
                    assert b"NOTIFY_SOCKET" not in Path(f"/proc/{pid}/environ").read_bytes()
            server.proc.send_signal(signal.SIGHUP)
            assert "RELOADING=1" in await told()
            assert "READY=1" in await told()
            server.proc.send_signal(signal.SIGTERM)
            assert "STOPPING=1" in await told()
    finally:
        receiver.close()
