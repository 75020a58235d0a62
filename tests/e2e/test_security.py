"""Attacking a real ``serve`` over SIP on loopback: sources outside ``[security] allow``
learn nothing, a flooding source is banned (visible and liftable through the API), and
allowed callers are answered all along. Attackers bind 127.0.0.2/127.0.0.3 (loopback
is a /8 on Linux); ``allow`` names only what each test allows."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e.harness import WORKERS, Server, served


def request(method: str, user: str, port: int, n: int, local: str) -> bytes:
    return (
        f"{method} sip:{user}@127.0.0.1:{port} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP {local};branch=z9hG4bK-sec-{n};rport\r\n"
        f"From: <sip:scanner@{local}>;tag=s{n}\r\nTo: <sip:{user}@127.0.0.1>\r\n"
        f"Call-ID: sec-{n}@{local}\r\nCSeq: 1 {method}\r\nMax-Forwards: 70\r\n"
        f"Contact: <sip:scanner@{local}>\r\nContent-Length: 0\r\n\r\n"
    ).encode()


def udp_from(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 0))
    sock.settimeout(1.0)
    return sock


def answer(sock: socket.socket, data: bytes, server: Server) -> bytes | None:
    sock.sendto(data, server.sip)
    try:
        return sock.recv(65536)
    except TimeoutError:
        return None


def config(tmp_path: Path, text: str) -> tuple[str, ...]:
    path = tmp_path / "callhook.toml"
    path.write_text(text)
    return ("--config", str(path))


async def test_an_unallowed_source_gets_no_answer_and_learns_no_users(
    tmp_path: Path, app: AppServer
) -> None:
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    extra = config(tmp_path, '[security]\nallow = ["127.0.0.1/32"]\n')
    async with Server.for_app(tmp_path / "data", app, extra=extra) as server:
        with udp_from("127.0.0.2") as outsider, udp_from("127.0.0.1") as insider:
            port = server.sip_port
            local = f"127.0.0.2:{outsider.getsockname()[1]}"
            for n, (method, user) in enumerate(
                [
                    ("OPTIONS", "x"),
                    ("INVITE", "demo"),
                    ("INVITE", "nosuchuser"),
                    ("REGISTER", "100"),
                ]
            ):
                assert answer(outsider, request(method, user, port, n, local), server) is None
            inside = f"127.0.0.1:{insider.getsockname()[1]}"
            reply = answer(insider, request("OPTIONS", "x", port, 9, inside), server)
            assert reply is not None and reply.startswith(b"SIP/2.0 200")
        await asyncio.sleep(0.2)
    assert app.bodies("/start") == []  # no application ran for the outsider
    assert server.output.count("SIP from 127.0.0.2: not in [security] allow (drop)") == 1


async def test_reject_answers_every_user_the_same(tmp_path: Path, app: AppServer) -> None:
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    extra = config(tmp_path, '[security]\nallow = ["127.0.0.1/32"]\nunknown = "reject"\n')
    async with Server.for_app(tmp_path / "data", app, extra=extra) as server:
        with udp_from("127.0.0.2") as outsider:
            local = f"127.0.0.2:{outsider.getsockname()[1]}"
            replies = [
                answer(outsider, request("INVITE", user, server.sip_port, n, local), server)
                for n, user in enumerate(["demo", "nosuchuser", "support", "100"])
            ]
    status_lines = {r.split(b"\r\n", 1)[0] for r in replies if r is not None}
    assert status_lines == {b"SIP/2.0 403 Forbidden"}, replies
    assert len([r for r in replies if r is not None]) == 4
    assert app.bodies("/start") == []


async def test_reject_answers_at_the_source_port_when_the_via_asks_rport(
    tmp_path: Path, app: AppServer
) -> None:
    """RFC 3581: a NATed (or scanning) source whose Via names another port gets its 403
    at the port it sent from, like every other response."""
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    extra = config(tmp_path, '[security]\nallow = ["127.0.0.1/32"]\nunknown = "reject"\n')
    async with Server.for_app(tmp_path / "data", app, extra=extra) as server:
        with udp_from("127.0.0.2") as outsider:
            port = outsider.getsockname()[1]
            reply = answer(
                outsider, request("INVITE", "demo", server.sip_port, 1, "127.0.0.2:9"), server
            )
    assert reply is not None and reply.startswith(b"SIP/2.0 403 Forbidden"), reply
    assert f"received=127.0.0.2;rport={port}".encode() in reply or (
        f"rport={port};received=127.0.0.2".encode() in reply
    ), reply


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_flooding_source_is_banned_and_the_ban_can_be_lifted(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """A source over ``[security] rate`` is banned: by serve's guard in one process, by
    Kamailio in front of the workers. Either way the operator sees the ban in
    ``/api/bans`` and ``callhook bans``, lifts it with ``DELETE``, and the source is
    answered again; everyone else is answered all along."""
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    data = tmp_path / "data"
    text = '[security]\nallow = ["127.0.0.1/32", "127.0.0.3/32"]\nrate = 20\n'
    async with served(tmp_path, app, workers, text) as server:
        with udp_from("127.0.0.3") as flooder, udp_from("127.0.0.1") as caller:
            local = f"127.0.0.3:{flooder.getsockname()[1]}"
            for n in range(300):
                flooder.sendto(request("OPTIONS", "x", server.sip_port, n, local), server.sip)
            await asyncio.sleep(0.3)
            inside = f"127.0.0.1:{caller.getsockname()[1]}"
            reply = answer(caller, request("OPTIONS", "x", server.sip_port, 999, inside), server)
            assert reply is not None and reply.startswith(b"SIP/2.0 200")  # others answered
            status, bans = await server.api("GET", "/api/bans")
            assert status == 200
            (ban,) = bans
            assert ban["address"] == "127.0.0.3" and 590 <= ban["seconds_left"] <= 600
            assert "more than 20 SIP messages a second" in ban["reason"]
            if workers > 1:
                assert ban["worker"] == "front", ban  # where it lives: Kamailio
            table = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "callhook", "bans", "--http",
                f"127.0.0.1:{server.http_port}", "--data-dir", str(data),
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await table.communicate()
            assert table.returncode == 0 and "127.0.0.3" in out.decode()
            flooder.settimeout(0.5)
            while True:  # drain what was answered before the ban
                try:
                    flooder.recv(65536)
                except TimeoutError:
                    break
            assert (
                answer(flooder, request("OPTIONS", "x", server.sip_port, 1000, local), server)
                is None
            )
            if workers == 1:
                # Over TCP too: a banned source's connection is closed before it says
                # anything.
                with socket.create_connection(
                    server.sip, timeout=5, source_address=("127.0.0.3", 0)
                ) as tcp:
                    try:
                        closed = tcp.recv(1) == b""
                    except ConnectionResetError:
                        closed = True
                    assert closed
            assert (await server.api("DELETE", "/api/bans/127.0.0.3"))[0] == 200
            assert (await server.api("DELETE", "/api/bans/127.0.0.3"))[0] == 404
            assert (await server.api("GET", "/api/bans"))[1] == []
            reply = answer(flooder, request("OPTIONS", "x", server.sip_port, 1001, local), server)
            assert reply is not None and reply.startswith(b"SIP/2.0 200")
    if workers == 1:
        assert server.output.count("SIP from 127.0.0.3: banned for 600 s") == 1
    else:
        assert "banned 127.0.0.3 for 600 s" in server.output


async def test_messages_over_max_message_bytes_are_refused(tmp_path: Path, app: AppServer) -> None:
    """[security] max_message_bytes (8192): a bigger datagram is dropped (logged); over
    TCP a request announcing a bigger body gets 413 and the connection is closed."""
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    async with Server.for_app(tmp_path / "data", app) as server:
        with udp_from("127.0.0.1") as sock:
            local = f"127.0.0.1:{sock.getsockname()[1]}"
            big = request("OPTIONS", "x", server.sip_port, 1, local).replace(
                b"Max-Forwards: 70\r\n", b"Max-Forwards: 70\r\nX-Pad: " + b"p" * 9000 + b"\r\n"
            )
            assert answer(sock, big, server) is None
            small = request("OPTIONS", "x", server.sip_port, 2, local)
            reply = answer(sock, small, server)
            assert reply is not None and reply.startswith(b"SIP/2.0 200")
        reader, writer = await asyncio.open_connection(*server.sip)
        head = request("INVITE", "demo", server.sip_port, 3, "127.0.0.1:9").replace(
            b"Content-Length: 0", b"Content-Length: 20000"
        )
        writer.write(head)
        reply = await asyncio.wait_for(reader.read(), 5)  # the 413, then the close
        writer.close()
        await asyncio.sleep(0.2)
    assert reply.startswith(b"SIP/2.0 413 "), reply
    assert b"CSeq: 1 INVITE" in reply
    assert "bytes (max 8192) dropped" in server.output
    assert app.bodies("/start") == []
