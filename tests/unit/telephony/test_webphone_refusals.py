"""What the web phone refuses (docs/webphone.md): a call over ``[sip] max_calls`` (its
calls and the SIP service's counted together) or while the media runs behind, as a SIP
call is refused (telephony/inbound.py); and JSON nested too deeply to read, on
``/phone/call``, taken as any other bad JSON there (no traceback, no task left behind).

The sockets are a real aiohttp server on loopback; the call itself never starts (its
refusal comes first), so no services are needed beyond the settings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from callhook.config.settings import AppConfig
from callhook.edge.overload import Overload
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.restapi import ApiError, errors
from callhook.telephony.inbound import Inbound
from callhook.telephony.webphone import WebPhone, loads

#: 60 000 ``[``: far deeper than json.loads can go (RecursionError), under the socket's
#: 64 KB message limit.
DEEP = "[" * 60_000


class Media:
    """The media engine, as far as a refusal reads it."""

    def __init__(self) -> None:
        self.overload = Overload(0.1)


def phone(max_calls: int = 500, sip_calls: int = 0, media: Media | None = None) -> WebPhone:
    apps = {"sales": AppConfig(name="sales", first_page="http://127.0.0.1:1/s", secret="x" * 32)}
    services = SimpleNamespace(settings=SimpleNamespace(sip=SimpleNamespace(max_calls=max_calls)))
    engine = media or Media()
    return WebPhone(
        cast(Any, services),
        lambda: cast(Any, engine),
        cast(Any, None),
        KeyRing({}),
        lambda: apps,
        sip_calls=lambda: sip_calls,
    )


@pytest.fixture
async def served() -> AsyncIterator[tuple[dict[str, WebPhone], str]]:
    """A server whose web phone is ``holder["phone"]`` (set by the test)."""
    holder: dict[str, WebPhone] = {}

    async def call(request: web.Request) -> web.StreamResponse:
        return await holder["phone"].call(request)

    app = web.Application(middlewares=[errors])
    app.router.add_get("/phone/call", call)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield holder, f"ws://127.0.0.1:{server.port}/phone/call"
    await server.close()


async def first_answer(url: str, message: str) -> tuple[dict[str, Any], WSMsgType]:
    """``message`` sent first on a new call socket: the page's answer, then what follows."""
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_str(message)
        answer = await ws.receive_json(timeout=5)
        after = (await ws.receive(timeout=5)).type
    return answer, after


def outboxes() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if not t.done() and "Outbox._send" in repr(t.get_coro())]


@pytest.mark.parametrize(
    ("max_calls", "sip_calls", "web_calls", "refused"),
    [
        (2, 1, 1, True),  # one SIP call and one web phone call: the limit
        (2, 2, 0, True),
        (2, 0, 2, True),
        (2, 1, 0, False),
        (0, 900, 900, False),  # 0: no limit
    ],
)
def test_web_phone_calls_count_in_max_calls(
    max_calls: int, sip_calls: int, web_calls: int, refused: bool
) -> None:
    p = phone(max_calls, sip_calls)
    p.calls.update({f"web-{n}": cast(Any, None) for n in range(web_calls)})
    if not refused:
        assert p._admit() is not None
        return
    with pytest.raises(ApiError) as caught:
        p._admit()
    assert (caught.value.status, caught.value.code) == (503, "unavailable")
    assert caught.value.message == f"too many calls ({max_calls}: [sip] max_calls)"


def test_web_phone_calls_are_refused_while_the_media_is_overloaded() -> None:
    media = Media()
    media.overload.overloaded = True
    with pytest.raises(ApiError) as caught:
        phone(media=media)._admit()
    assert (caught.value.status, caught.value.code) == (503, "unavailable")
    assert caught.value.message == "media overloaded ([media] max_lag_ms)"
    assert media.overload.refused == 1  # counted with the SIP calls refused so


async def test_the_page_is_told_why_its_call_is_refused(
    served: tuple[dict[str, WebPhone], str],
) -> None:
    holder, url = served
    holder["phone"] = phone(max_calls=1, sip_calls=1)
    answer, after = await first_answer(url, '{"type": "start", "app": "sales"}')
    assert answer == {
        "type": "error",
        "code": "unavailable",
        "message": "too many calls (1: [sip] max_calls)",
    }
    assert after is WSMsgType.CLOSE
    media = Media()
    media.overload.overloaded = True
    holder["phone"] = phone(media=media)
    answer, _ = await first_answer(url, '{"type": "start", "app": "sales"}')
    assert answer["message"] == "media overloaded ([media] max_lag_ms)"


def test_sip_calls_count_the_web_phones_in_max_calls() -> None:
    """An INVITE is refused 503 when the SIP calls and the web phone's reach max_calls."""
    rejected: list[tuple[str, int, str]] = []
    agent = SimpleNamespace(
        reject=lambda call_id, status, now, reason: rejected.append((call_id, status, reason))
    )
    services = SimpleNamespace(settings=SimpleNamespace(sip=SimpleNamespace(max_calls=2)))
    loop = SimpleNamespace(time=lambda: 0.0)
    inbound = Inbound(
        services=cast(Any, services),
        loop=cast(Any, loop),
        agent=lambda: cast(Any, agent),
        media=lambda: cast(Any, Media()),
        address="127.0.0.1",
        trunks=cast(Any, None),
        prompts=cast(Any, None),
        calls={"c0": cast(Any, None)},
        lifecycle=cast(Any, None),
        web_calls=lambda: 1,
    )
    inbound.incoming(cast(Any, SimpleNamespace(call_id="c1")))
    assert rejected == [("c1", 503, "Service Unavailable (too many calls)")]


def test_loads_takes_too_deep_a_nesting_for_bad_json() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        loads(DEEP)
    with pytest.raises(ValueError):
        loads("{nonsense")
    assert loads('{"type": "hangup"}') == {"type": "hangup"}


async def test_a_too_deep_start_message_is_a_bad_one(
    served: tuple[dict[str, WebPhone], str], caplog: pytest.LogCaptureFixture
) -> None:
    holder, url = served
    holder["phone"] = phone()
    caplog.set_level(logging.WARNING)
    for message in ("{nonsense", DEEP):
        answer, after = await first_answer(url, message)
        assert (answer["type"], answer["code"]) == ("error", "bad_request")
        assert answer["message"].startswith("no valid start message")
        assert after is WSMsgType.CLOSE
    for _ in range(100):
        if not outboxes():
            break
        await asyncio.sleep(0.01)
    assert outboxes() == []  # each socket's sender ended with it
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_too_deep_message_during_a_call_is_ignored() -> None:
    """In a call the page's bad JSON is ignored; its hangup still ends the call."""

    class Socket:
        def __init__(self, *texts: str) -> None:
            self.messages = [SimpleNamespace(type=WSMsgType.TEXT, data=t) for t in texts]

        def __aiter__(self) -> Socket:
            return self

        async def __anext__(self) -> Any:
            if not self.messages:
                raise StopAsyncIteration
            return self.messages.pop(0)

    ws = Socket(DEEP, "{nonsense", "[1]", '{"type": "hangup"}', '{"type": "after"}')
    await phone()._listen(cast(Any, ws), cast(Any, None), 0, ("127.0.0.1", 1))
    assert len(ws.messages) == 1  # it returned at the hangup
