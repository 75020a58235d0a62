"""The load kit's calls against ``serve --workers 2`` while Debian's Prometheus scrapes
``/metrics`` every second: Prometheus' answers against SIPp's totals, and the scrape's
cost.

    .venv/bin/python -m bench.metrics_scrape [--calls 50] [--workers 2] [--kit ../shared/bench]

The call is the kit's IVR call (``bench/ivr_load.py``: a prompt, 4 RFC 2833 digits, a
recording); N calls at once, 5 x N in all. After the run, Prometheus' query API is asked
for calls started, ended by cause, in progress, the first pages answered, key presses by
transport and RTP packets lost; each is printed beside what SIPp (and the kit's
application) counted. Then ``/metrics`` is fetched 50 times, idle: the time a scrape takes
(p50/p95) and its size. Needs ``sipp`` (Debian ``sip-tester``), ``prometheus`` and
``kamailio``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from bench.ivr_load import (
    KIT,
    ROOT,
    SIP_PORT,
    free_port,
    get_json,
    load_config,
    prepare_data,
    sipp_common,
    start_app,
    wait_started,
)

RTP = (20000, 29999)


def prometheus(workdir: Path, target: str, token: str) -> tuple[subprocess.Popen[bytes], int]:
    """Debian's Prometheus, scraping ``target`` every second with the bearer ``token``."""
    port = free_port()
    (workdir / "token").write_text(token)
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: callhook\n"
        f"    authorization:\n      credentials_file: {workdir / 'token'}\n"
        f'    static_configs:\n      - targets: ["{target}"]\n'
    )
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=(workdir / "prometheus.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    return proc, port


def query(port: int, expression: str) -> float | None:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            results = json.loads(r.read())["data"]["result"]
    except OSError:
        return None
    return float(results[0]["value"][1]) if results else None


def settled(port: int, expression: str, seconds: float = 20.0) -> float | None:
    """The query's answer once two scrapes a second apart agree (the last calls' ends in)."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        value = query(port, expression)
        if value is not None and value == last:
            return value
        last = value
        time.sleep(1.2)
    return last


def scrape_cost(http: int, token: str, times: int = 50) -> tuple[float, float, int]:
    """``/metrics`` fetched ``times`` times: p50 and p95 in ms, and its size in bytes."""
    request = urllib.request.Request(f"http://127.0.0.1:{http}/metrics")
    request.add_header("Authorization", f"Bearer {token}")
    took, size = [], 0
    for _ in range(times):
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=10) as r:
            size = len(r.read())
        took.append((time.perf_counter() - start) * 1000)
    took.sort()
    return took[len(took) // 2], took[int(len(took) * 0.95)], size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="calls at once (5 x that in all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kit", type=Path, default=KIT)
    args = parser.parse_args()
    for tool in ("sipp", "prometheus"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install sip-tester prometheus)")
    if not (args.kit / "scenarios" / "ivr_uac.xml").exists():
        sys.exit(f"the load kit is not at {args.kit} (pass --kit)")
    workdir = Path(tempfile.mkdtemp(prefix="callhook-scrape-"))
    app, app_base = start_app()
    data = workdir / "data"
    prepare_data(data, args.kit)
    http = free_port()
    log_path = workdir / "callhook.log"
    server = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "callhook"),
            "serve",
            "--config",
            str(load_config(workdir)),
            "--sip",
            f"127.0.0.1:{SIP_PORT}",
            "--http",
            f"127.0.0.1:{http}",
            "--rtp-ports",
            f"{RTP[0]}-{RTP[1]}",
            "--data-dir",
            str(data),
            "--app-url",
            f"{app_base}/ivr/start",
            "--final-page",
            f"{app_base}/ivr/final",
            "--secret",
            "bench",
            "--workers",
            str(args.workers),
        ],
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
    )
    watcher = None
    try:
        wait_started(log_path, server)
        token = (data / "secret").read_text().strip()
        watcher, port = prometheus(workdir, f"127.0.0.1:{http}", token)
        while query(port, 'up{job="callhook"}') != 1.0:
            time.sleep(0.5)
        n = args.calls
        sipp = ["sipp", "-sf", "ivr_uac.xml", *sipp_common(n), "-mp", "6000"]
        errors = workdir / "sipp-errors.log"
        run = subprocess.run(
            [*sipp, "-error_file", str(errors)],
            cwd=args.kit / "scenarios",
            capture_output=True,
            text=True,
        )
        screen = run.stdout + run.stderr

        def count(label: str) -> int:
            found = re.findall(rf"{label}\s*\|\s*\d+\s*\|\s*(\d+)", screen)
            return int(found[-1]) if found else -1

        ok, failed = count("Successful call"), count("Failed call")
        kit_app = get_json(f"{app_base}/stats")
        rows = [
            ("calls started", "sum(callhook_calls_started_total)", ok + failed),
            ("calls ended, completed", 'sum(callhook_calls_ended_total{cause="completed"})', ok),
            ("calls ended, any cause", "sum(callhook_calls_ended_total)", ok + failed),
            ("calls in progress", "sum(callhook_calls_active)", 0),
            (
                "pages answered (4 a call)",  # start, the digits, the recording, final
                'sum(callhook_page_request_duration_seconds_count{outcome="ok"})',
                4 * ok,
            ),
            (
                "key presses (RFC 4733)",
                'sum(callhook_dtmf_digits_received_total{transport="rfc4733"})',
                4 * sum(kit_app["digits"].values()),
            ),
            ("RTP packets lost", "sum(callhook_rtp_packets_lost_total) or vector(0)", 0),
        ]
        print(f"serve --workers {args.workers}, {n} calls at once, {5 * n} in all;")
        print(f"SIPp: {ok} successful, {failed} failed")
        print(f"{'':28} {'Prometheus':>11} {'expected':>9}")
        for label, expression, expected in rows:
            got = settled(port, expression)
            shown = "" if expected is None else str(expected)
            mark = "" if expected is None else (" ok" if got == expected else " DIFFERS")
            print(f"{label:28} {got if got is not None else float('nan'):>11.0f} {shown:>9}{mark}")
        p50, p95, size = scrape_cost(http, token)
        print(
            f"/metrics (idle, {args.workers} workers): p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
            f"{size / 1024:.0f} KiB"
        )
    finally:
        if watcher is not None:
            watcher.terminate()
            watcher.wait(timeout=10)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=90)
        app.terminate()
        app.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
