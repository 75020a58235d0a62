"""The web phone in a real browser: headless Chromium calls the demo through ``/phone``.

Debian's chromium, driven by Selenium through chromium-driver (``scripts/setup
--test`` installs both), with a fake microphone that plays a real recording of
"two" (then 3 s of silence, looped): the audio goes over the page's WebSocket as
RTP, through serve's media session, VAD and Whisper, exactly as a SIP caller's
does. The keypad sends RFC 4733 digits. The test checks what the demo's pages
received (in the call log), what the page shows (timeline, picture), and a
screenshot of the page, kept in ``test-artifacts/`` (``CALLHOOK_ARTIFACTS``).
"""

from __future__ import annotations

import asyncio
import os
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from callhook.devtools.harness import AppServer
from tests.e2e.browser import browser, count, wait
from tests.e2e.harness import Server, served

SPEECH = Path(__file__).parent.parent / "data" / "speech"
ARTIFACTS = Path(os.environ.get("CALLHOOK_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts"))

#: The page's colours (callhook/web/phone.css), as the screenshot has them.
COLOURS = {
    "prompt spans": (0x63, 0xB3, 0xED),
    "voice activity": (0xDD, 0x6B, 0x20),
    "digits": (0x2F, 0x85, 0x5A),
    "timers": (0xFE, 0xFC, 0xBF),
}


def fake_microphone(path: Path) -> Path:
    """A WAV of 'two' and 3 s of silence (Chromium loops it as the microphone)."""
    with wave.open(str(SPEECH / "2_jackson_2.wav")) as src:
        rate = src.getframerate()
        audio = np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16)
    return microphone_wav(path, np.concatenate([audio, np.zeros(3 * rate, np.int16)]), rate)


def microphone_wav(path: Path, audio: np.ndarray[Any, Any], rate: int) -> Path:
    """``audio`` (16-bit mono at ``rate``) written to ``path`` as a WAV: a fake microphone's
    file for Chromium."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(audio.astype("<i2").tobytes())
    return path


def call_the_demo(base: str, microphone: Path, profile: Path, shot: Path) -> dict[str, Any]:
    """The browser's part: a whole call through the page; what it showed."""
    from selenium.webdriver.common.by import By

    driver = browser(microphone, profile)
    try:
        driver.get(f"{base}/phone")
        wait(
            "the demo in the application list",
            lambda: "demo" in driver.find_element(By.ID, "app").text,
        )
        driver.find_element(By.ID, "call").click()

        def timeline() -> str:
            return str(driver.find_element(By.ID, "timeline").text)

        def press(digits: str) -> None:
            for digit in digits:
                driver.find_element(
                    By.CSS_SELECTOR, f'#keypad button[data-digit="{digit}"]'
                ).click()
                time.sleep(0.3)

        wait("the get_number prompt", lambda: "Please enter a number" in timeline())
        press("12#")
        wait("the spoken 'two' recognised", lambda: "speech 'two'" in timeline(), 90)
        wait("the recording started", lambda: "recording_start" in timeline())
        time.sleep(2.0)  # the caller says "two" into the recording
        press("#")
        wait("the recording saved", lambda: "recording_stop" in timeline())
        wait("the recording's play button", lambda: count(driver, "#timeline button.play"))
        time.sleep(1.0)  # a redraw of the picture (every 250 ms)
        live = {
            "timeline": timeline(),
            "pages": count(driver, "#timeline li.page details"),
            "page": driver.execute_script(
                "return document.querySelector('#timeline li.page summary').textContent"
            ),
            "prompts": count(driver, "#picture rect.prompt"),
            "voice": count(driver, "#picture rect.voice"),
            "digits": count(driver, "#picture circle.digit"),
            "speech": count(driver, "#picture circle.speech"),
            "timers": count(driver, "#picture rect.timer"),
            "levels": count(driver, "#picture rect.level"),
            "status": driver.find_element(By.ID, "status").text,
        }
        driver.save_screenshot(str(shot))
        driver.find_element(By.ID, "hangup").click()
        wait("the call over", lambda: driver.execute_script("return document.body.dataset.ended"))
        # The same call again, drawn from its call log alone.
        link = wait(
            "the past call listed", lambda: driver.find_elements(By.CSS_SELECTOR, "#calls a")
        )
        link[0].click()
        wait(
            "the past call shown",
            lambda: "from its call log" in driver.find_element(By.ID, "view-title").text,
        )
        past = {
            "prompts": count(driver, "#picture rect.prompt"),
            "voice": count(driver, "#picture rect.voice"),
            "digits": count(driver, "#picture circle.digit"),
            "timers": count(driver, "#picture rect.timer"),
            "levels": count(driver, "#picture rect.level"),
            "timeline": timeline(),
        }
        return {"live": live, "past": past}
    finally:
        driver.quit()


def colour_pixels(shot: Path) -> dict[str, int]:
    """How many pixels of the screenshot have each of the picture's colours."""
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    return {
        name: int(np.sum(np.all(np.abs(pixels - np.array(rgb)) <= 3, axis=1)))
        for name, rgb in COLOURS.items()
    }


@pytest.mark.solo  # a real browser's audio: starved of CPU beside other tests, it stutters
async def test_the_web_phone_calls_the_demo_with_keypad_and_voice(tmp_path: Path) -> None:
    microphone = fake_microphone(tmp_path / "microphone.wav")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "webphone.png"
    async with Server(tmp_path / "data") as server:
        base = f"http://127.0.0.1:{server.http_port}"
        seen = await asyncio.to_thread(call_the_demo, base, microphone, tmp_path / "profile", shot)
    live, past = seen["live"], seen["past"]
    text = live["timeline"]
    # Keypad digits reached get_number as RFC 4733 events; the demo got "12".
    assert 'get_number: {"entered_number": "12"}' in text, text
    # The fake microphone's "two" went through VAD and Whisper: the demo chose support.
    assert "speech 'two' (confidence" in text, text
    assert "You chose support." in text, text
    assert "recording_stop recordings/" in text, text
    # The timeline folds each page request with its body and answer.
    assert live["pages"] >= 3, live
    assert "/demo/start → 200 in " in live["page"], live  # its HTTP status and latency
    # The picture: prompts, the caller's level, VAD, digits, speech and timers.
    assert live["prompts"] >= 5, live
    assert live["voice"] >= 1, live
    assert live["digits"] >= 4, live  # 1, 2, # and the # that ended the recording
    assert live["speech"] >= 1, live
    assert live["timers"] >= 3, live
    assert live["levels"] >= 50, live  # 100 ms bars over more than 5 s
    assert live["status"] == "in call", live
    # The past call from its call log: the same picture (levels, timers and all).
    for key in ("prompts", "voice", "digits", "timers"):
        assert past[key] >= live[key], (key, past, live)
    assert past["levels"] >= live["levels"], (past, live)
    # The screenshot shows the picture's parts (checked by their colours).
    pixels = colour_pixels(shot)
    for name, n in pixels.items():
        assert n > 150, (name, pixels, f"screenshot kept at {shot}")
    # What the page drew came from the call log on disk.
    (log,) = (tmp_path / "data").rglob("logs/*.log")
    lines = log.read_text()
    for kind in (" timers ", " levels ", " voice on", " prompt_end ", " digit 1"):
        assert kind in lines, (kind, lines)


def answer_in_the_browser(base: str, microphone: Path, profile: Path) -> dict[str, Any]:
    """The browser's part of a received call: sign in as agent-7 of ``ivr``, wait for the
    ring, answer, talk (the fake microphone), hang up; what the page showed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser(microphone, profile)

    def data(name: str) -> Any:
        return driver.execute_script(f"return document.body.dataset.{name}")

    try:
        driver.get(f"{base}/phone")
        wait("ivr in the application list", lambda: "ivr" in driver.find_element(By.ID, "app").text)
        Select(driver.find_element(By.ID, "app")).select_by_value("ivr")
        driver.find_element(By.ID, "client-id").send_keys("agent-7")
        driver.find_element(By.ID, "sign-in").click()
        wait("signed in", lambda: data("registered") == "agent-7")
        wait("the call ringing", lambda: data("incoming"), 60)
        ringing = {
            "text": driver.find_element(By.ID, "incoming-text").text,
            "status": driver.find_element(By.ID, "status").text,
        }
        driver.find_element(By.ID, "answer").click()
        wait("the caller heard", lambda: int(data("heard") or 0) > 100, 30)
        answered = driver.find_element(By.ID, "status").text
        time.sleep(3.0)  # the microphone's "two" reaches the caller
        driver.find_element(By.ID, "hangup").click()
        wait("the call over", lambda: data("callEnded"))
        return {"ringing": ringing, "answered": answered, "heard": int(data("heard"))}
    finally:
        driver.quit()


@pytest.mark.solo  # a real browser's audio: starved of CPU beside other tests, it stutters
async def test_the_web_phone_signed_in_as_a_client_id_answers_a_connect(
    tmp_path: Path, app: AppServer
) -> None:
    """``connect`` to ``webrtc:agent-7``: the web phone signed in as agent-7 rings, its user
    answers; the SIPp caller hears the browser's microphone, the browser hears the
    caller; the user hangs up and the connect reports it."""
    from tests.e2e import sipp
    from tests.e2e.rtpsink import RtpSink
    from tests.e2e.test_aculab_compat import app_table, call_in

    if sipp.SIPP is None:
        pytest.skip("SIPp (sip-tester) is not installed")
    microphone = fake_microphone(tmp_path / "microphone.wav")
    app.page(
        "/start",
        [{"connect": {"destinations": ["webrtc:agent-7"], "next_page": {"url": "/connected"}}}],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/start-final", None)
    async with served(tmp_path, app, 1, app_table(app, "ivr", "/start")) as server:
        base = f"http://127.0.0.1:{server.http_port}"
        browsing = asyncio.create_task(
            asyncio.to_thread(answer_in_the_browser, base, microphone, tmp_path / "profile")
        )
        for _ in range(300):  # signed in before the call comes
            if "web client agent-7 of ivr signed in" in server.output or browsing.done():
                break
            await asyncio.sleep(0.2)
        async with RtpSink() as ear:
            invite = sipp.invite("ivr").replace("m=audio [media_port]", f"m=audio {ear.port}")
            run = await call_in(server, tmp_path, invite=invite)
            seen = await browsing
            heard = ear.audio()
        assert run.returncode == 0, run.output + run.errors + server.output
    assert seen["ringing"]["text"].startswith("Incoming call from sip:sipp@"), seen
    assert seen["ringing"]["status"] == "ringing", seen
    assert seen["answered"].startswith("in call with sip:sipp@"), seen
    assert seen["heard"] > 100, seen
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    assert (result["connected"], result["destination"]) == (True, "webrtc:agent-7")
    assert (result["call_cause"], result["call_raw_cause"]) == ("hung_up", "BYE")
    # The browser's microphone ("two", then silence, looped) reached the caller.
    rms = [
        float(np.sqrt(np.mean(heard[i : i + 1600].astype(np.float64) ** 2)))
        for i in range(0, len(heard) - 1600, 1600)
    ]
    assert max(rms, default=0.0) > 300, ("the caller heard nothing of the browser", rms)
