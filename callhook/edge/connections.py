"""SIP over TCP and TLS: the listeners and connections of ``callhook serve`` (RFC 3261 §18).

The sans-IO agent names where each message goes with a
:class:`~callhook.sip.transport.Target`; for ``tcp`` and ``tls`` targets this
module finds the connection. There is one connection per far end: one a peer
opened to us is filed under its address (its host and source port), so a
response to a request that came on it goes back on it (§18.2.2); one we open
is filed under the target we opened it to, and reused by every later message
to that target (§18.1.1). Whatever arrives on a connection is cut into
messages by :class:`~callhook.sip.framing.StreamFramer` and handed to
``deliver`` with the connection's far end as the source.

Keep-alives (RFC 5626 §4.4.1): a double-CRLF ping is answered with a CRLF
pong. A stream that cannot be framed (no Content-Length, a header or message
over the limits) is logged with the cause and closed: there is no way to
find where the next message would start. Connections idle for
``idle_timeout`` seconds are closed (a peer that wants to keep one open pings).
An accepted connection has :data:`FIRST_MESSAGE_TIMEOUT` seconds from its opening for
its first whole message, which pings do not extend (else a peer pinging every 29 s
would hold a slot for ever), and one from a source ``[security]`` would not answer
(banned, or not allowed while ``unknown = "drop"``) is closed at once: it gets no pong
and no 413, nothing that says a SIP server is there.

TLS uses Python's :mod:`ssl`: the server side presents ``tls_certificate``
(with ``tls_key``); the client side verifies the peer against the system CAs
or ``tls_ca`` and sends the target's host name as SNI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Callable
from typing import cast

from callhook.config.tls import client_context
from callhook.sip.framing import PONG, FramingError, Ping, StreamFramer
from callhook.sip.transport import Target, Transport

logger = logging.getLogger("callhook.sip")

#: Seconds a connection may go without traffic before it is closed (unless a call or a
#: registration depends on it).
IDLE_TIMEOUT = 600.0
#: Seconds an accepted connection has to deliver its first whole message.
FIRST_MESSAGE_TIMEOUT = 30.0
#: Accepted connections at once, in all and from one address: file descriptors are
#: shared with the RTP sockets, and a peer must not be able to take them all.
MAX_CONNECTIONS = 4096
MAX_PER_ADDRESS = 64
#: Octets waiting to be written to a peer that does not read, before it is dropped.
MAX_WRITE_BUFFER = 1024 * 1024

#: Messages queued for a connection that is still being opened, at most.
MAX_PENDING = 64


class ListenError(Exception):
    """A SIP port that cannot be listened on (serve says which setting names it)."""

    def __init__(self, transport: str, host: str, port: int, exc: OSError) -> None:
        # (uvloop's error says only "could not bind": the cause's errno says why.)
        errno = exc.errno or getattr(exc.__cause__, "errno", None)
        why = os.strerror(errno) if errno else exc.strerror or str(exc)
        super().__init__(f"SIP cannot listen on {transport} {host}:{port}: {why}")
        self.transport = transport
        self.port = port


class _Stream(asyncio.Protocol):
    """One TCP or TLS connection: framing in, writes out, idle close."""

    def __init__(self, owner: Connections, transport: Transport, key: Target | None) -> None:
        self.owner = owner
        self.kind = transport
        self.key = key  # set at once for ours; from the peer's address for accepted ones
        self.framer = StreamFramer(max_message=owner.max_message)
        self.transport: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.idle: asyncio.TimerHandle | None = None
        self.accepted = key is None
        self.delivered = False  # a whole message came: the idle limit applies from now

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        transport = self.transport
        if self.key is None:
            host, port = transport.get_extra_info("peername")[:2]
            self.key = Target(host, port, self.kind)
            if self.owner.banned(host) or not self.owner.welcome(host):
                transport.abort()
                return
            refusal = self.owner._refusal(host)
            if refusal:
                logger.warning(
                    "SIP %s connection from %s:%s refused: %s", self.kind, host, port, refusal
                )
                transport.abort()
                return
            logger.debug("SIP %s connection from %s:%s", self.kind, host, port)
        self.owner._opened(self)
        for data in self.pending:
            transport.write(data)
        self.pending.clear()
        self._touch()

    def data_received(self, data: bytes) -> None:
        assert self.key is not None
        if self.accepted and self.owner.banned(self.key.host):  # (banned since it connected)
            assert self.transport is not None
            self.transport.abort()
            return
        first = not self.delivered
        self._touch()
        try:
            items = self.framer.feed(data)
        except FramingError as exc:
            logger.warning("SIP %s from %s: %s; closing the connection", self.kind, self.key, exc)
            if exc.head and self.owner.answer_oversized is not None:
                answer = self.owner.answer_oversized(exc.head)
                if answer:
                    self.write(answer)  # 413 before the close ([security] max_message_bytes)
            self.close()
            return
        for item in items:
            if isinstance(item, Ping):
                self.write(PONG)  # RFC 5626 §4.4.1
            else:
                self.delivered = True
                self.owner.deliver(item, self.key)
        if first and self.delivered:
            self._touch()  # (the idle limit from now on, not the first message's)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.owner._closed(self)

    def write(self, data: bytes) -> None:
        if self.transport is None:
            if len(self.pending) >= MAX_PENDING:
                logger.warning("SIP to %s: connection not open yet; message dropped", self.key)
                return
            self.pending.append(data)
            return
        if not self.transport.is_closing():
            self.transport.write(data)
            if self.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
                logger.warning("SIP %s to %s: the peer reads nothing; closing", self.kind, self.key)
                self.transport.abort()
                return
            self._touch()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _touch(self) -> None:
        loop = asyncio.get_running_loop()
        if self.accepted and not self.delivered:
            # The first message's deadline runs from the opening: traffic (a ping, a
            # message in pieces, our pongs) does not move it.
            if self.idle is None:
                deadline = min(self.owner.idle_timeout, FIRST_MESSAGE_TIMEOUT)
                self.idle = loop.call_later(deadline, self._idle)
            return
        if self.idle is not None:
            self.idle.cancel()
        self.idle = loop.call_later(self.owner.idle_timeout, self._idle)

    def _idle(self) -> None:
        assert self.key is not None
        if self.delivered and self.owner.in_use(self.key):
            self._touch()  # a call or a registration depends on it: keep it
            return
        logger.debug("SIP %s connection %s idle; closing it", self.kind, self.key)
        self.close()


class Connections:
    """callhook's TCP and TLS listeners and the connections to and from its peers."""

    def __init__(
        self,
        deliver: Callable[[bytes, Target], None],
        *,
        client_tls: ssl.SSLContext | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        closed: Callable[[Target], None] | None = None,
        failed: Callable[[Target], None] | None = None,
        in_use: Callable[[Target], bool] | None = None,
        max_message: int = 65536,
        answer_oversized: Callable[[bytes], bytes | None] | None = None,
        banned: Callable[[str], bool] | None = None,
        welcome: Callable[[str], bool] | None = None,
    ) -> None:
        """``banned(host)``: a source whose connections are closed at once, and whose data
        is not read, unlogged (the guard logged its ban; a banned flooder opening
        connections must not flood the log). ``welcome(host)``: whether a new connection
        from ``host`` is taken at all (one the guard would not answer is closed at once;
        the guard notes it)."""
        self.deliver = deliver
        self.banned = banned or (lambda host: False)
        self.welcome = welcome or (lambda host: True)
        self.on_closed = closed
        self.on_failed = failed
        self.in_use = in_use or (lambda target: False)
        self.max_message = max_message
        self.answer_oversized = answer_oversized
        self.client_tls = client_tls
        self.idle_timeout = idle_timeout
        self.streams: dict[Target, _Stream] = {}
        self.servers: list[asyncio.Server] = []
        self._opening: set[asyncio.Task[None]] = set()

    async def listen(
        self, transport: Transport, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> int:
        """Start a ``tcp`` or ``tls`` listener on ``host:port``; returns the port bound.
        :class:`ListenError` if it cannot be bound."""
        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(
                lambda: _Stream(self, transport, None), host, port, ssl=tls, reuse_address=True
            )
        except OSError as exc:
            raise ListenError(transport, host, port, exc) from None
        self.servers.append(server)
        bound: int = server.sockets[0].getsockname()[1]
        logger.info("SIP listening on %s %s:%d", transport, host, bound)
        return bound

    def send(self, data: bytes, target: Target) -> None:
        """Send ``data`` to ``target`` on its connection, opening one if there is none."""
        stream = self.streams.get(target)
        if stream is None:
            stream = _Stream(self, target.transport, target)
            self.streams[target] = stream
            task = asyncio.get_running_loop().create_task(self._open(stream, target))
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)
        stream.write(data)

    async def _open(self, stream: _Stream, target: Target) -> None:
        loop = asyncio.get_running_loop()
        tls = None
        server_hostname = None
        if target.transport == "tls":
            tls = self.client_tls or client_context(None)
            server_hostname = target.host
        try:
            await loop.create_connection(
                lambda: stream, target.host, target.port, ssl=tls, server_hostname=server_hostname
            )
        except (OSError, ssl.SSLError) as exc:
            # The transactions waiting on it end now (``failed``), as a 503.
            logger.warning("SIP connection to %s failed: %s", target, exc)
            if self.streams.get(target) is stream:
                del self.streams[target]
            if self.on_failed is not None:
                self.on_failed(target)

    def _refusal(self, host: str) -> str:
        """Why a new connection from ``host`` is refused ("" if it is not)."""
        accepted = [s for s in self.streams.values() if s.accepted]
        if len(accepted) >= MAX_CONNECTIONS:
            return f"{MAX_CONNECTIONS} connections already"
        if sum(1 for s in accepted if s.key is not None and s.key.host == host) >= MAX_PER_ADDRESS:
            return f"{MAX_PER_ADDRESS} connections from that address already"
        return ""

    def _opened(self, stream: _Stream) -> None:
        assert stream.key is not None
        previous = self.streams.get(stream.key)
        if previous is not None and previous is not stream:
            previous.close()  # one connection per far end
        self.streams[stream.key] = stream

    def _closed(self, stream: _Stream) -> None:
        if stream.key is not None and self.streams.get(stream.key) is stream:
            del self.streams[stream.key]
            if self.on_closed is not None:
                self.on_closed(stream.key)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        for server in self.servers:
            server.close()
        for stream in list(self.streams.values()):
            stream.close()
        for task in list(self._opening):
            task.cancel()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        self.servers.clear()
