"""Every call's UDP sockets, read and written in one call per media tick.

The media tick (:mod:`callhook.edge.mediaengine`) reads what every call's RTP and
RTCP sockets received and sends one packet on each call's RTP socket, every
20 ms. :class:`Udp` does each half of that for all calls in one call:

* :meth:`Udp.receive`: one ``epoll`` poll over every socket (level-triggered),
  one ``recvfrom`` per ready socket, repeated up to ``rounds`` rounds, so a
  socket gives at most ``rounds`` datagrams a tick (a flood stays in its kernel
  buffer and is dropped there); a socket whose read fails (an ICMP error queued
  on it) is skipped. Each datagram comes with the key its socket was added with,
  and its sender as ``(host, port)`` (IPv6 too: no flow or scope).
* :meth:`Udp.send`: each ``(fd, data, (host, port))`` sent from its socket; the
  number that could not be sent is returned (a full buffer, a peer that went
  away, an address that does not resolve). The next frame goes 20 ms later anyway.

Two implementations behave the same: the native one (``_udp.c``, built by
``pip install`` where a C compiler is: ``scripts/setup`` installs one), which
does the system calls of a whole batch with the GIL released and makes a
sender's address into Python objects once per sender rather than once per
datagram; and :class:`PollingUdp` here, in Python, which runs where the
extension was not built (said once in the log) and is the reference the
native one is tested against (tests/unit/edge/test_udp.py). The native one saves
about 3.4 µs per call and tick (``python -m bench.udp_io``).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
from typing import Any, Generic, Protocol, TypeVar

logger = logging.getLogger("callhook.media")

Address = tuple[str, int]
K = TypeVar("K")


class Udp(Protocol[K]):
    """The sockets of every call (see the module docstring); ``K``: their keys' type."""

    @property
    def registered(self) -> int:
        """How many sockets :meth:`receive` reads."""
        ...

    def add(self, sock: socket.socket, key: K) -> None:
        """Read ``sock`` in :meth:`receive`; its datagrams come with ``key``."""

    def remove(self, sock: socket.socket) -> None:
        """No longer read ``sock`` (call it before the socket closes)."""

    def receive(self) -> list[tuple[K, bytes, Address]]:
        """Every socket's datagrams: ``(key, data, sender)``."""
        ...

    def send(self, batch: list[tuple[int, bytes, Address]]) -> int:
        """Send each ``(fd, data, destination)``; how many could not be sent."""
        ...

    def close(self) -> None:
        """Forget every socket (they are not closed: their owner closes them)."""


class PollingUdp(Generic[K]):
    """:class:`Udp` in Python (the module docstring)."""

    def __init__(self, rounds: int, max_size: int = 2048) -> None:
        if rounds < 1 or max_size < 1:
            raise ValueError("rounds and max_size must be positive")
        self.rounds = rounds
        self.max_size = max_size
        self._epoll = select.epoll()
        self._by_fd: dict[int, tuple[socket.socket, K]] = {}

    @property
    def registered(self) -> int:
        return len(self._by_fd)

    def add(self, sock: socket.socket, key: K) -> None:
        fd = sock.fileno()
        if fd in self._by_fd:
            raise ValueError(f"descriptor {fd} is registered already")
        self._epoll.register(fd, select.EPOLLIN)
        self._by_fd[fd] = (sock, key)

    def remove(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        if self._by_fd.pop(fd, None) is not None:
            with contextlib.suppress(OSError, ValueError):
                self._epoll.unregister(fd)

    def receive(self) -> list[tuple[K, bytes, Address]]:
        got: list[tuple[K, bytes, Address]] = []
        poll, by_fd = self._epoll.poll, self._by_fd
        for _ in range(self.rounds):
            ready = poll(0)
            if not ready:
                break
            for fd, _ in ready:
                sock, key = by_fd[fd]
                try:
                    data, address = sock.recvfrom(self.max_size)
                except OSError:
                    continue  # nothing after all, or an ICMP error queued on the socket
                if len(address) != 2:
                    address = (address[0], address[1])  # IPv6: (host, port, flow, scope)
                got.append((key, data, address))
        return got

    def send(self, batch: list[tuple[int, bytes, Address]]) -> int:
        errors = 0
        by_fd = self._by_fd
        for fd, data, address in batch:
            if fd not in by_fd:
                raise ValueError(f"descriptor {fd} is not registered")
            try:
                by_fd[fd][0].sendto(data, address)
            except (OSError, OverflowError, TypeError):
                # A full buffer, a peer that went away, an address that does not resolve
                # (it came from the far end's SDP): that packet is not sent.
                errors += 1
        return errors

    def close(self) -> None:
        self._by_fd.clear()
        self._epoll.close()


def native() -> bool:
    """Whether the native implementation was built (``pip install`` with a C compiler)."""
    try:
        from callhook.edge import _udp  # noqa: F401
    except ImportError:
        return False
    return True


_fallback_logged = False


def new_udp(rounds: int) -> Udp[Any]:
    """The native :class:`Udp` where it was built, else :class:`PollingUdp` (said once)."""
    global _fallback_logged
    try:
        from callhook.edge._udp import Udp as NativeUdp
    except ImportError as exc:
        if not _fallback_logged:
            _fallback_logged = True
            logger.warning(
                "media IO in Python: the native extension callhook.edge._udp is not "
                "built (%s); rerun scripts/setup where a C compiler is (more CPU per call)",
                exc,
            )
        return PollingUdp[Any](rounds)
    return NativeUdp(rounds)
