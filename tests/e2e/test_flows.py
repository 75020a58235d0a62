"""``callhook test`` as an application developer's CI runs it: the example flows (one per
action, and the demo) against the example application (written with callhook.sdk) served
on its own port, with the real speech engines; JUnit XML; a wrong expectation fails. And
the framework examples (aiohttp, Flask, FastAPI): each serves the PIN entry, the speech
menu and the voicemail of examples/voiceapp and passes their flows. The example flows and
the framework apps' flows also run through a real serve, over SIP and RTP
(``callhook test --sip``)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Server, free_tcp_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CALLHOOK = [sys.executable, "-m", "callhook"]


def _free_port() -> int:
    return free_tcp_port()


def _wait_for(port: int, app: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or app.poll() is not None:
                raise AssertionError("the example app did not start") from None
            time.sleep(0.1)


@pytest.fixture(scope="module")
def app_port() -> Iterator[int]:
    port = _free_port()
    app = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "actions_app.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for(port, app)
        yield port
    finally:
        app.terminate()
        app.wait(timeout=10)


def _test(*args: str, port: int, data: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "APP_PORT": str(port)}
    return subprocess.run(
        [*CALLHOOK, "test", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )


def test_the_example_flows_pass_against_the_example_app(app_port: int, tmp_path: Path) -> None:
    flows = sorted(str(p.relative_to(ROOT)) for p in (EXAMPLES / "flows").glob("*.yaml"))
    assert len(flows) >= 14  # one per action, and the demo
    report = tmp_path / "junit.xml"
    result = _test(*flows, "--junit", str(report), port=app_port, data=tmp_path / "data")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASS ") == len(flows)
    assert result.stdout.splitlines()[-1] == f"{len(flows)} of {len(flows)} flows passed"
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        str(len(flows)),
        "0",
        "0",
    )
    # The spoken answer went through TTS, the VAD and Whisper with the action's hints.
    get_input = next(c for c in suite.findall("testcase") if c.get("name") == "get_input")
    out = get_input.findtext("system-out") or ""
    assert "speech 'support'" in out


def test_a_wrong_expectation_fails_with_a_clear_message(app_port: int, tmp_path: Path) -> None:
    flow = tmp_path / "wrong.yaml"
    flow.write_text(
        "app: http://127.0.0.1:${APP_PORT}/get_number/start\nsecret: s3cret\nsteps:\n"
        " - hear: Enter your four digit PIN\n - press: '1234'\n"
        " - request: {page: /done, result: {entered_number: '4321'}}\n"
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("app: demo\nsteps:\n - press: 'abc'\n")
    report = tmp_path / "junit.xml"
    result = _test(str(flow), "--junit", str(report), port=app_port, data=tmp_path / "d")
    assert result.returncode == 1, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"FAIL {flow}")
    assert "step 3 (request {page: '/done', result: {'entered_number': '4321'}})" in first
    assert "'entered_number': '1234'" in first  # what the application received instead
    failure = ET.parse(report).getroot().find("testsuite/testcase/failure")
    assert failure is not None and "step 3" in (failure.get("message") or "")

    result = _test(str(broken), port=app_port, data=tmp_path / "d")
    assert result.returncode == 2
    assert f"ERROR {broken}: steps[0] (press)" in result.stdout


# --- the same flows through a real serve, over SIP and RTP (callhook test --sip) -------------


def _serve_config(tmp_path: Path, actions_port: int, voice_port: int) -> Path:
    """examples/serve.toml with the examples' ports of this test."""
    text = (EXAMPLES / "serve.toml").read_text()
    text = text.replace("127.0.0.1:5000/", f"127.0.0.1:{actions_port}/")
    text = text.replace("127.0.0.1:5001/", f"127.0.0.1:{voice_port}/")
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return path


async def _test_sip(server: Server, *flows: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *CALLHOOK, "test", "--sip", f"127.0.0.1:{server.sip_port}",
        "--http", f"127.0.0.1:{server.http_port}", "--data-dir", str(server.data_dir), *flows,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_the_example_flows_pass_through_a_real_serve_over_sip(
    app_port: int, tmp_path: Path
) -> None:
    """Each flow is a real SIP call from callhook test's own user agent to serve: digits
    as RFC 4733, speech as TTS audio over RTP heard by serve's VAD and Whisper; the
    expectations are judged from serve's own call log."""
    flows = sorted(str(p.relative_to(ROOT)) for p in (EXAMPLES / "flows").glob("*.yaml"))
    config = _serve_config(tmp_path, app_port, _free_port())
    async with Server(tmp_path / "data", extra=("--config", str(config))) as server:
        # Four calls at once (the flows take real time, mostly listening to prompts).
        status, out = await _test_sip(server, "--jobs", "4", *flows)
        assert status == 0, out + server.output[-3000:]
        assert out.count("PASS ") == len(flows), out
        # Reported in the order given, whichever ended first.
        reported = [line.split()[1] for line in out.splitlines() if line.startswith("PASS ")]
        assert reported == flows, out
        assert f"sip:get_input@127.0.0.1:{server.sip_port}" in out
        # A deliberately wrong expectation: exit 1, the step, and what serve's log had.
        wrong = tmp_path / "wrong.yaml"
        wrong.write_text(
            "to: get_number\nsteps:\n - hear: Enter your four digit PIN\n - press: '1234'\n"
            " - request: {page: /done, result: {entered_number: '4321'}}\n"
        )
        status, out = await _test_sip(server, str(wrong))
    assert status == 1, out
    first = out.splitlines()[0]
    assert first.startswith(f"FAIL {wrong}"), out
    assert "step 3 (request {page: '/done', result: {'entered_number': '4321'}})" in first
    assert "'entered_number': '1234'" in first  # what the application received instead
    assert "digit 1" in out  # serve's call log, shown under the failure


FRAMEWORKS = ("aiohttp", "flask", "fastapi")


async def test_each_framework_example_passes_its_flows_through_a_real_serve(
    tmp_path: Path,
) -> None:
    """The PIN entry, speech menu and voicemail of examples/voiceapp, served by each
    framework's example app, called over SIP through its own serve (the three at once)."""
    import json
    import urllib.error
    import urllib.request

    flows = sorted(str(p) for p in (EXAMPLES / "flows" / "voiceapp").glob("*.yaml"))
    apps = []
    try:
        ports = {}
        for framework in FRAMEWORKS:
            ports[framework] = port = _free_port()
            command = [sys.executable, f"{framework}_app.py", "--port", str(port)]
            apps.append(
                subprocess.Popen(
                    command, cwd=EXAMPLES, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            )
        for framework, app in zip(FRAMEWORKS, apps, strict=True):
            _wait_for(ports[framework], app)
            # The framework's page checks the signature: a forged request is refused.
            forged = urllib.request.Request(
                f"http://127.0.0.1:{ports[framework]}/pin/start",
                data=json.dumps({"application_instance_id": "x"}).encode(),
                headers={"Callhook-Signature": "t=1,v1=00", "Content-Type": "application/json"},
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(forged, timeout=10)
            assert refused.value.code == 403, framework

        async def one(framework: str) -> tuple[str, int, str]:
            work = tmp_path / framework
            work.mkdir()
            config = _serve_config(work, _free_port(), ports[framework])
            async with Server(work / "data", extra=("--config", str(config))) as server:
                status, out = await _test_sip(server, "--jobs", "3", *flows)
            return framework, status, out

        for framework, status, out in await asyncio.gather(*(one(f) for f in FRAMEWORKS)):
            if status != 0 or out.splitlines()[-1] != "3 of 3 flows passed":
                # pytest.fail, not assert: an assertion's message is cut short in the
                # report, and the failing flow's account is the part that matters.
                failed = out[out.find("FAIL ") :] if "FAIL " in out else out
                pytest.fail(f"{framework} (exit {status}):\n{failed}", pytrace=False)
    finally:
        for app in apps:
            app.terminate()
            app.wait(timeout=10)
