"""The RTP port range: each call's socket on an even port, its RTCP socket on the next.

RFC 3550 §11: RTP on an even port, RTCP on the odd port above it. A port another process
holds is skipped (and tried again later); a call whose RTCP port is taken goes without
RTCP. The sockets are non-blocking and not registered with the event loop: the media
thread (or the loop's tick) reads them (:mod:`callhook.edge.mediaengine`).
"""

from __future__ import annotations

import errno
import logging
import socket
from collections import deque

logger = logging.getLogger("callhook.media")


class RtpPorts:
    """The free even ports of ``first``..``last`` on ``host``, least recently used first."""

    def __init__(self, host: str, first: int, last: int) -> None:
        self.host = host
        start = first + (first & 1)
        self._free: deque[int] = deque(range(start, last, 2))

    def __len__(self) -> int:
        """How many ports are free."""
        return len(self._free)

    def allocate(self) -> tuple[socket.socket, int]:
        """A UDP socket bound on the next free even port; OSError when none is left."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        for _ in range(len(self._free)):
            port = self._free.popleft()
            sock = socket.socket(family, socket.SOCK_DGRAM)
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

    def rtcp_socket(self, rtp: socket.socket, port: int) -> socket.socket | None:
        """The RTCP socket on ``port`` + 1; none if that port is taken."""
        sock = socket.socket(rtp.family, socket.SOCK_DGRAM)
        try:
            sock.bind((self.host, port + 1))
        except OSError:
            sock.close()
            logger.info("RTCP port %d is taken: no RTCP on this call", port + 1)
            return None
        sock.setblocking(False)
        return sock

    def free(self, port: int) -> None:
        """``port`` is free again (its sockets closed, or about to be)."""
        self._free.append(port)
