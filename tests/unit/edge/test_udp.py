"""The media tick's socket IO (callhook/edge/udp.py): the native implementation and
the Python one, on real sockets on 127.0.0.1 and ::1, behave the same."""

from __future__ import annotations

import gc
import socket
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from callhook.edge import udp
from callhook.edge.udp import PollingUdp, Udp


def _native(rounds: int) -> Udp[Any]:
    from callhook.edge._udp import Udp as NativeUdp

    return NativeUdp(rounds)


IMPLEMENTATIONS = {"native": _native, "python": PollingUdp}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def make(request: pytest.FixtureRequest) -> Callable[[int], Udp[Any]]:
    return IMPLEMENTATIONS[request.param]


@pytest.fixture
def sockets() -> Iterator[Callable[..., socket.socket]]:
    made: list[socket.socket] = []

    def new(host: str = "127.0.0.1") -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind((host, 0))
        sock.setblocking(False)
        made.append(sock)
        return sock

    yield new
    for sock in made:
        sock.close()


def _drain(io: Udp[Any]) -> list[tuple[object, bytes, tuple[str, int]]]:
    """receive() until nothing more (loopback delivers at once, but not within sendto)."""
    got: list[tuple[object, bytes, tuple[str, int]]] = []
    for _ in range(50):
        batch = io.receive()
        if not batch and got:
            return got
        got += batch
    return got


def test_the_native_implementation_is_built() -> None:
    # scripts/setup installs a C compiler; without the extension serve runs the Python
    # one, which costs more CPU per call (the module docstring), and says so in the log.
    assert udp.native(), "callhook.edge._udp was not built: rerun scripts/setup"


def test_each_datagram_comes_with_its_socket_key_and_sender(
    make: Callable[[int], Udp[Any]], sockets: Callable[..., socket.socket]
) -> None:
    io = make(6)
    a, b = sockets(), sockets()
    io.add(a, "call a")
    io.add(b, ("call b", True))
    alice, bob = sockets(), sockets()
    alice.sendto(b"one", a.getsockname())
    bob.sendto(b"two", a.getsockname())
    alice.sendto(b"three", b.getsockname())
    got = _drain(io)
    assert sorted(got, key=lambda g: g[1]) == [
        ("call a", b"one", alice.getsockname()),
        (("call b", True), b"three", alice.getsockname()),
        ("call a", b"two", bob.getsockname()),
    ]
    assert io.receive() == []
    io.close()


def test_a_socket_gives_at_most_rounds_datagrams_a_receive(
    make: Callable[[int], Udp[Any]], sockets: Callable[..., socket.socket]
) -> None:
    io = make(3)
    rtp, flooder = sockets(), sockets()
    io.add(rtp, "rtp")
    for i in range(7):
        flooder.sendto(bytes([i]), rtp.getsockname())
    got = [[data for _, data, _ in io.receive()] for _ in range(4)]
    assert got == [[b"\x00", b"\x01", b"\x02"], [b"\x03", b"\x04", b"\x05"], [b"\x06"], []]
    io.close()


def test_a_new_sender_is_told_apart_from_the_last(
    make: Callable[[int], Udp[Any]], sockets: Callable[..., socket.socket]
) -> None:
    # The native one keeps the last sender's address object: a change must show.
    io = make(6)
    rtp = sockets()
    io.add(rtp, "rtp")
    peers = [sockets(), sockets()]
    senders = []
    for peer in (0, 1, 1, 0):
        peers[peer].sendto(b"x", rtp.getsockname())
        (_, _, sender), *_ = _drain(io)
        senders.append(sender)
    first, second = (p.getsockname() for p in peers)
    assert senders == [first, second, second, first]
    io.close()


def test_an_ipv6_sender_is_host_and_port(
    make: Callable[[int], Udp[Any]], sockets: Callable[..., socket.socket]
) -> None:
    io = make(6)
    rtp, peer = sockets("::1"), sockets("::1")
    io.add(rtp, "rtp")
    peer.sendto(b"v6", rtp.getsockname())
    assert _drain(io) == [("rtp", b"v6", ("::1", peer.getsockname()[1]))]
    assert io.send([(rtp.fileno(), b"back", ("::1", peer.getsockname()[1]))]) == 0
    assert peer.recvfrom(100) == (b"back", rtp.getsockname())
    io.close()


def test_a_removed_socket_is_not_read_and_removal_is_forgiving(
    make: Callable[[int], Udp[Any]], sockets: Callable[..., socket.socket]
) -> None:
    io = make(6)
    kept, removed, peer = sockets(), sockets(), sockets()
    io.add(kept, "kept")
    io.add(removed, "removed")
    with pytest.raises(ValueError, match="registered already"):
        io.add(kept, "again")
    assert io.registered == 2
    io.remove(removed)
    io.remove(removed)  # twice, or one never added: nothing happens
    io.remove(peer)
    assert io.registered == 1
    peer.sendto(b"a", removed.getsockname())
    peer.sendto(b"b", kept.getsockname())
    assert _drain(io) == [("kept", b"b", peer.getsockname())]
    assert removed.recvfrom(10)[0] == b"a"  # still there: nobody read it
    io.close()
    assert io.registered == 0
    with pytest.raises(ValueError):
        io.receive()


def test_send_goes_from_each_calls_socket_to_its_destination(
    make: Callable[[int], Udp[Any]], sockets: Callable[..., socket.socket]
) -> None:
    io = make(6)
    a, b = sockets(), sockets()
    io.add(a, "a")
    io.add(b, "b")
    ear1, ear2 = sockets(), sockets()
    one, two = ear1.getsockname(), ear2.getsockname()
    assert io.send([(a.fileno(), b"from a", one), (b.fileno(), b"from b", two)]) == 0
    assert ear1.recvfrom(100) == (b"from a", a.getsockname())
    assert ear2.recvfrom(100) == (b"from b", b.getsockname())
    # The destination moves (a new latch): the next datagram follows it, as does an
    # equal address given as another object.
    assert io.send([(a.fileno(), b"moved", two), (a.fileno(), b"same", (one[0], one[1]))]) == 0
    assert ear2.recvfrom(100) == (b"moved", a.getsockname())
    assert ear1.recvfrom(100) == (b"same", a.getsockname())
    io.close()


def test_a_datagram_that_cannot_be_sent_is_counted_and_the_rest_go(
    make: Callable[[int], Udp[Any]], sockets: Callable[..., socket.socket]
) -> None:
    io = make(6)
    rtp, ear = sockets(), sockets()
    io.add(rtp, "rtp")
    fd, there = rtp.fileno(), ear.getsockname()
    errors = io.send(
        [
            (fd, b"x" * 70000, there),  # larger than a datagram can be (EMSGSIZE)
            (fd, b"v6", ("::1", 4000)),  # an IPv6 address for an IPv4 socket
            (fd, b"port", (there[0], 70000)),  # no such port
            (fd, b"fine", there),
        ]
    )
    assert errors == 3
    assert ear.recvfrom(100) == (b"fine", rtp.getsockname())
    with pytest.raises(ValueError, match="not registered"):
        io.send([(ear.fileno(), b"x", there)])
    io.close()


def test_keys_that_point_back_at_it_are_collected(make: Callable[[int], Udp[Any]]) -> None:
    class Stream:
        io: object = None

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        io = make(6)
        key = Stream()
        key.io = io  # key -> io -> key: only the collector frees the pair
        io.add(sock, key)
        gone = weakref.ref(key)
        del key, io
        gc.collect()
        assert gone() is None
