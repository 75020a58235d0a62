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
find where the next message would start.

Which connections are taken and how long they are kept is decided by
:mod:`callhook.sip.intake` (sans-IO, from the guard's rules); this module only
asks it, with the loop's time. A connection from a source ``[security]`` would not
answer (banned, or not allowed while ``unknown = "drop"``) is closed as soon as it is
accepted, before any TLS handshake: it gets no pong and no 413, nothing that says a
SIP server is there. An accepted connection has :data:`FIRST_MESSAGE_TIMEOUT` seconds
from its opening (its TLS handshake included) for its first whole message from a
served source, which pings do not extend (else a peer pinging every 29 s would hold a
slot for ever); after it, connections idle for ``idle_timeout`` seconds are closed (a
peer that wants to keep one open pings), unless a call or a registration depends on it.

TLS uses Python's :mod:`ssl`: the server side presents ``tls_certificate``
(with ``tls_key``); the client side verifies the peer against the system CAs
or ``tls_ca`` and sends the target's host name as SNI.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
from collections.abc import Callable
from functools import partial
from typing import cast

from callhook.config.tls import client_context
from callhook.sip.framing import PONG, FramingError, Ping, StreamFramer
from callhook.sip.intake import FIRST_MESSAGE_TIMEOUT, Lifetime, Standing
from callhook.sip.transport import Target, Transport

logger = logging.getLogger("callhook.sip")

#: Seconds a connection may go without traffic before it is closed (unless a call or a
#: registration depends on it).
IDLE_TIMEOUT = 600.0
#: (The first message's time, FIRST_MESSAGE_TIMEOUT, is sip/intake.py's.)
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
        code = exc.errno or getattr(exc.__cause__, "errno", None)
        why = os.strerror(code) if code else exc.strerror or str(exc)
        super().__init__(f"SIP cannot listen on {transport} {host}:{port}: {why}")
        self.transport = transport
        self.port = port


class _Stream(asyncio.Protocol):
    """One TCP or TLS connection: framing in, writes out, its lifetime (sip/intake.py)."""

    def __init__(
        self, owner: Connections, transport: Transport, key: Target | None, *, accepted: bool
    ) -> None:
        self.owner = owner
        self.kind = transport
        self.key = key  # ours: the target; accepted: the peer's address (known at accept)
        self.accepted = accepted
        self.framer = StreamFramer(max_message=owner.max_message)
        self.transport: asyncio.Transport | None = None  # where messages go (once secure)
        self.pending: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None
        self.lifetime: Lifetime | None = None
        self.handshake: asyncio.Task[None] | None = None  # an accepted TLS one's, under way
        self.handed = False  # (its socket given to the loop's TLS transport)

    def start(self, now: float) -> None:
        """Counted from ``now`` (its opening): filed, and its lifetime running."""
        self.lifetime = Lifetime(
            now,
            self.owner.idle_timeout,
            accepted=self.accepted,
            first_message_timeout=FIRST_MESSAGE_TIMEOUT,
        )
        self.owner._opened(self)
        self._arm()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        made = cast(asyncio.Transport, transport)
        if self.lifetime is None:  # (an accepted TLS one was judged and started at accept)
            if self.key is None:  # accepted TCP: judged before anything is read
                host, port = made.get_extra_info("peername")[:2]
                self.key = Target(host, port, self.kind)
                if not self.owner._take(self.key):
                    made.abort()
                    return
            self.start(asyncio.get_running_loop().time())
        self.transport = made
        for data in self.pending:
            made.write(data)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        assert self.key is not None and self.lifetime is not None
        if self.accepted and self.owner.banned(self.key.host):  # (banned since it connected)
            assert self.transport is not None
            self.transport.abort()
            return
        now = asyncio.get_running_loop().time()
        lifetime = self.lifetime
        lifetime.traffic(now)
        try:
            items = self.framer.feed(data)
        except FramingError as exc:
            logger.warning("SIP %s from %s: %s; closing the connection", self.kind, self.key, exc)
            if exc.head and self.owner.answer_oversized is not None:
                # 413 before the close ([security] max_message_bytes), if the guard answers
                # that source at all (it decides, and counts it like any request).
                answer = self.owner.answer_oversized(exc.head, self.key)
                if answer:
                    self.write(answer)
            self.close()
            return
        for item in items:
            if isinstance(item, Ping):
                # RFC 5626 §4.4.1; not to a source the guard would not answer.
                if not self.accepted or self.owner.standing(self.key.host) != "ignored":
                    self.write(PONG)
            else:
                if not lifetime.proven:
                    served = not self.accepted or self.owner.standing(self.key.host) == "served"
                    lifetime.message(now, served=served)
                self.owner.deliver(item, self.key)

    def connection_lost(self, exc: Exception | None) -> None:
        # (Also called for a TLS handshake that failed or was cut short.)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
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
            if self.lifetime is not None:
                self.lifetime.traffic(asyncio.get_running_loop().time())

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        elif self.handshake is not None:
            self.handshake.cancel()  # (still in its TLS handshake: its socket is closed)

    def _arm(self) -> None:
        """Wake at the lifetime's deadline (which only ever moves later: :meth:`_due` then
        sleeps again until the new one)."""
        assert self.lifetime is not None
        self.timer = asyncio.get_running_loop().call_at(self.lifetime.deadline, self._due)

    def _due(self) -> None:
        assert self.key is not None and self.lifetime is not None
        self.timer = None
        key = self.key
        now = asyncio.get_running_loop().time()
        if not self.lifetime.expired(now, lambda: self.owner.in_use(key)):
            self._arm()
            return
        why = "idle" if self.lifetime.proven else "no first message in time"
        logger.debug("SIP %s connection %s: %s; closing it", self.kind, key, why)
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
        answer_oversized: Callable[[bytes, Target], bytes | None] | None = None,
        banned: Callable[[str], bool] | None = None,
        standing: Callable[[str], Standing] | None = None,
    ) -> None:
        """``banned(host)``: a source whose data is not read (its connection is closed),
        unlogged (the guard logged its ban; a banned flooder must not flood the log); asked
        of every piece of data an accepted connection brings. ``standing(host)``: what the
        guard does with requests from ``host`` now (:func:`callhook.sip.intake.standing`):
        asked when a connection is accepted, of a ping, and of its first message.
        ``answer_oversized(head, source)``: the 413 for a request whose header ``head``
        announced too big a body, or None for none."""
        self.deliver = deliver
        self.banned = banned or (lambda host: False)
        self.standing: Callable[[str], Standing] = standing or (lambda host: "served")
        self.on_closed = closed
        self.on_failed = failed
        self.in_use = in_use or (lambda target: False)
        self.max_message = max_message
        self.answer_oversized = answer_oversized
        self.client_tls = client_tls
        self.idle_timeout = idle_timeout
        self.streams: dict[Target, _Stream] = {}
        self.servers: list[asyncio.Server] = []
        self.listeners: list[socket.socket] = []  # (the TLS ones: accepted by _accept_tls)
        self._opening: set[asyncio.Task[None]] = set()

    async def listen(
        self, transport: Transport, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> int:
        """Start a ``tcp`` or ``tls`` listener on ``host:port``; returns the port bound.
        :class:`ListenError` if it cannot be bound."""
        loop = asyncio.get_running_loop()
        if tls is not None:
            return await self._listen_tls(host, port, tls)
        try:
            server = await loop.create_server(
                lambda: _Stream(self, transport, None, accepted=True),
                host,
                port,
                reuse_address=True,
            )
        except OSError as exc:
            raise ListenError(transport, host, port, exc) from None
        self.servers.append(server)
        bound: int = server.sockets[0].getsockname()[1]
        logger.info("SIP listening on %s %s:%d", transport, host, bound)
        return bound

    async def _listen_tls(self, host: str, port: int, tls: ssl.SSLContext) -> int:
        """A TLS listener that accepts the TCP connections itself: each source is judged
        before its handshake (a listener with ``ssl=`` would make it first), and a
        handshake under way holds its slot. Bound to every address ``host`` names, as the
        loop's own listeners are."""
        loop = asyncio.get_running_loop()
        bound = port
        try:
            found = await loop.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            for family, _, _, _, address in dict.fromkeys(found):
                # (Port 0: the system's choice for the first, then the same for the rest.)
                listener = socket.create_server((address[0], bound), family=family)
                listener.setblocking(False)
                self.listeners.append(listener)
                bound = listener.getsockname()[1]
                task = loop.create_task(self._accept_tls(listener, tls))
                self._opening.add(task)
                task.add_done_callback(self._opening.discard)
        except OSError as exc:
            raise ListenError("tls", host, port, exc) from None
        logger.info("SIP listening on tls %s:%d", host, bound)
        return bound

    async def _accept_tls(self, listener: socket.socket, tls: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        failing = False  # (accept failing: said once until it accepts again)
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # (that one connection, gone before it was taken)
                if not failing:  # (out of file descriptors, most likely: it passes)
                    logger.warning("SIP tls: cannot accept a connection: %s", exc)
                failing = True
                await asyncio.sleep(0.1)
                continue
            failing = False
            try:
                self._accepted_tls(sock, Target(peer[0], peer[1], "tls"), tls)
            except Exception:  # (a bug: that connection, not the listener)
                logger.exception("SIP tls: a connection from %s could not be taken", peer)
                sock.close()

    def _accepted_tls(self, sock: socket.socket, key: Target, tls: ssl.SSLContext) -> None:
        """A TCP connection on a TLS listener: judged, then its handshake started."""
        if not self._take(key):
            sock.close()
            return
        loop = asyncio.get_running_loop()
        stream = _Stream(self, "tls", key, accepted=True)
        stream.start(loop.time())
        assert stream.lifetime is not None
        left = max(0.1, stream.lifetime.deadline - loop.time())
        task = loop.create_task(self._handshake(stream, sock, tls, left))
        task.add_done_callback(partial(self._handshaken, stream, sock))
        stream.handshake = task

    def _handshaken(self, stream: _Stream, sock: socket.socket, _: object) -> None:
        stream.handshake = None
        if not stream.handed:  # (cancelled before it began: the socket is still ours)
            sock.close()
            stream.connection_lost(None)

    async def _handshake(
        self, stream: _Stream, sock: socket.socket, tls: ssl.SSLContext, timeout: float
    ) -> None:
        """An accepted TLS connection's handshake, within its first message's time."""
        loop = asyncio.get_running_loop()
        stream.handed = True  # (the loop's transport owns the socket from here: no await yet)
        try:
            await loop.connect_accepted_socket(
                lambda: stream, sock, ssl=tls, ssl_handshake_timeout=timeout
            )
        except BaseException as exc:  # (ssl.SSLError, its timeout, a reset; closed meanwhile)
            if not isinstance(exc, asyncio.CancelledError):
                logger.debug("SIP tls connection from %s: no handshake: %s", stream.key, exc)
            stream.connection_lost(None)  # (the loop tells the protocol only once made)
            if not isinstance(exc, Exception):
                raise

    def _take(self, key: Target) -> bool:
        """Whether a connection a peer opened from ``key`` is taken (asked before anything
        is read from it or a TLS handshake is made): a source the guard would not answer
        learns nothing (the guard noted why; a ban was logged when decided)."""
        if self.standing(key.host) == "ignored":
            return False
        refusal = self._refusal(key.host)
        if refusal:
            logger.warning(
                "SIP %s connection from %s:%s refused: %s",
                key.transport,
                key.host,
                key.port,
                refusal,
            )
            return False
        logger.debug("SIP %s connection from %s:%s", key.transport, key.host, key.port)
        return True

    def send(self, data: bytes, target: Target) -> None:
        """Send ``data`` to ``target`` on its connection, opening one if there is none."""
        stream = self.streams.get(target)
        if stream is None:
            stream = _Stream(self, target.transport, target, accepted=False)
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
        tasks = list(self._opening)
        for task in tasks:
            task.cancel()
        # (The TLS listeners once their accept loops have stopped watching them.)
        await asyncio.gather(*tasks, return_exceptions=True)
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        self.servers.clear()
