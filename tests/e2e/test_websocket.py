"""connect to a WebSocket server on real calls: a SIPp caller calls serve, whose application
connects it to ``wss://`` server of the test (tests/e2e/wsagent.py, a certificate from a
test CA that serve is configured to trust).

The caller's ear is a socket of the test (its SDP names it) until the caller starts
playing its pcap (serve then sends where the caller's RTP comes from): the server's
audio is sent, and heard, first."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
import pytest
from aiohttp import web

from callhook.devtools.harness import AppServer
from callhook.edge.speechworkers import build_synthesiser
from callhook.media import wav
from callhook.telephony.wsprotocol import AUDIO, V1, V2
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, free_udp_port, served, wait_for_request
from tests.e2e.rtpsink import RtpSink
from tests.e2e.rtpstream import Stream
from tests.e2e.wsagent import Agent

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

SPEECH = Path(__file__).parent.parent / "data" / "speech"


def clip(name: str) -> npt.NDArray[np.int16]:
    return wav.decode_to_8k((SPEECH / name).read_bytes())


def settings(agent: Agent, *urls: str) -> str:
    """serve trusts the test's CA, and the servers at ``urls`` (on loopback: the egress
    policy refuses them unless they are listed)."""
    endpoints = ", ".join(f'"{urlsplit(url).netloc}"' for url in urls)
    return f'[sip]\ntls_ca = "{agent.ca_file}"\n[egress]\nendpoints = [{endpoints}]\n'


def config(tmp_path: Path, agent: Agent, *urls: str) -> tuple[str, ...]:
    """:func:`settings` in a file, as serve's arguments."""
    path = tmp_path / "callhook.toml"
    path.write_text(settings(agent, *urls))
    return ("--config", str(path))


def connect_app(app: AppServer, destination: str) -> None:
    app.page(
        "/start",
        [{"connect": {"destinations": [destination], "next_page": {"url": "/connected"}}}],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)


def best_match(got: npt.NDArray[np.int16], sent: npt.NDArray[np.int16]) -> float:
    """The highest normalised correlation of ``sent`` against any stretch of ``got``."""
    g, s = got.astype(np.float64), sent.astype(np.float64)
    if len(g) < len(s):
        return 0.0
    s = s - s.mean()
    corr = np.correlate(g, s, mode="valid")
    window = np.convolve(g * g, np.ones(len(s)), mode="valid")
    energy = np.sqrt(window * float(s @ s)) + 1e-9
    return float(np.max(corr / energy))


def without_gaps(samples: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    """``samples`` (20 ms frames, as the server gets them) without the frames of digital
    silence callhook sends while no audio comes from the caller. A caller held up
    mid-word (the test's stall, or SIPp on a loaded machine) leaves a gap no server could
    close: the audio was late at its source. What the server heard besides must be the
    caller's words, every frame in order."""
    whole = samples[: len(samples) // 160 * 160].reshape(-1, 160)
    kept: npt.NDArray[np.int16] = whole[np.any(whole != 0, axis=1)].reshape(-1)
    return kept


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_caller_talks_with_a_websocket_server_both_ways_and_it_hangs_up(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    caller_says = clip("7_jackson_7.wav")
    agent_says = clip("3_nicolas_13.wav")

    async def converse(agent: Agent, ws: web.WebSocketResponse) -> None:
        # Its answer in one burst, as a speech model sends it: the caller must hear it
        # whole, paced out in real time.
        await ws.send_bytes(agent_says.astype("<i2").tobytes())
        await agent.wait_for("dtmf")
        await ws.send_str(json.dumps({"type": "call_hangup", "raw_cause": "4321"}))

    async with Agent(tmp_path, converse) as agent:
        connect_app(app, agent.url)
        # The caller's phone is held up for 300 ms mid-word, then sends what it held at
        # once: callhook must keep the whole burst, not only the newest of it.
        stream = Stream(4.5).speech(caller_says, at=0.2).stall(0.3, 0.3).rfc4733("5", at=3.5)
        pcap = stream.write_pcap(tmp_path / "caller.pcap")
        async with (
            RtpSink() as caller_ear,
            served(tmp_path, app, workers, settings(agent, agent.url)) as server,
        ):
            invite = sipp.invite("ivr").replace(
                "m=audio [media_port]", f"m=audio {caller_ear.port}"
            )
            run = await sipp.call(
                server.sip,
                tmp_path,
                invite,
                sipp.ANSWERED,
                sipp.PAUSE.format(ms=5000),  # the server's answer reaches the ear first
                sipp.PLAY.format(pcap=pcap),
                sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
            )
            assert run.returncode == 0, run.output + run.errors + server.output
            assert await wait_for_request(app, "/connected"), server.output
        # The handshake offered both protocols; this server chose v2.
        assert agent.offered == [V2, V1] and agent.protocol == V2
        (start,) = agent.of_type("start")
        assert start["protocol"] == V2 and start["audio"] == AUDIO
        assert start["call"]["call_to"] == agent.url
        # The caller's digit came as a v2 DTMF event.
        assert [m["digit"] for m in agent.of_type("dtmf")] == ["5"]
        # The server heard what the caller said, all of it.
        assert best_match(without_gaps(agent.samples()), caller_says) > 0.9, server.output
        # The backlog the burst left was trimmed later, in the caller's silence (the feed
        # learns its excess over a whole second of takes after the burst: the digit, and
        # the hang-up, come 3 s later), and the far leg's end line counts it.
        dropped = re.search(r"the bridge dropped (\d+) ms of the caller's audio", server.output)
        assert dropped is not None and 0 < int(dropped[1]) <= 500, server.output
        # The caller heard the server's burst, whole and in real time.
        heard = caller_ear.audio()
        assert best_match(heard, agent_says) > 0.9, server.output
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    assert result["connected"] is True
    assert result["call_cause"] == "hung_up" and result["call_raw_cause"] == "4321"


@pytest.mark.parametrize(("where", "raw"), [("not found", "404"), ("nobody", "903")])
async def test_a_websocket_that_cannot_be_reached_gives_aculabs_raw_cause(
    tmp_path: Path, app: AppServer, where: str, raw: str
) -> None:
    async with Agent(tmp_path, status=404) as agent:
        url = agent.url if where == "not found" else f"wss://127.0.0.1:{free_udp_port()}/agent"
        connect_app(app, url)
        async with Server.for_app(
            tmp_path / "data", app, extra=config(tmp_path, agent, url)
        ) as server:
            run = await sipp.call(
                server.sip,
                tmp_path,
                sipp.invite("ivr"),
                sipp.ANSWERED,
                sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
            )
            assert run.returncode == 0, run.output + run.errors + server.output
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    assert result["connected"] is False and result["call_raw_cause"] == raw, result
    assert result["call_cause"] == ("unobtainable" if raw == "404" else "failed")


async def test_a_transcription_hears_both_the_caller_and_the_websocket_server(
    tmp_path: Path, app: AppServer
) -> None:
    """start_transcription in separate mode, then connect: the far end's speech (the
    server's, bridged) is transcribed as outbound, the caller's as inbound."""
    synthesiser = build_synthesiser("piper:joe")
    assert synthesiser is not None
    server_says = synthesiser.speak("Your parcel will arrive on Tuesday morning.")
    caller_says = synthesiser.speak("Thank you very much for the update.")

    async def speak_then_hang_up(agent: Agent, ws: web.WebSocketResponse) -> None:
        await ws.send_bytes(server_says.astype("<i2").tobytes())
        await asyncio.sleep(len(server_says) / 8000 + 4.5)  # the caller answers meanwhile
        await ws.send_str(json.dumps({"type": "call_hangup", "raw_cause": "200"}))

    async with Agent(tmp_path, speak_then_hang_up) as agent:
        app.page(
            "/start",
            [
                {"start_transcription": {"results_page": {"url": "results"}, "id": "bridged"}},
                {"connect": {"destinations": [agent.url], "next_page": {"url": "/connected"}}},
            ],
        )
        app.page("/connected", [{"hang_up": {}}])
        app.page("/results", None)
        app.page("/final", None)
        pcap = Stream(8.0).speech(caller_says, at=4.0).write_pcap(tmp_path / "caller.pcap")
        extra = config(tmp_path, agent, agent.url)
        async with Server.for_app(tmp_path / "data", app, extra=extra) as server:
            run = await sipp.call(
                server.sip,
                tmp_path,
                sipp.invite("ivr"),
                sipp.ANSWERED,
                sipp.PLAY.format(pcap=pcap),
                sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
            )
            assert run.returncode == 0, run.output + run.errors + server.output
            for _ in range(100):  # the call's end completes it
                if any(b["action_result"]["result"]["completed"] for b in app.bodies("/results")):
                    break
                await asyncio.sleep(0.1)
    phrases = [
        p for b in app.bodies("/results") for p in b["action_result"]["result"]["transcription"]
    ]
    said = {
        direction: " ".join(
            p["alternatives"][0]["text"].lower()
            for p in phrases
            if p["final"] and p["direction"] == direction
        )
        for direction in ("inbound", "outbound")
    }
    assert "parcel" in said["outbound"] and "tuesday" in said["outbound"], said
    assert "thank you" in said["inbound"] and "parcel" not in said["inbound"], said
