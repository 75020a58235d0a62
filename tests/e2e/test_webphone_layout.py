"""The web phone's page as a person reads it, in headless Chromium (tests/e2e/browser.py):
at a normal and at a narrow width the picture's row labels and timers are whole and
nothing overlaps, the row labels stay in view when the time axis scrolls, the picture
uses the window's height, and the window's title ends with the call."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.browser import browser, wait
from tests.e2e.harness import Server
from tests.e2e.test_webphone import ARTIFACTS, fake_microphone

#: The timers of the past call below, in the order they first ran: each named, whole,
#: beside its row.
TIMERS = ("overall", "initial", "inter-digit", "initial silence", "max duration", "silence")
#: The window sizes the page is read at: a laptop's, and a phone's.
SIZES = {"normal": (1400, 1000), "narrow": (420, 860)}


def past_call() -> str:
    """A call log of 40 s with every row of the picture in it: actions, prompts, the
    caller's level and voice, digits a quarter second apart, speech, and the timers of a
    get_number and a record (one that expired)."""
    lines: list[tuple[float, str, str]] = [
        (0.0, "call_start", "inbound call web-1 from 'sip:web@127.0.0.1' to 'demo'"),
        (0.0, "page_request", "POST http://127.0.0.1:8080/demo/start (first page)"),
        (0.01, "page_response", "http://127.0.0.1:8080/demo/start: get_number, record"),
        (0.01, "action_start", "[0] get_number"),
        (0.02, "prompt_start", "#1 say 'Please enter a number, then press hash.'"),
        (2.5, "prompt_end", "#1"),
        (2.5, "timers", "overall 2.500..32.500; initial 2.500..7.500"),
    ]
    t = 3.0
    for digit in "12345#":
        lines.append((t, "digit", digit))
        lines.append((t, "timers", f"overall 2.500..32.500; inter-digit {t:.3f}..{t + 5:.3f}"))
        t += 0.25
    lines += [
        (t, "timers", "none"),
        (t, "action_end", '[0] get_number: {"entered_number": "12345"}'),
        (t, "speech", "'support please, I would like to talk to someone' (confidence 0.91)"),
        (t + 0.1, "action_start", "[1] record"),
        (t + 0.1, "timers", "initial silence 4.600..9.600; max duration 4.600..64.600"),
        (t + 1.0, "voice", "on"),
        (t + 1.0, "timers", "silence 5.500..7.500; max duration 4.600..64.600"),
        (t + 3.0, "voice", "off"),
        (t + 5.0, "timers", "none"),
        (t + 5.0, "action_end", '[1] record: {"reason": "silence"}'),
        (39.5, "call_end", "call_cause=completed call_raw_cause=200"),
    ]
    for second in range(1, 40):
        lines.append((float(second), "levels", "aaaaBCDEaa"))
    lines.sort(key=lambda line: line[0])
    return "".join(f"2026-11-29T10:00:00.000Z +{t:.3f} {k} {x}\n" for t, k, x in lines)


#: What the page shows of the picture, measured in the browser (pixels, CSS).
MEASURE = """
const box = document.getElementById("picture-box").getBoundingClientRect();
const labelsSvg = document.getElementById("picture-labels");
const svg = document.getElementById("picture");
const rect = (e) => { const r = e.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
const texts = (root) => [...root.querySelectorAll("text")]
  .filter((t) => t.textContent).map((t) => ({text: t.textContent, ...rect(t)}));
return JSON.stringify({
  inner: [window.innerWidth, window.innerHeight],
  box: {left: box.left, right: box.right, top: box.top, bottom: box.bottom,
        height: box.height, client: document.getElementById("picture-box").clientHeight},
  labelsSvg: rect(labelsSvg),
  svgHeight: svg.getBoundingClientRect().height,
  labels: texts(labelsSvg),
  texts: texts(svg),
});
"""


def overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of texts whose boxes overlap (by more than a pixel's rounding)."""
    pairs = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            wide = min(a["right"], b["right"]) - max(a["left"], b["left"])
            tall = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
            if wide > 0.5 and tall > 0.5:
                pairs.append((a["text"], b["text"]))
    return pairs


def read_the_page(base: str, microphone: Path, profile: Path) -> dict[str, Any]:
    """The browser's part: the past call at each size (a screenshot of each kept in
    ``test-artifacts/``), then a live call hung up."""
    from selenium.webdriver.common.by import By

    driver = browser(microphone, profile)
    seen: dict[str, Any] = {}
    try:
        for name, (width, height) in SIZES.items():
            driver.set_window_size(width, height)
            driver.get(f"{base}/phone")
            link = wait("the past call", lambda: driver.find_elements(By.CSS_SELECTOR, "#calls a"))
            link[0].click()
            wait(
                "the past call drawn",
                lambda: "from its call log" in driver.find_element(By.ID, "view-title").text,
            )
            time.sleep(0.3)
            start = json.loads(driver.execute_script(MEASURE))
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(ARTIFACTS / f"webphone-{name}.png"))  # to look at
            # The time axis scrolled to the call's end: the labels stay where they were.
            driver.execute_script(
                "const s = document.getElementById('picture-scroll'); s.scrollLeft = s.scrollWidth;"
            )
            time.sleep(0.2)
            end = json.loads(driver.execute_script(MEASURE))
            seen[name] = {"start": start, "end": end}
        # A live call to the demo: the title names it, then says that it ended.
        driver.set_window_size(*SIZES["normal"])
        driver.get(f"{base}/phone")
        wait("the demo listed", lambda: "demo" in driver.find_element(By.ID, "app").text)
        before = driver.title
        driver.find_element(By.ID, "call").click()
        wait(
            "the first prompt",
            lambda: "Please enter a number" in driver.find_element(By.ID, "timeline").text,
            90,
        )
        during = driver.title
        driver.find_element(By.ID, "hangup").click()
        wait("the call over", lambda: driver.execute_script("return document.body.dataset.ended"))
        seen["titles"] = [before, during, driver.title]
        return seen
    finally:
        driver.quit()


@pytest.mark.solo  # a real browser: run alone, as the other web phone tests are
async def test_the_picture_is_readable_at_any_width_and_the_title_ends_with_the_call(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "data" / "media" / "demo" / "logs"
    logs.mkdir(parents=True)
    (logs / "0123456789abcdef0123456789abcdef.log").write_text(past_call())
    microphone = fake_microphone(tmp_path / "microphone.wav")
    async with Server(tmp_path / "data") as server:
        base = f"http://127.0.0.1:{server.http_port}"
        seen = await asyncio.to_thread(read_the_page, base, microphone, tmp_path / "profile")
    for size in SIZES:
        for when in ("start", "end"):
            page = seen[size][when]
            where = (size, when)
            labels = page["labels"]
            # Every row is labelled, each timer by its whole name.
            names = [label["text"] for label in labels]
            assert names[:5] == ["actions", "prompts", "caller level", "voice (VAD)",
                                 "digits, speech"], (where, names)  # fmt: skip
            assert names[5:] == [f"timer: {t}" for t in TIMERS], (where, names)  # as they ran
            # Whole and in view: inside their column, inside the window.
            column = page["labelsSvg"]
            for label in labels:
                assert column["left"] <= label["left"] and label["right"] <= column["right"], (
                    where,
                    label,
                    column,
                )
                assert label["left"] >= 0 and label["right"] <= page["inner"][0], (where, label)
            assert not overlapping(labels), (where, overlapping(labels))
            # Nothing drawn in the picture overlaps: bars' words, digits, speech, seconds.
            assert not overlapping(page["texts"]), (where, overlapping(page["texts"]))
            assert "expired" in [t["text"] for t in page["texts"]], where  # the silence timer
        # The label column did not move when the time axis scrolled.
        start, end = seen[size]["start"], seen[size]["end"]
        assert [(x["left"], x["top"]) for x in start["labels"]] == [
            (x["left"], x["top"]) for x in end["labels"]
        ], size
        # The picture uses the window's height: most of it, and its rows fill the box.
        box, inner_height = start["box"], start["inner"][1]
        assert box["height"] >= 0.45 * inner_height, (size, box, inner_height)
        assert start["svgHeight"] >= box["client"] - 60, (size, start["svgHeight"], box)
    before, during, after = seen["titles"]
    assert before == "callhook web phone", seen["titles"]
    assert during in ("callhook web phone — calling demo", "callhook web phone — in call with demo")
    assert after == "callhook web phone — call to demo ended", seen["titles"]
