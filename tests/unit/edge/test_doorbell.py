"""The notifier's doorbell, on real sockets: a ring reaches the process that listens on the
data directory's name, a flood is one wake per read, a ring nobody hears costs nothing,
the name is one listener's, and other users' rings are ignored."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

import pytest

from callhook.edge.doorbell import Doorbell


async def test_a_ring_wakes_the_listener_of_the_same_directory(tmp_path: Path) -> None:
    listener, ringer = Doorbell.for_directory(tmp_path), Doorbell.for_directory(tmp_path)
    other = Doorbell.for_directory(tmp_path / "..")  # another directory: another name
    woken = asyncio.Event()
    try:
        assert listener.listen(woken.set) and listener.listening
        assert not ringer.listening
        other.ring()
        await asyncio.sleep(0.05)
        assert not woken.is_set()
        ringer.ring()
        await asyncio.wait_for(woken.wait(), 5)
        assert listener.heard == 1 and listener.ignored == 0
    finally:
        for bell in (listener, ringer, other):
            bell.close()


async def test_rings_read_together_wake_once(tmp_path: Path) -> None:
    listener, ringer = Doorbell.for_directory(tmp_path), Doorbell.for_directory(tmp_path)
    wakes = 0

    def woken() -> None:
        nonlocal wakes
        wakes += 1

    try:
        assert listener.listen(woken)
        for _ in range(10):  # (before the loop runs the reader: all queued)
            ringer.ring()
        while listener.heard < 10:
            await asyncio.sleep(0.01)
        assert wakes == 1
    finally:
        listener.close()
        ringer.close()


async def test_a_ring_nobody_hears_and_a_ring_after_close_do_nothing(tmp_path: Path) -> None:
    ringer = Doorbell.for_directory(tmp_path)
    ringer.ring()  # nobody listens: no error
    ringer.close()
    ringer.ring()  # closed: no error either


async def test_the_name_is_one_listeners_until_it_closes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = Doorbell.for_directory(tmp_path), Doorbell.for_directory(tmp_path)
    try:
        assert first.listen(lambda: None)
        with caplog.at_level(logging.WARNING, "callhook.notify"):
            assert not second.listen(lambda: None)
            assert not second.listen(lambda: None)  # (tried at each look: said once)
        (said,) = [r.getMessage() for r in caplog.records]
        assert said.startswith("notifications queued by other processes wait for")
        assert said.endswith("its doorbell cannot listen (Address already in use)")
        first.close()
        woken = asyncio.Event()
        assert second.listen(woken.set)  # the next deliverer takes the name
        Doorbell.for_directory(tmp_path).ring()
        await asyncio.wait_for(woken.wait(), 5)
    finally:
        first.close()
        second.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="ringing as another user needs root")
async def test_another_users_ring_is_ignored(tmp_path: Path) -> None:
    listener = Doorbell.for_directory(tmp_path)
    woken = asyncio.Event()
    try:
        assert listener.listen(woken.set)
        child = os.fork()
        if child == 0:  # (the child only rings, as user nobody, and leaves at once)
            status = 1
            try:
                os.setuid(65534)
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as ringer:
                    ringer.sendto(b"\1", listener.name)
                status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        while listener.ignored < 1:
            await asyncio.sleep(0.01)
        assert not woken.is_set() and listener.heard == 0
    finally:
        listener.close()
