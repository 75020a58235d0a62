"""The web phone's figures: mouth-to-ear latency on loopback, and time to the first prompt.

``python -m bench.webphone latency``
    Headless Chromium calls an application whose first page is ``connect`` to a SIPp
    callee that echoes RTP (``sipp -sn uas -rtp_echo``). The fake microphone plays a
    30 ms 1 kHz burst every second. A second AudioWorklet in the page's own
    AudioContext taps both the microphone and what the phone plays, on one sample
    clock, and the delay from each burst to its echo is the round trip: microphone ->
    WebSocket -> serve (media tick, bridge) -> SIPp -> serve -> WebSocket -> the
    page's jitter buffer -> the loudspeaker's input. Half of it is the one-way
    mouth-to-ear delay of the web phone path (the two directions are symmetric but
    for the page's jitter buffer, which only the ear side has). The device's own
    latency (``AudioContext.outputLatency``; none for Chromium's fake devices) is
    printed beside it.

``python -m bench.webphone first-prompt [--checkout DIR]``
    Runs ``scripts/serve`` in DIR (a fresh clone: its first run creates the venv and
    installs everything), opens the web phone as soon as the port answers, calls the
    demo, and reports when the first prompt's audio reached the page's loudspeaker.

Needs Debian's chromium and chromium-driver (``scripts/setup --test``), and SIPp for
``latency``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
import wave
from pathlib import Path
from typing import Any

import numpy as np

from callhook.devtools.harness import AppServer
from tests.e2e.browser import browser, wait
from tests.e2e.harness import Server, free_even_udp_port, free_udp_port

RATE = 8000
BURST_EVERY = 1.0
BURSTS = 15

#: An AudioWorklet that hands the page, per render quantum, the peak of each input.
TAP = """
class Tap extends AudioWorkletProcessor {
  constructor() { super(); this.frame = 0; }
  process(inputs) {
    // Per input: its peak, and the first sample at least half of it (for sub-quantum onsets).
    const peak = (x) => {
      let m = 0;
      if (x) for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i]));
      return m;
    };
    const first = (x, m) => {
      if (x) for (let i = 0; i < x.length; i++) if (Math.abs(x[i]) >= m / 2) return i;
      return 0;
    };
    const mic = inputs[0][0], ear = inputs[1][0];
    const pm = peak(mic), pe = peak(ear);
    this.port.postMessage([this.frame, pm, pe, first(mic, pm), first(ear, pe)]);
    this.frame += (mic || ear || {length: 128}).length;
    return true;
  }
}
registerProcessor("tap", Tap);
"""

#: Installs the tap on the call's AudioContext (after the page started the call).
INSTALL = """
const done = arguments[arguments.length - 1];
(async () => {
  const url = URL.createObjectURL(new Blob([arguments[0]], {type: "application/javascript"}));
  await phone.ctx.audioWorklet.addModule(url);
  const tap = new AudioWorkletNode(phone.ctx, "tap", {numberOfInputs: 2, numberOfOutputs: 0});
  phone.ctx.createMediaStreamSource(phone.stream).connect(tap, 0, 0);
  phone.node.connect(tap, 0, 1);
  window.tapped = [];
  tap.port.onmessage = (e) => window.tapped.push(e.data);
  done({rate: phone.ctx.sampleRate, outputLatency: phone.ctx.outputLatency || 0,
        baseLatency: phone.ctx.baseLatency || 0});
})().catch((e) => done({error: String(e)}));
"""


def bursts(path: Path) -> Path:
    """The microphone: a 30 ms 1 kHz burst (-6 dBFS) every second, BURSTS of them."""
    t = np.arange(int(0.03 * RATE)) / RATE
    burst = (0.5 * 32767 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)
    second = np.zeros(int(BURST_EVERY * RATE), np.int16)
    second[: len(burst)] = burst
    audio = np.concatenate([np.zeros(RATE, np.int16), np.tile(second, BURSTS)])
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(audio.tobytes())
    return path


def onsets(times: list[float], peaks: list[float], threshold: float) -> list[float]:
    """Times a signal rises over ``threshold`` after at least 300 ms under it."""
    found: list[float] = []
    last_loud: float | None = None
    for t, p in zip(times, peaks, strict=True):
        if p >= threshold:
            if last_loud is None or t - last_loud > 0.3:
                found.append(t)
            last_loud = t
    return found


def tapped_delays(driver: Any, seconds: float) -> tuple[list[float], dict[str, Any]]:
    info = driver.execute_async_script(INSTALL, TAP)
    if "error" in info:
        raise RuntimeError(f"the tap could not be installed: {info['error']}")
    time.sleep(seconds)
    rows = driver.execute_script("const t = window.tapped; window.tapped = []; return t;")
    rate = float(info["rate"])
    mic = onsets([(r[0] + r[3]) / rate for r in rows], [r[1] for r in rows], 0.1)
    ear = onsets([(r[0] + r[4]) / rate for r in rows], [r[2] for r in rows], 0.05)
    delays = []
    for m in mic:
        after = [e - m for e in ear if 0 < e - m < 0.9]
        if after:
            delays.append(after[0])
    return delays, info


async def latency() -> None:
    work = Path(tempfile.mkdtemp(prefix="webphone-bench-"))
    callee_sip, callee_media = free_udp_port(), free_even_udp_port()
    echo = subprocess.Popen(
        ["sipp", "-sn", "uas", "-i", "127.0.0.1", "-p", str(callee_sip), "-mp", str(callee_media),
         "-rtp_echo"],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    app = AppServer()
    try:
        async with app:
            destination = f"sip:echo@127.0.0.1:{callee_sip}"
            app.page("/start", [{"connect": {"destinations": [destination]}}])
            app.page("/final", None)
            config = work / "callhook.toml"
            config.write_text('[outbound]\nallow = ["sip:*@127.0.0.1:*"]\n')
            async with Server.for_app(work / "data", app, ("--config", str(config))) as server:
                base = f"http://127.0.0.1:{server.http_port}"
                delays, info = await asyncio.to_thread(_call_and_tap, base, work)
    finally:
        echo.kill()
        echo.wait()
        shutil.rmtree(work, ignore_errors=True)
    if not delays:
        raise SystemExit("no echo was heard: nothing measured")
    ms = sorted(d * 1000 for d in delays)
    print(f"web phone round trip (mouth -> serve -> SIPp echo -> serve -> ear), {len(ms)} bursts:")
    print(f"  median {statistics.median(ms):.0f} ms, min {ms[0]:.0f}, max {ms[-1]:.0f}")
    print(f"  one way (half): median {statistics.median(ms) / 2:.0f} ms")
    print(
        f"  AudioContext: {info['rate']:.0f} Hz, baseLatency {info['baseLatency'] * 1000:.1f} ms,"
        f" outputLatency {info['outputLatency'] * 1000:.1f} ms (the device's, not included)"
    )


def _call_and_tap(base: str, work: Path) -> tuple[list[float], dict[str, Any]]:
    from selenium.webdriver.common.by import By

    driver = browser(bursts(work / "bursts.wav"), work / "profile")
    try:
        driver.get(f"{base}/phone")
        wait("an application", lambda: driver.find_element(By.ID, "app").text.strip())
        driver.find_element(By.ID, "call").click()
        wait("the far leg bridged", lambda: "bridge" in driver.find_element(By.ID, "timeline").text)
        return tapped_delays(driver, BURSTS * BURST_EVERY)
    finally:
        driver.quit()


def first_prompt(checkout: Path, http_port: int) -> None:
    """scripts/serve in ``checkout`` from nothing to the demo's first prompt in the page."""
    from selenium.webdriver.common.by import By

    work = Path(tempfile.mkdtemp(prefix="webphone-first-"))
    env = {**os.environ, "CALLHOOK_HTTP": f"127.0.0.1:{http_port}"}
    started = time.monotonic()
    serve = subprocess.Popen(
        ["scripts/serve", "--http", f"127.0.0.1:{http_port}", "--sip", "127.0.0.1:0"],
        cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{http_port}"
    try:
        while True:
            try:
                urllib.request.urlopen(f"{base}/phone", timeout=1).read()
                break
            except OSError:
                if serve.poll() is not None:
                    raise SystemExit(f"scripts/serve exited with {serve.returncode}") from None
                time.sleep(0.2)
        up = time.monotonic() - started
        driver = browser(bursts(work / "quiet.wav"), work / "profile")
        try:
            driver.get(f"{base}/phone")
            wait("the demo listed", lambda: "demo" in driver.find_element(By.ID, "app").text, 120)
            driver.find_element(By.ID, "call").click()
            is_up = "return !!(phone && phone.node)"
            wait("the call started", lambda: driver.execute_script(is_up))
            driver.execute_async_script(INSTALL, TAP)
            heard = wait("the first prompt heard", lambda: driver.execute_script(
                "return (window.tapped || []).some((r) => r[2] > 0.02)"), 120)  # fmt: skip
            assert heard
            at = time.monotonic() - started
        finally:
            driver.quit()
    finally:
        serve.terminate()
        serve.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    print(f"scripts/serve in {checkout}:")
    print(f"  the web phone page answered after {up:.1f} s")
    print(f"  the demo's first prompt was heard in the page after {at:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("latency", help="mouth-to-ear through serve and a SIPp echo")
    first = sub.add_parser("first-prompt", help="scripts/serve to the first prompt heard")
    first.add_argument("--checkout", type=Path, default=Path.cwd())
    first.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    if args.what == "latency":
        asyncio.run(latency())
    else:
        first_prompt(args.checkout.resolve(), args.port)


if __name__ == "__main__":
    main()
