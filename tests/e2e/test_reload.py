"""Reloading the config on SIGHUP through ``callhook serve``, one process and two workers
behind Kamailio: a new application (its number, its API key) takes calls while a call of
the old config is in progress, and that call completes as it began; a config with an
error is refused whole, named in the log, and the running one stays."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, served, wait_for_request

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

SECOND_KEY = "second-app-key-0123456789abcdef"


def apps(app: AppServer, *names: str, extra: str = "") -> str:
    text = ""
    for name in names:
        text += f"""
[apps.{name}]
first_page = "{app.url(f"/{name}")}"
final_page = "{app.url(f"/{name}/final")}"
secret = "{app.secret}"
"""
        if name == "second":
            text += f'api_key = "{SECOND_KEY}"\nnumbers = ["+441632960123"]\n'
    return text + extra


async def until_logged(server: Server, text: str, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while server.output.count(text) < count:
        assert time.monotonic() < deadline, server.output
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("workers", WORKERS)
async def test_sighup_applies_a_new_application_while_a_call_runs(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page("/first", [{"sleep": {"seconds": 4}}, {"hang_up": {}}])
    app.page("/first/final", None)
    app.page("/second", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    app.page("/second/final", None)
    bye = sipp.BYE_FROM_SERVER.format(timeout_ms=20000)
    async with served(tmp_path, app, workers, apps(app, "first")) as server:
        assert server.proc is not None
        config = tmp_path / "callhook.toml"
        running = asyncio.create_task(
            sipp.call(server.sip, tmp_path, sipp.invite("first"), sipp.ANSWERED, bye)
        )
        assert await wait_for_request(app, "/first", timeout=10)
        # The new config: a second application, with a number and an API key.
        text = config.read_text().replace(apps(app, "first"), apps(app, "first", "second"))
        config.write_text(text)
        server.proc.send_signal(signal.SIGHUP)
        await until_logged(server, "SIGHUP: reloaded", workers)
        # Called by its number: the second application answers, while the first call runs.
        second = await sipp.call(
            server.sip, tmp_path, sipp.invite("+441632960123"), sipp.ANSWERED, bye
        )
        assert second.returncode == 0, second.output + server.output
        assert await wait_for_request(app, "/second/final", timeout=10)
        first = await running
        assert first.returncode == 0, first.output + server.output
        assert await wait_for_request(app, "/first/final", timeout=10)
        (final,) = app.bodies("/first/final")
        assert final["this_call"]["call_cause"] == "completed"  # it hung up, as it began to
        # Its API key works now.
        url = f"http://127.0.0.1:{server.http_port}/api/v1/calls/records"
        headers = {"Authorization": f"Bearer {SECOND_KEY}"}
        async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as r:
            assert r.status == 200, await r.text()

        # A config with an error: refused whole, the error named; the running one stays.
        config.write_text(text + "\n[retention]\nrecordings_days = -3\n")
        server.proc.send_signal(signal.SIGHUP)
        await until_logged(server, "the config is refused; the running one stays", 1)
        assert "recordings_days must be 0" in server.output
        again = await sipp.call(server.sip, tmp_path, sipp.invite("second"), sipp.ANSWERED, bye)
        assert again.returncode == 0, again.output + server.output
        assert await wait_for_request(app, "/second/final", timeout=10, count=2)
        # What waits for a restart is named (a port), and the rest applied.
        changed = text.replace(apps(app, "first", "second"), apps(app, "second"))
        config.write_text(changed + "\n[http]\nmax_upload_mb = 7\n")
        server.proc.send_signal(signal.SIGHUP)
        await until_logged(server, "applied at the next restart: [http]", workers)
    assert "Traceback" not in server.output, server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_sighup_applies_security_while_a_call_runs(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """[security] reloaded: a caller from outside the new allow list is refused (403: by
    callhook, or with workers by Kamailio in front, started again on the new rules),
    while the call that was up when the config changed completes."""
    app.page("/first", [{"sleep": {"seconds": 6}}, {"hang_up": {}}])
    app.page("/first/final", None)
    bye = sipp.BYE_FROM_SERVER.format(timeout_ms=30000)
    async with served(tmp_path, app, workers, apps(app, "first")) as server:
        assert server.proc is not None
        config = tmp_path / "callhook.toml"
        running = asyncio.create_task(
            sipp.call(server.sip, tmp_path, sipp.invite("first"), sipp.ANSWERED, bye)
        )
        assert await wait_for_request(app, "/first", timeout=10)
        closed = '\n[security]\nallow = ["10.0.0.0/8"]\nunknown = "reject"\n'
        config.write_text(config.read_text() + closed)
        server.proc.send_signal(signal.SIGHUP)
        await until_logged(server, "SIGHUP: reloaded", workers)
        if workers > 1:
            await until_logged(server, "Kamailio starts again", 1)
        # (Kamailio listening again: a refused call is answered.)
        refused = sipp.REFUSED.format(status=403, user="first")
        for _ in range(20):
            run = await sipp.call(server.sip, tmp_path, sipp.invite("first"), refused)
            if run.returncode == 0:
                break
            await asyncio.sleep(0.5)
        assert run.returncode == 0, run.output + server.output
        first = await running
        assert first.returncode == 0, first.output + server.output
        assert await wait_for_request(app, "/first/final", timeout=10)
        (final,) = app.bodies("/first/final")
        assert final["this_call"]["call_cause"] == "completed"
    assert "Traceback" not in server.output, server.output
