"""The HTTP server's own routes and its error middleware (httpserver/server.py,
httpserver/restapi.py's ``errors``): an :class:`ApiError` raised on a path outside
``/api/`` (the web phone's) is its JSON error answer, not a 500 with a traceback in the
log; the index page escapes the Host header it quotes.

A real aiohttp server on loopback, its requests sent with the Host headers a test chooses.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from callhook.config.settings import AppConfig
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.server import application
from callhook.telephony.webphone import WebPhone

KEY = "sales-key-0123456789abcdef"


class Bans:
    """The banned sources: only 127.0.0.1 when ``banned``."""

    def __init__(self) -> None:
        self.banned_now = False

    def bans(self) -> list[dict[str, Any]]:
        return []

    def lift_ban(self, address: str) -> bool:
        return False

    def banned(self, address: str) -> bool:
        return self.banned_now

    async def auth_failed(self, address: str, what: str) -> None:
        return None


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Bans]]:
    apps = {"sales": AppConfig(name="sales", first_page="http://127.0.0.1:1/s", secret="x" * 32)}
    bans = Bans()
    phone = WebPhone(
        cast(Any, None), lambda: None, cast(Any, None), KeyRing({KEY: "sales"}), lambda: apps, bans
    )
    app = application("s" * 32, phone=phone, bans=bans)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    yield f"http://127.0.0.1:{test_server.port}", bans
    await test_server.close()


async def get(url: str, **headers: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
        return response.status, response.content_type, await response.text()


async def test_web_phone_errors_are_json_answers_not_tracebacks(
    server: tuple[str, Bans], caplog: pytest.LogCaptureFixture
) -> None:
    base, bans = server
    caplog.set_level(logging.INFO)
    cases = [
        ("/phone/assets/x", {}, 404, "not_found"),
        ("/phone/api/apps", {"Host": "evil.example:8080"}, 401, "unauthorized"),
        ("/phone/api/apps", {"Origin": "http://evil.example"}, 403, "forbidden"),
        ("/phone/api/calls/nosuch", {}, 404, "not_found"),
        ("/phone/call", {"Origin": "http://evil.example"}, 403, "forbidden"),  # (its socket)
    ]
    for path, headers, status, code in cases:
        answer = await get(base + path, **headers)
        assert answer[:2] == (status, "application/json"), (path, answer)
        assert f'"code": "{code}"' in answer[2], (path, answer)
    bans.banned_now = True
    answer = await get(base + "/phone/api/apps")
    assert answer[0] == 403 and '"code": "banned"' in answer[2]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_other_paths_keep_aiohttps_own_answers(server: tuple[str, Bans]) -> None:
    base, _ = server
    status, content_type, _ = await get(base + "/nosuch")
    assert (status, content_type) == (404, "text/plain")
    status, content_type, _ = await get(base + "/api/nosuch")
    assert (status, content_type) == (404, "application/json")


async def test_the_index_escapes_the_host_it_quotes(server: tuple[str, Bans]) -> None:
    base, _ = server
    status, _, page = await get(base + "/", Host='x"><script>alert(1)</script>')
    assert status == 200
    assert "<script>" not in page
    assert "http://x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;/demo/start" in page
    assert f"{base}/demo/start" in (await get(base + "/"))[2]
