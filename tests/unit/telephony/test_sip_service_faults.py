"""A fault inside callhook while it runs a call (a bug: here an exception injected into the
call runner): the call's task names it in the log at once and releases the caller, who
gets 500 instead of ringing for ever. The SIP service runs for real on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from callhook.app import build_services
from callhook.config.settings import AppConfig, Settings
from callhook.config.tables import SpeechSettings
from callhook.sip.message import Response, parse
from callhook.telephony.service import SipService


def _invite(port: int, local: int) -> bytes:
    sdp = (
        b"v=0\r\no=probe 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        b"m=audio 40000 RTP/AVP 0\r\n"
    )
    head = (
        f"INVITE sip:demo@127.0.0.1:{port} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{local};branch=z9hG4bK-fault-1\r\n"
        "Max-Forwards: 70\r\nFrom: <sip:probe@127.0.0.1>;tag=p1\r\n"
        "To: <sip:demo@127.0.0.1>\r\nCall-ID: fault-1@probe\r\nCSeq: 1 INVITE\r\n"
        f"Contact: <sip:probe@127.0.0.1:{local}>\r\nContent-Type: application/sdp\r\n"
        f"Content-Length: {len(sdp)}\r\n\r\n"
    )
    return head.encode() + sdp


@contextlib.asynccontextmanager
async def service(
    tmp_path: Path, run_call: Callable[..., Awaitable[Any]], rtp_ports: tuple[int, int]
) -> AsyncIterator[tuple[SipService, socket.socket]]:
    """A real SIP service on 127.0.0.1 whose calls run ``run_call``, and a UDP peer."""
    app = AppConfig(name="demo", first_page="http://127.0.0.1:9/start", secret="s")
    settings = Settings(
        data_dir=tmp_path,
        speech=SpeechSettings(recogniser="none", preload=False),
        apps={"demo": app},
    )
    services = build_services(settings)
    services.run_call = run_call  # type: ignore[method-assign,assignment]
    sip = SipService(services, "127.0.0.1", 0, rtp_ports=rtp_ports)
    await sip.start(register=False)
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.setblocking(False)
    try:
        yield sip, peer
    finally:
        peer.close()
        await sip.shutdown(grace=1.0)
        await services.close()


async def test_a_call_that_fails_inside_callhook_is_logged_and_released(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected fault")

    loop = asyncio.get_running_loop()
    async with service(tmp_path, broken, (47000, 47100)) as (sip, peer):
        with caplog.at_level(logging.ERROR, logger="callhook.sip"):
            await loop.sock_sendto(
                peer, _invite(sip.port, peer.getsockname()[1]), ("127.0.0.1", sip.port)
            )
            statuses: list[int] = []
            while not statuses or statuses[-1] < 200:
                data = await asyncio.wait_for(loop.sock_recv(peer, 65535), 5)
                message = parse(data)
                assert isinstance(message, Response)
                statuses.append(message.status)
        assert statuses[-1] == 500, statuses
        failed = [r for r in caplog.records if "failed inside callhook" in r.getMessage()]
        assert len(failed) == 1 and "injected fault" in failed[0].getMessage()
        assert failed[0].exc_info is not None  # the traceback is in the log
        assert sip.calls == {}


async def test_a_finished_call_leaves_nothing_behind(tmp_path: Path) -> None:
    """A long-running serve takes millions of calls: what the service keeps of each must
    go when it ends (a list of every call's summary once grew for ever), and go at once,
    by reference counting, not in a pass of the cyclic collector: its full passes stop
    every call's audio for as long as they take (over 100 ms with a few hundred calls'
    garbage), so the test runs the call with the collector off."""
    import gc

    from callhook.calls.runner import CallSummary
    from callhook.media.session import MediaSession
    from callhook.telephony.sipcall import SipCall

    ran: list[str] = []

    async def done(*args: Any, **kwargs: Any) -> CallSummary:
        ran.append("call")
        return CallSummary("0123", cause="normal", pages=["http://127.0.0.1:9/start"])

    loop = asyncio.get_running_loop()
    kinds = (SipCall, MediaSession, CallSummary)
    async with service(tmp_path, done, (47100, 47200)) as (sip, peer):
        gc.collect()
        # (Other tests' objects may live on in this process, held by a library's cache:
        # aiohttp's middleware cache keeps its handlers. This call's must not.)
        before = {id(o) for o in gc.get_objects() if isinstance(o, kinds)}
        gc.disable()
        try:
            await loop.sock_sendto(
                peer, _invite(sip.port, peer.getsockname()[1]), ("127.0.0.1", sip.port)
            )
            for _ in range(200):
                if ran and not sip.calls:
                    break
                await asyncio.sleep(0.01)
            assert ran and sip.calls == {}
            await asyncio.sleep(0.05)  # the call's task is done and let go of
            left = [o for o in gc.get_objects() if isinstance(o, kinds) and id(o) not in before]
            assert left == []
        finally:
            gc.enable()


async def test_a_call_that_cannot_be_sent_gives_its_rtp_port_back(tmp_path: Path) -> None:
    """The INVITE is refused as it is built (a transport callhook has not): the call is a
    RouteError (a 400 to whoever asked), and its RTP port is free again, or each such
    request would take one for good until no call could be made."""
    from callhook.dialplan.trunks import RouteError

    async def unused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no call runs")

    async with service(tmp_path, unused, (47200, 47210)) as (sip, _):
        assert sip.media is not None
        free = len(sip.media.ports)
        app = AppConfig(name="demo", first_page="http://127.0.0.1:9/start", secret="s")
        for _ in range(free + 1):  # (one more than the range holds)
            with pytest.raises(RouteError, match="cannot be called"):
                await sip.dialler.dial("sip:100@127.0.0.1;transport=sctp", app)
        assert len(sip.media.ports) == free
