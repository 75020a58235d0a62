"""SIP over TCP and TLS: what an accepted connection must do before it is closed
(callhook/edge/connections.py), on real loopback sockets. The decisions themselves are
tested on a virtual clock (tests/unit/sip/test_sip_intake.py); these check that the
adapter asks them and acts on them. The first message's deadline is shortened here (the
real one is 30 s); the bounds checked are wide, the test is of which connections are
closed, not of timing."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Callable

import pytest
import trustme

from callhook.edge import connections
from callhook.edge.connections import Connections
from callhook.sip.framing import PONG
from callhook.sip.intake import Standing
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
    standing: Callable[[str], Standing] = lambda host: "served",
    tls: ssl.SSLContext | None = None,
    answer_oversized: Callable[[bytes, Target], bytes | None] | None = None,
) -> AsyncIterator[tuple[Connections, int, list[bytes]]]:
    got: list[bytes] = []

    def deliver(data: bytes, source: Target) -> None:
        got.append(data)

    found = Connections(
        deliver,
        idle_timeout=5.0,
        standing=standing,
        answer_oversized=answer_oversized,
        max_message=1000,
    )
    port = await found.listen("tls" if tls else "tcp", "127.0.0.1", 0, tls)
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
    async with listening(standing=lambda host: "ignored") as (_, port, got):
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


async def test_a_source_answered_403_is_closed_at_the_deadline_despite_its_messages(
    deadline: float,
) -> None:
    """unknown = "reject": its requests go on to be answered 403 (delivered here), but they
    do not keep its connection open."""
    async with listening(standing=lambda host: "answered") as (_, port, got):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def requests() -> None:
            while True:
                writer.write(OPTIONS)
                await asyncio.sleep(0.1)

        sending = asyncio.ensure_future(requests())
        try:
            took = await closed_after(reader, 3.0)
        finally:
            sending.cancel()
            writer.close()
        assert took is not None and took < 3.0
        assert OPTIONS in got


async def test_a_413_is_asked_of_the_service_with_the_source_and_none_is_sent_for_none(
    deadline: float,
) -> None:
    asked: list[Target] = []

    def oversized(head: bytes, source: Target) -> bytes | None:
        asked.append(source)
        return None  # (the guard drops that source)

    big = OPTIONS.replace(b"Content-Length: 0", b"Content-Length: 5000")
    async with listening(answer_oversized=oversized) as (_, port, _got):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(big)
        try:
            heard = await asyncio.wait_for(reader.read(), 3.0)
        finally:
            writer.close()
        assert heard == b""
        assert [a.host for a in asked] == ["127.0.0.1"]


def _tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def test_tls_is_taken_after_the_checks_and_pongs_and_frames_as_tcp(
    deadline: float,
) -> None:
    server, client = _tls()
    async with listening(tls=server) as (found, port, got):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
        )
        try:
            writer.write(b"\r\n\r\n")
            assert await asyncio.wait_for(reader.readexactly(len(PONG)), 3.0) == PONG
            writer.write(OPTIONS)
            for _ in range(100):
                if got:
                    break
                await asyncio.sleep(0.02)
            assert got == [OPTIONS]
            (stream,) = found.streams.values()
            found.send(b"SIP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n", stream.key)  # type: ignore[arg-type]
            reply = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3.0)
            assert reply.startswith(b"SIP/2.0 200 OK")
            assert await closed_after(reader, deadline * 3) is None  # (its idle limit now)
        finally:
            writer.close()


async def test_a_tls_source_the_guard_would_not_answer_gets_no_handshake(
    deadline: float,
) -> None:
    """Closed before its handshake: not even the certificate is shown."""
    server, client = _tls()
    async with listening(standing=lambda host: "ignored", tls=server) as (_, port, got):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
            )
            writer.close()
        assert got == []


async def test_a_tls_handshake_counts_against_the_first_messages_deadline(
    deadline: float,
) -> None:
    """A client that opens the connection and never starts its handshake is closed at the
    first message's deadline, as one that says nothing over TCP."""
    server, _ = _tls()
    async with listening(tls=server) as (found, port, _got):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await asyncio.sleep(0.1)
            assert len(found.streams) == 1  # (counted while in its handshake)
            took = await closed_after(reader, 3.0)
        finally:
            writer.close()
        assert took is not None and took < 3.0
        await asyncio.sleep(0.05)
        assert found.streams == {}


async def test_a_fault_judging_one_tls_connection_does_not_stop_the_listener(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug met taking one connection closes that one, logged with its traceback; the
    listener accepts the next."""
    server, client = _tls()
    calls: list[str] = []

    def standing(host: str) -> Standing:
        calls.append(host)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return "served"

    async with listening(standing=standing, tls=server) as (_, port, _got):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
            )
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"),
            5.0,
        )
        try:
            writer.write(b"\r\n\r\n")
            assert await asyncio.wait_for(reader.readexactly(len(PONG)), 3.0) == PONG
        finally:
            writer.close()
    assert "could not be taken" in caplog.text and "RuntimeError: a bug" in caplog.text
