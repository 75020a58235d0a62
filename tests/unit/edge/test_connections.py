"""SIP over TCP: what an accepted connection must do before it is closed
(callhook/edge/connections.py), on real loopback sockets. The first message's deadline is
shortened here (the real one is 30 s); the bounds checked are wide, the test is of which
connections are closed, not of timing."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest

from callhook.edge import connections
from callhook.edge.connections import Connections
from callhook.sip.framing import PONG
from callhook.sip.transport import Target

OPTIONS = (
    b"OPTIONS sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:5;branch=z9hG4bK1\r\n"
    b"From: <sip:p@127.0.0.1>;tag=1\r\nTo: <sip:a@127.0.0.1>\r\nCall-ID: c1\r\n"
    b"CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
)


@pytest.fixture
def deadline(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(connections, "FIRST_MESSAGE_TIMEOUT", 0.5)
    return 0.5


@contextlib.asynccontextmanager
async def listening(
    welcome: Callable[[str], bool] = lambda host: True,
) -> AsyncIterator[tuple[Connections, int, list[bytes]]]:
    got: list[bytes] = []

    def deliver(data: bytes, source: Target) -> None:
        got.append(data)

    found = Connections(deliver, idle_timeout=5.0, welcome=welcome)
    port = await found.listen("tcp", "127.0.0.1", 0)
    try:
        yield found, port, got
    finally:
        await found.close()


async def closed_after(reader: asyncio.StreamReader, seconds: float) -> float | None:
    """How long until the server closed the connection (pongs read meanwhile); None: not
    within ``seconds``."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(100):
                pass
    except TimeoutError:
        return None
    return time.monotonic() - started


async def ping(writer: asyncio.StreamWriter) -> None:
    while True:
        writer.write(b"\r\n\r\n")
        await asyncio.sleep(0.1)


async def test_pings_do_not_extend_the_first_messages_deadline(deadline: float) -> None:
    """A peer that only pings (every 0.1 s here, every 29 s against the real 30 s) would
    otherwise hold one of the connections' slots for ever."""
    async with listening() as (_, port, got):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        pinging = asyncio.ensure_future(ping(writer))
        try:
            assert await reader.readexactly(len(PONG)) == PONG  # (a ping is answered)
            took = await closed_after(reader, 3.0)
        finally:
            pinging.cancel()
            writer.close()
        assert took is not None and took < 3.0
        assert got == []


async def test_after_its_first_message_a_connection_keeps_the_idle_limit(
    deadline: float,
) -> None:
    async with listening() as (_, port, got):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(OPTIONS)
        try:
            assert await closed_after(reader, deadline * 3) is None  # still open
        finally:
            writer.close()
        assert got == [OPTIONS]


async def test_a_source_the_guard_would_not_answer_is_closed_with_no_pong(
    deadline: float,
) -> None:
    async with listening(welcome=lambda host: False) as (_, port, got):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\r\n\r\n" + OPTIONS)
        try:
            heard = await asyncio.wait_for(reader.read(), 3.0)
        except ConnectionResetError:  # (closed before it read what we sent: a reset)
            heard = b""
        finally:
            writer.close()
        assert heard == b""  # nothing, then closed
        assert got == []
