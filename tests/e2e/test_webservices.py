"""Aculab's web services against a real ``serve``, through a client written from Aculab's
pages (tests/e2e/aculab_client.py): an outbound service started (a SIPp callee answers;
its parameters and token reach the application's first page), its status while it runs
and when it is over, the application instance's status; a file written, listed, read,
renamed and deleted; wrong credentials answered in Aculab's error shape and banned. The
same through the default deployment, workers behind Kamailio."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callhook.devtools.harness import AppServer, Received
from callhook.media import g711, tones, wav
from tests.e2e import sipp
from tests.e2e.aculab_client import AculabWebServices
from tests.e2e.harness import (
    WORKERS,
    Server,
    free_even_udp_port,
    free_udp_port,
    served,
    wait_for_request,
)

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

KEY = "outbound-service-key-0123456789"
ACCOUNT = ("1-2-0", "user@example.com")


def serve(tmp_path: Path, app: AppServer, workers: int) -> Server:
    lines = [
        "[apps.outbound]",
        f'first_page = "{app.url("/outbound")}"',
        f'final_page = "{app.url("/outbound-final")}"',
        f'secret = "{app.secret}"',
        f'api_key = "{KEY}"',
        f'webservices_username = "{ACCOUNT[0]}/{ACCOUNT[1]}"',
        "[outbound]",
        'allow = ["sip:*@127.0.0.1:*"]',
    ]
    return served(tmp_path, app, workers, "\n".join(lines) + "\n")


def client(server: Server, key: str = KEY, source: str | None = None) -> AculabWebServices:
    base = f"http://127.0.0.1:{server.http_port}"
    return AculabWebServices(base, *ACCOUNT, key, source=source)


async def until(check: Any, timeout: float = 15.0) -> Any:
    """``await check()`` until it is truthy (its value), or fail after ``timeout`` s."""
    for _ in range(int(timeout / 0.1)):
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("not in time")


@pytest.mark.parametrize("workers", WORKERS)
async def test_an_outbound_service_started_watched_and_reported(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    callee_port = free_udp_port()
    callee = await sipp.start_sipp(
        sipp.uas(), tmp_path, local_port=callee_port, media_port=free_even_udp_port()
    )
    first_pages: list[Received] = []

    def outbound(request: Received) -> list[dict[str, Any]]:
        first_pages.append(request)
        return [{"sleep": {"seconds": 3}}, {"hang_up": {}}]

    app.page("/outbound", outbound)
    app.page("/outbound-final", None)
    app.page("/start", [{"hang_up": {}}])
    to = f"sip:callee@127.0.0.1:{callee_port}"
    async with serve(tmp_path, app, workers) as server:
        ws = client(server)
        wanted = {"to": to, "token": "order-7"}
        started = await ws.service_start("outbound", KEY, wanted)
        assert started.status == 200, (started.raw, server.output)
        (reference,) = started.body
        running = await until(lambda: _status_is(ws, reference, "in_progress"), timeout=20)
        assert running["reference_id"] == reference
        assert await wait_for_request(app, "/outbound-final", timeout=20), server.output
        done = await until(lambda: _status_is(ws, reference, "completed"))
        assert (done["call_cause"], done["call_raw_cause"]) == ("completed", "200")
        status = await ws.application_status(reference)
        assert status.status == 200, status.raw
        # Its call log is a "rest" file, not a "media" one.
        logs = await ws.file_list("rest")
        assert f"{reference}.log" in [f["filename"] for f in logs.body["files"]]
        assert (await ws.file_list()).body == {"files": []}
        one = await ws._call(
            "file_list", {"filetype": "rest", "filename": f"{reference}.log"}, ws._key()
        )
        assert [f["filename"] for f in one.body["files"]] == [f"{reference}.log"]
        cancel_late = await ws.service_cancel(reference)  # over already: nothing to cancel
        assert cancel_late.status == 404 and cancel_late.body["error"]["code"] == "HTTP 404"
        # Its call log deleted (past [retention] call_logs_days): its call record tells the
        # call still.
        (server.data_dir / "media" / "outbound" / "logs" / f"{reference}.log").unlink()
        recorded = await ws.application_status(reference)
        assert recorded.status == 200, recorded.raw
    out, _ = await asyncio.wait_for(callee.communicate(), 30)
    assert callee.returncode == 0, out.decode(errors="replace")
    (first,) = first_pages
    assert first.json["application_instance_id"] == reference
    assert first.json["token"] == "order-7"  # "passed transparently to the Web App"
    this_call = first.json["this_call"]
    assert (this_call["call_direction"], this_call["call_to"]) == ("out", to)
    assert json.loads(this_call["outbound_parameters"]) == wanted
    adr = status.body["adr"]
    assert (adr["application_instance_id"], adr["application_name"]) == (reference, "outbound")
    assert adr["stop_time"] > adr["start_time"] > 0
    assert 2.5 <= adr["duration"] < 15
    (cdr,) = status.body["cdrs"]
    assert (cdr["call_direction"], cdr["call_to"], cdr["call_cause"]) == ("out", to, "completed")
    assert status.body["errs"] == []
    # From the record: the same instance, call and cause; its times the call's own (from
    # its INVITE, where the log's begin with the log).
    again = recorded.body["adr"]
    assert (again["application_instance_id"], again["application_name"]) == (reference, "outbound")
    (from_record,) = recorded.body["cdrs"]
    assert {k: from_record[k] for k in ("call_id", "call_direction", "call_to", "call_cause")} == {
        k: cdr[k] for k in ("call_id", "call_direction", "call_to", "call_cause")
    }
    assert abs(from_record["stop_time"] - cdr["stop_time"]) < 1.0


async def _status_is(ws: AculabWebServices, reference: str, wanted: str) -> Any:
    answer = await ws.service_status(reference)
    return answer.body if answer.status == 200 and answer.body["status"] == wanted else None


@pytest.mark.parametrize("workers", WORKERS)
async def test_files_written_listed_read_renamed_deleted(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page("/start", [{"hang_up": {}}])
    hello = wav.g711_file("alaw", g711.encode("alaw", tones.tone(440.0, 0.5)))
    async with serve(tmp_path, app, workers) as server:
        ws = client(server)
        written = await ws.file_write("prompts/hello.wav", hello)
        assert written.status == 200, written.raw
        listed = await ws.file_list()
        names = [f["filename"] for f in listed.body["files"]]
        assert names == ["prompts/hello.wav"]
        got = await ws.file_get("prompts/hello.wav")
        assert (got.status, got.raw) == (200, hello)
        renamed = await ws.file_rename("prompts/hello.wav", "prompts/welcome.wav")
        assert renamed.status == 200, renamed.raw
        names = [f["filename"] for f in (await ws.file_list()).body["files"]]
        assert names == ["prompts/welcome.wav"]
        # An encrypted file (Aculab: File Write "with the encrypted flag set to true"):
        # its bytes cannot be checked, only that they are whole AES blocks.
        secret = await ws.file_write("prompts/secret.wav", bytes(range(48)), encrypted=True)
        assert secret.status == 200, secret.raw
        torn = await ws.file_write("prompts/torn.wav", bytes(50), encrypted=True)
        assert (torn.status, torn.body["error"]["code"]) == (400, "0002")
        not_wav = await ws.file_write("prompts/x.wav", b"not a wav file at all")
        assert not_wav.status == 415 and not_wav.body["error"]["code"] == "HTTP 415"
        # The form's fields before its file are held in memory: 64 KiB of names and
        # values in all, and a hundred parts.
        for pads in (
            [(f"pad{n}", "x" * 4000) for n in range(20)],  # (each one short enough alone)
            [("p" * 4000 + str(n), "") for n in range(20)],  # (the names, not the values)
            [(f"p{n}", "") for n in range(101)],
        ):
            padded = aiohttp.FormData()
            for name, value in (("filetype", "media"), ("filename", "prompts/padded.wav")):
                padded.add_field(name, value)
            for name, value in pads:
                padded.add_field(name, value)
            padded.add_field("file", hello, filename="padded.wav")
            refused = await ws._call("file_write", {}, ws._key(), data=padded)
            assert (refused.status, refused.body["error"]["code"]) == (400, "0002"), refused.raw
            assert "the form" in refused.body["error"]["text"]
        fine = aiohttp.FormData()
        for name, value in (("filetype", "media"), ("filename", "prompts/fine.wav")):
            fine.add_field(name, value)
        for n in range(98):  # (100 fields with filetype and filename, then the file)
            fine.add_field(f"p{n}", "")
        fine.add_field("file", hello, filename="fine.wav")
        written = await ws._call("file_write", {}, ws._key(), data=fine)
        assert written.status == 200, written.raw
        assert (await ws.file_delete("prompts/fine.wav")).status == 200
        assert (await ws.file_delete("prompts/welcome.wav")).status == 200
        gone = await ws.file_get("prompts/welcome.wav")
        assert gone.status == 404
        error = gone.body["error"]
        assert error["code"] == "HTTP 404" and error["text"] and error["link"]
        assert gone.body["request"]["url"] == "/file_get"
        missing = await ws.file_get("")
        assert (missing.status, missing.body["error"]["code"]) == (400, "0002")
        no_type = await ws._call("file_list", {}, ws._key())
        assert (no_type.status, no_type.body["error"]["code"]) == (400, "0001")
        # The call logs are filetype "rest": listed and read, never written.
        assert (await ws.file_list("rest")).status == 200
    stored = tmp_path / "data" / "media" / "outbound" / "prompts"
    assert sorted(p.name for p in stored.iterdir()) == ["secret.wav"]


async def test_wrong_credentials_are_refused_in_aculabs_shape_and_banned(
    tmp_path: Path, app: AppServer
) -> None:
    app.page("/start", [{"hang_up": {}}])
    async with serve(tmp_path, app, 1) as server:
        right = client(server)
        assert (await right.file_list()).status == 200
        other_account = AculabWebServices(
            f"http://127.0.0.1:{server.http_port}", "1-2-0", "mallory@example.com", KEY
        )
        refused = await other_account.file_list()  # the right key, another account
        assert refused.status == 401 and refused.body["error"]["code"] == "HTTP 401"
        wrong_service = await right.service_start("outbound", "not-the-key", {"to": "sip:a@b"})
        assert wrong_service.status == 401
        guesser = client(server, key="guess", source="127.0.0.2")
        for _ in range(5):
            answer = await guesser.file_list()
            assert answer.status == 401 and answer.body["error"]["code"] == "HTTP 401"
        banned = await client(server, source="127.0.0.2").file_list()  # the right key now
        assert banned.status == 403 and banned.body["error"]["code"] == "HTTP 403"
    assert "127.0.0.2: banned for 600 s: 5 failed web service authentications" in server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_start_of_several_calls_is_all_or_nothing(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """rest_calls with two calls, the second to a destination [outbound] allow refuses:
    the answer is the refusal, and the first call, placed already, is cancelled (no call
    runs that the back end has no reference for)."""
    app.page("/outbound", [{"sleep": {"seconds": 30}}])
    app.page("/outbound-final", None)
    app.page("/start", [{"hang_up": {}}])
    silent = free_udp_port()  # nothing answers there: the first call rings until cancelled
    async with serve(tmp_path, app, workers) as server:
        answer = await client(server).service_start(
            "outbound",
            KEY,
            [{"to": f"sip:first@127.0.0.1:{silent}"}, {"to": "sip:second@192.0.2.7"}],
        )
        assert answer.status == 403 and answer.body["error"]["code"] == "HTTP 403", answer.raw
        assert await wait_for_request(app, "/outbound-final", timeout=20), server.output
    (final,) = app.bodies("/outbound-final")
    assert final["this_call"]["call_to"] == f"sip:first@127.0.0.1:{silent}"
    assert final["this_call"]["call_cause"] == "no_answer"
    assert app.bodies("/outbound") == []  # never answered, never run
