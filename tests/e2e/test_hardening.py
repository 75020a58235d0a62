"""Attacking a real ``serve`` over HTTP and through its applications (docs/security.md):
guessed REST API keys get the guesser banned, calls to destinations outside
``[outbound] allow`` (or one call too many) are refused naming the rule, and pages
cannot make callhook fetch cloud metadata or an unlisted private host (``[egress]``).
Attackers bind 127.0.0.2 (loopback is a /8 on Linux)."""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callhook.devtools.harness import AppServer
from tests import leaks
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, free_udp_port, served, wait_for_request

needs_sipp = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


def config(tmp_path: Path, text: str) -> tuple[str, ...]:
    path = tmp_path / "callhook.toml"
    path.write_text(text)
    return ("--config", str(path))


async def request_from(
    source: str, method: str, url: str, key: str, json: Any = None
) -> tuple[int, dict[str, Any]]:
    """``method url`` with bearer ``key``, from local address ``source``."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.request(method, url, headers={"Authorization": f"Bearer {key}"}, json=json) as r,
    ):
        return r.status, await r.json()


@pytest.mark.parametrize("workers", WORKERS)
async def test_guessing_rest_api_keys_gets_the_source_banned(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """With workers, the kernel spreads the guesses over them: they share the count, the
    ban holds on each (listed with each worker's index) and is logged once."""
    app.page("/start", [{"hang_up": {}}])
    async with served(tmp_path, app, workers) as server:
        base = f"http://127.0.0.1:{server.http_port}"
        secret = (tmp_path / "data" / "secret").read_text().strip()
        # A request without any key is not a guess: it counts for nothing.
        for _ in range(8):
            assert (await request_from("127.0.0.2", "GET", f"{base}/api/v1/media", ""))[0] == 401
        for n in range(5):  # five wrong keys in a minute, on both kinds of key
            path = "/api/v1/media" if n % 2 else "/api/stats"
            status, body = await request_from("127.0.0.2", "GET", base + path, f"guess-{n}")
            assert status == 401 and body["error"]["code"] == "unauthorized"
        # Banned now: even the right key is refused from there...
        status, body = await request_from("127.0.0.2", "GET", f"{base}/api/stats", secret)
        assert (status, body["error"]["code"]) == (403, "banned")
        # ...the ban is listed, for ban_seconds (600 by default)...
        status, bans = await server.api("GET", "/api/bans")
        assert status == 200 and len(bans) == workers, bans
        for ban in bans:
            assert ban["address"] == "127.0.0.2"
            assert ban["reason"] == "5 failed REST API authentications in a minute"
            assert 590 <= ban["seconds_left"] <= 600
        if workers > 1:
            assert sorted(ban["worker"] for ban in bans) == list(range(workers)), bans
        # ...while the operator's own loopback, guessing as much, is never banned.
        for n in range(10):
            status, _ = await request_from("127.0.0.1", "GET", f"{base}/api/stats", f"x{n}")
            assert status == 401
        assert (await request_from("127.0.0.1", "GET", f"{base}/api/stats", secret))[0] == 200
        assert len((await server.api("GET", "/api/bans"))[1]) == workers
        # Lifting the ban lets the source in again (on every worker: new connections).
        assert (await server.api("DELETE", "/api/bans/127.0.0.2"))[0] == 200
        for _ in range(4):
            status, _ = await request_from("127.0.0.2", "GET", f"{base}/api/stats", secret)
            assert status == 200
        assert (await server.api("GET", "/api/bans"))[1] == []
    banned = "127.0.0.2: banned for 600 s: 5 failed REST API authentications in a minute"
    assert server.output.count(banned) == 1


@needs_sipp
@pytest.mark.parametrize("workers", WORKERS)
async def test_outbound_calls_obey_the_allow_list_and_the_per_application_limit(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    silent = free_udp_port()  # nobody answers there: an admitted call keeps ringing
    text = f'[outbound]\nallow = ["sip:*@127.0.0.1:{silent}", "+44"]\nmax_calls_per_app = 1\n'
    async with served(tmp_path, app, workers, text) as server:
        secret = (tmp_path / "data" / "secret").read_text().strip()
        url = f"http://127.0.0.1:{server.http_port}/api/calls"

        async def place(to: str) -> tuple[int, dict[str, Any]]:
            body = {"to": to, "app": "default"}
            return await request_from("127.0.0.1", "POST", url, secret, body)

        status, body = await place("sip:premium@198.51.100.7")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        assert body["error"]["message"] == (
            "refused by [outbound] allow: sip:premium@198.51.100.7 matches none of its patterns"
        )
        status, body = await place(f"sip:callee@127.0.0.1:{silent}")
        assert status == 202, body
        status, body = await place(f"sip:callee@127.0.0.1:{silent}")
        assert (status, body["error"]["code"]) == (429, "too_many_calls")
        assert body["error"]["message"] == (
            "refused by [outbound] max_calls_per_app: application 'default' has 1 outbound "
            "call(s) already (the limit is 1)"
        )
    assert "outbound call for application 'default': refused by [outbound] allow" in server.output
    assert app.bodies("/start") == []  # nothing was answered: no application ran


async def test_callhook_dial_refuses_a_destination_outside_the_allow_list(
    tmp_path: Path, app: AppServer
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "callhook", "dial", "sip:someone@198.51.100.7",
        "--app-url", app.url("/start"), "--sip", "127.0.0.1:0",
        "--data-dir", str(tmp_path / "data"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode(errors="replace")
    assert proc.returncode != 0, text
    assert "refused by [outbound] allow: sip:someone@198.51.100.7 is not one of this" in text
    assert "allow is empty" in text


@needs_sipp
async def test_pages_cannot_reach_metadata_or_an_unlisted_private_host(
    tmp_path: Path, app: AppServer
) -> None:
    async with (
        AppServer(host="127.0.0.2") as internal,  # a private host no app lives on
        AppServer() as beside,  # another service on the application's own host
    ):
        internal.page("/prompt.wav", None)
        beside.page("/prompt.wav", None)
        plays = [
            {"play": {"play_list": [{"file_to_play": {"url": s.url("/prompt.wav")}}]}}
            for s in (internal, beside)
        ]
        app.page(
            "/start",
            [
                *plays,
                {
                    "record": {
                        "seconds_max_duration": 1,
                        "next_page": {"url": "http://169.254.169.254/latest/meta-data/"},
                    }
                },
            ],
        )
        app.page("/final", None)
        async with Server.for_app(tmp_path / "data", app) as server:
            run = await sipp.call(
                server.sip,
                tmp_path,
                sipp.invite("ivr"),
                sipp.ANSWERED,
                sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
            )
            assert run.returncode == 0, server.output + run.errors
            assert await wait_for_request(app, "/final")
        assert internal.requests == [] and beside.requests == []  # not one reached them
    log = "".join(p.read_text() for p in (tmp_path / "data" / "media").glob("*/logs/*.log"))
    assert (
        f"refused by [egress]: 127.0.0.2 port {internal.port} is a private or loopback "
        "address and not a configured application's (allow_private is false)"
    ) in log
    assert (
        f"refused by [egress]: 127.0.0.1 port {beside.port} is a private or loopback "
        "address and not a configured application's (allow_private is false)"
    ) in log
    assert (
        "refused by [egress]: 169.254.169.254 is a link-local or cloud metadata address "
        "(never fetched)"
    ) in log
    # The server log names each refusal once (the call's errors are its own lines).
    assert server.output.count("callhook.egress: refused by [egress]: 169.254.169.254") == 1
    assert server.output.count("callhook.egress: refused by [egress]: 127.0.0.2") == 1


@needs_sipp
async def test_a_password_in_the_application_url_is_used_and_never_logged(
    tmp_path: Path, app: AppServer
) -> None:
    password = "pw-" + "x7" * 8
    leaks.used(password)  # and the session's check looks for it in every log
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    with_password = app.url("/").replace("http://", f"http://ivr:{password}@")
    server = Server(
        tmp_path / "data",
        app_url=with_password + "start",
        secret=app.secret,
        final_page=with_password + "final",
    )
    async with server:
        # The application hangs up at once: the INVITE is declined (603), as it says.
        await sipp.call(server.sip, tmp_path, sipp.invite("ivr"))
        assert await wait_for_request(app, "/final")
    basic = "Basic " + base64.b64encode(f"ivr:{password}".encode()).decode()
    assert all(r.headers.get("Authorization") == basic for r in app.requests)
    log = "".join(p.read_text() for p in (tmp_path / "data" / "media").glob("*/logs/*.log"))
    assert "page_request POST http://ivr:***@127.0.0.1:" in log
    assert password not in log and password not in server.output
    assert "application: http://ivr:***@127.0.0.1:" in server.output
