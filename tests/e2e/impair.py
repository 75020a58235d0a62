"""A lossy, jittery line in userspace: a UDP relay that drops and delays real packets.

``tc netem`` needs the kernel's ``sch_netem``, which not every machine has. This
relay puts the same impairment on the real path instead: it listens on another
loopback address (``127.0.0.5``, all of 127/8 is the machine's own), on the
ports ``serve`` advertises there (``[sip] external_address``), and forwards
each datagram to the same port of the address ``serve`` is bound to:

* from anyone but ``serve``: to ``serve`` (``target_host``, same port); the
  sender is remembered as that port's peer;
* from ``serve`` (``target_host``, same port): to the port's peer, as last
  learned (none yet: the datagram is counted in ``unroutable`` and dropped).

The relay sends from its own socket, so ``serve`` sees the relay as the source
of the caller's RTP, latches onto it (symmetric RTP, RFC 4961) and sends its
own RTP back through the relay: both directions cross the impairment.

Each direction of each port is a :class:`Line` (sans-IO: no sockets, no
clock of its own; tested with a virtual clock in tests/unit/project/test_impair.py):
every packet is lost with probability ``loss``, else held ``delay ± jitter``
seconds (uniform, clamped at 0, like netem's ``delay 20ms 60ms``), so packets
overtake one another. The random numbers come from a :class:`random.Random`
seeded per line: the n-th packet of a line always meets the same fate, run
after run. Each line counts what it did (``sent``, ``dropped``, ``delayed``,
``reordered``), so a test can check that the impairment really happened.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

T = TypeVar("T")

Address = tuple[str, int]


@dataclass(frozen=True)
class Impairment:
    """What a line does to packets: ``loss`` a probability, ``delay``/``jitter`` seconds."""

    loss: float = 0.0
    delay: float = 0.0
    jitter: float = 0.0

    def fate(self, rng: random.Random) -> float | None:
        """How long one packet is held (None: lost). Two draws for every packet, so the
        n-th packet's fate does not depend on what happened to the ones before it."""
        lost = rng.random() < self.loss
        held = max(0.0, self.delay + rng.uniform(-self.jitter, self.jitter))
        return None if lost else held


#: A line that passes everything on at once (SIP: it has retransmissions of its own).
CLEAR = Impairment()


@dataclass
class Line(Generic[T]):
    """One direction of one flow: packets in with :meth:`send`, out when due with :meth:`due`."""

    impairment: Impairment
    rng: random.Random
    sent: int = 0
    dropped: int = 0
    delayed: int = 0  # held more than 0 s
    reordered: int = 0  # sent after a packet that leaves after it (it overtakes)
    max_held: float = 0.0
    _queue: list[tuple[float, int, T]] = field(default_factory=list)
    _latest: float = float("-inf")  # the latest release time of the packets kept so far

    def send(self, item: T, now: float) -> float | None:
        """Take one packet at ``now``; its release time (None: it is lost)."""
        self.sent += 1
        held = self.impairment.fate(self.rng)
        if held is None:
            self.dropped += 1
            return None
        release = now + held
        if held > 0:
            self.delayed += 1
            self.max_held = max(self.max_held, held)
        if release < self._latest:
            self.reordered += 1
        self._latest = max(self._latest, release)
        heapq.heappush(self._queue, (release, self.sent, item))
        return release

    def next_due(self) -> float | None:
        """When the next packet leaves (None: none is held)."""
        return self._queue[0][0] if self._queue else None

    def due(self, now: float) -> list[T]:
        """The packets whose time has come by ``now``, in the order they leave."""
        out: list[T] = []
        while self._queue and self._queue[0][0] <= now:
            out.append(heapq.heappop(self._queue)[2])
        return out

    def __str__(self) -> str:
        return (
            f"sent {self.sent}, dropped {self.dropped}, delayed {self.delayed} "
            f"(at most {self.max_held * 1000:.0f} ms), reordered {self.reordered}"
        )


#: The two directions of a port: toward ``serve`` and back from it.
FORTH, BACK = "forth", "back"


class _Port(asyncio.DatagramProtocol):
    def __init__(self, target_host: str, port: int, impairment: Impairment, seed: str) -> None:
        self.port = port
        self.target: Address = (target_host, port)
        self.peer: Address | None = None
        self.unroutable = 0
        self.lines: dict[str, Line[tuple[bytes, Address]]] = {
            way: Line(impairment, random.Random(f"{seed}:{way}")) for way in (FORTH, BACK)
        }
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Address) -> None:
        source = (addr[0], addr[1])
        if source == self.target:
            if self.peer is None:
                self.unroutable += 1
                return
            way, destination = BACK, self.peer
        else:
            self.peer = source
            way, destination = FORTH, self.target
        line = self.lines[way]
        loop = asyncio.get_running_loop()
        release = line.send((data, destination), loop.time())
        if release is not None:
            loop.call_at(release, self._flush, line)

    def _flush(self, line: Line[tuple[bytes, Address]]) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        for data, destination in line.due(asyncio.get_running_loop().time()):
            self.transport.sendto(data, destination)


class Relay:
    """The relay on ``host``: for each of ``ports``, its impairment (see the module docstring).

    ``seed`` makes the lines' random numbers; each line's is derived from it, the
    port's place in ``ports`` and the direction, so it is the same run after run
    whatever port numbers the run got.
    """

    def __init__(
        self,
        host: str,
        target_host: str,
        ports: dict[int, Impairment],
        *,
        seed: int = 0,
    ) -> None:
        self.host = host
        self.target_host = target_host
        self.impairments = ports
        self.seed = seed
        self.ports: dict[int, _Port] = {}

    async def __aenter__(self) -> Relay:
        try:
            for index, (port, impairment) in enumerate(self.impairments.items()):
                await self._open(port, impairment, f"{self.seed}:{index}")
        except BaseException:
            self.close()
            raise
        return self

    async def _open(self, port: int, impairment: Impairment, seed: str) -> None:
        protocol = _Port(self.target_host, port, impairment, seed)
        await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: protocol, local_addr=(self.host, port)
        )
        self.ports[port] = protocol

    def line(self, port: int, way: str) -> Line[tuple[bytes, Address]]:
        return self.ports[port].lines[way]

    def report(self) -> str:
        """What every line did, for an assertion's message."""
        rows = []
        for port, p in self.ports.items():
            for way, line in p.lines.items():
                rows.append(f"{self.host}:{port} {way}: {line}")
            if p.unroutable:
                rows.append(f"{self.host}:{port}: {p.unroutable} from serve before any peer")
        return "\n".join(rows)

    def close(self) -> None:
        for p in self.ports.values():
            if p.transport is not None:
                p.transport.close()

    async def __aexit__(self, *exc: object) -> None:
        self.close()
