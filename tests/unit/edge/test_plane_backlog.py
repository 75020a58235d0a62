"""A backlog left in the kernel while Python is behind is no flood (the media thread's clock).

The loop is held longer than the thread's event ring lasts: the thread leaves the rest of
the calls' packets in the kernel, then reads them in bursts once Python takes the ring
again. Each datagram comes with the kernel's time of arrival, and the flood limit counts
by it: the calls' packets, which came at 50 a second, are all received, none dropped.
(Marked solo: it runs on the real clock.)
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time

import pytest

from callhook.edge import mediaengine
from callhook.edge.mediaengine import MediaEngine
from callhook.edge.plane import Plane
from callhook.media.session import MediaSession

try:
    from callhook.edge._plane import Plane as NativePlane
except ImportError:  # pragma: no cover (scripts/setup builds it)
    pytest.fail("callhook.edge._plane was not built: rerun scripts/setup", pytrace=False)

CALLS = 10
#: The smallest ring the plane takes: about 2 s of ten calls' packets.
CAPACITY = 1024


def small_plane(rounds: int) -> Plane:
    plane: Plane = NativePlane(rounds, capacity=CAPACITY)
    return plane


@pytest.mark.solo
async def test_packets_left_in_the_kernel_while_python_is_behind_are_no_flood(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mediaengine, "new_plane", small_plane)
    engine = MediaEngine("127.0.0.1", 43400, 43500)
    callers = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(CALLS)]
    sessions: list[MediaSession] = []
    sent = [0] * CALLS
    done = threading.Event()
    try:
        ports = []
        for i, caller in enumerate(callers):
            caller.bind(("127.0.0.1", 0))
            session = MediaSession("PCMU", 0, 101, caller.getsockname(), label=f"call{i}")
            sock, port = engine.allocate()
            await engine.open(session, sock, port, lambda: None)
            sessions.append(session)
            ports.append(port)

        def send() -> None:
            # Each call's packets at 50 a second, on time, whatever the loop does.
            start = time.monotonic()
            for n in range(350):  # 7 s
                delay = start + n * 0.02 - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                header = struct.pack("!BBHII", 0x80, 0, n, 160 * n, 0x1234)
                for i, caller in enumerate(callers):
                    caller.sendto(header + b"\xff" * 160, ("127.0.0.1", ports[i]))
                    sent[i] += 1
            done.set()

        sender = threading.Thread(target=send)
        sender.start()
        await asyncio.sleep(0.5)
        time.sleep(5.0)  # the loop holds: the ring fills, the rest waits in the kernel
        while not done.is_set():
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # the backlog is read, in bursts
        sender.join()
        assert engine.plane is not None
        for session in sessions:
            session.reclaim()  # (the thread takes a resting call's packets itself)
        assert sum(s.flood_dropped for s in sessions) == 0
        assert [s.receiver.received for s in sessions] == sent
    finally:
        done.set()
        engine.shutdown()
        for caller in callers:
            caller.close()
