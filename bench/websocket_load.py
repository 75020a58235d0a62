"""WebSocket calls (voice agents): mouth-to-ear latency through one, and CPU under load.

    .venv/bin/python -m bench.websocket_load [--steps 50,100] [--kit ../shared/bench]
                                             [--clicks 40] [--no-ivr]

**Latency.** One call: SIPp places it (signalling only) with an SDP that names a UDP
socket of this benchmark, which is the caller's mouth and ear: it sends 20 ms µ-law
frames in real time, silence but for a loud 20 ms click every half second, to serve's
RTP address (learned from serve's first packet). serve's application connects the call
to ``ws://`` :mod:`bench.ws_echo`, which sends every frame straight back (an agent that
takes no time of its own). The latency of a click is from its sending to the first loud
frame back: caller → serve (the tick) → bridge → the WebSocket leg's frame → the agent
→ back → the pacer (its cushion) → bridge → caller. p50/p95 over ``--clicks``.

**Load.** The kit's IVR caller (``scenarios/ivr_uac.xml``, its pcap) calls serve, whose
application (``bench/ivr_app.py``, ``/websocket/PORT/``) connects it to the echo server,
which hangs up 14.3 s after the start (the kit's call length); the connect's
``next_page`` hangs the caller up. For each step N (N at once, 5 x N in all): calls
completed and failed, connects and their seconds, serve's CPU per *WebSocket-connected
call-second* (its CPU over the run / the sum of ``seconds_connected_duration``), % of a
core, peak RSS, the RTP gaps serve sends the caller (p50/p99/max), and whether the
caller's own speech came back whole (the echo: frames missing, quiet frames trimmed,
silence inserted, as :mod:`bench.connect_load` counts them); then the kit's IVR call for
the same N, for comparison.

Needs ``sipp`` and ``tcpdump`` and root, like :mod:`bench.ivr_load`.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench import ivr_load
from bench.capture import quantiles, rtp_gaps
from bench.connect_load import (
    CALLER_MEDIA,
    audio,
    caller_scenario,
    gaps,
    leg_audio,
    sipp_count,
    speech_frames,
)
from bench.ivr_load import (
    KIT,
    ROOT,
    RTP_FIRST,
    RTP_LAST,
    SIP_PORT,
    Sampler,
    capture,
    check_kit,
    free_port,
    get_json,
    sipp_common,
    start_app,
)
from callhook.media import g711
from callhook.media.rtp import RtpSender
from tests.e2e import sipp as scenarios


def start_echo(seconds: float) -> tuple[subprocess.Popen[bytes], int]:
    """bench.ws_echo in its own process; its port once it listens."""
    port = free_port()
    echo = subprocess.Popen(
        [sys.executable, "-m", "bench.ws_echo", "--port", str(port), "--seconds", str(seconds)],
        cwd=ROOT,
    )
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return echo, port
        time.sleep(0.05)
    raise RuntimeError("bench.ws_echo did not start")


def serve(workdir: Path, label: str, app_url: str, echo_port: int, n: int) -> tuple[
    subprocess.Popen[bytes], int, Path
]:  # fmt: skip
    """callhook serve for one run: the kit's load config, the echo server trusted."""
    data = workdir / f"data-{label}"
    data.mkdir(parents=True, exist_ok=True)
    config = workdir / f"{label}.toml"
    config.write_text(
        ivr_load.load_config(workdir).read_text()
        + f'\n[egress]\nendpoints = ["127.0.0.1:{echo_port}"]\n'
        + f"[outbound]\nmax_calls_per_app = {4 * n + 10}\n"
    )
    http = free_port()
    log = (workdir / f"callhook-{label}.log").open("w")
    base = app_url.rsplit("/", 1)[0]
    server = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "callhook"), "serve", "--workers", "1",
            "--config", str(config),
            "--sip", f"127.0.0.1:{SIP_PORT}", "--http", f"127.0.0.1:{http}",
            "--rtp-ports", f"{RTP_FIRST}-{RTP_LAST}", "--data-dir", str(data),
            "--app-url", app_url, "--error-page", f"{base}/error",
            "--final-page", f"{base}/final", "--secret", "bench",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    time.sleep(1.5)
    return server, http, data


# --- latency ---------------------------------------------------------------------------------


def measure_latency(app_base: str, workdir: Path, clicks: int) -> list[float]:
    """Seconds from each click sent to its echo heard (see the module docstring)."""
    seconds = clicks * 0.5 + 4.0
    echo, echo_port = start_echo(seconds)
    server, _, _ = serve(
        workdir, "latency", f"{app_base}/websocket/{echo_port}/start", echo_port, 1
    )
    ear = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ear.bind(("127.0.0.1", 0))
    ear.settimeout(0.5)
    port = ear.getsockname()[1]
    invite = scenarios.invite("ivr").replace("m=audio [media_port]", f"m=audio {port}")
    (workdir / "latency.xml").write_text(
        scenarios.scenario(
            invite, scenarios.ANSWERED, scenarios.BYE_FROM_SERVER.format(timeout_ms=120000)
        )
    )
    caller = subprocess.Popen(
        ["sipp", "-sf", "latency.xml", f"127.0.0.1:{SIP_PORT}", "-i", "127.0.0.1", "-p", "5061",
         "-m", "1", "-nostdin", "-trace_err"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    heard: list[float] = []
    remote: list[tuple[str, int]] = []
    done = threading.Event()

    def listen() -> None:
        while not done.is_set():
            try:
                data, address = ear.recvfrom(2048)
            except TimeoutError:
                continue
            if not remote:
                remote.append(address)
            if len(data) > 12 and data[1] & 0x7F == 0:
                samples = g711.decode("ulaw", data[12:])
                if float(np.abs(samples.astype(np.int32)).max()) > 4000:
                    heard.append(time.monotonic())

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        for _ in range(500):
            if remote:
                break
            time.sleep(0.02)
        else:
            raise RuntimeError("serve sent no RTP to the caller")
        time.sleep(1.0)  # the connect is made
        rng = np.random.default_rng(1)
        click = g711.encode("ulaw", (rng.uniform(-1, 1, 160) * 20000).astype(np.int16))
        quiet = b"\xff" * 160
        sender = RtpSender(0)
        sent: list[float] = []
        start = time.monotonic()
        for i in range(clicks * 25):
            loud = i % 25 == 0
            ear.sendto(sender.frame(click if loud else quiet), remote[0])
            if loud:
                sent.append(time.monotonic())
            delay = start + (i + 1) * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        time.sleep(1.0)
    finally:
        done.set()
        listener.join()
        ear.close()
        caller.terminate()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        echo.terminate()
    latencies = []
    for at in sent:
        back = [t for t in heard if at < t < at + 1.0]
        if back:
            latencies.append(back[0] - at)
    return latencies


# --- load --------------------------------------------------------------------------------------


def run_websocket(n: int, kit: Path, app_base: str, workdir: Path) -> dict[str, object]:
    """One step: N WebSocket calls at once, 5 x N in all; the figures of one line."""
    label = f"websocket-{n}"
    echo, echo_port = start_echo(ivr_load.CALL_SECONDS)
    (workdir / "caller.xml").write_text(caller_scenario(kit))
    server, http, data = serve(
        workdir, label, f"{app_base}/websocket/{echo_port}/start", echo_port, n
    )
    urllib.request.urlopen(urllib.request.Request(f"{app_base}/stats/reset", method="POST"))
    pcap = workdir / f"rtp-{label}.pcap"
    dump = capture(pcap, CALLER_MEDIA)
    time.sleep(1.0)
    sampler = Sampler(server.pid)
    sampler.start()
    started = time.monotonic()
    caller = subprocess.run(
        ["sipp", "-sf", "caller.xml", *sipp_common(n), "-mp", str(CALLER_MEDIA)],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - started
    time.sleep(2.0)
    sampler.stop.set()
    sampler.join()
    dump.send_signal(signal.SIGINT)
    dump.wait(timeout=10)
    secret = (data / "secret").read_text().strip()
    stats = get_json(f"http://127.0.0.1:{http}/api/stats", secret)
    app = get_json(f"{app_base}/stats")
    with urllib.request.urlopen(f"http://127.0.0.1:{echo_port}/stats") as r:
        echoed = json.loads(r.read())
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)
    echo.terminate()
    screen = caller.stdout + caller.stderr
    (workdir / f"sipp-{label}.out").write_text(screen)
    log = (workdir / f"callhook-{label}.log").read_text(errors="replace")
    problems = [l for l in log.splitlines() if re.search(r"Traceback|ERROR|Exception", l)]  # noqa: E741
    cpu_total, pct, rss_mb = sampler.figures()
    connects = app.get("connects", [])
    connected = [c for c in connects if c[0]]
    seconds = sum(float(c[2] or 0) for c in connected)
    result: dict[str, object] = {
        "ok": sipp_count(screen, "Successful call"),
        "failed": sipp_count(screen, "Failed call"),
        "connected": len(connected),
        "connects": len(connects),
        "causes": sorted({f"{c[1]}" for c in connects}),
        "seconds": seconds,
        "cpu_ms_per_s": cpu_total * 1000 / seconds if seconds else float("nan"),
        "cpu_pct": pct,
        "rss_mb": rss_mb,
        "gaps": quantiles(rtp_gaps(pcap)),
        "audio": leg_audio(pcap, speech_frames(kit)),
        "late_ticks": stats.get("media_late_ticks"),
        "echoed": echoed,
        "problems": problems,
        "elapsed": elapsed,
    }
    pcap.unlink(missing_ok=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="50,100")
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--clicks", type=int, default=40)
    parser.add_argument("--no-ivr", action="store_true", help="the WebSocket calls only")
    args = parser.parse_args()
    check_kit(args.kit)
    workdir = Path(tempfile.mkdtemp(prefix="callhook-bench-websocket-"))
    app, app_base = start_app()
    print(f"callhook WebSocket call benchmark; kit {args.kit}; work dir {workdir}")
    try:
        latencies = measure_latency(app_base, workdir, args.clicks)
        if latencies:
            q = statistics.quantiles(latencies, n=20)
            print(
                f"mouth-to-ear through a WebSocket agent that echoes at once: "
                f"p50 {statistics.median(latencies) * 1000:.0f} ms, p95 {q[18] * 1000:.0f} ms, "
                f"max {max(latencies) * 1000:.0f} ms ({len(latencies)} of {args.clicks} clicks "
                f"heard back)",
                flush=True,
            )
        else:
            print("mouth-to-ear: no click came back", flush=True)
        print(
            "   N | call      |   ok | fail | connected | CPU ms/call-s | % core | RSS MB "
            "| RTP gap p50/p99/max ms | echo whole/calls, missing, trimmed, inserted | late"
        )
        for n in (int(x) for x in args.steps.split(",")):
            r = run_websocket(n, args.kit, app_base, workdir)
            print(
                f"{n:4d} | websocket | {r['ok']:4} | {r['failed']:4} "
                f"| {r['connected']:4}/{r['connects']:<4} | {r['cpu_ms_per_s']:13.2f} "
                f"| {r['cpu_pct']:6.1f} | {r['rss_mb']:6.0f} | {gaps(r['gaps'])} "
                f"| {audio(r['audio'])} | {r['late_ticks']}",
                flush=True,
            )
            problems = r["problems"]
            assert isinstance(problems, list)
            print(
                f"       {r['seconds']:.0f} connected call-s in {r['elapsed']:.0f} s; causes "
                f"{r['causes']}; echo server {r['echoed']}; problems {len(problems)} "
                f"{problems[:3]}",
                flush=True,
            )
            if not args.no_ivr:
                ivr = ivr_load.run_step(n, args.kit, app_base, workdir)
                print(
                    f"{n:4d} | IVR       | {ivr['ok']:4} | {ivr['failed']:4} |           "
                    f"| {ivr['cpu_ms_per_call_s']:13.2f} | {ivr['cpu_pct']:6.1f} "
                    f"| {ivr['rss_mb']:6.0f} | {ivr['gap_p50']:4.1f} / {ivr['gap_p99']:4.1f} / "
                    f"{ivr['gap_max']:4.0f} |                                             "
                    f"| {ivr['late_ticks']}",
                    flush=True,
                )
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
