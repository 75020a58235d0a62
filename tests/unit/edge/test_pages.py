"""Page requests and the connections they go on (callhook/edge/pages.py).

A page request is not idempotent: once written, it is not sent again, even where the
server had closed the kept-alive connection as idle just as the request crossed that
close on the wire (RFC 9112 §9.3.1; a client cannot tell that from a server that read
the request and failed). The close is made to cross the request deterministically: the
server closes while the client's event loop is held, so the client cannot have seen the
close when it sends. What keeps that race rare is checked too: a connection idle longer
than callhook keeps one is not reused. A request whose body could not be written is
sent again.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from callhook.edge.pages import HttpPages
from callhook.ports import PageError


class Server:
    """A blocking HTTP/1.1 server on loopback: what it does with each request is scripted."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/page"
        self.connections = 0
        self.requests: list[bytes] = []
        #: After answering the first request, close the connection when told (how: "fin"
        #: or "rst"); None keeps it open.
        self.close_idle: str | None = None
        #: Read every request after the first and close without answering.
        self.drop_after_first = False
        self.go = threading.Event()
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += conn.recv(4096)
        return body

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            while (body := self._read(conn)) is not None:
                self.requests.append(body)
                if self.drop_after_first and len(self.requests) > 1:
                    return  # read, and closed without an answer
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]")
                if self.close_idle is not None:
                    self.go.wait(10)
                    if self.close_idle == "rst":
                        linger = struct.pack("ii", 1, 0)
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    self.close_idle = None
                    self.closed.set()
                    return


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.go.set()
    s.listener.close()


@pytest.mark.parametrize("how", ["fin", "rst"])
async def test_a_request_crossing_the_servers_idle_close_is_not_sent_again(
    server: Server, how: str
) -> None:
    pages = HttpPages(timeout=5)
    server.close_idle = how
    try:
        assert await pages.fetch(server.url, "POST", b'{"n": 1}', "k") == b"[]"
        server.go.set()
        assert server.closed.wait(5)  # holds the loop: the client has not seen the close
        with pytest.raises(PageError, match="unreachable"):
            await pages.fetch(server.url, "POST", b'{"n": 2}', "k")
    finally:
        await pages.close()
    assert server.requests == [b'{"n": 1}'] and server.connections == 1


async def test_a_connection_idle_longer_than_callhook_keeps_one_is_not_reused(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import callhook.edge.pages as pages_module

    monkeypatch.setattr(pages_module, "KEEPALIVE_SECONDS", 0.2)
    pages = HttpPages(timeout=5)
    try:
        await pages.fetch(server.url, "POST", b'{"n": 1}', "k")
        await pages.fetch(server.url, "POST", b'{"n": 2}', "k")
        assert server.connections == 1  # (kept alive: reused at once)
        await asyncio.sleep(0.5)
        await pages.fetch(server.url, "POST", b'{"n": 3}', "k")
    finally:
        await pages.close()
    assert server.connections == 2


async def test_a_request_whose_body_could_not_be_written_is_sent_again(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp's error for a body it could not write (the connection closed after it was
    picked): the request is sent again; any other error of the connection is final."""
    import aiohttp

    pages = HttpPages(timeout=5)
    real = pages._once
    failures = [
        aiohttp.ClientOSError(None, f"Can not write request body for {server.url}"),
        aiohttp.ClientOSError(104, "Connection reset by peer"),
    ]

    async def once(*args: object, **kwargs: object) -> tuple[int, bytes]:
        if failures:
            raise failures.pop(0)
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pages, "_once", once)
    try:
        with pytest.raises(PageError, match="Connection reset by peer"):
            await pages.fetch(server.url, "POST", b'{"n": 1}', "k")  # (unwritten, then reset)
        assert await pages.fetch(server.url, "POST", b'{"n": 2}', "k") == b"[]"
    finally:
        await pages.close()
    assert server.requests == [b'{"n": 2}']


async def test_a_fresh_connection_closed_without_an_answer_is_not_sent_again(
    server: Server,
) -> None:
    pages = HttpPages(timeout=5)
    server.drop_after_first = True
    try:
        await pages.fetch(server.url, "POST", b'{"n": 1}', "k")
        await pages.close()  # the next request opens a fresh connection
        with pytest.raises(PageError, match="ServerDisconnected"):
            await pages.fetch(server.url, "POST", b'{"n": 2}', "k")
    finally:
        await pages.close()
    assert server.requests == [b'{"n": 1}', b'{"n": 2}']


async def test_a_kept_alive_connection_closed_after_reading_is_not_sent_again(
    server: Server,
) -> None:
    """What the application's server read may have been acted on: never sent twice."""
    pages = HttpPages(timeout=5)
    server.drop_after_first = True
    try:
        await pages.fetch(server.url, "POST", b'{"n": 1}', "k")
        with pytest.raises(PageError, match="ServerDisconnected"):
            await pages.fetch(server.url, "POST", b'{"n": 2}', "k")
    finally:
        await pages.close()
    assert server.requests == [b'{"n": 1}', b'{"n": 2}']
    assert server.connections == 1


async def test_no_cookie_a_page_sets_goes_with_a_later_request() -> None:
    """One session serves every call of every application: a cookie kept from one page
    would reach other calls' (and applications') requests."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    seen: list[str | None] = []

    async def page(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.json_response([])
        response.set_cookie("session", "the-first-caller")
        return response

    app = web.Application()
    app.router.add_post("/page", page)
    pages = HttpPages(timeout=5)
    async with TestServer(app, host="127.0.0.1") as site:
        try:
            # (By name: aiohttp's jar keeps no cookie of an IP address's.)
            url = f"http://localhost:{site.port}/page"
            for _ in range(2):
                assert await pages.fetch(url, "POST", b"{}", "k") == b"[]"
        finally:
            await pages.close()
    assert seen == [None, None]
