"""RTP sockets and the one media tick that drives every call's outgoing audio.

Each call has its own UDP port (an even port from the configured range, as
RFC 3550 §11 suggests; RTCP would take the odd one above). Every 20 ms one
timer callback runs :meth:`MediaSession.tick` for all calls and sends what
they return: no per-call timers for media (DESIGN.md §2). The tick keeps its
phase: it is scheduled on a fixed 20 ms grid, and a late tick does not push
the following ones later.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from callhook.media.session import MediaSession

logger = logging.getLogger("callhook.media")

TICK = 0.02


@dataclass
class _Stream:
    session: MediaSession
    transport: asyncio.DatagramTransport
    wake: Callable[[], None]


class _RtpProtocol(asyncio.DatagramProtocol):
    def __init__(self, engine: MediaEngine, port: int) -> None:
        self.engine = engine
        self.port = port

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        stream = self.engine.streams.get(self.port)
        if stream is None:
            return
        session = stream.session
        session.receive(data, (addr[0], addr[1]), self.engine.loop.time())
        if session.events:
            stream.wake()

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable for a peer that went away: nothing to do but carry on.
        logger.debug("RTP port %d: %s", self.port, exc)


class MediaEngine:
    """All calls' RTP ports and the shared media tick."""

    def __init__(self, host: str, first_port: int = 20000, last_port: int = 29999) -> None:
        self.host = host
        self.loop = asyncio.get_running_loop()
        self.streams: dict[int, _Stream] = {}
        start = first_port + (first_port & 1)
        self._free: deque[int] = deque(range(start, last_port, 2))
        self._handle: asyncio.TimerHandle | None = None
        self._next = 0.0
        self.late_ticks = 0

    def allocate(self) -> tuple[socket.socket, int]:
        """Bind a UDP socket on the next free even port of the range."""
        for _ in range(len(self._free)):
            port = self._free.popleft()
            sock = socket.socket(
                socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_DGRAM
            )
            try:
                sock.bind((self.host, port))
            except OSError as exc:
                sock.close()
                if exc.errno != errno.EADDRINUSE:
                    raise
                self._free.append(port)
                continue
            sock.setblocking(False)
            return sock, port
        raise OSError("no free RTP port in the configured range")

    async def open(
        self, session: MediaSession, sock: socket.socket, port: int, wake: Callable[[], None]
    ) -> None:
        """Start receiving on ``sock`` for ``session``; it takes part in the tick from now."""
        transport, _ = await self.loop.create_datagram_endpoint(
            lambda: _RtpProtocol(self, port), sock=sock
        )
        # uvloop's UDP transport implements the interface without subclassing it.
        self.streams[port] = _Stream(session, transport, wake)
        if self._handle is None:
            self._next = self.loop.time() + TICK
            self._handle = self.loop.call_at(self._next, self._tick)

    def release(self, sock: socket.socket, port: int) -> None:
        """Give back a port that :meth:`allocate` bound but :meth:`open` never used."""
        if port not in self.streams:
            sock.close()
            self._free.append(port)

    def close(self, port: int) -> None:
        stream = self.streams.pop(port, None)
        if stream is not None:
            stream.transport.close()
            self._free.append(port)
        if not self.streams and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        now = self.loop.time()
        for stream in list(self.streams.values()):
            session = stream.session
            data = session.tick(now)
            if data is not None and session.remote is not None:
                stream.transport.sendto(data, session.remote)
            if session.events:
                stream.wake()
        self._next += TICK
        if self._next <= self.loop.time():
            # Fell behind (a long GC pause, an overloaded core): skip to the next
            # slot of the grid rather than bursting to catch up.
            self.late_ticks += 1
            behind = self.loop.time() - self._next
            self._next += (int(behind / TICK) + 1) * TICK
        self._handle = self.loop.call_at(self._next, self._tick)

    def shutdown(self) -> None:
        for port in list(self.streams):
            self.close(port)
