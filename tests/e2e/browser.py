"""Headless Chromium for the web phone's tests and benchmark (Debian's chromium, driven by
Selenium through chromium-driver; ``scripts/setup --test`` installs both)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser(microphone: Path, profile: Path) -> Any:
    """Chromium, headless, whose microphone plays ``microphone`` (a WAV, looped)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for tool in (CHROMIUM, CHROMEDRIVER):
        if not Path(tool).exists():
            raise RuntimeError(f"{tool} is missing: scripts/setup --test installs it")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        # Without these Chromium keeps trying hosts this machine cannot reach.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--use-fake-ui-for-media-stream",  # the microphone is allowed without asking
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}",
        "--autoplay-policy=no-user-gesture-required",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def wait(what: str, condition: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll ``condition`` until it is truthy (a deadline, then a failure naming ``what``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def count(driver: Any, selector: str) -> int:
    return int(driver.execute_script(f"return document.querySelectorAll('{selector}').length"))
