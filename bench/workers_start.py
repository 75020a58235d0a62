"""Start-up CPU, time and memory of ``callhook serve --workers N``.

    .venv/bin/python -m bench.workers_start [--workers 1,2,4] [--runs 5] [--preload]

For each N, ``--runs`` times: a fresh ``serve --workers N`` on free local ports, with
its own data directory (``[speech] preload = false`` unless ``--preload``): the seconds
until it prints ``web:`` (every worker takes calls, and with N > 1, Kamailio answers),
then after 3 s each process's proportional memory (PSS: shared pages split between the
processes that share them, so the column adds up to what the whole takes), then SIGTERM
and the CPU (user + system) that the whole tree used from start to end: the supervisor,
the fork server, the workers and Kamailio, reaped each by its parent. N = 1 is one
process (no supervisor, no fork server): the floor to compare with, in the same run.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.startup import free_port


def pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a child started from any of its threads)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += tree(int(child))
    return found


def role(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().split()
    if "kamailio" in argv[0]:
        return "kamailio"
    if "--fork-server" in argv:
        return "fork server"
    if "--worker" in argv:
        return "worker"
    return "serve"


def one(workers: int, preload: bool) -> tuple[float, float, dict[str, list[float]]]:
    """(seconds to ``web:``, CPU seconds of the whole run, PSS MB by role)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "callhook.toml"
        config.write_text(f"[speech]\npreload = {'true' if preload else 'false'}\n")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        command = [sys.executable, "-m", "callhook", "serve", "--workers", str(workers)]
        command += ["--config", str(config), "--data-dir", f"{tmp}/data"]
        command += ["--sip", f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"]
        command += ["--http", f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"]
        proc = subprocess.Popen(
            command,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None
        said = b""
        for line in proc.stdout:
            said += line
            if b"web:" in line:
                break
        else:
            raise SystemExit(f"serve --workers {workers} did not start:\n{said.decode()}")
        ready = time.monotonic() - started
        time.sleep(3.0)
        memory: dict[str, list[float]] = {}
        for pid in tree(proc.pid):
            memory.setdefault(role(pid), []).append(pss_mb(pid))
        proc.send_signal(signal.SIGTERM)
        proc.stdout.read()
        proc.wait()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return ready, cpu, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="the Ns, comma-separated")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--preload", action="store_true", help="load the speech models")
    args = parser.parse_args()
    print("| workers | to web: p50 | CPU per run p50 | PSS MB: serve / fork server / each worker"
          " / kamailio | PSS MB in all |")  # fmt: skip
    print("|---|---|---|---|---|")
    for workers in (int(n) for n in args.workers.split(",")):
        runs = [one(workers, args.preload) for _ in range(args.runs)]
        memory = runs[-1][2]

        def shown(name: str, memory: dict[str, list[float]] = memory) -> str:
            values = memory.get(name, [])
            return " ".join(f"{v:.0f}" for v in values) or "-"

        total = sum(sum(v) for name, v in memory.items() if name != "kamailio")
        print(
            f"| {workers} | {statistics.median(r[0] for r in runs):.2f} s "
            f"| {statistics.median(r[1] for r in runs):.2f} s "
            f"| {shown('serve')} / {shown('fork server')} / {shown('worker')} "
            f"/ {sum(memory.get('kamailio', [])):.0f} | {total:.0f} (without Kamailio) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
