"""The connect action on real calls: a SIPp caller calls serve, whose application puts it
through to a SIPp callee (callhook in the middle as a B2BUA, media through it).

Each direction is heard by a socket of the test (tests/e2e/rtpsink.py) that the listening
side's SDP names: SIPp plays its pcap from its own media port, so the side that plays is
not the side whose audio is checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from callhook.devtools.harness import AppServer
from callhook.media import g711, tones, wav
from tests.e2e import sipp
from tests.e2e.harness import (
    WORKERS,
    Server,
    free_even_udp_port,
    free_udp_port,
    served,
    wait_for_request,
)
from tests.e2e.rtpsink import RtpSink
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

CALLEE_HZ = 700.0
CALLER_HZ = 1100.0


#: The callees SIPp plays are on loopback.
ALLOW = '[outbound]\nallow = ["sip:*@127.0.0.1:*"]\n'


def config(tmp_path: Path) -> tuple[str, ...]:
    path = tmp_path / "callhook.toml"
    path.write_text(ALLOW)
    return ("--config", str(path))


def connect_app(app: AppServer, callee_port: int) -> None:
    app.page(
        "/start",
        [
            {
                "connect": {
                    "destinations": [f"sip:callee@127.0.0.1:{callee_port}"],
                    "next_page": {"url": "/connected"},
                }
            }
        ],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)


def energy_at(samples: npt.NDArray[np.int16], hz: float) -> float:
    """The share of the signal's energy within 20 Hz of ``hz``."""
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / 8000)
    total = float(spectrum.sum()) or 1.0
    return float(spectrum[np.abs(freqs - hz) <= 20].sum()) / total


async def bridged_calls(server: Server) -> list[tuple[str, str]]:
    """(call id, far leg's URI) of the calls ``GET /api/v1/calls`` shows bridged, as soon
    as there are some (within 10 s)."""
    import aiohttp

    key = (server.data_dir / "secret").read_text().strip()
    url = f"http://127.0.0.1:{server.http_port}/api/v1/calls"
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            async with http.get(url, headers={"Authorization": f"Bearer {key}"}) as r:
                calls = (await r.json())["calls"]
            found = [(c["call_id"], c["bridged_to"]["call_to"]) for c in calls if "bridged_to" in c]
            if found:
                return found
            await asyncio.sleep(0.05)
    return []


def callee_scenario(pcap: Path | None, media_port: int | None = None, hold_ms: int = 4000) -> str:
    """A callee that answers, plays ``pcap`` (if any), stays ``hold_ms``, then hangs up."""
    answer = sipp.UAS_ANSWER.format(receive=sipp.UAS_RECEIVE_REMEMBERING)
    if media_port is not None:  # the callee's SDP names the test's socket
        answer = answer.replace("m=audio [media_port]", f"m=audio {media_port}")
    parts = [answer]
    if pcap is not None:
        parts.append(sipp.PLAY.format(pcap=pcap))
    parts += [sipp.PAUSE.format(ms=hold_ms), sipp.BYE_FROM_UAS]
    return sipp.scenario(*parts)


@pytest.mark.parametrize("workers", WORKERS)
async def test_the_caller_hears_the_callee_and_the_application_goes_on_after(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    callee_port = free_udp_port()
    connect_app(app, callee_port)
    said = Stream(3.0).speech(tones.tone(CALLEE_HZ, 2.5, -12), at=0.2)
    pcap = said.write_pcap(tmp_path / "callee.pcap")
    callee = await sipp.start_sipp(
        callee_scenario(pcap), tmp_path, local_port=callee_port, media_port=free_even_udp_port()
    )
    async with (
        RtpSink() as caller_ear,
        served(tmp_path, app, workers, ALLOW) as server,
    ):
        invite = sipp.invite("ivr").replace("m=audio [media_port]", f"m=audio {caller_ear.port}")
        calling = asyncio.create_task(
            sipp.call(
                server.sip,
                tmp_path,
                invite,
                sipp.ANSWERED,
                sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
            )
        )
        bridged = await bridged_calls(server)  # the REST API shows both legs while bridged
        caller = await calling
        callee_out, _ = await asyncio.wait_for(callee.communicate(), 30)
        assert callee.returncode == 0, callee_out.decode(errors="replace") + server.output
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/connected")
    ((primary, far_to),) = bridged
    assert primary.startswith("1-") and far_to == f"sip:callee@127.0.0.1:{callee_port}"
    heard = caller_ear.audio()
    assert energy_at(heard, CALLEE_HZ) > 0.5, "the caller did not hear the callee's tone"
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]
    assert result["action"] == "connect"
    outcome = result["result"]
    assert outcome["connected"] is True
    assert outcome["destination"] == f"sip:callee@127.0.0.1:{callee_port}"
    assert outcome["call_cause"] == "hung_up"
    assert 3.0 < outcome["seconds_connected_duration"] < 10
    # The call log shows both legs and how they were joined.
    log = "".join(p.read_text() for p in (tmp_path / "data" / "media").glob("*/logs/*.log"))
    for line in (
        f"callee_call #0 sip:callee@127.0.0.1:{callee_port}",
        "callee_answered #0 ",
        "bridge #0",
        "callee_ended #0 hung_up (BYE)",
    ):
        assert line in log, log


async def test_the_callee_hears_the_caller_and_gets_the_digits_pressed(
    tmp_path: Path, app: AppServer
) -> None:
    callee_port = free_udp_port()
    connect_app(app, callee_port)
    said = Stream(4.0).speech(tones.tone(CALLER_HZ, 1.5, -12), at=0.5).rfc4733("7", at=2.5)
    pcap = said.write_pcap(tmp_path / "caller.pcap")
    async with (
        RtpSink() as callee_ear,
        Server.for_app(tmp_path / "data", app, extra=config(tmp_path)) as server,
    ):
        callee = await sipp.start_sipp(
            callee_scenario(None, callee_ear.port),
            tmp_path,
            local_port=callee_port,
            media_port=free_even_udp_port(),
        )
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.PLAY.format(pcap=pcap),
            sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
        )
        callee_out, _ = await asyncio.wait_for(callee.communicate(), 30)
        assert callee.returncode == 0, callee_out.decode(errors="replace") + server.output
        assert caller.returncode == 0, caller.output + caller.errors + server.output
    heard = callee_ear.audio()
    assert energy_at(heard, CALLER_HZ) > 0.3, "the callee did not hear the caller's tone"
    digits = {e.digit for e in callee_ear.events() if e.end}
    assert digits == {"7"}, callee_ear.events()


#: A callee that rings until CANCELled; its 487 carries the INVITE's Via headers (RFC 3261
#: §9.2, §8.2.6.2: the response is the INVITE's), kept when it came, not the CANCEL's
#: (which, through a proxy, has the proxy's alone).
UAS_RINGS_UNTIL_CANCEL = (
    '  <recv request="INVITE">\n'
    "    <action>\n"
    '      <ereg regexp="Via:[^\\r\\n]*(\\r?\\nVia:[^\\r\\n]*)*" search_in="msg"'
    ' assign_to="vias"/>\n'
    "    </action>\n"
    "  </recv>\n"
    + sipp.uas_response(180, "Ringing", sdp=False)
    + """  <recv request="CANCEL" timeout="30000"/>
  <send><![CDATA[
SIP/2.0 200 OK
[last_Via:]
[last_From:]
[last_To:];tag=[pid]SIPpTag01[call_number]
[last_Call-ID:]
[last_CSeq:]
Content-Length: 0

]]></send>
  <send><![CDATA[
SIP/2.0 487 Request Terminated
[$vias]
[last_From:]
[last_To:];tag=[pid]SIPpTag01[call_number]
[last_Call-ID:]
CSeq: [cseq] INVITE
Content-Length: 0

]]></send>
  <recv request="ACK"/>
"""
)

UAS_REFUSES = (
    '  <recv request="INVITE"/>\n'
    + sipp.uas_response(999, "reason", sdp=False).replace("999 reason", "{status} {reason}")
    + '  <recv request="ACK"/>\n'
)


async def connect_call(
    tmp_path: Path, app: AppServer, connect: dict[str, object], *callees: str, workers: int = 1
) -> tuple[Server, RtpSink, list[asyncio.subprocess.Process], list[int]]:
    """``callees`` (SIPp scenarios) wait; a SIPp caller calls serve (one process, or
    ``workers`` behind Kamailio), whose /start connects to them in order; the caller's
    audio is heard by the returned sink."""
    ports = [free_udp_port() for _ in callees]
    app.page(
        "/start",
        [
            {
                "connect": {
                    "destinations": [f"sip:callee{n}@127.0.0.1:{p}" for n, p in enumerate(ports)],
                    "next_page": {"url": "/connected"},
                    **connect,
                }
            }
        ],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)
    procs = [
        await sipp.start_sipp(
            sipp.scenario(text), tmp_path, local_port=port, media_port=free_even_udp_port()
        )
        for text, port in zip(callees, ports, strict=True)
    ]
    async with RtpSink() as sink, served(tmp_path, app, workers, ALLOW) as server:
        invite = sipp.invite("ivr").replace("m=audio [media_port]", f"m=audio {sink.port}")
        caller = await sipp.call(
            server.sip,
            tmp_path,
            invite,
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
        )
    assert caller.returncode == 0, caller.output + caller.errors + server.output
    return server, sink, procs, ports


async def test_no_answer_in_time_cancels_the_callee_while_the_caller_hears_ringback(
    tmp_path: Path, app: AppServer
) -> None:
    server, sink, (callee,), _ = await connect_call(
        tmp_path, app, {"seconds_answer_timeout": 3}, UAS_RINGS_UNTIL_CANCEL
    )
    out, _ = await asyncio.wait_for(callee.communicate(), 30)
    assert callee.returncode == 0, out.decode(errors="replace") + server.output  # CANCEL came
    (connected,) = app.bodies("/connected")
    outcome = connected["action_result"]["result"]
    assert (outcome["connected"], outcome["call_cause"]) == (False, "no_answer")
    heard = sink.audio()[: 2 * 8000]  # the first ringback burst: 440 + 480 Hz
    assert energy_at(heard, 440.0) + energy_at(heard, 480.0) > 0.8


@pytest.mark.parametrize(
    ("status", "reason", "cause"),
    [
        (486, "Busy Here", "busy"),
        (404, "Not Found", "unobtainable"),
        (408, "Request Timeout", "no_answer"),
        (503, "Service Unavailable", "failed"),
    ],
)
async def test_a_refusal_gives_its_cause(
    tmp_path: Path, app: AppServer, status: int, reason: str, cause: str
) -> None:
    refusal = UAS_REFUSES.format(status=status, reason=reason)
    _, _, (callee,), _ = await connect_call(tmp_path, app, {}, refusal)
    await asyncio.wait_for(callee.communicate(), 30)
    (connected,) = app.bodies("/connected")
    outcome = connected["action_result"]["result"]
    assert (outcome["connected"], outcome["call_cause"], outcome["call_raw_cause"]) == (
        False,
        cause,
        str(status),
    )


async def test_of_two_destinations_the_first_to_answer_is_bridged_the_other_cancelled(
    tmp_path: Path, app: AppServer
) -> None:
    answers = (
        sipp.UAS_ANSWER.format(receive=sipp.UAS_RECEIVE_REMEMBERING)
        + sipp.PAUSE.format(ms=2000)
        + sipp.BYE_FROM_UAS
    )
    server, _, (ringing, answering), ports = await connect_call(
        tmp_path, app, {}, UAS_RINGS_UNTIL_CANCEL, answers
    )
    for proc in (ringing, answering):
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, out.decode(errors="replace") + server.output
    (connected,) = app.bodies("/connected")
    outcome = connected["action_result"]["result"]
    assert outcome["connected"] is True
    assert outcome["destination"] == f"sip:callee1@127.0.0.1:{ports[1]}"


@pytest.mark.parametrize("workers", WORKERS)
async def test_the_caller_hanging_up_while_the_callee_rings_cancels_it(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """With workers, the callee's INVITE and the CANCEL go out through Kamailio."""
    callee_port = free_udp_port()
    connect_app(app, callee_port)
    callee = await sipp.start_sipp(
        sipp.scenario(UAS_RINGS_UNTIL_CANCEL),
        tmp_path,
        local_port=callee_port,
        media_port=free_even_udp_port(),
    )
    async with served(tmp_path, app, workers, ALLOW) as server:
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.PAUSE.format(ms=1500),
            sipp.BYE_FROM_CALLER.format(cseq=2),
        )
        out, _ = await asyncio.wait_for(callee.communicate(), 30)
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert callee.returncode == 0, out.decode(errors="replace") + server.output  # CANCEL
        assert await wait_for_request(app, "/final")
    assert app.bodies("/connected") == []  # the call was over: no next page
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"
    assert "SIP response dropped" not in server.output, server.output  # (487s find their way)


UAS_EARLY_MEDIA = (
    sipp.UAS_RECEIVE_REMEMBERING
    + sipp.uas_response(183, "Session Progress", sdp=True)
    + sipp.PLAY
    + sipp.PAUSE.format(ms=2500)
    + sipp.uas_response(200, "OK", sdp=True, retrans=True)
    + '  <recv request="ACK"/>\n'
    + sipp.PAUSE.format(ms=1500)
)


async def test_early_media_is_passed_to_the_caller_when_asked(
    tmp_path: Path, app: AppServer
) -> None:
    """pass_early_media: the far end's announcement before it answers (183 with SDP and
    audio) is what the caller hears, instead of ringback; then the call is bridged."""
    early = Stream(2.4).speech(tones.tone(CALLEE_HZ, 2.2, -12), at=0.1)
    pcap = early.write_pcap(tmp_path / "early.pcap")
    scenario = UAS_EARLY_MEDIA.format(pcap=pcap) + sipp.BYE_FROM_UAS
    server, sink, (callee,), _ = await connect_call(
        tmp_path, app, {"pass_early_media": True}, scenario
    )
    out, _ = await asyncio.wait_for(callee.communicate(), 30)
    assert callee.returncode == 0, out.decode(errors="replace") + server.output
    (connected,) = app.bodies("/connected")
    assert connected["action_result"]["result"]["connected"] is True
    heard = sink.audio()[: 2 * 8000]  # before the answer: the far end's tone, no ringback
    assert energy_at(heard, CALLEE_HZ) > 0.5
    assert energy_at(heard, 440.0) < 0.05


async def test_the_bridged_call_is_recorded_both_ways_caller_left_callee_right(
    tmp_path: Path, app: AppServer
) -> None:
    callee_port = free_udp_port()
    app.page(
        "/start",
        [
            {
                "connect": {
                    "destinations": [f"sip:callee@127.0.0.1:{callee_port}"],
                    "secondary_call": {"call_recording": True, "call_recording_mode": "separate"},
                    "next_page": {"url": "/connected"},
                }
            }
        ],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)
    callee_pcap = (
        Stream(3.0)
        .speech(tones.tone(CALLEE_HZ, 1.0, -12), at=1.5)
        .write_pcap(tmp_path / "callee.pcap")
    )
    caller_pcap = (
        Stream(3.0)
        .speech(tones.tone(CALLER_HZ, 1.0, -12), at=0.2)
        .write_pcap(tmp_path / "caller.pcap")
    )
    callee = await sipp.start_sipp(
        callee_scenario(callee_pcap),
        tmp_path,
        local_port=callee_port,
        media_port=free_even_udp_port(),
    )
    async with Server.for_app(tmp_path / "data", app, extra=config(tmp_path)) as server:
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.PLAY.format(pcap=caller_pcap),
            sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
        )
        callee_out, _ = await asyncio.wait_for(callee.communicate(), 30)
        assert callee.returncode == 0, callee_out.decode(errors="replace") + server.output
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/connected")
    (connected,) = app.bodies("/connected")
    filename = connected["action_result"]["result"]["call_recording_filename"]
    (path,) = (tmp_path / "data" / "media").glob(f"*/{filename}")
    data = path.read_bytes()
    info = wav.read_info(data)
    assert info.channels == 2
    audio = data[info.data_offset : info.data_offset + info.data_length]
    seconds = len(audio) / 16000
    assert 3.0 < seconds < 8, seconds  # from the bridge to the callee's hang-up
    left, right = g711.decode("ulaw", audio[0::2]), g711.decode("ulaw", audio[1::2])
    # The caller said its tone first, the callee its own a second later: each on its side.
    assert energy_at(left, CALLER_HZ) > 0.5 and energy_at(left, CALLEE_HZ) < 0.05
    assert energy_at(right, CALLEE_HZ) > 0.5 and energy_at(right, CALLER_HZ) < 0.05
    log = "".join(p.read_text() for p in (tmp_path / "data" / "media").glob("*/logs/*.log"))
    assert f"recording_start {filename} (the call, separate)" in log, log
    assert f"recording_stop {filename}" in log, log
