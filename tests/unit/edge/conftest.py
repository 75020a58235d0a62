"""The media plane's tests share one plane, stepped on the virtual clock from T0."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from callhook.edge.plane import Plane, new_plane

#: The virtual clock's origin for the plane's slots (slot n is at T0 + n x 20 ms).
T0 = 1000.0

#: socket(7)'s SO_TIMESTAMPNS (and SCM_TIMESTAMPNS) on Linux: Python's socket module
#: does not name it.
SO_TIMESTAMPNS = 35


@pytest.fixture(scope="session")
def kernel_stamps() -> Iterator[None]:
    """The kernel stamping datagrams as they arrive, for as long as the tests run.

    The first socket that asks for SO_TIMESTAMPNS only schedules the switch that turns
    stamping on (Linux's `net_enable_timestamp` defers it to a work queue); a datagram
    that arrives before the work queue has run is stamped when it is read instead
    (`__sock_recv_timestamp`: "race occurred between timestamp enabling and packet
    receiving"). On a loaded machine that window is long enough for a test's datagrams
    to fall in, so one socket keeps stamping on, and the fixture waits until a datagram
    shows a stamp from before its read.
    """
    keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    keeper.bind(("127.0.0.1", 0))
    keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    deadline = time.monotonic() + 10.0
    while True:
        keeper.sendto(b"stamp", keeper.getsockname())
        sent = time.time()
        time.sleep(0.05)
        _, ancillary, _, _ = keeper.recvmsg(64, 64)
        stamps = [
            int.from_bytes(data[:8], "little") + int.from_bytes(data[8:16], "little") / 1e9
            for level, kind, data in ancillary
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS
        ]
        if (stamps and stamps[0] < sent + 0.025) or time.monotonic() > deadline:
            break
    yield
    keeper.close()


@pytest.fixture
def plane(kernel_stamps: None) -> Iterator[Plane]:
    made = new_plane(6)
    assert made is not None
    made.set_origin(T0)
    yield made
    made.close()
