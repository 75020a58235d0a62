"""The REST API (``/api/v1``) of a real running ``callhook serve``.

The server runs two applications, ``alpha`` and ``beta``, each with its own
API key (docs/api.md). Every answer is checked for its status and its
stable error code; files are checked on the disk of the store as well.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from callhook.devtools.harness import AppServer
from callhook.media import g711, tones, wav
from tests.e2e import sipp
from tests.e2e.harness import (
    CALLHOOK,
    Server,
    free_even_udp_port,
    free_udp_port,
    wait_for_request,
)
from tests.e2e.rtpstream import Stream

ALPHA = "alpha-key-0123456789abcdef"
BETA = "beta-key-0123456789abcdef"
LIMIT = 256 * 1024  # max_upload_mb = 0.25
needs_sipp = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


def tone_wav(seconds: float = 0.5) -> bytes:
    return wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(440.0, seconds)))


def riff(tag: int, rate: int, bits: int, data: bytes, channels: int = 1) -> bytes:
    """A WAV file with any format tag (for formats callhook cannot play)."""
    block = channels * max(1, bits // 8)
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> bool:
    """Poll ``check`` until it is true (False if it never was within ``timeout``)."""
    for _ in range(round(timeout / 0.05)):
        if await check():
            return True
        await asyncio.sleep(0.05)
    return False


async def expect_error(response: aiohttp.ClientResponse, status: int, code: str) -> str:
    """Assert the API's error shape with ``status`` and ``code``; returns the message."""
    body = await response.json()
    assert (response.status, body["error"]["code"]) == (status, code), body
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    message: str = body["error"]["message"]
    assert message
    return message


class Api:
    """A client of one running server's API."""

    def __init__(self, server: Server, http: aiohttp.ClientSession) -> None:
        self.base = f"http://127.0.0.1:{server.http_port}"
        self.http = http
        self.data = server.data_dir
        self.sip = server.sip
        self.server = server

    def url(self, path: str) -> URL:
        # encoded=True: the path goes out exactly as written (no '..' folding by the client).
        return URL(self.base + path, encoded=True)

    def request(
        self, method: str, path: str, key: str | None = ALPHA, **kwargs: Any
    ) -> Any:  # the request context manager
        headers = {**(auth(key) if key else {}), **kwargs.pop("headers", {})}
        return self.http.request(method, self.url(path), headers=headers, **kwargs)

    def namespace(self, app: str) -> Path:
        return self.data / "media" / app


@pytest.fixture
async def api(tmp_path: Path, app: AppServer) -> AsyncIterator[Api]:
    config = tmp_path / "callhook.toml"
    config.write_text(
        f"""
[http]
max_upload_mb = 0.25

[speech]
recogniser = "none"
preload = false

[outbound]
allow = ["sip:*@127.0.0.1:*"]

[apps.alpha]
first_page = "{app.url("/alpha/start")}"
final_page = "{app.url("/alpha/final")}"
secret = "{app.secret}"
api_key = "{ALPHA}"

[apps.beta]
first_page = "{app.url("/beta/start")}"
secret = "{app.secret}"
api_key = "{BETA}"
"""
    )
    async with (
        Server(tmp_path / "data", extra=("--config", str(config))) as server,
        aiohttp.ClientSession() as http,
    ):
        yield Api(server, http)


# --- keys -------------------------------------------------------------------------------------


async def raw_get(api: Api, path: str, authorization: bytes) -> bytes:
    """The status line of a GET sent with an ``Authorization`` header of raw bytes (aiohttp's
    client sends only text)."""
    host, port = api.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: callhook.example\r\nConnection: close\r\n".encode()
        + b"Authorization: "
        + authorization
        + b"\r\n\r\n"
    )
    answer = await reader.read()
    writer.close()
    return answer.split(b"\r\n", 1)[0]


async def test_a_key_of_bytes_past_utf8_is_a_wrong_key_not_a_server_error(api: Api) -> None:
    """A header's bytes that are not UTF-8 reach the key ring as lone surrogates: every
    route that asks for a key answers 401, and the log has no traceback."""
    for path, authorization in (
        ("/api/v1/media", b"Bearer \xff\xfe-key"),
        ("/phone/api/apps", b"Bearer \xff\xfe-key"),
        ("/file_list?filetype=media", b"Basic " + base64.b64encode(b"a/b:\xff\xfe")),
    ):
        status = await raw_get(api, path, authorization)
        assert status.startswith(b"HTTP/1.1 401"), (path, status)
    assert "Traceback" not in api.server.output


async def test_requests_without_a_valid_key_get_401(api: Api) -> None:
    for headers in ({}, auth("wrong-key-0123456789abcdef"), {"Authorization": f"Basic {ALPHA}"}):
        async with api.request("GET", "/api/v1/media", key=None, headers=headers) as r:
            await expect_error(r, 401, "unauthorized")
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
    async with api.request("PUT", "/api/v1/media/a.wav", key="nope", data=tone_wav()) as r:
        await expect_error(r, 401, "unauthorized")
    assert not api.namespace("alpha").exists()
    async with api.request("GET", "/api/v1/calls", key=None) as r:
        await expect_error(r, 401, "unauthorized")
    # The installation secret is the key of the built-in demo (the default application).
    secret = (api.data / "secret").read_text().strip()
    async with api.request("GET", "/api/v1/media", key=secret) as r:
        assert (r.status, await r.json()) == (200, {"files": [], "next": None})


async def test_another_applications_files_are_not_found(api: Api) -> None:
    audio = tone_wav()
    async with api.request("PUT", "/api/v1/media/prompts/hi.wav", data=audio) as r:
        assert r.status == 201, await r.text()
    for method, body in (("GET", None), ("DELETE", None), ("PATCH", {"name": "stolen.wav"})):
        async with api.request(method, "/api/v1/media/prompts/hi.wav", key=BETA, json=body) as r:
            await expect_error(r, 404, "not_found")
    async with api.request("GET", "/api/v1/media", key=BETA) as r:
        assert (await r.json())["files"] == []
    # Beta's file of the same name is its own.
    async with api.request("PUT", "/api/v1/media/prompts/hi.wav", key=BETA, data=tone_wav(1)):
        pass
    async with api.request("GET", "/api/v1/media/prompts/hi.wav") as r:
        assert await r.read() == audio
    assert (api.namespace("beta") / "prompts" / "hi.wav").read_bytes() == tone_wav(1)


# --- files ------------------------------------------------------------------------------------


async def test_upload_list_download_rename_delete(api: Api) -> None:
    names = ["b.wav", "a.wav", "prompts/x.wav", "prompts/y.wav", "z.wav"]
    files = {name: tone_wav(0.1 * (i + 1)) for i, name in enumerate(names)}
    for name, audio in files.items():
        async with api.request(
            "PUT", f"/api/v1/media/{name}", data=audio, headers={"Content-Type": "audio/wav"}
        ) as r:
            info = await r.json()
            assert r.status == 201, info
            assert (info["name"], info["size"]) == (name, len(audio))
            assert r.headers["Location"] == f"/api/v1/media/{name}"
    # Paging: two at a time, in name order, each `next` the `after` of the following page.
    seen: list[str] = []
    after = ""
    for _ in range(10):
        async with api.request("GET", f"/api/v1/media?limit=2&after={after}") as r:
            page = await r.json()
        assert len(page["files"]) <= 2
        seen += [f["name"] for f in page["files"]]
        if page["next"] is None:
            break
        after = page["next"]
    assert seen == sorted(names)
    async with api.request("GET", "/api/v1/media?prefix=prompts/") as r:
        listed = (await r.json())["files"]
    assert [(f["name"], f["size"]) for f in listed] == [
        ("prompts/x.wav", len(files["prompts/x.wav"])),
        ("prompts/y.wav", len(files["prompts/y.wav"])),
    ]
    assert listed[0]["modified"].endswith("Z")
    # Download: the same bytes.
    async with api.request("GET", "/api/v1/media/prompts/y.wav") as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "audio/wav"
        assert await r.read() == files["prompts/y.wav"]
    # Replacing is 200; refusing to replace is 409.
    async with api.request("PUT", "/api/v1/media/a.wav", data=files["b.wav"]) as r:
        assert r.status == 200
    async with api.request("PUT", "/api/v1/media/a.wav?overwrite=false", data=tone_wav()) as r:
        await expect_error(r, 409, "file_exists")
    # Rename: not over another file unless asked.
    async with api.request("PATCH", "/api/v1/media/a.wav", json={"name": "b.wav"}) as r:
        await expect_error(r, 409, "file_exists")
    async with api.request("PATCH", "/api/v1/media/a.wav", json={"name": "moved/a.wav"}) as r:
        assert (r.status, (await r.json())["name"]) == (200, "moved/a.wav")
    async with api.request(
        "PATCH", "/api/v1/media/moved/a.wav", json={"name": "z.wav", "overwrite": True}
    ) as r:
        assert r.status == 200
    async with api.request("PATCH", "/api/v1/media/z.wav", json={"name": "../z.wav"}) as r:
        await expect_error(r, 400, "outside_namespace")
    async with api.request("PATCH", "/api/v1/media/z.wav", json={"nom": "y.wav"}) as r:
        await expect_error(r, 400, "bad_request")
    async with api.request("GET", "/api/v1/media/z.wav") as r:
        assert await r.read() == files["b.wav"]
    # Delete.
    async with api.request("DELETE", "/api/v1/media/z.wav") as r:
        assert r.status == 204
    async with api.request("DELETE", "/api/v1/media/z.wav") as r:
        await expect_error(r, 404, "not_found")
    async with api.request("GET", "/api/v1/media") as r:
        left = [f["name"] for f in (await r.json())["files"]]
    assert left == ["b.wav", "prompts/x.wav", "prompts/y.wav"]
    # On disk: the files, no temporary file left behind.
    on_disk = sorted(
        str(p.relative_to(api.namespace("alpha")))
        for p in api.namespace("alpha").rglob("*")
        if p.is_file()
    )
    assert on_disk == left


async def test_bad_uploads_each_with_its_error(api: Api) -> None:
    async with api.request("PUT", "/api/v1/media/big.wav", data=tone_wav(40)) as r:
        assert "262144 bytes" in await expect_error(r, 413, "too_large")

    async def chunked() -> AsyncIterator[bytes]:
        # No Content-Length: the limit is found while reading. One byte over, at the end.
        audio = tone_wav(LIMIT / 8000)
        audio += b"\0" * (LIMIT + 1 - len(audio))
        for i in range(0, len(audio), 32768):
            yield audio[i : i + 32768]

    async with api.request("PUT", "/api/v1/media/big.wav", data=chunked()) as r:
        await expect_error(r, 413, "too_large")
    async with api.request("PUT", "/api/v1/media/text.wav", data=b"hello, not a WAV") as r:
        await expect_error(r, 415, "not_wav")
    adpcm = riff(0x0002, 8000, 4, b"\0" * 400)
    async with api.request("PUT", "/api/v1/media/adpcm.wav", data=adpcm) as r:
        assert "ADPCM" in await expect_error(r, 415, "unsupported_wav")
    headers = {"Content-Type": "application/json"}
    async with api.request("PUT", "/api/v1/media/a.wav", data=tone_wav(), headers=headers) as r:
        await expect_error(r, 415, "unsupported_media_type")
    # Any WAV callhook can play is taken: 16-bit PCM at 16 kHz, stereo.
    pcm = riff(1, 16000, 16, b"\1\0" * 3200, channels=2)
    async with api.request("PUT", "/api/v1/media/pcm.wav", data=pcm) as r:
        assert r.status == 201
    async with api.request("GET", "/api/v1/media") as r:
        assert [f["name"] for f in (await r.json())["files"]] == ["pcm.wav"]
    assert sorted(p.name for p in api.namespace("alpha").iterdir()) == ["pcm.wav"]


async def test_an_encrypted_prompt_is_uploaded_as_is(api: Api) -> None:
    """?encrypted=true: an aescbc WAV for play's decryption_cipher; only its size is checked."""
    from callhook.store import crypto

    key = crypto.Key.from_hex("3c" * 32, "c3" * 16)
    secret = crypto.encrypt(tone_wav(), key)
    async with api.request("PUT", "/api/v1/media/secret.wav", data=secret) as r:
        await expect_error(r, 415, "not_wav")  # without the flag it must be a WAV
    path = "/api/v1/media/secret.wav?encrypted=true"
    async with api.request("PUT", path, data=secret[:-3]) as r:
        assert "16-byte blocks" in await expect_error(r, 415, "not_aescbc")
    async with api.request("PUT", path, data=secret) as r:
        assert r.status == 201, await r.text()
    async with api.request("GET", "/api/v1/media/secret.wav") as r:
        assert crypto.decrypt_wav(await r.read(), key) == tone_wav()
    assert sorted(p.name for p in api.namespace("alpha").iterdir()) == ["secret.wav"]


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("../x.wav", "outside_namespace"),
        ("%2e%2e/x.wav", "outside_namespace"),
        ("prompts/../../x.wav", "outside_namespace"),
        ("/etc/passwd", "outside_namespace"),
        ("%2Fetc%2Fpasswd", "outside_namespace"),
        ("..%5Cx.wav", "bad_name"),
        ("a%00b.wav", "bad_name"),
        ("hello%20world.wav", "bad_name"),
        (".hidden.wav", "bad_name"),
        ("x" * 300 + ".wav", "bad_name"),
        ("logs/x.log", "reserved_name"),
    ],
)
async def test_names_outside_the_namespace_are_refused(api: Api, path: str, code: str) -> None:
    for method, data in (("PUT", tone_wav()), ("GET", None), ("DELETE", None)):
        async with api.request(method, f"/api/v1/media/{path}", data=data) as r:
            await expect_error(r, 400, code)
    async with api.request("PATCH", "/api/v1/media/a.wav", json={"name": path}) as r:
        # The JSON name is not URL-decoded: "%2e%2e" and "%20" are just odd characters there.
        assert r.status == 400
    assert not (api.data / "media" / "x.wav").exists()
    assert not (api.data / "x.wav").exists()


async def test_a_symlink_planted_in_the_namespace_is_not_followed(api: Api, tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.wav"
    secret.parent.mkdir()
    secret.write_bytes(tone_wav())
    namespace = api.namespace("alpha")
    namespace.mkdir(parents=True)
    (namespace / "planted.wav").symlink_to(secret)
    (namespace / "planted").symlink_to(secret.parent)
    for name in ("planted.wav", "planted/secret.wav"):
        async with api.request("GET", f"/api/v1/media/{name}") as r:
            assert "symbolic link" in await expect_error(r, 400, "outside_namespace")
        async with api.request("PUT", f"/api/v1/media/{name}", data=tone_wav(1)) as r:
            await expect_error(r, 400, "outside_namespace")
        async with api.request("DELETE", f"/api/v1/media/{name}") as r:
            await expect_error(r, 400, "outside_namespace")
    async with api.request("GET", "/api/v1/media") as r:
        assert (await r.json())["files"] == []
    assert secret.read_bytes() == tone_wav()
    assert sorted(p.name for p in secret.parent.iterdir()) == ["secret.wav"]


async def test_aiohttps_own_errors_have_the_api_shape(api: Api) -> None:
    async with api.request("GET", "/api/v1/nothing-here") as r:
        await expect_error(r, 404, "not_found")
    async with api.request("POST", "/api/v1/media") as r:
        await expect_error(r, 405, "method_not_allowed")
        assert "GET" in r.headers["Allow"]
    big = json.dumps({"name": "x" * 100_000})
    async with api.request("PATCH", "/api/v1/media/a.wav", data=big) as r:
        await expect_error(r, 413, "too_large")
    async with api.request("PATCH", "/api/v1/media/a.wav", data="{not json") as r:
        await expect_error(r, 400, "bad_request")
    async with api.request("GET", "/api/v1/media?limit=0") as r:
        await expect_error(r, 400, "bad_request")
    async with api.request("GET", "/api/v1/media?colour=red") as r:
        await expect_error(r, 400, "bad_request")
    async with api.request("GET", "/api/v1/logs/not%20an%20id") as r:
        await expect_error(r, 400, "bad_name")
    async with api.request("GET", "/api/v1/logs/0123abcd") as r:
        await expect_error(r, 404, "not_found")
    # The older calls API shares the shape.
    async with api.request("POST", "/api/calls", key="wrong") as r:
        await expect_error(r, 401, "unauthorized")


async def test_openapi_document_is_served_and_valid(api: Api) -> None:
    from openapi_spec_validator import validate

    async with api.request("GET", "/openapi.json", key=None) as r:
        assert r.status == 200
        doc = await r.json()
    validate(doc)
    assert doc["info"]["title"] == "callhook REST API"
    for path, methods in {
        "/api/v1/media": {"get"},
        "/api/v1/media/{name}": {"get", "put", "patch", "delete"},
        "/api/v1/logs": {"get"},
        "/api/v1/logs/{id}": {"get"},
        "/api/v1/calls": {"get", "post"},
        "/api/v1/calls/{call_id}": {"get", "delete"},
    }.items():
        assert methods <= set(doc["paths"][path]), path
    assert doc["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    assert "262144" in doc["paths"]["/api/v1/media/{name}"]["put"]["summary"]


def test_openapi_document_describes_every_route(tmp_path: Path) -> None:
    """Every route the server has is in the document with its methods, and nothing else."""
    from callhook.httpserver import server as web
    from callhook.httpserver.keys import KeyRing
    from callhook.httpserver.openapi import document
    from callhook.httpserver.recordsapi import RecordsApi
    from callhook.httpserver.restapi import Api as RestApi
    from callhook.store.callrecords import CallRecords
    from callhook.store.database import Database
    from callhook.store.files import MediaStore
    from callhook.telephony.conferences import Conferences
    from callhook.webservices.conferences import ConferenceApi, RoomViews

    rest = RestApi(MediaStore(tmp_path), KeyRing({}), lambda name: None)
    db = Database(tmp_path / "state.sqlite3")
    rest.records = RecordsApi(CallRecords(db), rest, "secret").list_records
    rooms = ConferenceApi(RoomViews(Conferences(lambda: 0.0)), rest)
    server = web.application("secret", api=rest, extra=(rooms,))
    routes: dict[str, set[str]] = {}
    for route in server.router.routes():
        path = route.resource.canonical if route.resource else ""
        if (path.startswith("/api/") or path == "/openapi.json") and route.method != "HEAD":
            routes.setdefault(path, set()).add(route.method.lower())
    paths = document(1)["paths"]
    documented = {path: {m for m in item if m != "parameters"} for path, item in paths.items()}
    assert routes == documented
    db.close()


# --- calls and logs ---------------------------------------------------------------------------


@needs_sipp
async def test_calls_are_listed_and_hung_up_per_application(
    api: Api, app: AppServer, tmp_path: Path
) -> None:
    # alpha's first page plays a file uploaded through the API, then waits.
    async with api.request("PUT", "/api/v1/media/prompts/hi.wav", data=tone_wav(0.5)) as r:
        assert r.status == 201
    app.page(
        "/alpha/start",
        [{"play": {"play_list": [{"file_to_play": "prompts/hi.wav"}]}}, {"sleep": {"seconds": 60}}],
    )
    app.page("/alpha/final", None)
    pcap = Stream(20.0).write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("alpha"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
    caller = asyncio.create_task(sipp.call(api.sip, tmp_path, *parts))

    calls: list[dict[str, Any]] = []

    async def listed() -> bool:
        nonlocal calls
        async with api.request("GET", "/api/v1/calls") as r:
            calls = (await r.json())["calls"]
        return bool(calls) and calls[0]["call_state"] == "answered"

    assert await until(listed), "the call was never listed as answered"
    (call,) = calls
    assert call["call_direction"] == "in"
    assert "alpha@" in call["call_to"]
    assert call["started"].endswith("Z")
    # The call's log can be read while the call runs: wait there for the prompt to end.
    (start,) = app.bodies("/alpha/start")
    instance = start["application_instance_id"]
    assert start["log_filename"] == f"logs/{instance}.log"
    log = ""

    async def played() -> bool:
        nonlocal log
        async with api.request("GET", f"/api/v1/logs/{instance}") as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            log = await r.text()
        return "action_start [1] sleep" in log

    assert await until(played), log
    assert "prompt_start #1 file prompts/hi.wav" in log
    assert "[0] play: played" in log  # the uploaded file, to its end
    call_path = f"/api/v1/calls/{call['call_id']}"
    async with api.request("GET", "/api/v1/calls", key=BETA) as r:
        assert (await r.json())["calls"] == []
    async with api.request("GET", call_path, key=BETA) as r:
        await expect_error(r, 404, "not_found")
    async with api.request("DELETE", call_path, key=BETA) as r:
        await expect_error(r, 404, "not_found")
    async with api.request("GET", call_path) as r:
        assert (await r.json())["call_id"] == call["call_id"]
    async with api.request("DELETE", call_path) as r:
        assert r.status == 202

    async def gone() -> bool:
        async with api.request("GET", "/api/v1/calls") as r:
            left: list[Any] = (await r.json())["calls"]
        return left == []

    assert await until(gone), "the call did not end"
    run = await asyncio.wait_for(caller, 60)
    assert run.returncode == 0, run.output + run.errors  # it got callhook's BYE
    assert await wait_for_request(app, "/alpha/final")
    (final,) = app.bodies("/alpha/final")
    assert final["this_call"]["call_cause"] == "dropped"
    # The call's log: listed for alpha only.
    async with api.request("GET", "/api/v1/logs") as r:
        logs = (await r.json())["logs"]
    assert [entry["application_instance_id"] for entry in logs] == [instance]
    async with api.request("GET", f"/api/v1/logs/{instance}", key=BETA) as r:
        await expect_error(r, 404, "not_found")
    async with api.request("GET", "/api/v1/logs", key=BETA) as r:
        assert (await r.json())["logs"] == []
    async with api.request("GET", f"/api/v1/logs/{instance}.log") as r:
        log = await r.text()
    assert "aborted hung up through the REST API" in log
    # The log is not a media file.
    async with api.request("GET", "/api/v1/media") as r:
        assert [f["name"] for f in (await r.json())["files"]] == ["prompts/hi.wav"]


@needs_sipp
async def test_an_outbound_call_runs_the_keys_application(
    api: Api, app: AppServer, tmp_path: Path
) -> None:
    app.page("/alpha/start", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    app.page("/alpha/final", None)
    port = free_udp_port()
    uas = await sipp.start_sipp(
        sipp.uas(), tmp_path, local_port=port, media_port=free_even_udp_port()
    )
    target = f"sip:callee@127.0.0.1:{port}"
    async with api.request("POST", "/api/v1/calls", json={"to": "mailto:x"}) as r:
        await expect_error(r, 400, "bad_request")
    async with api.request("POST", "/api/v1/calls", json={"to": target, "app": "beta"}) as r:
        await expect_error(r, 400, "bad_request")  # the key says which application
    # Toll fraud: a destination outside [outbound] allow is refused, naming the rule.
    outside = {"to": "sip:callee@198.51.100.7"}
    async with api.request("POST", "/api/v1/calls", json=outside) as r:
        message = await expect_error(r, 403, "forbidden")
        assert message == (
            "refused by [outbound] allow: sip:callee@198.51.100.7 matches none of its patterns"
        )
    body = {"to": target, "application_parameters": "from the API"}
    async with api.request("POST", "/api/v1/calls", json=body) as r:
        placed = await r.json()
        assert r.status == 202, placed
    assert placed["application"] == "alpha" and placed["call_id"]
    uas_out, _ = await asyncio.wait_for(uas.communicate(), 30)
    assert uas.returncode == 0, uas_out.decode(errors="replace")
    assert await wait_for_request(app, "/alpha/final")
    (start,) = app.bodies("/alpha/start")
    assert start["this_call"]["call_direction"] == "out"
    assert start["this_call"]["call_id"] == placed["call_id"]
    assert start["this_call"]["application_parameters"] == "from the API"
    assert app.bodies("/beta/start") == []


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("apps", "why"),
    [
        ('[apps.a]\nfirst_page = "http://x/"\napi_key = "short"\n', "at least 16"),
        ('[apps.a]\nfirst_page = "http://x/"\napi_key = "has a space in it ok"\n', "no spaces"),
        (
            '[apps.a]\nfirst_page = "http://x/"\napi_key = "same-key-0123456789"\n'
            '[apps.b]\nfirst_page = "http://x/"\napi_key = "same-key-0123456789"\n',
            "same as [apps.a]",
        ),
        ('[apps."a/b"]\nfirst_page = "http://x/"\n', "application name"),
        ('[http]\nmax_upload_mb = 0\n[apps.a]\nfirst_page = "http://x/"\n', "max_upload_mb"),
    ],
)
def test_unusable_keys_and_limits_are_config_errors(tmp_path: Path, apps: str, why: str) -> None:
    from callhook.config.settings import ConfigError, load

    path = tmp_path / "callhook.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n{apps}')
    with pytest.raises(ConfigError, match=re.escape(why)):
        load(path)


def test_keys_and_limit_from_the_config(tmp_path: Path) -> None:
    from callhook.config.settings import load

    path = tmp_path / "callhook.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[http]\nmax_upload_mb = 1.5\n'
        f'[apps.a]\nfirst_page = "http://x/"\napi_key = "{ALPHA}"\n'
        '[apps.b]\nfirst_page = "http://x/"\n'
    )
    settings = load(path)
    assert settings.http.max_upload_bytes == 1536 * 1024
    assert (settings.apps["a"].api_key, settings.apps["b"].api_key) == (ALPHA, None)
    assert ALPHA not in repr(settings.apps["a"])  # keys stay out of logs


async def test_serve_refuses_a_weak_api_key(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        *CALLHOOK,
        "serve",
        "--workers",
        "1",
        "--data-dir",
        str(tmp_path / "data"),
        "--http",
        "127.0.0.1:0",
        "--sip",
        "127.0.0.1:0",
        "--api-key",
        "1234",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert "--api-key must be a string of at least 16 characters" in out.decode()
