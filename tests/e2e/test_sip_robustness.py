"""What a SIP peer may throw at ``callhook serve``: probes, garbage, floods, and shutdown."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from callhook.media import wav
from callhook.sip.message import Response, parse
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, served, wait_for_request
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


def exchange(
    server: tuple[str, int], data: bytes, timeout: float = 2.0, *, final: bool = False
) -> list[Response]:
    """Send one datagram from a fresh port; return the responses that come back (with
    ``final``: until a final response, within ``timeout``)."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(timeout)
        s.sendto(data, server)
        out: list[Response] = []
        try:
            while True:
                message = parse(s.recv(65535))
                assert isinstance(message, Response)
                out.append(message)
                if final and message.status < 200:
                    s.settimeout(max(0.01, deadline - time.monotonic()))
                else:
                    s.settimeout(0.3)
        except TimeoutError:
            return out


_probes = iter(range(1, 1_000_000))


def request(method: str, port: int, extra: str = "", via_port: int = 5999) -> bytes:
    """A fresh request (its own branch and Call-ID, so it is never a retransmission)."""
    n = next(_probes)
    return (
        f"{method} sip:ivr@127.0.0.1:{port} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{via_port};branch=z9hG4bK{method}{port}x{n};rport\r\n"
        "From: <sip:probe@127.0.0.1>;tag=p1\r\nTo: <sip:ivr@127.0.0.1>\r\n"
        f"Call-ID: {method}-{port}-{n}@probe\r\nCSeq: 1 {method}\r\nMax-Forwards: 70\r\n"
        f"{extra}Content-Length: 0\r\n\r\n"
    ).encode()


async def test_options_probe_and_garbage(tmp_path: Path) -> None:
    async with Server(tmp_path / "data") as server:
        (ok,) = await asyncio.to_thread(exchange, server.sip, request("OPTIONS", server.sip_port))
        assert ok.status == 200
        assert "INVITE" in (ok.headers.get("Allow") or "")
        # A request that is not well-formed gets 400 with the reason (Content-Length lies).
        bad = request("OPTIONS", server.sip_port).replace(
            b"Content-Length: 0", b"Content-Length: 99"
        )
        (answer,) = await asyncio.to_thread(exchange, server.sip, bad)
        assert answer.status == 400
        assert "Content-Length" in answer.reason
        # Noise gets nothing back, and the server is still there.
        assert (
            await asyncio.to_thread(exchange, server.sip, b"\x00\xff garbage \r\n\r\n", 0.5) == []
        )
        (ok,) = await asyncio.to_thread(exchange, server.sip, request("OPTIONS", server.sip_port))
        assert ok.status == 200
        (nope,) = await asyncio.to_thread(
            exchange, server.sip, request("SUBSCRIBE", server.sip_port)
        )
        assert nope.status == 405
    assert "not well-formed" in server.output


async def test_rtp_flood_is_cut_and_the_call_goes_on(tmp_path: Path, app: AppServer) -> None:
    """An RTP flood into a call's port from elsewhere: dropped, logged, the call goes on."""
    app.page("/start", [{"get_number": {"digit_count": 2, "next_page": {"url": "/number"}}}])
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)
    pcap = Stream(6.0).rfc4733("77", at=3.0).write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
    async with Server.for_app(tmp_path / "data", app) as server:
        sipp_task = asyncio.create_task(sipp.call(server.sip, tmp_path, *parts))
        # The call's media port exists once its first page is asked for; on a loaded
        # machine that can take seconds, so wait for it rather than for a fixed time.
        assert await wait_for_request(app, "/start", timeout=30.0), server.output
        ports = range(server.rtp_ports[0], server.rtp_ports[1], 2)

        def flood() -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                junk = b"\x80\x00" + bytes(170)
                for _ in range(500):
                    for port in ports[:4]:
                        s.sendto(junk, ("127.0.0.1", port))

        # Bursts until serve says it cut one (or the call is over), so a slow start of
        # the media session cannot make the flood miss it.
        while "which is not the call's peer" not in server.output and not sipp_task.done():
            await asyncio.to_thread(flood)
            await asyncio.sleep(0.1)
        run = await sipp_task
    assert run.returncode == 0, run.output + run.errors + server.output
    assert app.bodies("/number")[0]["action_result"]["result"] == {"entered_number": "77"}
    assert "which is not the call's peer" in server.output


async def test_shutdown_refuses_new_calls_and_lets_running_ones_finish(
    tmp_path: Path, app: AppServer
) -> None:
    app.page("/start", [{"sleep": {"seconds": 3}}, {"hang_up": {}}])
    app.page("/final", None)
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=30000)]
    server = Server.for_app(tmp_path / "data", app)
    async with server:
        running = asyncio.create_task(sipp.call(server.sip, tmp_path, *parts))
        assert await wait_for_request(app, "/start", timeout=30.0), server.output
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        (refused,) = await asyncio.to_thread(
            exchange, server.sip, request("INVITE", server.sip_port, via_port=5998)
        )
        assert refused.status in (100, 503)
        run = await running
    assert run.returncode == 0, run.output + run.errors + server.output
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"
    assert "shutting down" in server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_calls_above_max_calls_get_503(tmp_path: Path, app: AppServer, workers: int) -> None:
    """``[sip] max_calls`` is each worker's: with every worker full, the caller gets 503,
    from one process or from Kamailio in front of the workers (which would make a relayed
    503 a 500, RFC 3261 §16.7)."""
    app.page("/start", [{"sleep": {"seconds": 8}}, {"hang_up": {}}])
    app.page("/final", None)
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=30000)]
    async with served(tmp_path, app, workers, "[sip]\nmax_calls = 1\n") as server:
        running = [
            asyncio.create_task(sipp.call(server.sip, tmp_path, *parts)) for _ in range(workers)
        ]
        # One call up on each worker (the front passes a refused call on to the next).
        assert await wait_for_request(app, "/start", timeout=30.0, count=workers), server.output
        answers = await asyncio.to_thread(
            exchange, server.sip, request("INVITE", server.sip_port, via_port=5997)
        )
        runs = await asyncio.gather(*running)
    assert [a.status for a in answers][-1] == 503, answers
    # (Kamailio cannot pass a refused branch's reason on: it has made the reply a 500.)
    assert ("too many calls" if workers == 1 else "every worker is full") in answers[-1].reason
    for run in runs:
        assert run.returncode == 0, run.output + run.errors + server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_calls_get_503_while_the_media_runs_behind(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """[media] max_lag_ms: a threshold no tick can meet (a microsecond) makes a worker with
    a call up overloaded within a second; its next call is refused 503, said once in the
    log. Behind Kamailio the front tries the other worker, which has no call: not refused."""
    app.page("/start", [{"sleep": {"seconds": 4}}, {"hang_up": {}}])
    app.page("/final", None)
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=30000)]
    async with served(tmp_path, app, workers, "[media]\nmax_lag_ms = 0.001\n") as server:
        running = asyncio.create_task(sipp.call(server.sip, tmp_path, *parts))
        assert await wait_for_request(app, "/start", timeout=30.0), server.output
        await asyncio.sleep(1.5)  # over half of the last second's ticks were behind
        answers = await asyncio.to_thread(
            exchange, server.sip, request("INVITE", server.sip_port, via_port=5995)
        )
        run = await running
        await asyncio.sleep(1.5)  # no call: within a second it takes calls again
    statuses = [a.status for a in answers]
    assert run.returncode == 0, run.output + run.errors + server.output
    if workers == 1:
        assert statuses == [100, 503]
        assert "media overloaded" in answers[-1].reason
        assert server.output.count("new calls get 503 until it catches up") == 1
        assert "the media caught up: taking new calls again (1 refused)" in server.output
    else:
        assert 503 not in statuses and statuses, server.output


async def test_shutdown_deadline_aborts_a_recording_and_keeps_it(
    tmp_path: Path, app: AppServer
) -> None:
    """Past shutdown_grace the running action is aborted: the recording is kept, reported
    with reason aborted; callhook hangs up (BYE) and the final page says dropped."""
    app.page(
        "/start", [{"record": {"next_page": {"url": "/recorded"}, "seconds_max_duration": 60}}]
    )
    app.page("/recorded", [{"play": {"play_list": [{"text_to_say": "never"}]}}])
    app.page("/final", None)
    # The caller talks throughout (real recordings of spoken digits, back to back): the
    # recording cannot end on silence before the deadline.
    talking = Stream(20.0)
    clips = sorted((Path(__file__).parent.parent / "data" / "speech").glob("*jackson*.wav"))
    at = 0.5
    for clip in clips * 3:
        samples = wav.decode_to_8k(clip.read_bytes())
        talking.speech(samples, at=at)
        at += len(samples) / 8000 + 0.2
        if at > 18.0:
            break
    pcap = talking.write_pcap(tmp_path / "caller.pcap")
    parts = [
        sipp.invite("ivr", telephone_event=True),
        sipp.ANSWERED,
        sipp.PLAY.format(pcap=pcap),
        sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
    ]
    server = Server.for_app(tmp_path / "data", app, extra=("--shutdown-grace", "1"))
    async with server:
        running = asyncio.create_task(sipp.call(server.sip, tmp_path, *parts))
        assert await wait_for_request(app, "/start", timeout=30.0), server.output
        await asyncio.sleep(2.0)  # recording
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        run = await running
    assert run.returncode == 0, run.output + run.errors + server.output  # it got our BYE
    (recorded,) = app.bodies("/recorded")
    result = recorded["action_result"]["result"]
    assert result["reason"] == "aborted"
    assert result["contains_sound"] is True
    path = tmp_path / "data" / "media" / "default" / result["filename"]
    seconds = wav.read_info(path.read_bytes()).seconds
    assert seconds == pytest.approx(result["seconds_duration"], abs=0.15)
    assert seconds > 2.0
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "dropped"


async def test_no_common_codec_gets_488_and_gives_its_port_back(
    tmp_path: Path, app: AppServer
) -> None:
    """One RTP port only: a refused offer must not keep it, or the next call finds none."""
    app.page("/start", [{"sleep": {"seconds": 0.5}}, {"hang_up": {}}])
    app.page("/final", None)
    g729 = (
        "v=0\r\no=x 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        "m=audio 7000 RTP/AVP 18\r\na=rtpmap:18 G729/8000\r\n"
    )
    server = Server.for_app(tmp_path / "data", app)
    first = server.rtp_ports[0]
    server.args[server.args.index("--rtp-ports") + 1] = f"{first}-{first + 1}"
    async with server:
        invite = request(
            "INVITE",
            server.sip_port,
            extra="Contact: <sip:probe@127.0.0.1:5996>\r\nContent-Type: application/sdp\r\n",
            via_port=5996,
        ).replace(
            b"Content-Length: 0\r\n\r\n", f"Content-Length: {len(g729)}\r\n\r\n{g729}".encode()
        )
        answers = await asyncio.to_thread(exchange, server.sip, invite, 10.0, final=True)
        assert [a.status for a in answers] == [100, 488]
        parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=30000)]
        run = await sipp.call(server.sip, tmp_path, *parts)
    assert run.returncode == 0, run.output + run.errors + server.output
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"


async def test_a_caller_whose_headers_are_not_utf8_is_served_and_logged(
    tmp_path: Path, app: AppServer
) -> None:
    """A From user that is not UTF-8 (byte 0xff): the call runs, the application is asked
    for its page, and the call's lines are in the server log and in the call log file,
    escaped. A Call-ID beyond ASCII is not well-formed (§25.1): 400, and no call (it
    used to get 100 and 180, then nothing: writing it to the call log raised, and the
    call was lost without a word)."""
    app.page("/start", [{"hang_up": {}}])
    async with Server(tmp_path / "data", app_url=app.url("/start"), secret=app.secret) as server:
        invite = request("INVITE", server.sip_port, extra=_SDP_HEADERS).replace(
            b"Content-Length: 0\r\n\r\n", b"Content-Length: %d\r\n\r\n" % len(_SDP) + _SDP
        )
        odd = invite.replace(b"sip:probe@", b"sip:jos\xff@")
        answers = await asyncio.to_thread(exchange, server.sip, odd, 15.0, final=True)
        # The application ran: its hang_up before any answer declines the call (603).
        assert [a.status for a in answers][-1] == 603, [a.status for a in answers]
        assert await wait_for_request(app, "/start")
        bad_id = request("INVITE", server.sip_port).replace(b"@probe\r\n", b"\xff@probe\r\n")
        (refused,) = await asyncio.to_thread(exchange, server.sip, bad_id)
        assert refused.status == 400 and "bad Call-ID" in refused.reason
        for _ in range(50):
            if "call_end" in server.output:
                break
            await asyncio.sleep(0.1)
    assert "from 'sip:jos\\udcff@127.0.0.1'" in server.output
    (log,) = (tmp_path / "data").rglob("logs/*.log")
    text = log.read_bytes().decode("utf-8")  # the file is UTF-8
    assert "call_start" in text and "jos\\udcff" in text and "call_end" in text


_SDP = (
    b"v=0\r\no=probe 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    b"m=audio 40000 RTP/AVP 0\r\n"
)
_SDP_HEADERS = "Contact: <sip:probe@127.0.0.1:5999>\r\nContent-Type: application/sdp\r\n"
