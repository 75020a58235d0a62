"""Live transcription on a real call (``start_transcription``): a caller speaks a script
(sentences made by the default TTS voice) to a real serve while the application plays a
prompt; the application's results page, a real HTTP server, receives the phrases. The
inbound finals match the script (word error rate), the prompt's phrase is labelled
outbound, interim results come with their stability, and ``completed`` ends it. The
caller is SIPp playing a pcap, and callhook test's own user agent (``--sip``)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from bench.transcription import wer, words
from callhook.devtools.harness import AppServer, Received, Reply
from callhook.edge.speechworkers import build_synthesiser
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, served
from tests.e2e.rtpstream import Stream

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (
    "My order number is four five six and it has not arrived yet.",
    "Please call me back tomorrow morning after nine o'clock.",
    "I need to change the delivery address for my new phone.",
)


async def test_a_call_is_transcribed_both_ways_as_it_goes_on(
    tmp_path: Path, app: AppServer
) -> None:
    app.page(
        "/start",
        [
            {
                "start_transcription": {
                    "results_page": {"url": "results"},
                    "id": "order-line",
                    "enable_interim_results": True,
                }
            },
            {"play": {"play_list": [{"text_to_say": "Hello. Please tell me about your order."}]}},
            {"sleep": {"seconds": 25}},
            {"stop_transcription": {}},
            {"hang_up": {}},
        ],
    )
    app.page("/results", None)  # 204
    flow = tmp_path / "caller.yaml"
    steps = "".join(f"  - say: {line!r}\n  - wait: 1.5\n" for line in SCRIPT)
    flow.write_text(f"to: transcribed\nsteps:\n  - wait: 4\n{steps}  - wait: 30\n")
    async with Server(
        tmp_path / "data",
        app_url=app.url("/start"),
        secret=app.secret,
        final_page=app.url("/final"),
    ) as server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "callhook", "test", "--sip", f"127.0.0.1:{server.sip_port}",
            "--http", f"127.0.0.1:{server.http_port}", "--data-dir", str(server.data_dir),
            str(flow), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 180)
        for _ in range(100):  # the completed result follows the last decode
            if any(b["action_result"]["result"]["completed"] for b in app.bodies("/results")):
                break
            await asyncio.sleep(0.1)
        output = server.output
    assert proc.returncode == 0, out.decode() + output[-3000:]
    posts = [r for r in app.requests if r.path == "/results"]
    assert posts and all(r.signature_ok(app.secret) for r in posts)
    results = [r.json["action_result"]["result"] for r in posts]
    assert all(r["id"] == "order-line" for r in results)
    assert all(r.json["token"] == "" and "this_call" not in r.json for r in posts)
    # completed comes once, last: a call's results arrive in the order they were made
    assert [r["completed"] for r in results] == [False] * (len(results) - 1) + [True]
    phrases = [p for r in results for p in r["transcription"]]
    finals = [p for p in phrases if p["final"]]
    inbound = " ".join(p["alternatives"][0]["text"] for p in finals if p["direction"] == "inbound")
    reference = words(" ".join(SCRIPT))
    errors, _ = wer(reference, words(inbound))
    print(f"transcription WER {100 * errors / len(reference):.1f} % ({inbound!r})")
    assert errors / len(reference) <= 0.10, inbound
    # The prompt, heard outbound: in one phrase, or in two when its sentences' pause was
    # long enough on a loaded machine ("Hello." / "Please tell me about your order.").
    heard = [p["alternatives"][0]["text"] for p in finals if p["direction"] == "outbound"]
    outbound = " ".join(heard)
    assert "your order" in outbound.lower(), outbound
    interims = [p for p in phrases if not p["final"]]
    assert interims and all(0.0 <= p["stability"] <= 1.0 for p in interims)
    assert all("confidence" in p["alternatives"][0] for p in finals)


def _script_results(app: AppServer, refused: int = 0) -> tuple[list[dict[str, object]], str]:
    """Every phrase the results page took (after the first ``refused`` requests), and the
    inbound finals' text."""
    results = [b["action_result"]["result"] for b in app.bodies("/results")[refused:]]
    phrases = [p for r in results for p in r["transcription"]]
    inbound = " ".join(
        p["alternatives"][0]["text"]
        for p in phrases
        if p["final"] and p.get("direction") == "inbound"
    )
    return phrases, inbound


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_sipp_caller_speaking_a_script_is_transcribed(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """SIPp calls and plays a pcap of the three sentences; finals only (the default). With
    workers the same: the call's worker transcribes it and posts the results. The results
    page refuses the first result (503) for its first 6 s: the call's later results wait
    behind it, and it comes again before any of them."""
    synthesiser = build_synthesiser("piper:joe")
    assert synthesiser is not None
    app.page(
        "/start",
        [
            {"start_transcription": {"results_page": {"url": "results"}, "id": "pcap"}},
            {"play": {"play_list": [{"text_to_say": "Hello. Please tell me about your order."}]}},
            {"sleep": {"seconds": 22}},
            {"hang_up": {}},
        ],
    )
    refusing: list[float] = []  # when the first was refused first

    def results(request: Received) -> Reply:
        now = asyncio.get_running_loop().time()
        if not refusing or now - refusing[0] < 6.0:
            refusing.append(now)
            return Reply(status=503)
        return Reply(status=204)

    app.page("/results", results)
    app.page("/final", None)
    stream = Stream(24.0)
    at = 4.0
    for line in SCRIPT:
        spoken = synthesiser.speak(line)
        stream = stream.speech(spoken, at=at)
        at += len(spoken) / 8000 + 1.5
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=40000))
    config = "[notifications]\nfirst_retry = 0.5\nmax_retry = 1\n"  # (tried again soon)
    async with served(tmp_path, app, workers, config) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
        for _ in range(100):  # the call's end stops it: the completed result comes last
            if any(b["action_result"]["result"]["completed"] for b in app.bodies("/results")):
                break
            await asyncio.sleep(0.1)
        output = server.output
    assert run.returncode == 0, run.output + run.errors + output[-3000:]
    # The refused result, again and again until it was taken, before any later one.
    bodies = app.bodies("/results")
    assert len(refusing) >= 2, bodies
    assert all(b == bodies[0] for b in bodies[: len(refusing) + 1]), bodies
    phrases, inbound = _script_results(app, refused=len(refusing))
    reference = words(" ".join(SCRIPT))
    errors, _ = wer(reference, words(inbound))
    print(f"transcription WER (SIPp) {100 * errors / len(reference):.1f} % ({inbound!r})")
    assert errors / len(reference) <= 0.10, inbound
    assert all(p["final"] for p in phrases)  # interim results are off by default
    assert any(p.get("direction") == "outbound" for p in phrases)
    completed = [b["action_result"]["result"]["completed"] for b in bodies[len(refusing) :]]
    # the call's end stopped it, and its results came in order: completed last
    assert completed == [False] * (len(completed) - 1) + [True]
