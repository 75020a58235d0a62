"""docs/tutorial.md, done as a newcomer does it: every file it shows is written and used,
every command it shows is run (with this test's ports), and what it says happens does.

The tutorial's commands are checked against :data:`COMMANDS`, so a change to them fails
here until this test runs the new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.browser import browser, count, wait
from tests.e2e.harness import Server, free_tcp_port, free_udp_port
from tests.e2e.test_webphone import SPEECH, microphone_wav

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
CALLHOOK = [sys.executable, "-m", "callhook"]

#: The shell commands of the tutorial, in order: each is run below.
COMMANDS = [
    "scripts/serve",
    ".venv/bin/python voicemail.py --port 5000 &",
    ".venv/bin/callhook serve --config voicemail.toml",
    ".venv/bin/callhook test voicemail-flow.yaml",
    ".venv/bin/callhook test --sip 127.0.0.1:5060 voicemail-flow.yaml",
]


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block."""
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


def files(text: str) -> dict[str, str]:
    """The files the tutorial shows: blocks whose first line is ``# file: NAME``."""
    out = {}
    for _, body in blocks(text):
        first = body.partition("\n")[0]
        if first.startswith("# file: "):
            out[first.removeprefix("# file: ").strip()] = body
    return out


def test_the_tutorial_shows_exactly_the_commands_this_test_runs() -> None:
    shown = [
        line.strip()
        for lang, body in blocks(TUTORIAL.read_text())
        if lang == "sh"
        for line in body.splitlines()
        if line.strip()
    ]
    assert shown == COMMANDS
    assert set(files(TUTORIAL.read_text())) == {
        "voicemail.py",
        "voicemail.toml",
        "voicemail-flow.yaml",
    }


def _write(folder: Path, app_port: int) -> dict[str, Path]:
    written = {}
    for name, body in files(TUTORIAL.read_text()).items():
        if name != "voicemail.py":
            body = body.replace("127.0.0.1:5000", f"127.0.0.1:{app_port}")
        (folder / name).write_text(body)
        written[name] = folder / name
    return written


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers (405 to a GET: the app only takes POSTs)
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError("the tutorial's application did not start") from None
            time.sleep(0.1)


async def _run(*args: str, cwd: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_scripts_serve_starts_the_web_phone(tmp_path: Path) -> None:
    """Step 1: ``scripts/serve`` (set up already, as the suite's own setup did it)."""
    http = free_tcp_port()
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / COMMANDS[0]), "--http", f"127.0.0.1:{http}", "--sip",
        f"127.0.0.1:{free_udp_port()}", "--data-dir", str(tmp_path / "data"),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        printed = ""
        async with asyncio.timeout(120):
            while "web phone:" not in printed:
                line = await proc.stdout.readline()
                assert line, printed
                printed += line.decode()
        assert f"web phone: http://127.0.0.1:{http}/phone" in printed
        page = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{http}/phone", timeout=10).read()
        )
        assert b"callhook web phone" in page
    finally:
        proc.terminate()
        await proc.wait()


@contextlib.contextmanager
def voicemail_app(folder: Path) -> Iterator[dict[str, Path]]:
    """The tutorial's files written in ``folder``, and its application running there."""
    app_port = free_tcp_port()
    written = _write(folder, app_port)
    app = subprocess.Popen(
        [sys.executable, "voicemail.py", "--port", str(app_port)],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_port(app_port, app)
        yield written
    finally:
        app.terminate()
        app.wait(timeout=10)


@pytest.mark.solo  # a real browser's audio: starved of CPU beside other tests, it stutters
async def test_the_voicemail_of_the_tutorial_in_the_web_phone(tmp_path: Path) -> None:
    """Steps 2 and 3: the application, and a call to it in the web phone."""
    with voicemail_app(tmp_path) as written:
        config = ("--config", str(written["voicemail.toml"]))
        async with Server(tmp_path / "data", extra=config) as server:
            base = f"http://127.0.0.1:{server.http_port}"
            seen = await asyncio.to_thread(_web_phone_call, base, tmp_path)
    # In the web phone: the message recorded, ended by the silence timer, played back.
    assert "voicemail" in str(seen["title"]), seen
    text = str(seen["timeline"])
    assert '"reason": "silence"' in text, text
    assert "Here it is" in text and "file recordings/" in text, text
    assert isinstance(seen["expired"], int) and seen["expired"] >= 1, seen  # the silence timer


async def test_the_voicemail_of_the_tutorial_passes_its_flow(tmp_path: Path) -> None:
    """Step 4: the application's flow through serve over SIP and in-process (passing, and
    failing when told to expect the wrong thing)."""
    with voicemail_app(tmp_path) as written:
        config = ("--config", str(written["voicemail.toml"]))
        async with Server(tmp_path / "data", extra=config) as server:
            status, out = await _run(
                *CALLHOOK, "test", "--sip", f"127.0.0.1:{server.sip_port}", "--http",
                f"127.0.0.1:{server.http_port}", "--data-dir", str(server.data_dir),
                "voicemail-flow.yaml", cwd=tmp_path,
            )  # fmt: skip
            assert status == 0, out + server.output[-3000:]
            assert out.startswith("PASS voicemail-flow.yaml"), out
        status, out = await _run(*CALLHOOK, "test", "voicemail-flow.yaml", cwd=tmp_path)
        assert status == 0, out
        assert out.startswith("PASS voicemail-flow.yaml"), out
        flow = written["voicemail-flow.yaml"]
        flow.write_text(flow.read_text().replace("contains_sound: true", "contains_sound: false"))
        status, out = await _run(*CALLHOOK, "test", "voicemail-flow.yaml", cwd=tmp_path)
        assert status == 1, out
        assert out.startswith("FAIL voicemail-flow.yaml"), out
        assert "'contains_sound': True" in out  # what the application received instead


def message_microphone(path: Path) -> Path:
    """A caller who speaks after the beep, as a WAV for the browser's microphone: quiet
    through the greeting, "two" every 1.2 s from 6 s to 12 s, then quiet.

    Chromium plays the file from when the page opens the microphone, a moment before the
    call starts, and loops it. A short loop (the keypad test's: "two" then 3 s of quiet)
    puts the words at a different place for each call: one started 0.9 s later than usual
    had "two" fall during the beep, and the record's 2 s of initial silence ran out before
    the next one. Here the words cover the record's first seconds for any start up to
    about 3 s late, and the quiet after them (longer than the record's 2 s of silence)
    ends the message; the file is longer than the call, so it does not loop in time."""
    import wave

    import numpy as np

    with wave.open(str(SPEECH / "2_jackson_2.wav")) as src:
        rate = src.getframerate()
        two = np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16)
    audio = np.zeros(round(30 * rate), np.int16)
    for start in np.arange(6.0, 12.0, 1.2):
        at = round(start * rate)
        audio[at : at + len(two)] = two
    return microphone_wav(path, audio, rate)


def _web_phone_call(base: str, folder: Path) -> dict[str, object]:
    from selenium.webdriver.common.by import By

    driver = browser(message_microphone(folder / "microphone.wav"), folder / "profile")
    try:
        driver.get(f"{base}/phone")
        select = driver.find_element(By.ID, "app")
        wait("the voicemail listed", lambda: "voicemail" in select.text)
        driver.find_element(By.ID, "call").click()

        def timeline() -> str:
            return str(driver.find_element(By.ID, "timeline").text)

        try:
            wait("the message played back", lambda: "file recordings/" in timeline(), 90)
            wait("the call over", lambda: "call_end" in timeline(), 60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the page's timeline:\n{timeline()}") from None
        time.sleep(0.5)
        return {
            "timeline": timeline(),
            "title": driver.find_element(By.ID, "view-title").text,
            "expired": count(driver, "#picture rect.timer.expired"),
        }
    finally:
        driver.quit()
