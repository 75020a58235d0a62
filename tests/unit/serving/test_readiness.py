"""``/healthz`` and ``/readyz`` (serving/readiness.py): each check, and the workers'
answers gathered. A real aiohttp server on loopback; the process's parts are stand-ins
(this layer only: tests/e2e/test_readiness.py asks a real serve)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from callhook.cluster.siblings import Siblings
from callhook.serving.readiness import Readiness
from callhook.serving.sipprobe import answers_options
from callhook.sip.transport import Target


async def ok_database() -> None:
    return None


async def get(readiness: Readiness, path: str = "/readyz") -> tuple[int, Any]:
    app = web.Application()
    app.add_routes(readiness.routes())
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{server.port}{path}") as r,
        ):
            return r.status, await r.json()
    finally:
        await server.close()


def readiness(
    accepting: bool = True,
    loading: bool = False,
    database: Callable[[], Awaitable[object]] = ok_database,
    **kw: Any,
) -> Readiness:
    return Readiness(
        accepting=lambda: accepting,
        speech_loading=lambda: loading,
        database=database,
        **kw,
    )


async def test_alive_and_ready_when_every_check_is_ok() -> None:
    assert await get(readiness(), "/healthz") == (200, {"status": "alive"})
    status, body = await get(readiness())
    assert status == 200
    assert body == {"checks": {"sip": "ok", "speech": "ok", "database": "ok"}, "ready": True}


async def test_draining_loading_and_a_database_away_are_not_ready() -> None:
    async def broken() -> None:
        raise OSError("gone")

    status, body = await get(readiness(accepting=False, loading=True, database=broken))
    assert status == 503 and body["ready"] is False
    assert body["checks"] == {
        "sip": "shutting down",
        "speech": "loading",
        "database": "unreachable: OSError",
    }
    assert (await get(readiness(accepting=False)))[0] == 503  # draining alone


async def test_a_front_that_does_not_answer_sip_is_not_ready() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # a port nobody answers on
        front = Target("127.0.0.1", silent.getsockname()[1])
        status, body = await get(readiness(front=front))
    assert status == 503 and body["checks"]["front"] == "no answer to OPTIONS"


async def test_a_front_that_answers_options_is_ready() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as front:
        front.bind(("127.0.0.1", 0))

        def answer() -> None:
            data, source = front.recvfrom(4096)
            assert data.startswith(b"OPTIONS sip:")
            front.sendto(b"SIP/2.0 200 OK\r\n\r\n", source)

        answering = asyncio.get_running_loop().run_in_executor(None, answer)
        target = Target("127.0.0.1", front.getsockname()[1])
        assert await asyncio.to_thread(answers_options, target, 2.0)
        await answering


async def test_the_answer_gathers_every_workers_and_one_silent_is_not_ready() -> None:
    """Worker 0 ready, worker 1 loading its models, worker 2 gone."""
    loading = readiness(loading=True)
    app = web.Application()
    app.add_routes(loading.routes())
    one = TestServer(app, host="127.0.0.1")
    await one.start_server()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        gone = closed.getsockname()[1]
    siblings = Siblings(
        0,
        0,
        [(1, f"http://127.0.0.1:{one.port}", None), (2, f"http://127.0.0.1:{gone}", None)],
    )
    try:
        status, body = await get(readiness(siblings=siblings))
    finally:
        await siblings.close()
        await one.close()
    assert status == 503
    assert body["workers"] == {
        "0": "ready",
        "1": "not ready: speech: loading",
        "2": "not answering",
    }


async def test_a_flood_of_readyz_asks_the_database_once_at_a_time() -> None:
    """No key is needed, so what costs something is shared: requests that come while the
    database is being asked wait for that answer; the next one after it asks again (a
    fresh answer: nothing is kept)."""
    asked: list[int] = []
    release = asyncio.Event()

    async def database() -> None:
        asked.append(len(asked))
        await release.wait()

    checks = readiness(database=database)
    flood = [asyncio.ensure_future(checks.checks()) for _ in range(50)]
    await asyncio.sleep(0)
    release.set()
    answers = await asyncio.gather(*flood)
    assert asked == [0] and all(a["database"] == "ok" for a in answers)
    await checks.checks()
    assert asked == [0, 1]  # asked again


async def test_a_flood_of_readyz_probes_the_front_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each probe of the front is a thread waiting up to 2 s for Kamailio's answer: the
    requests that come while one is out wait for it."""
    from callhook.serving import readiness as module

    probes: list[Target] = []
    release = threading.Event()

    def probe(front: Target, timeout: float) -> bool:
        probes.append(front)
        release.wait(5)
        return True

    monkeypatch.setattr(module, "answers_options", probe)
    checks = readiness(front=Target("127.0.0.1", 9))
    flood = [asyncio.ensure_future(checks.checks()) for _ in range(20)]
    await asyncio.sleep(0.1)
    release.set()
    answers = await asyncio.gather(*flood)
    assert len(probes) == 1 and all(a["front"] == "ok" for a in answers)


async def test_one_waiter_gone_does_not_cancel_the_others_answer() -> None:
    from callhook.serving.readiness import Shared

    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "ok"

    shared = Shared(slow)
    first, second = asyncio.ensure_future(shared.get()), asyncio.ensure_future(shared.get())
    await asyncio.sleep(0)
    first.cancel()
    release.set()
    assert await second == "ok"
