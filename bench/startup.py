"""Start-up time and memory of ``callhook serve`` with each speech model.

    .venv/bin/python -m bench.startup [--models tiny.en,base] [--runs 2]

For each ``[speech] model`` (Whisper; ``sphinx`` names the pocketsphinx recogniser), a
fresh ``callhook serve`` on free local ports, with its own data directory: the seconds
until it listens (the ``web:`` line: calls are answered from then on, and a call that
needs speech waits for the models), until the recognition model and the text-to-speech
voice are loaded (their ``model is ready`` lines), and the process's RSS then. The first
run of a split model (``base``) also puts it together in the cache when that was not done
yet; the figures are the best of ``--runs``.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY = re.compile(r"the (speech recognition|text-to-speech) model is ready")


def free_port(kind: socket.SocketKind) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(model: str) -> tuple[float, float, float, float]:
    """(listening s, recogniser ready s, TTS ready s, RSS MB) of one ``serve``."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "callhook.toml"
        speech = 'recogniser = "sphinx"' if model == "sphinx" else f'model = "{model}"'
        config.write_text(
            f'data_dir = "{tmp}/data"\n[http]\nport = {free_port(socket.SOCK_STREAM)}\n'
            f'[sip]\nhost = "127.0.0.1"\nport = {free_port(socket.SOCK_DGRAM)}\ntcp_port = 0\n'
            f"[speech]\n{speech}\n"
        )
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "callhook", "serve", "--workers", "1", "--config", str(config)],
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None
        listening = asr = tts = float("nan")
        try:
            for line in proc.stdout:
                now = time.monotonic() - started
                if "web: " in line and listening != listening:
                    listening = now
                found = READY.search(line)
                if found and found.group(1) == "speech recognition":
                    asr = now
                elif found:
                    tts = now
                if asr == asr and tts == tts and listening == listening:
                    break
                if now > 120:
                    raise TimeoutError("serve did not get ready in 120 s")
            rss = rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(10)
    return listening, asr, tts, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="tiny.en,base,sphinx")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    print(f"{'model':12} {'listening s':>12} {'recogniser s':>13} {'TTS s':>6} {'RSS MB':>7}")
    for model in args.models.split(","):
        runs = [start(model) for _ in range(args.runs)]
        best = min(runs, key=lambda r: r[1])
        print(f"{model:12} {best[0]:>12.1f} {best[1]:>13.1f} {best[2]:>6.1f} {best[3]:>7.0f}")


if __name__ == "__main__":
    main()
