"""The flood benchmark: one source floods ``serve`` with SIP while the load kit's IVR calls go on.

    .venv/bin/python -m bench.flood [--seconds 10] [--calls 100] [--flood-allowed]

One ``callhook serve`` (the IVR of :mod:`bench.ivr_load`, the same command line) with
``[security] allow = ["127.0.0.1/32"]`` and the default ``rate`` (20 a second, burst
40) and ``ban_seconds``; SIPp calls from 127.0.0.1. The flooder is one process bound
to 127.0.0.2 (outside ``allow``; ``--flood-allowed`` puts it in, so that only the rate
stops it) sending INVITEs and OPTIONS alternately, each with its own Call-ID and
branch, on a connected UDP socket as fast as one Python process can (no pacing).

1. **Idle**: serve's CPU time (utime + stime, ``/proc/PID/stat``) over ``--seconds``
   with nothing to do.
2. **Flood alone**: the flood for ``--seconds``, no calls. Offered packets per second
   (what the flooder sent), packets serve received (offered minus what the kernel
   dropped at serve's SIP socket, its ``drops`` in ``/proc/net/udp``, read once the
   socket's queue is empty), and serve's CPU time during the flood minus the idle CPU
   of as long, per received packet: what a dropped packet costs serve (all but the
   first ``burst`` of them are dropped by the ban). ``Guard.admit`` on a banned source,
   timed alone in this process, shows how much of that is the guard.
3. **Calls**: ``--calls`` of the kit's IVR call (``--calls / 5`` at once, the kit's
   ramp), without a flood and then with one (the flooder's ban lifted first through
   ``DELETE /api/bans``, so the burst gets through again): calls completed and failed
   (SIPp's count), digits right, serve's CPU, and the gaps between consecutive RTP
   packets serve sent on a call (p50/p99/max from a tcpdump capture on loopback;
   ideal 20 ms).

The machine has 2 cores: the flooder keeps one busy by itself; serve, SIPp, tcpdump
and the IVR application share the other (the figures say how busy each was). Needs
``sipp`` and ``tcpdump`` and root for the capture, like :mod:`bench.ivr_load`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.synchronize
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

from bench.capture import quantiles, rtp_gaps
from bench.ivr_load import (
    KIT,
    ROOT,
    RTP_FIRST,
    RTP_LAST,
    SIP_PORT,
    Sampler,
    check_kit,
    free_port,
    get_json,
    prepare_data,
    sipp_common,
    start_app,
)
from callhook.sip.guard import Guard, networks

FLOODER = "127.0.0.2"


# --- the flooder (its own process) --------------------------------------------------------


def flood_packets(port: int, source: str = FLOODER, count: int = 512) -> list[bytes]:
    """INVITEs (with an SDP offer) and OPTIONS alternately, each its own transaction."""
    packets = []
    for n in range(count):
        method = "INVITE" if n % 2 == 0 else "OPTIONS"
        body = (
            f"v=0\r\no=- 1 1 IN IP4 {source}\r\ns=-\r\nc=IN IP4 {source}\r\nt=0 0\r\n"
            "m=audio 4000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
            if method == "INVITE"
            else ""
        )
        packets.append(
            (
                f"{method} sip:ivr@127.0.0.1:{port} SIP/2.0\r\n"
                f"Via: SIP/2.0/UDP {source}:5060;branch=z9hG4bK-flood-{n};rport\r\n"
                f"From: <sip:flood@{source}>;tag=f{n}\r\nTo: <sip:ivr@127.0.0.1>\r\n"
                f"Call-ID: flood-{n}@{source}\r\nCSeq: 1 {method}\r\nMax-Forwards: 70\r\n"
                f"Contact: <sip:flood@{source}:5060>\r\n"
                + ("Content-Type: application/sdp\r\n" if body else "")
                + f"Content-Length: {len(body)}\r\n\r\n{body}"
            ).encode()
        )
    return packets


def flooder(
    source: str,
    port: int,
    seconds: float,
    stop: multiprocessing.synchronize.Event,
    sent: Synchronized[int],
    cpu: Synchronized[float],
    elapsed: Synchronized[float],
) -> None:
    """Send :func:`flood_packets` to 127.0.0.1:``port`` from ``source`` as fast as this
    process can, until ``stop`` or ``seconds``; report what it sent and its CPU time."""
    packets = flood_packets(port, source)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    send = sock.send
    count = 0
    started = time.monotonic()
    deadline = started + seconds
    cpu_start = time.process_time()
    while not stop.is_set() and time.monotonic() < deadline:
        for packet in packets:
            try:
                send(packet)
            except OSError:  # ECONNREFUSED from an ICMP error, ENOBUFS: try the next
                continue
            count += 1
    elapsed.value = time.monotonic() - started
    cpu.value = time.process_time() - cpu_start
    sent.value = count


@dataclass
class FloodResult:
    sent: int
    seconds: float
    cpu: float  # the flooder's own CPU seconds

    @property
    def pps(self) -> float:
        return self.sent / self.seconds if self.seconds else float("nan")


class Flood:
    """The flooder in its own process for ``limit`` seconds at most (or until stopped)."""

    def __init__(self, source: str, port: int, limit: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.limit = limit
        self._stop = ctx.Event()
        self._sent, self._cpu, self._elapsed = ctx.Value("q", 0), ctx.Value("d"), ctx.Value("d")
        self._process = ctx.Process(
            target=flooder,
            args=(source, port, limit, self._stop, self._sent, self._cpu, self._elapsed),
            daemon=True,
        )
        self._process.start()

    def wait(self) -> FloodResult:
        """Wait for the flooder to reach its limit (or stop): what it sent, in how long."""
        self._process.join(self.limit + 30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
            raise RuntimeError("the flooder did not stop")
        return FloodResult(int(self._sent.value), self._elapsed.value, self._cpu.value)

    def stop(self) -> FloodResult:
        self._stop.set()
        return self.wait()


@contextmanager
def flooding(source: str, port: int, limit: float) -> Iterator[list[FloodResult]]:
    """A :class:`Flood` while the block runs; the list it yields gets its result."""
    running = Flood(source, port, limit)
    result: list[FloodResult] = []
    try:
        yield result
    finally:
        result.append(running.stop())


# --- measuring serve ------------------------------------------------------------------------


def udp_socket(port: int) -> tuple[int, int]:
    """(bytes queued, datagrams dropped) of the UDP socket bound to 127.0.0.1:``port``."""
    local = f"0100007F:{port:04X}"
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local:
            return int(fields[4].split(":")[1], 16), int(fields[-1])
    raise RuntimeError(f"no UDP socket on 127.0.0.1:{port}")


def wait_until(what: str, condition: Any, timeout: float, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout} s")
        time.sleep(every)


def cpu_seconds(sampler: Sampler) -> float:
    value = sampler.read()
    if value is None:
        raise RuntimeError("serve has exited")
    return value[0]


def guard_admit_seconds(count: int = 200_000) -> float:
    """``Guard.admit`` for a banned source, timed here (the guard's share of a drop)."""
    guard = Guard(networks(["127.0.0.1/32"]))
    while guard.admit(FLOODER, 0.0) != "drop" or not guard.bans(0.0):
        pass  # the burst, then the ban
    started = time.perf_counter()
    for _ in range(count):
        guard.admit(FLOODER, 1.0)
    return (time.perf_counter() - started) / count


class Serve:
    """``callhook serve`` running the kit's IVR with the benchmark's ``[security]``."""

    def __init__(self, workdir: Path, kit: Path, app_base: str, flood_allowed: bool) -> None:
        self.data = workdir / "data"
        prepare_data(self.data, kit)
        allow = ["127.0.0.1/32"] + ([f"{FLOODER}/32"] if flood_allowed else [])
        config = workdir / "flood.toml"
        config.write_text(f"[security]\nallow = {json.dumps(allow)}\n")
        self.http = free_port()
        self.log_path = workdir / "callhook.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [
                str(ROOT / ".venv" / "bin" / "callhook"),
                "serve",
                "--workers",
                "1",
                "--config",
                str(config),
                "--sip",
                f"127.0.0.1:{SIP_PORT}",
                "--http",
                f"127.0.0.1:{self.http}",
                "--rtp-ports",
                f"{RTP_FIRST}-{RTP_LAST}",
                "--data-dir",
                str(self.data),
                "--app-url",
                f"{app_base}/ivr/start",
                "--final-page",
                f"{app_base}/ivr/final",
                "--secret",
                "bench",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until("serve starting", lambda: "web: " in self.log_path.read_text(), 30)
        self.sampler = Sampler(self.process.pid)

    def api(self, method: str, path: str) -> Any:
        secret = (self.data / "secret").read_text().strip()
        request = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", method=method)
        request.add_header("Authorization", f"Bearer {secret}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def lift(self, address: str) -> None:
        self.api("DELETE", f"/api/bans/{address}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        self.log.close()


def drained(port: int) -> bool:
    return udp_socket(port)[0] == 0


def machine_cpu() -> tuple[float, float]:
    """(busy, total) clock ticks of all cores since boot (``/proc/stat``)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


# --- the phases -----------------------------------------------------------------------------


def idle_cpu(serve: Serve, seconds: float) -> float:
    """serve's CPU seconds per second with nothing to do."""
    cpu0, t0 = cpu_seconds(serve.sampler), time.monotonic()
    time.sleep(seconds)  # the measurement window
    return (cpu_seconds(serve.sampler) - cpu0) / (time.monotonic() - t0)


def flood_alone(serve: Serve, seconds: float, idle: float) -> dict[str, float]:
    """The flood for ``seconds``, no calls: what it offered, what serve got, what it cost."""
    serve.lift(FLOODER)
    _, drops0 = udp_socket(SIP_PORT)
    cpu0, t0, machine0 = cpu_seconds(serve.sampler), time.monotonic(), machine_cpu()
    sent = Flood(FLOODER, SIP_PORT, seconds).wait()
    machine1 = machine_cpu()
    wait_until("serve reading the last of the flood", lambda: drained(SIP_PORT), 30, 0.01)
    cpu1, t1 = cpu_seconds(serve.sampler), time.monotonic()
    _, drops1 = udp_socket(SIP_PORT)
    received = sent.sent - (drops1 - drops0)
    spent = (cpu1 - cpu0) - idle * (t1 - t0)
    return {
        "offered_pps": sent.pps,
        "received": received,
        "received_pps": received / sent.seconds,
        "kernel_dropped": drops1 - drops0,
        "flooder_core_pct": sent.cpu / sent.seconds * 100,
        "machine_busy_pct": (machine1[0] - machine0[0]) / (machine1[1] - machine0[1]) * 100,
        "serve_core_pct": spent / sent.seconds * 100,
        "us_per_packet": spent / received * 1e6 if received else float("nan"),
    }


def calls(serve: Serve, count: int, kit: Path, app_base: str, workdir: Path, label: str) -> dict:  # type: ignore[type-arg]
    """``count`` of the kit's IVR calls (a fifth of them at once): SIPp's counts, the
    digits, serve's CPU and the RTP gaps."""
    urllib.request.urlopen(urllib.request.Request(f"{app_base}/stats/reset", method="POST"))
    pcap = workdir / f"rtp-{label}.pcap"
    dump = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-n", "-s", "64", "-B", "16384", "-w", str(pcap),
         f"udp and src portrange {RTP_FIRST}-{RTP_LAST}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert dump.stderr is not None
    line = dump.stderr.readline()  # "listening on lo, ...": capturing from now on
    if "listening" not in line:
        raise RuntimeError(f"tcpdump: {line}")
    _, drops0 = udp_socket(SIP_PORT)
    cpu0, t0 = cpu_seconds(serve.sampler), time.monotonic()
    at_once = count // 5
    sipp = subprocess.run(
        ["sipp", "-sf", "ivr_uac.xml", *sipp_common(at_once), "-mp", "6000",
         "-error_file", str(workdir / f"sipp-{label}-errors.log")],
        cwd=kit / "scenarios", capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    screen = sipp.stdout + sipp.stderr
    (workdir / f"sipp-{label}.out").write_text(screen)

    def counted(name: str) -> int:
        found = re.findall(rf"{name}\s*\|\s*\d+\s*\|\s*(\d+)", screen)
        return int(found[-1]) if found else -1

    ok, failed = counted("Successful call"), counted("Failed call")
    wait_until(
        "the final pages",
        lambda: sum(get_json(f"{app_base}/stats")["final"].values()) >= ok,
        15,
        0.2,
    )
    cpu1, t1 = cpu_seconds(serve.sampler), time.monotonic()
    _, drops1 = udp_socket(SIP_PORT)
    dump.send_signal(signal.SIGINT)
    dump.wait(timeout=10)
    p50, p99, gap_max = quantiles(rtp_gaps(pcap))
    pcap.unlink(missing_ok=True)
    app = get_json(f"{app_base}/stats")
    return {
        "ok": ok,
        "failed": failed,
        "digits_right": app["digits"].get("1234", 0),
        "digits_calls": sum(app["digits"].values()),
        "serve_core_pct": (cpu1 - cpu0) / (t1 - t0) * 100,
        "gap_p50": p50,
        "gap_p99": p99,
        "gap_max": gap_max,
        "kernel_dropped": drops1 - drops0,
        "seconds": t1 - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="idle and flood windows")
    parser.add_argument("--calls", type=int, default=100, help="a multiple of 5")
    parser.add_argument("--flood-allowed", action="store_true", help=f"{FLOODER} in allow")
    parser.add_argument("--kit", type=Path, default=KIT)
    args = parser.parse_args()
    check_kit(args.kit)
    workdir = Path(tempfile.mkdtemp(prefix="callhook-flood-"))
    app, app_base = start_app()
    where = "inside [security] allow, rate-limited" if args.flood_allowed else "outside allow"
    print(f"callhook flood benchmark; kit {args.kit}; work dir {workdir}")
    print(
        f"{os.cpu_count()} cores; flooder: 1 process from {FLOODER} ({where}), INVITE + "
        "OPTIONS alternately, unpaced; SIPp from 127.0.0.1 (allowed); load average before: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
        flush=True,
    )
    serve = Serve(workdir, args.kit, app_base, args.flood_allowed)
    try:
        time.sleep(2.0)  # let serve's start-up work settle before the idle window
        idle = idle_cpu(serve, args.seconds)
        print(f"idle serve: {idle * 100:.2f} % of a core", flush=True)
        f = flood_alone(serve, args.seconds, idle)
        print(
            f"flood alone, {args.seconds:g} s: offered {f['offered_pps']:,.0f} packets/s "
            f"(the flooder at {f['flooder_core_pct']:.0f} % of a core; all cores "
            f"{f['machine_busy_pct']:.0f} % busy); serve received "
            f"{f['received_pps']:,.0f}/s ({f['received']:,.0f}; the kernel dropped "
            f"{f['kernel_dropped']:,.0f} at its full socket); serve at "
            f"{f['serve_core_pct']:.0f} % of a core above idle: {f['us_per_packet']:.2f} us "
            f"of CPU per received (dropped) packet; Guard.admit alone on a banned source: "
            f"{guard_admit_seconds() * 1e6:.2f} us",
            flush=True,
        )
        print(f"bans: {serve.api('GET', '/api/bans')}", flush=True)
        print(
            "calls    |  ok | fail | digits ok | serve % core | RTP gap p50/p99/max ms "
            "| SIP socket drops | flood offered / received per s",
            flush=True,
        )
        for label in ("no flood", "flood"):
            if label == "flood":
                serve.lift(FLOODER)
                _, drops0 = udp_socket(SIP_PORT)
                with flooding(FLOODER, SIP_PORT, 600.0) as result:
                    r = calls(serve, args.calls, args.kit, app_base, workdir, "flood")
                wait_until("serve reading the last of the flood", lambda: drained(SIP_PORT), 30)
                (sent,) = result
                received = sent.sent - (udp_socket(SIP_PORT)[1] - drops0)
                offered = f"{sent.pps:,.0f} / {received / sent.seconds:,.0f}"
            else:
                r = calls(serve, args.calls, args.kit, app_base, workdir, "quiet")
                offered = "-"
            print(
                f"{label:8} | {r['ok']:3} | {r['failed']:4} "
                f"| {r['digits_right']:4}/{r['digits_calls']:<4} | {r['serve_core_pct']:12.1f} "
                f"| {r['gap_p50']:5.1f} / {r['gap_p99']:5.1f} / {r['gap_max']:5.0f} "
                f"| {r['kernel_dropped']:16,} | {offered}",
                flush=True,
            )
        print(f"bans: {serve.api('GET', '/api/bans')}", flush=True)
    finally:
        serve.stop()
        app.terminate()


if __name__ == "__main__":
    main()
