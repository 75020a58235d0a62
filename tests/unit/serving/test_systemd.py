"""The notifications to systemd (sd_notify(3)) on real datagram sockets."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from callhook.serving.systemd import SILENT, ServiceManager


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(str(path))
        s.settimeout(5)
        yield s, str(path)


def test_each_state_is_one_datagram_of_its_fields(receiver: tuple[socket.socket, str]) -> None:
    s, path = receiver
    manager = ServiceManager(path)
    manager.ready("serving, SIP 0.0.0.0:5060")
    assert s.recv(4096) == b"READY=1\nSTATUS=serving, SIP 0.0.0.0:5060"
    manager.reloading()
    assert s.recv(4096).split(b"\n")[0] == b"RELOADING=1"
    manager.stopping()
    assert s.recv(4096).split(b"\n")[0] == b"STOPPING=1"


def test_an_abstract_socket_is_written_with_an_at_sign() -> None:
    name = f"callhook-unit-notify-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind("\0" + name)
        s.settimeout(5)
        assert ServiceManager("@" + name).send("READY=1")
        assert s.recv(4096) == b"READY=1"


def test_the_variable_is_taken_from_the_environment_so_no_child_inherits_it(
    monkeypatch: pytest.MonkeyPatch, receiver: tuple[socket.socket, str]
) -> None:
    s, path = receiver
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    manager = ServiceManager.from_environment()
    assert "NOTIFY_SOCKET" not in os.environ
    assert manager.send("READY=1") and s.recv(4096) == b"READY=1"


def test_without_systemd_or_with_it_gone_nothing_is_sent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert ServiceManager.from_environment().address is None
    assert not SILENT.send("READY=1")
    assert not ServiceManager(str(tmp_path / "gone")).send("READY=1")  # no error either
