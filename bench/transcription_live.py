"""Live transcription on live calls: how many at once one ``serve`` keeps up with.

    .venv/bin/python -m bench.transcription_live [--steps 4,8,16] [--rate 2] [--interim]

For each step N, N SIPp callers call one ``serve``, ``--rate`` new calls a second (so
their sentences do not all end at the same moment, as a real line's do not), and play
the same pcap: the
script of :mod:`bench.transcription` (six sentences by the default voice, in line
noise), about 30 s. The application (in this process) answers the first page with
``start_transcription`` (finals only, or with interim results), a ``sleep`` as long as
the script and ``hang_up``; its ``results_page`` notes when each final phrase arrives.

Printed per step: calls completed, the word error rate of all the calls' finals against
the script, and the latency from the end of a sentence's speech to the arrival of its
final phrase (p50/p95/max; a sentence's end is known from the pcap, its call's start from
the first page request, so the figure carries the few ms between that request and the
answer). Keeping up in real time means a latency that does not grow with N; once the
decoding threads fall behind it grows with every sentence. serve runs with its defaults
(``[speech] workers = 2``).

Needs ``sipp``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.ivr_load import ROOT, SIP_PORT, free_port
from bench.transcription import SENTENCES, script_audio, wer, words
from tests.e2e import sipp as scenarios
from tests.e2e.rtpstream import Stream


class Results:
    """The application: its first page, and the results page's arrivals."""

    def __init__(self, seconds: float, interim: bool) -> None:
        self.seconds = seconds
        self.interim = interim
        self.started: dict[str, float] = {}  # by application instance
        self.finals: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.completed: set[str] = set()

    async def start(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        instance = body["application_instance_id"]
        self.started[instance] = time.monotonic()
        options = {"results_page": {"url": "results"}, "id": instance}
        if self.interim:
            options["enable_interim_results"] = True
        actions = [
            {"start_transcription": options},
            {"sleep": {"seconds": self.seconds}},
            {"hang_up": {}},
        ]
        return web.json_response({"actions": actions})

    async def results(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        body = json.loads(await request.read())
        result = body["action_result"]["result"]
        for phrase in result["transcription"]:
            if phrase["final"]:
                self.finals[result["id"]].append((now, phrase["alternatives"][0]["text"]))
        if result["completed"]:
            self.completed.add(result["id"])
        return web.Response(status=204)

    async def final(self, request: web.Request) -> web.Response:
        return web.Response(status=204)


async def run_step(
    n: int, pcap: Path, ends: list[float], seconds: float, interim: bool, rate: float,
    workdir: Path,
) -> dict[str, Any]:  # fmt: skip
    results = Results(seconds, interim)
    app = web.Application()
    app.router.add_post("/start", results.start)
    app.router.add_post("/results", results.results)
    app.router.add_post("/final", results.final)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}"
    data = workdir / f"data-{n}"
    (workdir / f"load-{n}.toml").write_text("[security]\nrate = 100000\n")
    server = await asyncio.create_subprocess_exec(
        str(ROOT / ".venv" / "bin" / "callhook"), "serve", "--workers", "1",
        "--config", str(workdir / f"load-{n}.toml"), "--sip", f"127.0.0.1:{SIP_PORT}",
        "--http", f"127.0.0.1:{free_port()}", "--data-dir", str(data),
        "--app-url", f"{base}/start", "--final-page", f"{base}/final", "--secret", "bench",
        stdout=(workdir / f"callhook-{n}.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    await asyncio.sleep(4.0)  # the speech models load
    scenario = scenarios.scenario(
        scenarios.invite("ivr"),
        scenarios.ANSWERED,
        scenarios.PLAY.format(pcap=pcap),
        scenarios.BYE_FROM_SERVER.format(timeout_ms=int(seconds * 1000) + 60000),
    )
    (workdir / "caller.xml").write_text(scenario)
    caller = await asyncio.create_subprocess_exec(
        "sipp", "-sf", "caller.xml", f"127.0.0.1:{SIP_PORT}", "-i", "127.0.0.1", "-p", "5061",
        "-mi", "127.0.0.1", "-mp", "6000", "-l", str(n), "-m", str(n),
        "-r", "1", "-rp", str(round(1000 / rate)),
        "-nostdin", "-trace_err", cwd=workdir,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    await caller.wait()
    for _ in range(300):  # the last decodes, then completed
        if len(results.completed) >= len(results.started):
            break
        await asyncio.sleep(0.1)
    server.terminate()
    await server.wait()
    await runner.cleanup()
    latencies: list[float] = []
    errors = total = 0
    reference = words(" ".join(SENTENCES))
    for instance, started in results.started.items():
        finals = results.finals.get(instance, [])
        said = " ".join(text for _, text in finals)
        e, t = wer(reference, words(said))
        errors, total = errors + e, total + t
        # Each sentence's final is the first to arrive after its speech ended.
        arrivals = sorted(at - started for at, _ in finals)
        for end in ends:
            after = [a for a in arrivals if a >= end]
            if after:
                latencies.append(after[0] - end)
                arrivals.remove(after[0])
    q = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else [float("nan")] * 19
    return {
        "calls": len(results.started),
        "completed": len(results.completed),
        "wer": 100 * errors / total if total else float("nan"),
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p95": q[18],
        "max": max(latencies) if latencies else float("nan"),
        "finals": sum(len(v) for v in results.finals.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="4,8,16")
    parser.add_argument("--rate", type=float, default=2.0, help="new calls a second")
    parser.add_argument("--interim", action="store_true", help="with interim results")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="callhook-bench-transcription-"))
    audio, ends = script_audio()
    seconds = len(audio) / 8000
    pcap = Stream(seconds).speech(audio, at=0.0).write_pcap(workdir / "script.pcap")
    kind = "with interim results" if args.interim else "finals only"
    print(
        f"live transcription on live calls ({kind}); script {seconds:.0f} s, "
        f"{len(SENTENCES)} sentences; work dir {workdir}"
    )
    print("   N | calls | completed | finals | WER % | end of speech to final p50 / p95 / max s")
    for n in (int(x) for x in args.steps.split(",")):
        r = asyncio.run(run_step(n, pcap, ends, seconds + 2.0, args.interim, args.rate, workdir))
        print(
            f"{n:4d} | {r['calls']:5} | {r['completed']:9} | {r['finals']:6} | {r['wer']:5.1f} "
            f"| {r['p50']:.2f} / {r['p95']:.2f} / {r['max']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
