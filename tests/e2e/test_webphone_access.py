"""Who gets the web phone's loopback rights from a real ``serve`` (docs/webphone.md#access,
docs/security.md), one process and workers behind Kamailio:

- an application's page cannot make callhook fetch another application's file through
  the web phone on callhook's own port (its prompt URL aimed at
  ``http://127.0.0.1:PORT/phone/api/media/OTHER/...``): that file is refused exactly as
  an absent one, and as the page's own application's is (callhook's own HTTP client
  gets no loopback rights);
- a site rebound to 127.0.0.1 (DNS rebinding: the browser sends its name as Host) gets
  no loopback rights either, on the JSON routes and the sockets, while
  ``127.0.0.1:PORT`` and ``localhost:PORT`` keep them; a page of another site (its
  Origin) is refused; and every refusal is a JSON answer, never a traceback.

The tests' own calls and requests come from loopback, as a browser on the machine's.
"""

from __future__ import annotations

import json
import math
import struct
import wave
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callhook.devtools.harness import AppServer
from tests.e2e.harness import WORKERS, served, wait_for_request

VICTIM_KEY = "victim-key-0123456789abcdef"


def tone_wav(path: Path, seconds: float = 1.0) -> None:
    """A WAV callhook can play (8 kHz, 16-bit: a 440 Hz tone)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rate = 8000
    samples = [
        int(8000 * math.sin(2 * math.pi * 440 * n / rate)) for n in range(int(rate * seconds))
    ]
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(struct.pack(f"<{len(samples)}h", *samples))


def config(app: AppServer) -> str:
    return (
        "[apps.victim]\n"
        f'first_page = "{app.url("/victim")}"\n'
        f'secret = "{app.secret}"\n'
        f'api_key = "{VICTIM_KEY}"\n'
    )


async def web_phone_call(base: str, app: str) -> list[dict[str, Any]]:
    """A call to ``app`` from the web phone's socket (as the page makes it, from loopback):
    every message until it ends."""
    seen: list[dict[str, Any]] = []
    url = base.replace("http://", "ws://") + "/phone/call"
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_json({"type": "start", "app": app})
        async for msg in ws:
            if msg.type is aiohttp.WSMsgType.TEXT:
                seen.append(json.loads(msg.data))
                if seen[-1]["type"] in ("ended", "error"):
                    break
            elif msg.type is not aiohttp.WSMsgType.BINARY:
                break
    return seen


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_page_cannot_read_another_applications_file_through_the_web_phone(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    data = tmp_path / "data"
    tone_wav(data / "media" / "victim" / "greeting.wav")
    tone_wav(data / "media" / "default" / "mine.wav")
    server = served(tmp_path, app, workers, config(app))
    base = f"http://127.0.0.1:{server.http_port}"
    urls = [
        f"{base}/phone/api/media/victim/greeting.wav",  # another application's file
        f"{base}/phone/api/media/victim/absent.wav",  # a file that is not there
        f"{base}/phone/api/media/default/mine.wav",  # the page's own application's
    ]
    app.page(
        "/start",
        [
            *({"play": {"play_list": [{"file_to_play": {"url": url}}]}} for url in urls),
            {"hang_up": {}},
        ],
    )
    app.page("/final", None)
    async with server:
        # The same file from a browser on the machine: there, and playable.
        async with aiohttp.ClientSession() as http, http.get(urls[0]) as response:
            assert response.status == 200 and response.content_type == "audio/wav"
        seen = await web_phone_call(base, "default")
        assert seen[-1]["type"] == "ended", seen
        assert await wait_for_request(app, "/final", timeout=20)
    log = "".join(p.read_text() for p in (data / "media" / "default" / "logs").glob("*.log"))
    for url in urls:  # each refused, the same way: nothing tells them apart
        assert f"could not be played: {url}: HTTP 401" in log, log
    assert "prompt_end #1 (not played)" in log, log  # not a sample of the victim's file
    assert app.bodies("/victim") == []


async def get(url: str, **headers: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
        return response.status, await response.json(content_type=None)


async def first_answer(url: str, first: dict[str, Any], **headers: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.ws_connect(url, headers=headers) as ws:
        await ws.send_json(first)
        answer: dict[str, Any] = await ws.receive_json(timeout=20)
        return answer


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_rebound_name_gets_no_loopback_rights(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page("/start", [{"hang_up": {}}])
    async with served(tmp_path, app, workers, config(app)) as server:
        port = server.http_port
        base = f"http://127.0.0.1:{port}"
        # The web phone's own addresses: every application, no key.
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            status, body = await get(f"{base}/phone/api/apps", Host=host)
            assert status == 200 and body["loopback"] is True, (host, body)
            assert sorted(body["apps"]) == ["default", "victim"]
        # evil.example resolved to 127.0.0.1 in a browser on this machine: its own name.
        rebound = {"Host": f"evil.example:{port}"}
        for path in ("/phone/api/apps", "/phone/api/calls/victim", "/phone/api/media/victim/a.wav"):
            status, body = await get(base + path, **rebound)
            assert (status, body["error"]["code"]) == (401, "unauthorized"), (path, body)
        status, body = await get(
            f"{base}/phone/api/apps", Authorization=f"Bearer {VICTIM_KEY}", **rebound
        )
        assert (status, body["apps"], body["loopback"]) == (200, ["victim"], False)
        # Its page's sockets: same origin as far as the browser knows, but no rights.
        ws = base.replace("http://", "ws://")
        origin = {**rebound, "Origin": f"http://evil.example:{port}"}
        answer = await first_answer(
            f"{ws}/phone/call", {"type": "start", "app": "victim"}, **origin
        )
        assert (answer["type"], answer["code"]) == ("error", "unauthorized"), answer
        answer = await first_answer(
            f"{ws}/phone/client", {"type": "register", "client_id": "a", "app": "victim"}, **origin
        )
        assert (answer["type"], answer["code"]) == ("error", "unauthorized"), answer
        # A page of another site reading the JSON routes of 127.0.0.1: refused.
        status, body = await get(f"{base}/phone/api/apps", Origin="http://evil.example")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        status, body = await get(f"{base}/phone/assets/nosuch.js")
        assert (status, body["error"]["code"]) == (404, "not_found")
    assert "Error handling request" not in server.output
    assert "Traceback" not in server.output
