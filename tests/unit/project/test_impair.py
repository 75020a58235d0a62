"""The impairment relay of the end-to-end fault test (tests/e2e/impair.py).

The sans-IO line against a virtual clock (loss, delay, jitter, reordering,
determinism), then the relay with real sockets on two loopback addresses.
"""

from __future__ import annotations

import asyncio
import random
import socket

import pytest

from tests.e2e.harness import free_udp_port
from tests.e2e.impair import BACK, CLEAR, FORTH, Impairment, Line, Relay

NETEM = Impairment(loss=0.05, delay=0.020, jitter=0.060)


def run(line: Line[int], packets: int, spacing: float = 0.02) -> list[int]:
    """Send ``packets`` numbered packets ``spacing`` apart on a virtual clock; what came
    out, in order (the clock runs until the line is empty)."""
    out: list[int] = []
    now = 0.0
    for n in range(packets):
        now = n * spacing
        out += line.due(now)
        line.send(n, now)
    while (due := line.next_due()) is not None:
        out += line.due(due)
    return out


def test_a_clear_line_passes_everything_at_once_in_order() -> None:
    line: Line[int] = Line(CLEAR, random.Random(1))
    assert line.send(7, 3.0) == 3.0
    assert line.due(3.0) == [7]
    line = Line(CLEAR, random.Random(1))
    assert run(line, 100) == list(range(100))
    assert (line.sent, line.dropped, line.delayed, line.reordered) == (100, 0, 0, 0)


def test_loss_delay_and_jitter_like_netem() -> None:
    line: Line[int] = Line(NETEM, random.Random(5))
    out = run(line, 20000)
    assert line.sent == 20000
    assert len(out) == line.sent - line.dropped
    assert sorted(out) == sorted(set(out))  # nothing twice
    assert 0.04 < line.dropped / line.sent < 0.06
    # 20 ms ± 60 ms, clamped at 0: a third leave at once, the rest up to 80 ms later.
    assert 0.60 < line.delayed / line.sent < 0.73
    assert 0.075 < line.max_held <= 0.080
    # Reordered: the packets that leave before one sent earlier (they overtake it).
    overtakers, lowest_after = 0, float("inf")
    for n in reversed(out):
        overtakers += lowest_after < n
        lowest_after = min(lowest_after, n)
    assert overtakers == line.reordered
    assert line.reordered > line.sent // 10


def test_nothing_leaves_before_its_time() -> None:
    line: Line[str] = Line(Impairment(delay=0.05), random.Random(0))
    line.send("a", 1.0)
    assert line.next_due() == pytest.approx(1.05)
    assert line.due(1.049) == []
    assert line.due(1.05) == ["a"]
    assert line.next_due() is None


def test_the_same_seed_gives_the_same_fates() -> None:
    def fates(seed: str) -> list[float | None]:
        rng = random.Random(seed)
        return [NETEM.fate(rng) for _ in range(500)]

    assert fates("0:1:forth") == fates("0:1:forth")
    assert fates("0:1:forth") != fates("0:1:back")


async def test_the_relay_carries_both_ways_as_itself_and_drops_what_its_lines_drop() -> None:
    """A client on 127.0.0.1 sends to the relay on 127.0.0.5; the relay forwards to an echo
    server on 127.0.0.1, same port; the echo comes back to the relay, which forwards it to
    the client. Both ends see the relay as the other side (what makes serve's symmetric
    RTP latch onto it)."""
    port = free_udp_port()
    loop = asyncio.get_running_loop()
    echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    echo.bind(("127.0.0.1", port))
    echo.setblocking(False)
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.bind(("127.0.0.1", 0))
    client.setblocking(False)
    echo_sources: set[tuple[str, int]] = set()

    async def echo_server() -> None:
        while True:
            data, source = await loop.sock_recvfrom(echo, 2048)
            echo_sources.add(source)
            await loop.sock_sendto(echo, data, source)

    lossy = Impairment(loss=0.2, delay=0.005, jitter=0.005)
    try:
        async with Relay("127.0.0.5", "127.0.0.1", {port: lossy}, seed=3) as relay:
            server = asyncio.create_task(echo_server())
            for n in range(200):
                await loop.sock_sendto(client, n.to_bytes(2, "big"), ("127.0.0.5", port))
            forth, back = relay.line(port, FORTH), relay.line(port, BACK)
            got: list[int] = []
            async with asyncio.timeout(5):
                # Every packet the client sent reached the relay, every echo of one the
                # relay passed on came back to it; then the client has all the relay kept.
                while not (
                    forth.sent == 200
                    and back.sent == forth.sent - forth.dropped
                    and len(got) == back.sent - back.dropped
                ):
                    try:
                        data, source = await asyncio.wait_for(
                            loop.sock_recvfrom(client, 2048), 0.05
                        )
                    except TimeoutError:
                        continue
                    assert source == ("127.0.0.5", port)
                    got.append(int.from_bytes(data, "big"))
            server.cancel()
    finally:
        echo.close()
        client.close()
    assert echo_sources == {("127.0.0.5", port)}
    assert len(set(got)) == len(got) and set(got) <= set(range(200))
    assert 10 < forth.dropped < 70 and 5 < back.dropped < 60, relay.report()
    assert len(got) == 200 - forth.dropped - back.dropped
