"""``GET /metrics`` scraped by a real Prometheus server (Debian's ``prometheus``): SIPp
calls to ``callhook serve``, one process and two workers behind Kamailio (whose samples
are added up across the workers), and Prometheus' own query API answers the counts SIPp
made."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, free_tcp_port, served, wait_for_request
from tests.e2e.rtpstream import Stream

PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed"),
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (apt)"),
]

CALLS = 5  # answered and hung up by the application
REFUSED = 2  # whose first page fails: declined, the error and final pages told


class Prometheus:
    """A Prometheus server scraping ``target`` every second with ``token``."""

    def __init__(self, folder: Path, target: str, token: str) -> None:
        folder.mkdir()
        self.port = free_tcp_port()
        (folder / "token").write_text(token)
        (folder / "prometheus.yml").write_text(
            f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: callhook
    authorization:
      credentials_file: {folder / "token"}
    static_configs:
      - targets: ["{target}"]
"""
        )
        assert PROMETHEUS is not None
        self.log = folder / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    async def query(self, expression: str) -> float | None:
        """The value of an instant query with one result (None: no result yet)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query"
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, params={"query": expression}) as response,
        ):
            body: dict[str, Any] = await response.json()
        results = body["data"]["result"]
        return float(results[0]["value"][1]) if results else None

    async def answer(self, expression: str) -> dict[str, Any]:
        """The query API's whole answer (its status, and the results)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query"
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, params={"query": expression}) as response,
        ):
            body: dict[str, Any] = await response.json()
        return body

    async def until(self, expression: str, wanted: float, timeout: float = 30.0) -> float | None:
        """Query until the answer is ``wanted`` (scrapes come every second), or time out."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            try:
                value = await self.query(expression)
            except (aiohttp.ClientError, KeyError):
                value = None  # (still starting)
            if value == wanted:
                return value
            await asyncio.sleep(0.5)
        return value

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def prometheus_folder(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "prometheus"


@pytest.mark.parametrize("workers", WORKERS)
async def test_prometheus_scrapes_the_calls_sipp_made(
    tmp_path: Path, app: AppServer, workers: int, prometheus_folder: Path
) -> None:
    app.page("/start", [{"sleep": {"seconds": 2.5}}, {"hang_up": {}}])
    app.page("/final", None)
    app.page("/error", [{"hang_up": {}}])
    # Calls to sip:broken@... run an application whose first page is not there.
    config = f"""
[apps.broken]
first_page = "{app.url("/broken")}"
error_page = "{app.url("/error")}"
final_page = "{app.url("/final")}"
secret = "{app.secret}"
"""
    # Each answered caller sends 1.5 s of RTP with two RFC 4733 key presses, then a SIP
    # INFO one.
    stream = Stream(1.5).rfc4733("12", at=0.3)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    ok = [
        sipp.invite("ivr"),
        sipp.ANSWERED,
        sipp.PLAY.format(pcap=pcap),
        sipp.PAUSE.format(ms=1700),
        sipp.INFO.format(cseq=2, digit="4"),
        sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
    ]
    # (A call whose first page fails is declined before it is answered.)
    refused = sipp.REFUSED.format(status=603, user="broken")
    bad = [sipp.invite("broken"), '  <recv response="180" optional="true"/>', refused]
    async with served(tmp_path, app, workers, config) as server:
        runs = await asyncio.gather(
            *(sipp.call(server.sip, tmp_path, *ok) for _ in range(CALLS)),
            *(sipp.call(server.sip, tmp_path, *bad) for _ in range(REFUSED)),
        )
        for run in runs:
            assert run.returncode == 0, run.output + run.errors + server.output
        await wait_for_request(app, "/final", count=CALLS + REFUSED, timeout=20)
        token = (server.data_dir / "secret").read_text().strip()
        # Without the installation secret, nothing is told.
        url = f"http://127.0.0.1:{server.http_port}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            assert response.status == 401, await response.text()
        watcher = Prometheus(prometheus_folder, f"127.0.0.1:{server.http_port}", token)
        try:
            up = await watcher.until('up{job="callhook"}', 1.0)
            assert up == 1.0, watcher.log.read_text()
            started = await watcher.until("sum(callhook_calls_started_total)", CALLS + REFUSED)
            assert started == CALLS + REFUSED, server.output
            # Every call as SIPp saw it: ended, by application and cause.
            ended = 'callhook_calls_ended_total{application="default",cause="completed"}'
            assert await watcher.until(ended, CALLS) == CALLS
            failed = 'sum(callhook_calls_ended_total{application="broken"})'
            assert await watcher.until(failed, REFUSED) == REFUSED
            assert await watcher.until("sum(callhook_calls_active)", 0.0) == 0.0
            # The pages: each call's first and final page answered, the broken ones' first
            # page failed (its error and final pages answered).
            pages = (
                'callhook_page_request_duration_seconds_count{application="default",outcome="ok"}'
            )
            assert await watcher.until(pages, 2 * CALLS) == 2 * CALLS
            broken = "callhook_page_request_duration_seconds_count"
            broken += '{application="broken",outcome="failed"}'
            assert await watcher.until(broken, REFUSED) == REFUSED
            # The media ticks that carried the calls' audio, each one's lateness.
            ticks = await watcher.query("sum(callhook_media_tick_lateness_seconds_count)")
            assert ticks is not None and ticks > 10, ticks
            # The callers' media, counted as each call's media ended: every packet came
            # (audio and telephone events), none lost; dropped: only the repeats of each
            # key press's end packet (RFC 4733 §2.5.1.4: sent three times, one sequence
            # number); the key presses by how they came.
            sent = len(stream.packets()) * CALLS
            received = await watcher.until("callhook_rtp_packets_received_total", sent)
            assert received == sent, server.output
            assert await watcher.query("callhook_rtp_packets_lost_total") == 0.0
            repeats = 'callhook_packets_dropped_total{protocol="rtp",cause="duplicate"}'
            assert await watcher.query(repeats) == 2 * 2 * CALLS
            others = 'sum(callhook_packets_dropped_total{protocol="rtp",cause!="duplicate"})'
            assert await watcher.query(f"{others} or vector(0)") == 0.0
            digits = 'callhook_dtmf_digits_received_total{transport="%s"}'
            assert await watcher.until(digits % "rfc4733", 2 * CALLS) == 2 * CALLS
            assert await watcher.until(digits % "sip_info", CALLS) == CALLS
            # Sampled each second: SIPp's UDP opened no connection; nothing held back.
            assert await watcher.until("sum(callhook_sip_connections)", 0.0) == 0.0
            assert await watcher.until("callhook_recording_journal_held_updates", 0.0) == 0.0
            # What the workers share, read when scraped: nothing waits in the outbox, no
            # address is banned.
            assert await watcher.until('callhook_notifications{state="pending"}', 0.0) == 0.0
            assert await watcher.until("callhook_bans", 0.0) == 0.0
            # The Grafana dashboard's every query is one this Prometheus takes; those of
            # what these calls did have an answer.
            await check_dashboard(watcher)
        finally:
            watcher.stop()


DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "callhook.json"
#: Panels that these calls give an answer (no trunk, speech or connection here).
ANSWERED = {
    "Calls in progress",
    "Calls started per second",
    "Calls ended per second, by cause",
    "Page request time, p50 and p95",
    "Page requests per second, by outcome",
    "Media tick lateness, p99",
    "RTP packets lost",
    "Packets dropped per second, by cause",
    "Key presses per second, by transport",
    "Notifications",
    "Oldest due notification",
    "Journal updates held",
    "Banned addresses",
}


async def check_dashboard(watcher: Prometheus) -> None:
    # A rate needs two samples in its window: three scrapes, to be sure.
    scrapes = 'count_over_time(up{job="callhook"}[1m]) >= bool 3'
    assert await watcher.until(scrapes, 1.0) == 1.0
    dashboard = json.loads(DASHBOARD.read_text())
    answered = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            # Grafana's variables as it fills them: every application, a rate's window.
            expression = (
                target["expr"].replace("$__rate_interval", "1m").replace('"$application"', '".*"')
            )
            body = await watcher.answer(expression)
            assert body["status"] == "success", (panel["title"], expression, body)
            if body["data"]["result"]:
                answered.add(panel["title"])
    assert answered >= ANSWERED, ANSWERED - answered
