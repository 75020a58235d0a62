"""The IO floor of a load run: what the same RTP costs a process that does nothing else.

Receiving and echoing RTP datagrams with uvloop costs ~0.32 ms CPU per
call-second on loopback; nothing that handles the packets can cost less. The absolute
figures of these shared machines move by a third from run to run, so
:mod:`bench.ivr_load` measures the floor *in the same run*, from *the same capture*, and
reports callhook's CPU as a multiple of it (issue 19's yardstick):

* the run's capture of the RTP serve sent (tcpdump, :func:`bench.ivr_load.capture`)
  gives every stream's packets: when each was sent and how long it was
  (:func:`streams`);
* :func:`measure` starts this module as a process of its own (``python -m bench.floor
  N``): N UDP sockets with uvloop, each datagram echoed to its source at once (no SIP,
  no parsing, no DSP), then replays the streams to it, one socket per stream, each
  packet at its captured time and length, and takes the process's CPU time over the
  replay.

So the floor process receives as many packets as serve sent, in the same rhythm, and
sends as many back: the pure cost of the packets on this machine, now.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parent.parent


def streams(pcap: Path) -> list[list[tuple[float, int]]]:
    """Each RTP stream of a tcpdump capture on lo (by source and destination port): its
    packets' (seconds from the capture's first packet, UDP payload length)."""
    data = pcap.read_bytes()
    if len(data) < 24:
        return []
    nano = struct.unpack_from("<I", data)[0] == 0xA1B23C4D
    linktype = struct.unpack_from("<I", data, 20)[0]
    offset = {1: 14, 113: 16, 0: 4, 276: 20}.get(linktype, 14)
    flows: dict[tuple[int, int], list[tuple[float, int]]] = defaultdict(list)
    first: float | None = None
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, caplen, length = struct.unpack_from("<IIII", data, pos)
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if len(frame) < offset + 28:
            continue
        ihl = (frame[offset] & 0x0F) * 4
        sport, dport = struct.unpack_from("!HH", frame, offset + ihl)
        if sport & 1:
            continue  # RTCP
        at = sec + frac / (1e9 if nano else 1e6)
        first = at if first is None else first
        flows[(sport, dport)].append((at - first, length - offset - ihl - 8))
    return list(flows.values())


def measure(pcap: Path) -> float:
    """CPU seconds the floor process spends on the capture's streams (see the module
    docstring); NaN when the capture has none."""
    flows = streams(pcap)
    if not flows:
        return float("nan")
    floor = subprocess.Popen(
        [sys.executable, "-m", "bench.floor", str(len(flows))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert floor.stdout is not None
    ports = [int(p) for p in floor.stdout.readline().split()]
    # Every packet in time order, with its stream's target port.
    packets = sorted((at, length, ports[i]) for i, flow in enumerate(flows) for at, length in flow)
    senders = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in flows]
    by_port = dict(zip(ports, senders, strict=True))
    for s in senders:
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)  # the echoes: not read
    payload = bytes(2048)
    before = _cpu(floor.pid)
    start = time.monotonic() + 0.2
    for at, length, port in packets:
        delay = start + at - time.monotonic()
        if delay > 0.002:
            time.sleep(delay)
        with contextlib.suppress(BlockingIOError):
            by_port[port].sendto(payload[:length], ("127.0.0.1", port))
    time.sleep(0.5)
    used = _cpu(floor.pid) - before
    floor.send_signal(signal.SIGTERM)
    floor.wait(timeout=10)
    for s in senders:
        s.close()
    return used


def _cpu(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # uvloop's is no subclass

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.transport.sendto(data, addr)


async def _serve(n: int) -> None:
    loop = asyncio.get_running_loop()
    ports = []
    for _ in range(n):
        transport, _ = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0))
        ports.append(transport.get_extra_info("sockname")[1])
    print(" ".join(map(str, ports)), flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


def main() -> None:
    import uvloop

    uvloop.run(_serve(int(sys.argv[1])))


if __name__ == "__main__":
    main()
