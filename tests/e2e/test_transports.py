"""SIP over TCP, and big messages over UDP, on real calls: SIPp calling ``callhook serve``.

``serve`` listens on TCP beside UDP (on the same port by default, RFC 3261 §18); with
workers, Kamailio does, and hands the calls to the workers. A SIPp caller on TCP runs
the same scenarios as on UDP: its INVITE, ACK, INFO digits and BYE, and callhook's
responses and its own BYE, all go over the one connection or ones to the caller's
address. The TCP calls and the big INVITE run in one process and with workers behind
Kamailio (which passes the big INVITE on, grown by its own headers, over UDP).
"""

from __future__ import annotations

import asyncio
import re
import ssl
from pathlib import Path

import pytest
import trustme

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, free_tcp_port, served
from tests.e2e.rtpstream import Stream
from tests.e2e.test_sip_calls import get_number, write_prompt

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_call_over_tcp_takes_rfc4733_and_info_digits(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    write_prompt(tmp_path / "data", seconds=0.5)
    app.page("/start", [get_number(digit_count=2)])
    app.page("/number", [get_number(digit_count=0, end_digit="#", next_page={"url": "/more"})])
    app.page("/more", [{"hang_up": {}}])
    app.page("/final", None)
    pcap = Stream(8.0).rfc4733("12", at=1.5).write_pcap(tmp_path / "caller.pcap")
    infos = [sipp.INFO.format(cseq=2 + i, digit=d) for i, d in enumerate("34#")]
    parts = [
        sipp.invite("ivr"),
        sipp.ANSWERED,
        sipp.PLAY.format(pcap=pcap),
        sipp.PAUSE.format(ms=3500),
        *infos,
        sipp.BYE_FROM_SERVER.format(timeout_ms=20000),  # callhook's BYE, over TCP
    ]
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, *parts, transport="tcp")
    assert run.returncode == 0, run.output + run.errors + server.output
    (first,) = app.bodies("/number")
    assert first["action_result"]["result"] == {"entered_number": "12"}
    (second,) = app.bodies("/more")
    assert second["action_result"]["result"] == {"entered_number": "34"}
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"


@pytest.mark.parametrize("workers", WORKERS)
async def test_the_caller_hangs_up_over_tcp(tmp_path: Path, app: AppServer, workers: int) -> None:
    app.page("/start", [{"sleep": {"seconds": 30}}])
    app.page("/final", None)
    parts = [
        sipp.invite("ivr"),
        sipp.ANSWERED,
        sipp.PAUSE.format(ms=500),
        sipp.BYE_FROM_CALLER.format(cseq=2),
    ]
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, *parts, transport="tcp")
    assert run.returncode == 0, run.output + run.errors + server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_3_kb_invite_over_udp_is_answered(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Twice the size of a safe datagram (§18.1.1 is about sending; receiving one must work)."""
    app.page("/start", [{"sleep": {"seconds": 0.2}}, {"hang_up": {}}])
    app.page("/final", None)
    padding = "".join(f"X-Padding-{i}: {'p' * 90}\n" for i in range(30))
    invite = sipp.invite("ivr").replace("Max-Forwards: 70\n", "Max-Forwards: 70\n" + padding)
    assert len(invite.encode()) > 3000
    bye = sipp.BYE_FROM_SERVER.format(timeout_ms=15000)
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, invite, sipp.ANSWERED, bye)
    assert run.returncode == 0, run.output + run.errors + server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"


def _tls_config(tmp_path: Path, port: int) -> tuple[Path, ssl.SSLContext]:
    """A callhook config with a TLS listener on ``port`` (a certificate for 127.0.0.1 from a
    test CA, made with trustme), and a client context that trusts only that CA."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    chain, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_pem.write_to_path(str(key))
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    config = tmp_path / "callhook.toml"
    config.write_text(f'[sip]\ntls_port = {port}\ntls_certificate = "{chain}"\ntls_key = "{key}"\n')
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return config, client


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> bytes:
    writer.write(request)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
    return head + (await reader.readexactly(length) if length else b"")


def _options(port: int, transport: str, cseq: int) -> bytes:
    return (
        f"OPTIONS sip:ivr@127.0.0.1:{port} SIP/2.0\r\n"
        f"Via: SIP/2.0/{transport} 127.0.0.1:5999;branch=z9hG4bK-opt-{cseq}\r\n"
        "From: <sip:probe@127.0.0.1>;tag=p1\r\nTo: <sip:ivr@127.0.0.1>\r\n"
        f"Call-ID: options-1@127.0.0.1\r\nCSeq: {cseq} OPTIONS\r\nMax-Forwards: 70\r\n"
        "Content-Length: 0\r\n\r\n"
    ).encode()


async def test_tls_listener_answers_on_the_connection_and_pongs(
    tmp_path: Path, app: AppServer
) -> None:
    """A TLS client that checks callhook's certificate against the test CA: two requests
    and a keep-alive ping on one connection, each answered on it (§18.2.2, RFC 5626 §4.4.1)."""
    port = free_tcp_port()
    config, client = _tls_config(tmp_path, port)
    app.page("/start", None)
    async with Server.for_app(tmp_path / "data", app, extra=("--config", str(config))) as server:
        assert f"SIP: tls 127.0.0.1:{port}" in server.output
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
        )
        try:
            for cseq in (1, 2):
                reply = await _exchange(reader, writer, _options(port, "TLS", cseq))
                assert reply.startswith(b"SIP/2.0 200"), reply
                assert f"CSeq: {cseq} OPTIONS".encode() in reply
            writer.write(b"\r\n\r\n")
            assert await asyncio.wait_for(reader.readexactly(2), 5) == b"\r\n"
        finally:
            writer.close()


async def test_a_tls_client_that_does_not_trust_the_certificate_gets_no_sip(
    tmp_path: Path, app: AppServer
) -> None:
    port = free_tcp_port()
    config, _ = _tls_config(tmp_path, port)
    app.page("/start", None)
    async with Server.for_app(tmp_path / "data", app, extra=("--config", str(config))):
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection(
                "127.0.0.1", port, ssl=ssl.create_default_context(), server_hostname="127.0.0.1"
            )


async def test_a_stream_without_content_length_is_closed(tmp_path: Path, app: AppServer) -> None:
    """§18.3: on a stream Content-Length is mandatory; without it nothing more can be framed."""
    app.page("/start", None)
    async with Server.for_app(tmp_path / "data", app) as server:
        reader, writer = await asyncio.open_connection(*server.sip)
        request = _options(server.sip_port, "TCP", 1).replace(b"Content-Length: 0\r\n", b"")
        writer.write(request)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
        writer.close()
        await logged(server, "without Content-Length")


async def test_one_address_cannot_take_every_connection(tmp_path: Path, app: AppServer) -> None:
    """A peer that opens connection after connection gets MAX_PER_ADDRESS of them; the next
    is closed at once (logged), and those it has still work."""
    from callhook.edge.connections import MAX_PER_ADDRESS

    app.page("/start", None)
    async with Server.for_app(tmp_path / "data", app) as server:
        held = [await asyncio.open_connection(*server.sip) for _ in range(MAX_PER_ADDRESS)]
        try:
            reader, writer = await asyncio.open_connection(*server.sip)
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed at once
            writer.close()
            first_reader, first_writer = held[0]
            reply = await _exchange(first_reader, first_writer, _options(server.sip_port, "TCP", 1))
            assert reply.startswith(b"SIP/2.0 200")
        finally:
            for _, w in held:
                w.close()
        await logged(server, f"{MAX_PER_ADDRESS} connections from that address already")


async def test_a_source_not_allowed_gets_no_answer_over_tcp_either(
    tmp_path: Path, app: AppServer
) -> None:
    """With [security] unknown = "drop" (the default), a source outside allow hears nothing
    over TCP, as over UDP: its connection is closed at once, with no pong to its ping and
    no answer to its request, so a scanner cannot tell a SIP server is there."""
    app.page("/start", None)
    config = tmp_path / "callhook.toml"
    config.write_text('[security]\nallow = ["10.0.0.0/8"]\n')  # (not this test's 127.0.0.1)
    async with Server.for_app(tmp_path / "data", app, extra=("--config", str(config))) as server:
        reader, writer = await asyncio.open_connection(*server.sip)
        writer.write(b"\r\n\r\n" + _options(server.sip_port, "TCP", 1))
        try:
            heard = await asyncio.wait_for(reader.read(), 5)
        except ConnectionResetError:  # (closed before it read what we sent: a reset)
            heard = b""
        finally:
            writer.close()
        assert heard == b""  # nothing, then closed
        await logged(server, "not in [security] allow (drop)")


async def test_a_source_not_allowed_gets_no_tls_handshake(tmp_path: Path, app: AppServer) -> None:
    """Over TLS the source is judged before the handshake: a scanner outside allow is
    not shown the certificate (nor anything else)."""
    app.page("/start", None)
    port = free_tcp_port()
    config, client = _tls_config(tmp_path, port)
    config.write_text(config.read_text() + '[security]\nallow = ["10.0.0.0/8"]\n')
    async with Server.for_app(tmp_path / "data", app, extra=("--config", str(config))) as server:
        await logged(server, f"SIP: tls 127.0.0.1:{port}")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
            )
            writer.close()
        await logged(server, "not in [security] allow (drop)")
        assert "handshake" not in server.output.lower(), server.output


async def logged(server: Server, text: str, timeout: float = 10.0) -> None:
    """Until ``server``'s output has ``text`` (fails after ``timeout`` s)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while text not in server.output:
        assert asyncio.get_running_loop().time() < deadline, server.output
        await asyncio.sleep(0.05)


async def test_a_crlf_pinger_is_closed_at_the_first_messages_deadline(
    tmp_path: Path, app: AppServer
) -> None:
    """A peer that only pings (RFC 5626 §4.4.1) is answered, but its pings do not extend the
    30 s an accepted connection has from its opening for its first message: pinging every
    29 s it would otherwise hold one of the connections' slots for ever."""
    from callhook.sip.intake import FIRST_MESSAGE_TIMEOUT

    app.page("/start", None)
    async with Server.for_app(tmp_path / "data", app) as server:
        reader, writer = await asyncio.open_connection(*server.sip)
        opened = asyncio.get_running_loop().time()

        async def ping() -> None:
            while True:
                writer.write(b"\r\n\r\n")
                await asyncio.sleep(2.0)

        pinging = asyncio.ensure_future(ping())
        heard = b""
        try:
            async with asyncio.timeout(FIRST_MESSAGE_TIMEOUT + 10):
                while chunk := await reader.read(100):
                    heard += chunk
        except ConnectionResetError:
            pass
        finally:
            pinging.cancel()
            writer.close()
        took = asyncio.get_running_loop().time() - opened
        assert heard.startswith(b"\r\n\r\n")  # (pongs: it was answered all along)
        assert FIRST_MESSAGE_TIMEOUT - 1 <= took < FIRST_MESSAGE_TIMEOUT + 5, took


async def test_a_source_answered_403_learns_nothing_more_from_a_413(
    tmp_path: Path, app: AppServer
) -> None:
    """With [security] unknown = "reject", a source outside allow gets 403 with no Server
    header; a request of its that announces too big a body gets its 413 with none either."""
    app.page("/start", None)
    config = tmp_path / "callhook.toml"
    config.write_text('[security]\nallow = ["10.0.0.0/8"]\nunknown = "reject"\n')
    async with Server.for_app(tmp_path / "data", app, extra=("--config", str(config))) as server:
        reader, writer = await asyncio.open_connection(*server.sip)
        try:
            reply = await _exchange(reader, writer, _options(server.sip_port, "TCP", 1))
            assert reply.startswith(b"SIP/2.0 403"), reply
            assert b"\r\nServer:" not in reply
            big = _options(server.sip_port, "TCP", 2).replace(
                b"Content-Length: 0", b"Content-Length: 20000"
            )
            writer.write(big)
            answer = await asyncio.wait_for(reader.read(), 5)
        finally:
            writer.close()
        assert answer.startswith(b"SIP/2.0 413"), answer
        assert b"\r\nServer:" not in answer
