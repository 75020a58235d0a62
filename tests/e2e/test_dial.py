"""Outbound calls: ``callhook dial`` calling a SIPp UAS, with and without a digest challenge."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import free_even_udp_port, free_udp_port, wait_for_request
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


def outbound_config(tmp_path: Path, allow: str = "sip:*@127.0.0.1:*") -> str:
    """A config whose [outbound] allow lets the tests call SIPp on loopback."""
    path = tmp_path / "outbound.toml"
    path.write_text(f'[outbound]\nallow = ["{allow}"]\n')
    return str(path)


async def dial(tmp_path: Path, app: AppServer, target: str, *extra: str) -> tuple[int, str]:
    if "--config" not in extra:
        extra = ("--config", outbound_config(tmp_path), *extra)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "callhook",
        "dial",
        target,
        "--app-url",
        app.url("/start"),
        "--secret",
        app.secret,
        "--final-page",
        app.url("/final"),
        "--sip",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "data"),
        *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(errors="replace")


async def test_dial_runs_the_application_when_answered(tmp_path: Path, app: AppServer) -> None:
    digits = Stream(6.0).rfc4733("42", at=1.0).write_pcap(tmp_path / "callee.pcap")
    app.page(
        "/start",
        [{"get_number": {"digit_count": 2, "next_page": {"url": "/number"}}}],
    )
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)
    port = free_udp_port()
    uas = await sipp.start_sipp(
        sipp.uas(play=str(digits)), tmp_path, local_port=port, media_port=free_even_udp_port()
    )
    code, out = await dial(tmp_path, app, f"sip:callee@127.0.0.1:{port}")
    uas_out, _ = await asyncio.wait_for(uas.communicate(), 30)
    assert code == 0, out
    assert uas.returncode == 0, uas_out.decode(errors="replace")
    (first,) = app.bodies("/start")
    assert first["this_call"]["call_direction"] == "out"
    assert first["this_call"]["call_state"] == "answered"
    (number,) = app.bodies("/number")
    assert number["action_result"]["result"] == {"entered_number": "42"}
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"


async def test_dial_answers_a_digest_challenge(tmp_path: Path, app: AppServer) -> None:
    app.page("/start", [{"sleep": {"seconds": 0.5}}, {"hang_up": {}}])
    app.page("/final", None)
    port = free_udp_port()
    scenario = sipp.uas(username="alice", password="wonderland")
    uas = await sipp.start_sipp(
        scenario, tmp_path, local_port=port, media_port=free_even_udp_port()
    )
    code, out = await dial(
        tmp_path,
        app,
        f"sip:callee@127.0.0.1:{port}",
        "--username",
        "alice",
        "--password",
        "wonderland",
    )
    uas_out, _ = await asyncio.wait_for(uas.communicate(), 30)
    assert uas.returncode == 0, uas_out.decode(errors="replace") + out
    assert code == 0, out
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"


async def test_dial_with_a_wrong_password_fails_cleanly(tmp_path: Path, app: AppServer) -> None:
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    port = free_udp_port()
    scenario = sipp.uas(username="alice", password="wonderland")
    uas = await sipp.start_sipp(
        scenario, tmp_path, local_port=port, media_port=free_even_udp_port()
    )
    code, out = await dial(
        tmp_path, app, f"sip:callee@127.0.0.1:{port}", "--username", "alice", "--password", "nope"
    )
    uas_out, _ = await asyncio.wait_for(uas.communicate(), 30)
    assert uas.returncode == 0, uas_out.decode(errors="replace")  # it answered 403 as scripted
    assert code == 1, out
    assert app.bodies("/start") == []  # never answered: the application did not run
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "failed"
    assert final["this_call"]["call_raw_cause"] == "403"


async def test_calls_api_places_a_call(tmp_path: Path, app: AppServer) -> None:
    """POST /api/calls on a running server: authenticated with the installation secret."""
    import aiohttp

    from tests.e2e.harness import Server

    app.page("/start", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    app.page("/final", None)
    port = free_udp_port()
    uas = await sipp.start_sipp(
        sipp.uas(), tmp_path, local_port=port, media_port=free_even_udp_port()
    )
    config = ("--config", outbound_config(tmp_path))
    async with Server(tmp_path / "data", extra=config) as server:
        secret = (tmp_path / "data" / "secret").read_text().strip()
        url = f"http://127.0.0.1:{server.http_port}/api/calls"
        body = {
            "to": f"sip:callee@127.0.0.1:{port}",
            "first_page": app.url("/start"),
            "final_page": app.url("/final"),
            "secret": app.secret,
        }
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json=body) as r:
                assert r.status == 401  # no token
            headers = {"Authorization": f"Bearer {secret}"}
            async with http.post(url, json={"to": "mailto:x"}, headers=headers) as r:
                assert r.status == 400
            async with http.post(url, json=body, headers=headers) as r:
                assert r.status == 202
        uas_out, _ = await asyncio.wait_for(uas.communicate(), 30)
        await wait_for_request(app, "/final")
    assert uas.returncode == 0, uas_out.decode(errors="replace") + server.output
    assert app.bodies("/start")[0]["this_call"]["call_direction"] == "out"
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"
