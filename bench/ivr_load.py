"""The IVR load benchmark: the load kit's SIPp call against one ``callhook serve``.

    .venv/bin/python -m bench.ivr_load [--steps 50,100,200,400,800] [--workers 1,2]
                                       [--kit ../shared/bench]

The call (``../shared/bench/README.md``): answer, play a 3.0 s prompt, beep,
collect 4 RFC 2833 digits, record until 3 s of silence, hang up. The caller
is the kit's SIPp scenario replaying the kit's pcap — the same work the kit's
Asterisk 20 figures were measured on. The application (``bench/ivr_app.py``)
runs in its own process; callhook is one ``callhook serve`` process, or with
``--workers 2`` a ``serve --workers 2`` (a supervisor, two workers and Kamailio:
CPU and RSS are the sum over all of them, and so are the late ticks; the tick and GC
figures are those of the worker that answered ``/api/stats``).

For each step N (N calls at once, 5 x N calls in all) it prints: calls
completed and failed (SIPp's count), digits right, recordings of the right
length, calls that heard the prompt whole (every frame in order, nothing between: a
silent frame in its place keeps the RTP gaps at 20 ms but cuts a hole; read off the
capture, :mod:`bench.capture`), callhook's CPU (ms per call-second, % of one core while loaded), its
peak RSS, the IO floor of the same run (:mod:`bench.floor`: the captured streams
replayed to a process that only echoes them; its CPU per call-second, and callhook's
CPU as a multiple of it, the figure that holds still on a noisy machine), the gaps
between consecutive RTP packets callhook sends on a call (p50/p99/max, from a tcpdump
capture on loopback; ideal 20 ms), and page request latency as callhook measured it.
Under it, the CPU split three ways (``/api/stats``' thread clocks, no profiler, read
with the processes' CPU just before SIPp starts and after it ends): the media ticks,
the event loop's thread outside them (SIP, the calls' runners, their pages and logs),
and the rest (the speech and database threads; with workers, the supervisor and
Kamailio too).
Needs ``sipp`` and ``tcpdump`` (Debian ``sip-tester``, ``tcpdump``) and root for the
capture.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench import clocks as bench_clocks
from bench import floor
from bench.capture import (
    capture_dropped,
    digits_astray,
    late_starts,
    prompts_whole,
    quantiles,
    rtp_gaps,
    server_starts,
)
from bench.report import (
    print_driver,
    print_prompts,
    print_recordings,
    print_thread,
    thread_counters,
    wrong_recordings,
)
from callhook.media import wav

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT.parent / "shared" / "bench"
SIP_PORT = 5070
RTP_FIRST, RTP_LAST = 20000, 29999
EXPECTED_RECORDING = (7.6, 9.0)  # 4.8 s of speech + 3 s of silence, pre-roll and VAD hangover
CALL_SECONDS = 14.3  # ACK to BYE when the IVR keeps time (the kit's README)


def start_app() -> tuple[subprocess.Popen[str], str]:
    """The load kit's IVR application (bench/ivr_app.py) in a process of its own, so that
    its CPU is not serve's; returns the process and its base URL once it is ready."""
    port = free_port()
    app = subprocess.Popen(
        [sys.executable, "-m", "bench.ivr_app", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert app.stdout is not None and app.stdout.readline().strip() == "ready"
    return app, f"http://127.0.0.1:{port}"


def check_kit(kit: Path) -> None:
    """Exit with the reason unless the load kit, SIPp and tcpdump are there."""
    if not (kit / "scenarios" / "ivr_uac.xml").exists():
        sys.exit(f"the load kit is not at {kit} (pass --kit)")
    for tool in ("sipp", "tcpdump"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install sip-tester tcpdump)")


def capture(pcap: Path, dst_port: int | None = None) -> subprocess.Popen[bytes]:
    """tcpdump of the RTP serve sends on loopback (to ``dst_port`` only, if given) into
    ``pcap``: the first 80 bytes of each packet, enough for the gap and payload checks
    (bench/capture.py)."""
    where = f"udp and src portrange {RTP_FIRST}-{RTP_LAST}"
    if dst_port is not None:
        where += f" and dst port {dst_port}"
    return tcpdump(pcap, where)


def capture_events(pcap: Path) -> subprocess.Popen[bytes]:
    """tcpdump of the telephone events (RTP payload type 101, the kit's) the caller sends
    to the server's RTP ports, and of the first packet of its audio (the one with the
    marker bit), into ``pcap``: when the driver really sent each key press
    (:func:`bench.capture.digits_astray`), and when it began (:func:`bench.capture.late_starts`)."""
    return tcpdump(
        pcap,
        f"udp and dst portrange {RTP_FIRST}-{RTP_LAST} and "
        "((udp[9] & 0x7f) = 101 or (udp[9] & 0x80) = 0x80)",
    )


def tcpdump(pcap: Path, where: str) -> subprocess.Popen[bytes]:
    """tcpdump on loopback of what ``where`` selects into ``pcap`` (80 bytes of each
    packet, a 64 MB buffer); what it says of its counts at the end goes beside it
    (``.txt``: :func:`bench.capture.capture_dropped`)."""
    with pcap.with_suffix(".txt").open("w") as said:
        return subprocess.Popen(
            ["tcpdump", "-i", "lo", "-n", "-s", "80", "-B", "65536", "-w", str(pcap), where],
            stdout=subprocess.DEVNULL,
            stderr=said,
        )


#: How far (s) a call's key presses may stray from the caller's schedule before the
#: benchmark says the driver sent them late (a server waits 5 s for all four).
ASTRAY = 0.2


def driver_figures(pcap: Path, server: dict[int, list[float]]) -> dict[str, object]:
    """The calls whose caller (the driver, not the server) sent its key presses off
    schedule by more than :data:`ASTRAY`, or began its stream more than a second after
    the server answered (``server``: :func:`bench.capture.server_starts`), and by how
    much at worst; ``pcap`` is deleted."""
    astray = digits_astray(pcap)
    started = late_starts(pcap, server)
    pcap.unlink(missing_ok=True)
    pcap.with_suffix(".txt").unlink(missing_ok=True)
    late = [a for a in astray if a > ASTRAY]
    return {
        "digits_sent": len(astray),
        "digits_astray": len(late),
        "digits_astray_max": max(late, default=0.0),
        "late_starts": len(started),
        "late_start_max": max(started, default=0.0),
    }


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def prepare_data(data: Path, kit: Path) -> None:
    """The kit's raw µ-law prompt and beep as WAV files in the IVR's namespace."""
    target = data / "media" / "default" / "ivr"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("prompt", "beep"):
        raw = (kit / "sounds" / f"{name}.ulaw").read_bytes()
        (target / f"{name}.wav").write_bytes(wav.g711_file("ulaw", raw))


class Sampler(threading.Thread):
    """CPU time (utime+stime) and RSS of one process, once a second."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float, int]] = []  # (time, cpu seconds, rss kB)
        self.stop = threading.Event()
        self.hz = os.sysconf("SC_CLK_TCK")

    def read(self) -> tuple[float, int] | None:
        """CPU seconds and RSS of the process and of every process under it (serve
        --workers: the workers and Kamailio); None once the process is gone."""
        own = self._one(self.pid)
        if own is None:
            return None
        cpu, rss = own
        for child in _descendants(self.pid):
            figures = self._one(child)
            if figures is not None:
                cpu, rss = cpu + figures[0], rss + figures[1]
        return cpu, rss

    def _one(self, pid: int) -> tuple[float, int] | None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / self.hz
        match = re.search(r"VmRSS:\s+(\d+)", status)
        rss = int(match.group(1)) if match else 0
        return cpu, rss

    def figures(self) -> tuple[float, float, float]:
        """(CPU seconds over the run, % of one core while fully loaded: the middle half
        of the run, peak RSS in MB); NaN where there are too few samples."""
        samples = self.samples
        nan = float("nan")
        cpu_total = samples[-1][1] - samples[0][1] if len(samples) > 1 else nan
        loaded = samples[len(samples) // 4 : 3 * len(samples) // 4]
        pct = (
            (loaded[-1][1] - loaded[0][1]) / (loaded[-1][0] - loaded[0][0]) * 100
            if len(loaded) > 1
            else nan
        )
        rss_mb = max(s[2] for s in samples) / 1024 if samples else nan
        return cpu_total, pct, rss_mb

    def run(self) -> None:
        while not self.stop.wait(1.0):
            value = self.read()
            if value is None:
                return
            self.samples.append((time.monotonic(), *value))


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (children, their children ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def get_json(url: str, token: str | None = None) -> dict:  # type: ignore[type-arg]
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as r:
        result: dict = json.loads(r.read())  # type: ignore[type-arg]
        return result


#: Extra keys of serve's ``[media]`` table for every step (``--media``: an A/B of one).
MEDIA: list[str] = []


def load_config(workdir: Path) -> Path:
    """serve's config for a load run: SIPp is one source sending hundreds of requests a
    second, as a proxy in front of callhook would; the per-source rate is raised so the
    guard does not ban it ([security], docs/security.md); and ``[sip] max_calls`` (500 a
    process by default) is raised above every step, so a step measures what the process
    does with that many calls, not the operator's limit."""
    path = workdir / "load.toml"
    media = "".join(f"{line}\n" for line in MEDIA)
    path.write_text(
        "[security]\nrate = 100000\n\n[sip]\nmax_calls = 5000\n"
        + (f"\n[media]\n{media}" * bool(media))
    )
    return path


def run_step(
    n: int,
    kit: Path,
    app_base: str,
    workdir: Path,
    workers: int = 1,
    clocks: Path | None = None,
) -> dict[str, object]:
    """One load step of the kit's own call: N calls at once, 5 x N in all (``clocks``: the
    loop thread's CPU by function kept there, :mod:`bench.clocks`)."""
    data = workdir / f"data-{n}-{workers}"
    prepare_data(data, kit)
    sipp = ["sipp", "-sf", "ivr_uac.xml", *sipp_common(n), "-mp", "6000"]
    return run_load(
        n,
        data,
        f"{n}-{workers}",
        app_base,
        workdir,
        sipp,
        kit / "scenarios",
        workers=workers,
        clocks=clocks,
        from_capture=lambda pcap: prompt_figures(pcap, kit),
    )


def prompt_figures(pcap: Path, kit: Path) -> dict[str, object]:
    """How many calls heard the kit's prompt whole, of those that heard it
    (:func:`bench.capture.prompts_whole`)."""
    whole, played, starts = prompts_whole(pcap, (kit / "sounds" / "prompt.ulaw").read_bytes())
    return {
        "prompts_whole": whole,
        "prompts": played,
        "prompt_start": quantiles(starts),
        "capture_dropped": capture_dropped(pcap),
    }


def sipp_common(n: int) -> list[str]:
    """SIPp's arguments for load step ``n`` (the kit's README), but the scenario and the
    media ports: target, addresses, N at once, the kit's ramp, 5 x N calls."""
    return [
        f"127.0.0.1:{SIP_PORT}",
        "-i",
        "127.0.0.1",
        "-p",
        "5061",
        "-mi",
        "127.0.0.1",
        "-l",
        str(n),
        "-r",
        str((n + 11) // 12),
        "-m",
        str(n * 5),
        "-recv_timeout",
        "40000",
        "-nostdin",
        "-trace_err",
    ]


def wait_started(log: Path, server: subprocess.Popen[bytes], seconds: float = 90.0) -> None:
    """Until serve says where its web server is (every worker is up, Kamailio too)."""
    deadline = time.monotonic() + seconds
    while "  web: " not in log.read_text(errors="replace"):
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"callhook serve did not start: see {log}")
        time.sleep(0.2)
    time.sleep(0.5)


def run_load(
    n: int,
    data: Path,
    label: str,
    app_base: str,
    workdir: Path,
    sipp_command: list[str],
    sipp_cwd: Path,
    *,
    digits: str = "1234",
    from_capture: Callable[[Path], dict[str, object]] | None = None,
    workers: int = 1,
    clocks: Path | None = None,
) -> dict[str, object]:
    """Run ``serve`` on ``data``, capture its RTP, run ``sipp_command`` and measure: the
    figures of one line of the table. ``from_capture`` adds figures read off the RTP
    capture before it is deleted; SIPp's screen is kept in ``sipp-<label>.out``. With
    ``clocks`` (one worker), serve runs under :mod:`bench.clocks`, which keeps its loop
    thread's CPU by function in ``clocks``."""
    http = free_port()
    log = (workdir / f"callhook-{label}.log").open("w")
    command = [str(ROOT / ".venv" / "bin" / "callhook")]
    if clocks is not None:
        command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "bench.clocks", "run", str(clocks)]
    server = subprocess.Popen(
        [
            *command,
            "serve",
            "--config",
            str(load_config(workdir)),
            "--sip",
            f"127.0.0.1:{SIP_PORT}",
            "--http",
            f"127.0.0.1:{http}",
            "--rtp-ports",
            f"{RTP_FIRST}-{RTP_LAST}",
            "--data-dir",
            str(data),
            "--app-url",
            f"{app_base}/ivr/start",
            "--final-page",
            f"{app_base}/ivr/final",
            "--secret",
            "bench",
            "--workers",
            str(workers),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT if clocks is not None else None,  # (bench.clocks is imported from it)
    )
    wait_started(workdir / f"callhook-{label}.log", server)
    secret = (data / "secret").read_text().strip()
    # The split's own window: the threads' clocks and the processes' CPU read together.
    loop_before = loop_cpu(get_json(f"http://127.0.0.1:{http}/api/stats", secret))
    process_before = Sampler(server.pid).read()
    urllib.request.urlopen(urllib.request.Request(f"{app_base}/stats/reset", method="POST"))
    pcap = workdir / f"rtp-{label}.pcap"
    dump = capture(pcap)
    events = workdir / f"events-{label}.pcap"
    events_dump = capture_events(events)
    time.sleep(1.0)
    sampler = Sampler(server.pid)
    sampler.start()
    started = time.monotonic()
    # SIPp's unexpected messages go to the work dir (its default: beside the scenario,
    # which is the shared kit).
    errors = workdir / f"sipp-{label}-errors.log"
    sipp_command = [*sipp_command, "-error_file", str(errors)]
    sipp = subprocess.run(sipp_command, cwd=sipp_cwd, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    time.sleep(2.0)  # final pages, last packets
    sampler.stop.set()
    sampler.join()
    for each in (dump, events_dump):
        each.send_signal(signal.SIGINT)
        each.wait(timeout=10)
    stats = get_json(f"http://127.0.0.1:{http}/api/stats", secret)
    loop_after = loop_cpu(stats)
    process_after = Sampler(server.pid).read()
    app = get_json(f"{app_base}/stats")
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)
    log.close()

    screen = sipp.stdout + sipp.stderr
    (workdir / f"sipp-{label}.out").write_text(screen)

    def count(label: str) -> int:
        found = re.findall(rf"{label}\s*\|\s*\d+\s*\|\s*(\d+)", screen)
        return int(found[-1]) if found else -1

    ok, failed = count("Successful call"), count("Failed call")
    cpu_total, pct, rss_mb = sampler.figures()
    call_seconds = max(ok, 0) * CALL_SECONDS
    recordings = app["recordings"]
    right_length = sum(
        1
        for d, _, _ in recordings
        if d is not None and EXPECTED_RECORDING[0] <= d <= EXPECTED_RECORDING[1]
    )
    p50, p99, gmax = quantiles(rtp_gaps(pcap))
    began = server_starts(pcap)
    extra = from_capture(pcap) if from_capture is not None else {}
    floor_cpu = floor.measure(pcap)  # the same streams, echoed by a process doing nothing else
    nan = float("nan")
    tick_cpu, loop_cpu_s = loop_after[0] - loop_before[0], loop_after[1] - loop_before[1]
    if loop_after[2] != loop_before[2] or process_before is None or process_after is None:
        tick_cpu = loop_cpu_s = process_cpu = nan  # a worker did not answer, or serve died
    else:
        process_cpu = process_after[0] - process_before[0]
    split = {
        "tick": tick_cpu,  # the media ticks
        "control": loop_cpu_s - tick_cpu,  # the loop's thread outside them: SIP, runners, pages
        "other": process_cpu - loop_cpu_s,  # the other threads (and processes, with workers)
    }
    pcap.unlink(missing_ok=True)
    driver = driver_figures(events, began)
    return {
        **driver,
        "n": n,
        "ok": ok,
        "failed": failed,
        "digits_right": app["digits"].get(digits, 0),
        "digits_calls": sum(app["digits"].values()),
        "recordings_right": right_length,
        "recordings": len(recordings),
        "recording_lengths": quantiles([d for d, _, _ in recordings if d is not None]),
        **wrong_recordings([d for d, _, _ in recordings], EXPECTED_RECORDING),
        "cpu_ms_per_call_s": cpu_total * 1000 / call_seconds if call_seconds else float("nan"),
        "floor_ms_per_call_s": floor_cpu * 1000 / call_seconds if call_seconds else float("nan"),
        "floor_ratio": cpu_total / floor_cpu if floor_cpu > 0 else float("nan"),
        "split_ms_per_call_s": {
            k: v * 1000 / call_seconds if call_seconds else float("nan") for k, v in split.items()
        },
        "cpu_pct": pct,
        "rss_mb": rss_mb,
        "gap_p50": p50,
        "gap_p99": p99,
        "gap_max": gmax,
        "page": stats.get("page_latency", {}),
        # Every worker's late ticks (serve --workers lists each worker's counters).
        "late_ticks": sum(w.get("media_late_ticks") or 0 for w in stats["workers"])
        if "workers" in stats
        else stats.get("media_late_ticks"),
        "tick": stats.get("media_tick", {}),
        "thread": thread_counters(stats),
        "gc": stats.get("gc_pauses", {}),
        "elapsed": elapsed,
        "final": app["final"],
        **extra,
    }


def loop_cpu(stats: dict) -> tuple[float, float, int]:  # type: ignore[type-arg]
    """The CPU seconds the event loops' threads spent in media ticks, and in all, so far
    (``/api/stats``; with workers, summed over them), and how many answered."""
    each = [w for w in stats.get("workers") or [stats] if "cpu_loop_s" in w]
    return (
        sum(w["cpu_media_tick_s"] for w in each),
        sum(w["cpu_loop_s"] for w in each),
        len(each),
    )


def asterisk_reference(kit: Path) -> str:
    """The kit's Asterisk 20 figures for the same call (its README's table), to print beside
    callhook's."""
    rows = re.findall(
        r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*/\s*(\d+)\s*\|",
        (kit / "README.md").read_text(),
        re.MULTILINE,
    )
    lines = [
        "Asterisk 20 on the same call (the kit's README): N | fail | CPU ms/call-s | gap p99/max"
    ]
    for n, failed, _, cpu, p99, gmax in rows:
        lines.append(f"  {int(n):4d} | {int(failed):4d} | {float(cpu):13.2f} | {p99} / {gmax}")
    return "\n".join(lines) if rows else "(no Asterisk figures found in the kit's README)"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="50,100,200,400,800")
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument(
        "--workers",
        default="1",
        help="serve --workers for each step, a list (e.g. 1,2: every step with each)",
    )
    parser.add_argument(
        "--clocks",
        type=Path,
        help="a directory: each one-worker step's loop thread CPU by function is kept there "
        "(bench.clocks; the wrappers add a few per cent) and printed under the step",
    )
    parser.add_argument(
        "--media",
        action="append",
        default=[],
        help='a key of serve\'s [media] table for every step, e.g. "thread_receive = false"',
    )
    args = parser.parse_args()
    MEDIA.extend(args.media)
    check_kit(args.kit)
    workdir = Path(tempfile.mkdtemp(prefix="callhook-bench-"))
    app, app_base = start_app()
    print(f"callhook IVR load benchmark; kit {args.kit}; work dir {workdir}")
    print(asterisk_reference(args.kit))
    print(
        "   N | W |   ok | fail | digits ok | rec ok (p50 s) | prompt whole | CPU ms/call-s "
        "| floor ms (x) | % core | RSS MB | RTP gap p50/p99/max ms | page p50/p99 ms | late ticks"
    )
    try:
        steps = [int(x) for x in args.steps.split(",")]
        for n, workers in ((n, int(w)) for n in steps for w in args.workers.split(",")):
            clocks = None
            if args.clocks is not None and workers == 1:
                args.clocks.mkdir(parents=True, exist_ok=True)
                clocks = args.clocks / f"clocks-{n}-{workers}.json"
            r = run_step(n, args.kit, app_base, workdir, workers, clocks)
            page = r["page"] or {}
            assert isinstance(page, dict)
            lengths = r["recording_lengths"]
            assert isinstance(lengths, tuple)
            nan = float("nan")
            print(
                f"{n:4d} | {workers} | {r['ok']:4} | {r['failed']:4} "
                f"| {r['digits_right']:4}/{r['digits_calls']:<4} "
                f"| {r['recordings_right']:4}/{r['recordings']:<4} ({lengths[0]:.1f}) "
                f"| {r.get('prompts_whole', 0):5}/{r.get('prompts', 0):<6} "
                f"| {r['cpu_ms_per_call_s']:13.2f} "
                f"| {r['floor_ms_per_call_s']:5.2f} ({r['floor_ratio']:4.1f}) "
                f"| {r['cpu_pct']:6.1f} | {r['rss_mb']:6.0f} "
                f"| {r['gap_p50']:5.1f} / {r['gap_p99']:5.1f} / {r['gap_max']:5.0f} "
                f"| {page.get('p50_ms', nan):5.1f} / {page.get('p99_ms', nan):5.1f} "
                f"| {r['late_ticks']}",
                flush=True,
            )
            tick = r["tick"]
            assert isinstance(tick, dict)
            if tick:
                print(
                    f"       tick lateness (last minute) p50/p99/max: {tick['late_p50_ms']:.1f} / "
                    f"{tick['late_p99_ms']:.1f} / {tick['late_max_ms']:.1f} ms; tick took "
                    f"{tick['took_p50_ms']:.1f} / {tick['took_p99_ms']:.1f} / "
                    f"{tick['took_max_ms']:.1f} ms; gc pauses {r['gc']}",
                    flush=True,
                )
            print_prompts(r)
            print_recordings(r)
            print_driver(r)
            print_thread(r)
            split = r["split_ms_per_call_s"]
            assert isinstance(split, dict)
            print(
                f"       CPU ms/call-s: media ticks {split['tick']:.2f}, the loop's thread "
                f"outside them (SIP, runners, pages) {split['control']:.2f}, the rest "
                f"(other threads{', supervisor, Kamailio' if workers > 1 else ''}) "
                f"{split['other']:.2f}",
                flush=True,
            )
            if clocks is not None and clocks.exists():
                print(
                    "       (serve ran under bench.clocks: its wrappers add a few per cent to "
                    "the figures above)",
                    flush=True,
                )
                print(textwrap.indent(bench_clocks.table(clocks, rows=30), "       "), flush=True)
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
