"""``callhook test`` when something is wrong, run as a developer runs it: a FAIL line names
the application's error (in process, and over SIP from serve's call log), and a serve that
refuses this process's installation secret stops the run before any call is placed."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer, Reply
from tests import leaks
from tests.e2e.harness import WORKERS, served

ROOT = Path(__file__).resolve().parents[2]
CALLHOOK = [sys.executable, "-m", "callhook"]


async def _test(*args: str) -> tuple[int, str, str]:
    """``callhook test ARGS``: exit status, standard output, standard error."""
    env = {k: v for k, v in os.environ.items() if k != "CALLHOOK_SECRET"}
    proc = await asyncio.create_subprocess_exec(
        *CALLHOOK, "test", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_in_process_a_fail_line_names_the_page_and_what_was_wrong(
    tmp_path: Path, app: AppServer
) -> None:
    app.page("/start", {"actions": [{"get_number": {"digit_count": 40}}]})
    flow = tmp_path / "pin.yaml"
    flow.write_text(
        f"app: {app.url('/start')}\nsecret: {app.secret}\nsteps:\n - hear: Enter your PIN\n"
    )
    status, out, err = await _test(str(flow), "--data-dir", str(tmp_path / "data"))
    assert status == 1, out + err
    first = out.splitlines()[0]
    assert first.startswith(f"FAIL {flow} (pin: {app.url('/start')}): step 1 (hear"), out
    assert first.endswith(
        f" — the call's error: the page {app.url('/start')} answered no valid action list:"
        " $.actions[0].get_number.next_page: required property is missing;"
        " $.actions[0].get_number.digit_count: input should be less than or equal to 32,"
        " got 40"
    ), first


@pytest.mark.parametrize("workers", WORKERS)
async def test_over_sip_a_fail_line_names_the_error_in_serves_log(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """serve's first page answers 500: serve refuses the call; the FAIL line says that, and
    why, from serve's call log of the call it refused."""
    app.page("/start", Reply("database down", status=500, content_type="text/plain"))
    app.page("/final", None)
    flow = tmp_path / "welcome.yaml"
    flow.write_text("to: anyone\nsteps:\n - hear: Welcome\n")
    async with served(tmp_path, app, workers) as server:
        status, out, err = await _test(
            "--sip", f"127.0.0.1:{server.sip_port}", "--http", f"127.0.0.1:{server.http_port}",
            "--data-dir", str(server.data_dir), str(flow),
        )  # fmt: skip
    assert status == 1, out + err
    first = out.splitlines()[0]
    assert first.startswith(f"FAIL {flow} (welcome: sip:anyone@127.0.0.1:"), out
    assert first.endswith(
        f" — the call's error: the page {app.url('/start')} answered HTTP 500 Internal Server"
        " Error: database down"
    ), first
    assert "call_end call_cause=failed" in out  # serve's call log, shown under the failure


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_serve_refusing_the_secret_stops_the_run_before_any_call(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """``callhook test --sip`` run with another data directory than serve's: its secret is
    not serve's. One line says so, naming the file it read, and no call is placed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wrong = "not-the-secret-of-this-serve-0123456789"
    leaks.used(wrong)
    (elsewhere / "secret").write_text(wrong + "\n")
    flow = tmp_path / "demo.yaml"
    flow.write_text("steps:\n - hear: Welcome\n")
    app.page("/start", [{"play": {"play_list": [{"text_to_say": "Welcome."}]}}])
    async with served(tmp_path, app, workers) as server:
        status, out, err = await _test(
            "--sip", f"127.0.0.1:{server.sip_port}", "--http", f"127.0.0.1:{server.http_port}",
            "--data-dir", str(elsewhere), str(flow), str(flow),
        )  # fmt: skip
    assert status == 2, out + err
    assert out == "", out  # no flow ran: no PASS, FAIL or count
    (line,) = err.splitlines()
    assert line.startswith(
        f"callhook test --sip: serve at http://127.0.0.1:{server.http_port} refused the"
        f" installation secret read from {(elsewhere / 'secret').resolve()}: serve's own is"
        " the file secret in serve's data directory"
    ), err
    assert app.bodies("/start") == []  # no call was placed: the application saw none
