"""The live-call routes of ``serve --workers``, and its stats and bans: one worker's answer
completed by the others'.

Two real aiohttp servers on loopback stand for two workers' private ports; a third
port has nobody on it (a worker that is dead or restarting).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from multidict import MultiDict

from callhook.cluster.siblings import HEADER, Siblings
from callhook.httpserver.aculabshape import WEB_SERVICE_PARAMS


def worker_app(
    calls: list[str],
    hung_up: list[str],
    siblings: Siblings | None,
    bans: set[str] | None = None,
) -> web.Application:
    """A worker's live-call routes over ``calls``, its counters and its ``bans`` (the REST
    API's shapes)."""
    banned = bans if bans is not None else set()

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"calls_active": len(calls)})

    async def list_bans(request: web.Request) -> web.Response:
        return web.json_response([{"address": a, "reason": "flood"} for a in sorted(banned)])

    async def lift(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer k":
            return web.json_response({"error": "unauthorized"}, status=401)
        address = request.match_info["address"]
        if address not in banned:
            return web.json_response({"error": "not_found"}, status=404)
        banned.discard(address)
        return web.json_response({"address": address, "status": "lifted"})

    async def list_calls(request: web.Request) -> web.Response:
        return web.json_response({"calls": [{"call_id": c} for c in calls]})

    async def one(request: web.Request) -> web.Response:
        call_id = request.match_info["id"]
        if call_id not in calls:
            return web.json_response({"error": "not_found"}, status=404)
        if request.method == "DELETE":
            hung_up.append(call_id)
            return web.json_response({"call_id": call_id, "status": "hanging_up"}, status=202)
        return web.json_response({"call_id": call_id, "auth": request.headers["Authorization"]})

    async def log(request: web.Request) -> web.Response:
        call_id = request.match_info["id"]
        if call_id not in calls:
            return web.json_response({"error": "not_found"}, status=404)
        return web.Response(text=f"log of {call_id}")

    async def service_status(request: web.Request) -> web.Response:
        # As the web services read them: the query and a form body together, kept.
        values: MultiDict[str] = MultiDict(request.query)
        values.extend((k, v) for k, v in (await request.post()).items() if isinstance(v, str))
        request[WEB_SERVICE_PARAMS] = values
        reference = values.get("reference_id")
        if reference not in calls or len(values.getall("reference_id")) != 1:
            return web.json_response({"error": "not_found"}, status=404)
        return web.json_response({"reference_id": reference, "status": "in_progress"})

    async def registered_clients(request: web.Request) -> web.Response:
        request[WEB_SERVICE_PARAMS] = MultiDict(request.query)
        return web.json_response({"clients": [{"client_id": f"agent-{c}"} for c in calls]})

    middlewares = [siblings.middleware] if siblings is not None else []
    app = web.Application(middlewares=middlewares)
    app.router.add_get("/api/v1/calls", list_calls)
    app.router.add_route("*", "/api/v1/calls/{id}", one)
    app.router.add_get("/api/calls/{id}/log", log)
    app.router.add_get("/phone", phone)
    app.router.add_get("/api/stats", stats)
    app.router.add_get("/api/bans", list_bans)
    app.router.add_delete("/api/bans/{address}", lift)
    app.router.add_post("/api/v1/calls", place)
    app.router.add_route("*", "/service_status", service_status)
    app.router.add_route("*", "/webrtc_registered_clients", registered_clients)
    return app


async def place(request: web.Request) -> web.Response:
    return web.json_response({"call_id": "new"}, status=201)


async def phone(request: web.Request) -> web.Response:
    return web.Response(text="the web phone")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
async def workers() -> AsyncIterator[dict[str, Any]]:
    # The third: bound and never listening, so nobody can take it meanwhile (a test in
    # another process) and a connection to it is refused, as to a dead worker's.
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    ports = [free_port(), free_port(), dead.getsockname()[1]]
    siblings = Siblings.of_workers(0, ports)
    hung_up: list[str] = []
    runners: list[web.AppRunner] = []
    bans = [{"192.0.2.1", "192.0.2.9"}, {"192.0.2.2", "192.0.2.9"}]
    for app in (
        worker_app(["a1"], hung_up, siblings, bans[0]),
        worker_app(["b1", "b2"], hung_up, None, bans[1]),
    ):
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", ports[len(runners)]).start()
        runners.append(runner)
    try:
        yield {"base": f"http://127.0.0.1:{ports[0]}", "hung_up": hung_up, "bans": bans}
    finally:
        await siblings.close()
        for runner in runners:
            await runner.cleanup()
        dead.close()


async def get(url: str, method: str = "GET", **headers: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as client,
        client.request(method, url, headers={"Authorization": "Bearer k", **headers}) as r,
    ):
        return r.status, await r.text()


async def test_the_private_port_takes_no_other_method(workers: dict[str, Any]) -> None:
    status, _ = await get(workers["base"] + "/api/v1/calls", method="POST")
    assert status == 404  # placing a call is not one of the siblings' questions


async def test_a_request_refused_here_is_not_passed_on(workers: dict[str, Any]) -> None:
    """A wrong key is not sent on to the others (each would count it against this
    worker's address, and ban it)."""
    status, _ = await get(
        workers["base"] + "/api/bans/192.0.2.2", method="DELETE", Authorization="Bearer bad"
    )
    assert status == 401 and workers["bans"][1] == {"192.0.2.2", "192.0.2.9"}


async def test_the_list_has_every_workers_calls(workers: dict[str, Any]) -> None:
    status, text = await get(workers["base"] + "/api/v1/calls")
    assert status == 200
    assert sorted(c["call_id"] for c in json.loads(text)["calls"]) == ["a1", "b1", "b2"]


async def test_a_call_of_another_worker_is_found_with_the_callers_key(
    workers: dict[str, Any],
) -> None:
    status, text = await get(workers["base"] + "/api/v1/calls/b2")
    assert status == 200 and '"call_id": "b2"' in text and "Bearer k" in text
    status, text = await get(workers["base"] + "/api/calls/b1/log")
    assert (status, text) == (200, "log of b1")
    status, _ = await get(workers["base"] + "/api/v1/calls/b1", method="DELETE")
    assert status == 202 and workers["hung_up"] == ["b1"]


async def test_the_answering_workers_own_call_is_answered_by_it(workers: dict[str, Any]) -> None:
    status, text = await get(workers["base"] + "/api/v1/calls/a1")
    assert status == 200 and '"call_id": "a1"' in text


async def test_the_private_port_answers_only_the_siblings_questions(
    workers: dict[str, Any],
) -> None:
    # The fixture's first server is worker 0's private port as well (its own port).
    status, _ = await get(workers["base"] + "/phone")
    assert status == 404
    status, _ = await get(workers["base"] + "/api/v1/calls/a1")
    assert status == 200


async def test_a_call_nobody_has_is_404_and_a_siblings_question_is_not_passed_on(
    workers: dict[str, Any],
) -> None:
    status, _ = await get(workers["base"] + "/api/v1/calls/zz")
    assert status == 404
    status, text = await get(workers["base"] + "/api/v1/calls/b2", **{HEADER: "1"})
    assert status == 404  # asked by a sibling: this worker answers for itself only
    status, text = await get(workers["base"] + "/api/v1/calls", **{HEADER: "1"})
    assert '"b1"' not in text


async def test_stats_are_the_answering_workers_with_every_workers_beside(
    workers: dict[str, Any],
) -> None:
    status, text = await get(workers["base"] + "/api/stats")
    stats = json.loads(text)
    assert status == 200 and stats["calls_active"] == 1  # worker 0's own, as in one process
    # Every worker that answered (the third is dead): its counters and its index.
    assert stats["workers"] == [
        {"worker": 0, "calls_active": 1},
        {"worker": 1, "calls_active": 2},
    ]


async def test_bans_are_every_workers_and_a_lift_reaches_each(workers: dict[str, Any]) -> None:
    status, text = await get(workers["base"] + "/api/bans")
    listed = sorted((b["address"], b["worker"]) for b in json.loads(text))
    assert status == 200 and listed == [
        ("192.0.2.1", 0),
        ("192.0.2.2", 1),
        ("192.0.2.9", 0),
        ("192.0.2.9", 1),
    ]
    status, _ = await get(workers["base"] + "/api/bans/192.0.2.2", method="DELETE")
    assert status == 200 and workers["bans"][1] == {"192.0.2.9"}  # lifted where it was
    status, _ = await get(workers["base"] + "/api/bans/192.0.2.9", method="DELETE")
    assert status == 200 and workers["bans"] == [{"192.0.2.1"}, set()]  # on both
    status, _ = await get(workers["base"] + "/api/bans/198.51.100.7", method="DELETE")
    assert status == 404


async def test_a_node_answers_nothing_meant_for_another() -> None:
    """Two machines that both said 127.0.0.1: a node asked at another's address answers
    404, rather than have its calls counted as the other's too."""

    async def no_nodes() -> list[tuple[str, str]]:
        return []

    port = free_port()
    siblings = Siblings("127.0.0.1:1", port, no_nodes, token="mine")
    runner = web.AppRunner(worker_app(["a1"], [], siblings))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        base = f"http://127.0.0.1:{port}/api/v1/calls"
        status, _ = await get(base, **{HEADER: "x", "X-Callhook-Node": "another"})
        assert status == 404
        status, text = await get(base, **{HEADER: "x", "X-Callhook-Node": "mine"})
        assert status == 200 and '"a1"' in text
    finally:
        await siblings.close()
        await runner.cleanup()


@pytest.mark.parametrize("form", [True, False], ids=["form-body", "query"])
async def test_a_web_service_about_another_workers_call_is_passed_on_whole(
    workers: dict[str, Any], form: bool
) -> None:
    """Aculab's service_status for a call of another worker: its parameters reach the
    worker that has it, whether they came in the query or a form body."""
    url = workers["base"] + "/service_status"
    async with aiohttp.ClientSession() as client:
        if form:
            request = client.post(url, data={"reference_id": "b2"})
        else:
            request = client.get(url, params={"reference_id": "b2"})
        async with request as r:
            assert r.status == 200, await r.text()
            assert (await r.json())["reference_id"] == "b2"
        async with client.post(url, data={"reference_id": "nobody"}) as r:
            assert r.status == 404


async def test_the_registered_web_clients_are_every_workers(workers: dict[str, Any]) -> None:
    status, text = await get(workers["base"] + "/webrtc_registered_clients")
    assert status == 200, text
    listed = sorted(c["client_id"] for c in json.loads(text)["clients"])
    assert listed == ["agent-a1", "agent-b1", "agent-b2"]


class FakeFront:
    """A machine's Kamailio's bans, as FrontBans gives them."""

    def __init__(self, host: str, banned: set[str]) -> None:
        self.host = host
        self.banned = banned

    async def bans(self) -> list[dict[str, Any]]:
        return [{"address": a, "reason": "flood", "seconds_left": 9} for a in sorted(self.banned)]

    async def listed(self) -> list[dict[str, Any]]:
        return [{**ban, "worker": "front", "front": self.host} for ban in await self.bans()]

    async def lift(self, address: str) -> bool:
        if address not in self.banned:
            return False
        self.banned.discard(address)
        return True


async def test_nodes_list_and_lift_every_machines_kamailio_bans_once() -> None:
    """Node A on machine a, nodes B and C on machine b (one Kamailio in front of both):
    A's /api/bans has a's Kamailio's bans and b's, each once; a lift reaches b's."""
    ports = {name: free_port() for name in "abc"}
    fronts = {"a": FakeFront("machine-a", {"203.0.113.5"})}
    fronts["b"] = fronts["c"] = FakeFront("machine-b", {"203.0.113.5", "203.0.113.6"})

    async def others() -> list[tuple[str, str]]:
        return [(f"http://127.0.0.1:{ports[n]}", f"token-{n}") for n in "bc"]

    async def nobody() -> list[tuple[str, str]]:
        return []

    nodes = {
        n: Siblings(
            f"127.0.0.1:{ports[n]}",
            ports[n],
            others if n == "a" else nobody,
            token=f"token-{n}",
            front=cast(Any, fronts[n]),
        )
        for n in "abc"
    }
    runners = []
    for n in "abc":
        runner = web.AppRunner(worker_app([], [], nodes[n], {f"192.0.2.{ord(n)}"}))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", ports[n]).start()
        runners.append(runner)
    try:
        base = f"http://127.0.0.1:{ports['a']}/api/bans"
        status, text = await get(base)
        found = [(str(b["worker"]), b["address"], b.get("front", "")) for b in json.loads(text)]
        assert status == 200 and sorted(found) == sorted(
            [
                (f"127.0.0.1:{ports['a']}", "192.0.2.97", ""),
                (f"127.0.0.1:{ports['b']}", "192.0.2.98", ""),
                (f"127.0.0.1:{ports['c']}", "192.0.2.99", ""),
                ("front", "203.0.113.5", "machine-a"),
                ("front", "203.0.113.5", "machine-b"),
                ("front", "203.0.113.6", "machine-b"),
            ]
        ), found
        status, _ = await get(base + "/203.0.113.6", method="DELETE")
        assert status == 200 and fronts["b"].banned == {"203.0.113.5"}  # b's Kamailio
        status, _ = await get(base + "/203.0.113.5", method="DELETE")
        assert status == 200 and fronts["a"].banned == fronts["b"].banned == set()
    finally:
        for node in nodes.values():
            await node.close()
        for runner in runners:
            await runner.cleanup()
