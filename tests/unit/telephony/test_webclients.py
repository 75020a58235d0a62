"""Pages signed in to receive calls (telephony/webclients.py) and the far leg that rings
them (telephony/webclientleg.py): sign-in by token, key or loopback; ringing, answering,
rejecting, busy, a page going away; the causes each gives the connect.

The socket tests run a real aiohttp server on loopback; the credential checks from
elsewhere use mocked requests (no real socket here has another address). The far leg
runs against a media engine stand-in that records what it is given (this layer only:
tests/e2e/test_webclients.py has the real calls)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request

from callhook.config.settings import AppConfig
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.restapi import ApiError, errors
from callhook.telephony import webrtctoken
from callhook.telephony.webclientleg import WebClientLeg
from callhook.telephony.webclients import Busy, NotSignedIn, WebClients

KEY = "ivr-key-0123456789abcdef"
SALES_KEY = "sales-key-0123456789abcdef"
NOW = 1_800_000_000.0


class Done:
    """Told already (no siblings here)."""

    def __await__(self) -> Generator[None, None, None]:
        return
        yield


class Bans:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def banned(self, address: str) -> bool:
        return False

    def auth_failed(self, address: str, what: str) -> Awaitable[None]:
        self.failed.append(address)
        return Done()


class Line:
    """The caller's side, as a test sees it."""

    def __init__(self) -> None:
        self.said: list[Any] = []
        self.why: str | None = None

    def to_caller(self, message: str | bytes) -> None:
        self.said.append(message if isinstance(message, bytes) else json.loads(message))

    def gone(self, why: str) -> None:
        self.why = why


def clients(now: Callable[[], float] = lambda: NOW) -> tuple[WebClients, Bans]:
    apps = {
        name: AppConfig(name=name, first_page=f"http://127.0.0.1:1/{name}", secret="x" * 32)
        for name in ("ivr", "sales")
    }
    bans = Bans()
    keys = KeyRing({KEY: "ivr", SALES_KEY: "sales"})
    return WebClients(keys, lambda: apps, bans=cast(Any, bans), now=now), bans


@pytest.fixture
async def served() -> AsyncIterator[tuple[WebClients, Bans, str]]:
    found, bans = clients()
    app = web.Application(middlewares=[errors])  # (serve's: an ApiError is its JSON answer)
    app.add_routes(found.routes())
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield found, bans, f"ws://127.0.0.1:{server.port}/phone/client"
    await server.close()


async def until(check: Callable[[], Any]) -> Any:
    for _ in range(200):
        if value := check():
            return value
        await asyncio.sleep(0.01)
    raise AssertionError("not in time")


def token(client_id: str, now: float = NOW, app: str = "ivr", **kw: Any) -> str:
    key = KeyRing({KEY: "ivr", SALES_KEY: "sales"}).signing_key(app)
    assert key is not None
    return webrtctoken.mint(key, app, client_id, now, **kw)


async def test_a_page_signs_in_rings_answers_and_hangs_up(
    served: tuple[WebClients, Bans, str],
) -> None:
    found, _, url = served
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_json({"type": "register", "client_id": "agent-7", "token": token("agent-7")})
        registered = await ws.receive_json()
        assert registered == {
            "type": "registered",
            "app": "ivr",
            "client_id": "agent-7",
            "expires": NOW + 3600,
        }
        assert [c.client_id for c in found.signed_in("ivr")] == ["agent-7"]
        assert found.signed_in("sales") == []
        line = Line()
        channel, where = await found.ring("ivr", "agent-7", "c1", line, {"call_from": "x"})
        assert where == "here"
        assert await ws.receive_json() == {"type": "incoming", "call_id": "c1", "call_from": "x"}
        with pytest.raises(Busy):  # one call at a time
            found.ring_here("ivr", "agent-7", "c2", Line(), {})
        with pytest.raises(NotSignedIn):  # a client id is of one application
            await found.ring("sales", "agent-7", "c3", Line(), {})
        await ws.send_bytes(b"\x80" + bytes(11))  # audio before answering: dropped
        await ws.send_json({"type": "answer", "call_id": "old"})  # another call's: ignored
        await ws.send_json({"type": "answer", "call_id": "c1"})
        await ws.send_bytes(b"\x80" + bytes(171))
        await until(lambda: len(line.said) == 2)
        assert line.said == [{"type": "answer"}, b"\x80" + bytes(171)]
        channel.to_client(b"to the page")
        assert (await ws.receive()).data == b"to the page"
        await ws.send_json({"type": "hangup", "call_id": "c1"})
        await until(lambda: len(line.said) == 3)
        assert line.said[-1] == {"type": "hangup"}
        channel.close()  # the caller's side learns of it and lets go: no "ended" now
        line2 = Line()
        channel2, _ = await found.ring("ivr", "agent-7", "c4", line2, {})
        assert (await ws.receive_json())["call_id"] == "c4"
        channel2.close()  # the caller's side gave up (another destination answered)
        assert await ws.receive_json() == {"type": "ended", "call_id": "c4"}
    await until(lambda: not found.clients)  # signed out with its socket


async def test_reject_with_a_cause_or_without_and_a_page_going_away(
    served: tuple[WebClients, Bans, str],
) -> None:
    found, _, url = served
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url) as ws:
            await ws.send_json({"type": "register", "client_id": "a", "app": "ivr"})
            assert (await ws.receive_json())["type"] == "registered"  # loopback: no key
            for sent, cause in ((603, 603), (None, 486), (200, 486), ("x", 486)):
                line = Line()
                await found.ring("ivr", "a", "c", line, {})
                await ws.receive_json()
                reject: dict[str, Any] = {"type": "reject", "call_id": "c"}
                if sent is not None:
                    reject["cause"] = sent
                await ws.send_json(reject)
                await until(line.said.copy)  # (a list: empty until the page's answer)
                assert line.said == [{"type": "reject", "cause": cause}]
            ringing = Line()
            await found.ring("ivr", "a", "c", ringing, {})
        await until(lambda: ringing.why)
        assert ringing.why == "the page closed its socket"


async def test_a_second_page_takes_the_client_id_over(
    served: tuple[WebClients, Bans, str],
) -> None:
    found, _, url = served
    async with aiohttp.ClientSession() as http:
        first = await http.ws_connect(url)
        await first.send_json({"type": "register", "client_id": "a", "app": "ivr"})
        await first.receive_json()
        second = await http.ws_connect(url)
        await second.send_json({"type": "register", "client_id": "a", "app": "ivr"})
        assert (await second.receive_json())["type"] == "registered"
        replaced = await first.receive_json()
        assert (replaced["type"], replaced["code"]) == ("error", "replaced")
        line = Line()
        await found.ring("ivr", "a", "c", line, {})
        assert (await second.receive_json())["type"] == "incoming"
        await first.close()
        await asyncio.sleep(0.05)
        assert found.clients[("ivr", "a")] is not None and line.why is None
        await second.close()


async def test_a_bad_first_message_or_none_is_an_error_then_the_socket_closes(
    served: tuple[WebClients, Bans, str],
) -> None:
    _, bans, url = served
    async with aiohttp.ClientSession() as http:
        for first, code in (
            ({"type": "start"}, "bad_request"),
            ({"type": "register", "client_id": "has space", "app": "ivr"}, "bad_request"),
            ({"type": "register", "client_id": "a", "app": "nosuch"}, "not_found"),
            ({"type": "register", "client_id": "a", "token": "junk"}, "unauthorized"),
        ):
            async with http.ws_connect(url) as ws:
                await ws.send_json(first)
                answer = await ws.receive_json()
                assert (answer["type"], answer["code"]) == ("error", code), (first, answer)
                assert (await ws.receive()).type is aiohttp.WSMsgType.CLOSE
    assert bans.failed == ["127.0.0.1"]  # the bad token counts towards a ban


def _register(client_id: str, **more: str) -> dict[str, Any]:
    return {"type": "register", "client_id": client_id, **more}


def test_away_from_loopback_a_token_or_the_applications_key_signs_in() -> None:
    found, bans = clients()
    request = make_mocked_request("GET", "/phone/client").clone(remote="192.0.2.7")
    assert found._credentials(request, _register("a", app="ivr", key=KEY), "a") == ("ivr", None)
    assert found._credentials(request, _register("a", token=token("a")), "a") == (
        "ivr",
        NOW + 3600,
    )
    wrong = []
    for data, code in (
        (_register("a", app="ivr"), "unauthorized"),  # no key
        (_register("a", app="sales", key=KEY), "unauthorized"),  # another app's key
        (_register("a", app="nosuch", key=KEY), "unauthorized"),  # (not "no such app")
        (_register("a", token=token("b")), "unauthorized"),  # another client id's token
        (_register("a", token=token("a", incoming=False)), "forbidden"),
        (_register("a", token=token("a", now=NOW - 3600)), "unauthorized"),  # expired
        (_register("a", app="nosuch", key="guess"), "unauthorized"),  # a wrong key
    ):
        with pytest.raises(ApiError) as caught:
            found._credentials(request, data, "a")
        assert caught.value.code == code, data
        wrong.append(caught.value.wrong_key)
    # The expired token and the wrong key count (the socket counts them, awaited before
    # the page is told); a valid key for another app does not.
    assert wrong == [False, False, False, False, False, True, True]
    assert bans.failed == []
    # A token minted on a node whose clock is a little ahead: accepted within a minute.
    assert found._credentials(request, _register("a", token=token("a", now=NOW + 59)), "a")
    with pytest.raises(ApiError, match="not valid yet"):
        found._credentials(request, _register("a", token=token("a", now=NOW + 61)), "a")


async def test_a_token_signed_in_client_stops_ringing_when_it_expires(
    served: tuple[WebClients, Bans, str],
) -> None:
    found, _, url = served
    clock = [NOW]
    found.now = lambda: clock[0]
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_json(_register("a", token=token("a", ttl=600)))
        await ws.receive_json()
        clock[0] = NOW + 600
        with pytest.raises(NotSignedIn):
            await found.ring("ivr", "a", "c", Line(), {})
        assert found.signed_in("ivr") == []
        # A fresh token on the same socket renews it.
        await ws.send_json(_register("a", token=token("a", now=NOW + 600, ttl=600)))
        assert (await ws.receive_json())["expires"] == NOW + 1200
        await found.ring("ivr", "a", "c", Line(), {})


class Media:
    """What the far leg gives the media engine."""

    def __init__(self) -> None:
        self.attached: list[Any] = []
        self.delivered: list[bytes] = []

    def attach(self, session: Any, out: Any, wake: Any) -> int:
        self.attached.append((session, out))
        return -7

    def deliver(self, key: int, data: bytes, source: Any) -> None:
        self.delivered.append(data)


class Channel:
    def __init__(self) -> None:
        self.sent: list[str | bytes] = []
        self.closed = False

    def to_client(self, message: str | bytes) -> None:
        self.sent.append(message)

    def close(self) -> None:
        self.closed = True


def far_leg() -> tuple[WebClientLeg, Media, list[Any]]:
    media = Media()
    seen: list[Any] = []
    leg = WebClientLeg(
        cast(Any, media),
        "far leg x",
        ringing=lambda: seen.append("ringing"),
        answered=lambda session, key: seen.append(("answered", key)),
        ended=lambda cause, raw: seen.append((cause, raw)),
        wake=lambda session: None,
    )
    return leg, media, seen


def test_the_far_leg_rings_answers_carries_audio_and_ends_once() -> None:
    leg, media, seen = far_leg()
    channel = Channel()
    leg.rung(channel, local=True)
    leg.to_caller(b"early")  # before the answer: nowhere to go
    leg.to_caller(json.dumps({"type": "answer"}))
    leg.to_caller(b"rtp")
    session, out = media.attached[0]
    out(b"to the page")
    leg.to_caller(json.dumps({"type": "hangup"}))
    leg.gone("the page closed its socket")  # after the end: nothing more
    assert seen == ["ringing", ("answered", -7), ("hung_up", "BYE")]
    assert media.delivered == [b"rtp"] and channel.sent == [b"to the page"]
    assert channel.closed and session.law == "ulaw"


@pytest.mark.parametrize(
    ("said", "cause"),
    [
        ({"type": "reject"}, ("busy", "486")),
        ({"type": "reject", "cause": 603}, ("failed", "603")),
        ({"type": "reject", "cause": 480}, ("no_answer", "480")),
        ({"type": "reject", "cause": 99}, ("busy", "486")),
        ({"type": "busy"}, ("busy", "486")),
        ({"type": "absent"}, ("unobtainable", "404")),
    ],
)
def test_what_the_page_says_is_the_connects_cause(said: dict[str, Any], cause: Any) -> None:
    leg, _, seen = far_leg()
    leg.rung(Channel(), local=False)  # rung elsewhere: that worker says when it rings
    leg.to_caller(json.dumps(said))
    assert seen == [cause]


def test_a_page_gone_while_ringing_is_no_answer_and_callhooks_end_tells_it() -> None:
    leg, _, seen = far_leg()
    leg.rung(Channel(), local=True)
    leg.gone("the page closed its socket")
    assert seen == ["ringing", ("no_answer", "480")]
    leg, _, seen = far_leg()
    channel = Channel()
    leg.rung(channel, local=True)
    leg.hang_up("no_answer")  # the connect's time ran out
    assert seen == ["ringing", ("no_answer", "")] and channel.closed
    late, _, seen = far_leg()
    late.failed("unobtainable", "404")
    stale = Channel()
    late.rung(stale, local=True)  # a ring that comes after the end is let go at once
    assert seen == [("unobtainable", "404")] and stale.closed


class Worker:
    """A worker's web clients on a public and a private port (its siblings: ``peers``)."""

    def __init__(self, label: int, apps: Callable[[], dict[str, AppConfig]]) -> None:
        from callhook.cluster.siblings import Peers, Siblings

        self.peers: Peers = []  # (filled in once every worker's ports are known)
        self.siblings = Siblings(label, 0, self.peers, token="shared")
        self.clients = WebClients(KeyRing({KEY: "ivr"}), apps, siblings=self.siblings)
        self.app = web.Application(middlewares=[self.siblings.middleware])
        self.app.add_routes(self.clients.routes())
        self.runner = web.AppRunner(self.app)
        self.public = 0

    async def start(self) -> None:
        await self.runner.setup()
        ports = []
        for _ in ("public", "private"):
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            ports.append(cast(Any, site)._server.sockets[0].getsockname()[1])
        self.public, self.siblings.private_port = ports

    @property
    def private(self) -> str:
        return f"http://127.0.0.1:{self.siblings.private_port}"

    def sees(self, *others: Worker) -> None:
        self.peers[:] = [(o.siblings.label, o.private, "shared") for o in others]

    async def stop(self) -> None:
        await self.siblings.close()
        await self.runner.cleanup()


@pytest.fixture
async def two_workers() -> AsyncIterator[tuple[Worker, Worker]]:
    apps = clients()[0].apps
    a, b = Worker(0, apps), Worker(1, apps)
    await a.start()
    await b.start()
    a.sees(b)
    b.sees(a)
    yield a, b
    await a.stop()
    await b.stop()


async def test_a_client_signed_in_on_another_worker_rings_through_its_private_port(
    two_workers: tuple[Worker, Worker],
) -> None:
    """Worker A has the call, worker B the page: A asks B on B's private port, with the
    workers' token; B rings the page and relays its messages unchanged both ways."""
    from callhook.cluster.siblings import HEADER, NODE

    a_worker, b_worker = two_workers
    a, b, base = a_worker.clients, b_worker.clients, b_worker.private
    public = b_worker.public
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"ws://127.0.0.1:{public}/phone/client")
        await ws.send_json(_register("a", app="ivr"))
        assert (await ws.receive_json())["type"] == "registered"
        with pytest.raises(NotSignedIn):  # nobody is client b, here or there
            await a.ring("ivr", "b", "c0", Line(), {})
        # Without the token, or on the public port: not found (the client is there).
        for where, headers in (
            (base, {HEADER: "0"}),
            (base, {HEADER: "0", NODE: "wrong"}),
            (f"http://127.0.0.1:{public}", {HEADER: "0", NODE: "shared"}),
        ):
            async with http.get(f"{where}/webrtc/ring/ivr/a", headers=headers) as r:
                assert r.status == 404, (where, headers)
        line = Line()
        channel, where = await a.ring("ivr", "a", "c1", line, {"call_from": "sip:x@y"})
        assert where == "worker 1"
        incoming = await ws.receive_json()
        assert incoming == {"type": "incoming", "call_id": "c1", "call_from": "sip:x@y"}
        await until(lambda: line.said)
        assert line.said == [{"type": "ringing"}]
        await ws.send_json({"type": "answer", "call_id": "c1"})
        await ws.send_bytes(b"\x80" + bytes(171))
        channel.to_client(b"\x80" + bytes(11))
        assert (await ws.receive()).data == b"\x80" + bytes(11)
        await until(lambda: len(line.said) == 3)
        assert line.said[1:] == [{"type": "answer"}, b"\x80" + bytes(171)]
        with pytest.raises(Busy):  # the page has a call: another worker's too
            b.ring_here("ivr", "a", "c2", Line(), {})
        await ws.close()  # the page goes away: A hears of it through B
        await until(lambda: line.why)
        assert line.why == "the page closed its socket"


async def test_a_page_signing_in_on_another_worker_takes_the_client_id_over(
    two_workers: tuple[Worker, Worker],
) -> None:
    a, b = two_workers
    async with aiohttp.ClientSession() as http:
        older = await http.ws_connect(f"ws://127.0.0.1:{b.public}/phone/client")
        await older.send_json(_register("a", app="ivr"))
        assert (await older.receive_json())["type"] == "registered"
        await asyncio.sleep(0.01)  # (signed in later: the wall clock moved on)
        newer = await http.ws_connect(f"ws://127.0.0.1:{a.public}/phone/client")
        await newer.send_json(_register("a", app="ivr"))
        assert (await newer.receive_json())["type"] == "registered"
        replaced = await older.receive_json()
        assert (replaced["type"], replaced["code"]) == ("error", "replaced")
        assert b.clients.clients == {}
        # B's calls ring the newer page, through A.
        channel, where = await b.clients.ring("ivr", "a", "c1", Line(), {})
        assert where == "worker 0"
        assert (await newer.receive_json())["call_id"] == "c1"
        channel.close()
        await newer.close()


async def test_a_renewal_is_of_the_same_client_id_of_the_same_application(
    served: tuple[WebClients, Bans, str],
) -> None:
    """A page signed in for ivr cannot stay signed in on another application's token (a
    token of another tenant for the same id): refused, counted, and signed out."""
    found, bans, url = served
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_json(_register("a", token=token("a", ttl=600)))
        await ws.receive_json()
        await ws.send_json(_register("a", token=token("a", app="sales", ttl=86400)))
        refused = await ws.receive_json()
        assert (refused["type"], refused["code"]) == ("error", "unauthorized"), refused
        await until(lambda: not found.clients)
    assert bans.failed == ["127.0.0.1"]


async def test_a_page_of_another_site_may_not_sign_in_and_hanging_up_a_ring_rejects(
    served: tuple[WebClients, Bans, str],
) -> None:
    found, _, url = served
    host = url.split("/")[2]
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(url, headers={"Origin": "https://evil.example"})
        assert refused.value.status == 403
        async with http.ws_connect(url, headers={"Origin": f"http://{host}"}) as ws:
            await ws.send_json(_register("a", app="ivr"))
            assert (await ws.receive_json())["type"] == "registered"
            line = Line()
            await found.ring("ivr", "a", "c", line, {})
            await ws.receive_json()
            await ws.send_json({"type": "hangup", "call_id": "c"})
            await until(lambda: line.said)
            assert line.said == [{"type": "reject", "cause": 486}]


async def test_shutdown_signs_every_page_out(served: tuple[WebClients, Bans, str]) -> None:
    found, _, url = served
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_json(_register("a", app="ivr"))
        await ws.receive_json()
        await found.sign_out_all("callhook is shutting down")
        told = await ws.receive_json()
        assert (told["type"], told["code"]) == ("error", "shutting_down")
        assert (await ws.receive()).type is aiohttp.WSMsgType.CLOSE
    assert found.clients == {}


def test_a_client_id_of_dots_alone_is_no_client_id() -> None:
    from callhook.dialplan import destinations

    for bad in ("webrtc:.", "webrtc:.."):
        with pytest.raises(destinations.BadDestination):
            destinations.parse(bad)
    assert destinations.parse("webrtc:a.b").value == "a.b"
    assert destinations.parse("webrtc:...x").value == "...x"


async def test_too_deep_json_is_bad_json_first_and_later(
    served: tuple[WebClients, Bans, str], caplog: pytest.LogCaptureFixture
) -> None:
    """JSON nested deeper than json.loads can read (RecursionError) is taken as any bad
    JSON: a bad register message first, ignored once signed in; no traceback."""
    found, _, url = served
    deep = "[" * 60_000
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url) as ws:
            await ws.send_str(deep)
            answer = await ws.receive_json(timeout=5)
            assert (answer["type"], answer["code"]) == ("error", "bad_request")
            assert (await ws.receive(timeout=5)).type is aiohttp.WSMsgType.CLOSE
        async with http.ws_connect(url) as ws:
            await ws.send_json(_register("a", app="ivr"))
            assert (await ws.receive_json())["type"] == "registered"
            line = Line()
            await found.ring("ivr", "a", "c", line, {})
            await ws.receive_json()  # incoming
            await ws.send_str(deep)  # ignored: the page is still signed in, and rings
            await ws.send_json({"type": "answer", "call_id": "c"})
            await until(lambda: line.said)
            assert line.said == [{"type": "answer"}]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_sign_in_cut_short_while_its_refusal_is_counted_leaves_no_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server stopping while a wrong token is being counted (the count waits on the
    other workers) cancels the handler: the socket's outbox task ends with it. And no
    register message in time is a bad request."""
    from callhook.telephony import webclients

    monkeypatch.setattr(webclients, "REGISTER_TIMEOUT", 0.2)
    found, bans = clients()
    counting = asyncio.Event()

    async def never(address: str, what: str) -> None:
        counting.set()
        await asyncio.Event().wait()

    bans.auth_failed = never  # type: ignore[method-assign]
    app = web.Application()
    app.add_routes(found.routes())
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    url = f"ws://127.0.0.1:{server.port}/phone/client"
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url) as ws:
            answer = await ws.receive_json()  # (said nothing)
            assert (answer["type"], answer["message"]) == ("error", "no register message in time")
        async with http.ws_connect(url) as ws:
            await ws.send_json(_register("a", token="junk"))
            await asyncio.wait_for(counting.wait(), 5)
            await server.close()  # (cancels the handler in its count)
    await asyncio.sleep(0.05)
    sending = [t for t in asyncio.all_tasks() if "Outbox._send" in repr(t.get_coro())]
    assert sending == []
