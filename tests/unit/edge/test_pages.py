"""Page requests on kept-alive connections that the application's server closed.

A server closes a connection it finds idle whenever it likes (RFC 9112 §9.3.1):
uvicorn after 5 s. A request sent as that close crosses it on the wire was never
read, and is sent again on another connection; one that fails on a fresh
connection is not (the application may have acted on it). The close is made
to cross the request deterministically: the server closes while the client's
event loop is held, so the client cannot have seen the close when it sends.
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
async def test_a_request_crossing_the_servers_idle_close_is_sent_again(
    server: Server, how: str
) -> None:
    pages = HttpPages(timeout=5)
    server.close_idle = how
    try:
        assert await pages.fetch(server.url, "POST", b'{"n": 1}', "k") == b"[]"
        server.go.set()
        assert server.closed.wait(5)  # holds the loop: the client has not seen the close
        assert await pages.fetch(server.url, "POST", b'{"n": 2}', "k") == b"[]"
    finally:
        await pages.close()
    assert server.requests == [b'{"n": 1}', b'{"n": 2}']  # the closed one never read it
    assert server.connections == 2


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


async def test_a_kept_alive_connection_closed_after_reading_is_sent_again_once_on_a_fresh_one(
    server: Server,
) -> None:
    """The case a client cannot tell from the idle close (docs/behaviour.md): the request
    goes again, on a fresh connection, and a failure there is final."""
    pages = HttpPages(timeout=5)
    server.drop_after_first = True
    try:
        await pages.fetch(server.url, "POST", b'{"n": 1}', "k")
        with pytest.raises(PageError, match="ServerDisconnected"):
            await pages.fetch(server.url, "POST", b'{"n": 2}', "k")
    finally:
        await pages.close()
    assert server.requests == [b'{"n": 1}', b'{"n": 2}', b'{"n": 2}']
    assert server.connections == 2
