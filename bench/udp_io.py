"""The media tick's socket IO, per call and tick: native and Python (callhook/edge/udp.py).

    .venv/bin/python -m bench.udp_io [--calls 300] [--ticks 300]

N calls' RTP sockets on 127.0.0.1 each receive one 172-byte datagram a tick (sent by
a peer process's worth of sockets beforehand, outside the timing) and send one back,
as the media tick does: ``receive()`` of every socket, then ``send()`` of every
call's packet. Prints µs per call and tick of each half, for each implementation,
and what the native one saves. The system calls are in both: on loopback a send
also delivers the datagram to the receiving socket, within the sender's call.
"""

from __future__ import annotations

import argparse
import socket
import time
from typing import Any

from callhook.edge.udp import PollingUdp, Udp, native

PAYLOAD = b"\x80" * 172


def run(io: Udp[Any], calls: int, ticks: int) -> tuple[float, float]:
    """µs per call and tick of receive() and send()."""
    ours: list[socket.socket] = []
    peers: list[socket.socket] = []
    for _ in range(calls):
        for kind in (ours, peers):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            sock.setblocking(False)
            kind.append(sock)
    try:
        for i, sock in enumerate(ours):
            io.add(sock, i)
        batch = [(s.fileno(), PAYLOAD, p.getsockname()) for s, p in zip(ours, peers, strict=True)]
        spent_receive = spent_send = 0.0
        for _ in range(ticks):
            for s, p in zip(ours, peers, strict=True):
                p.sendto(PAYLOAD, s.getsockname())
            a = time.perf_counter()
            got = io.receive()
            b = time.perf_counter()
            errors = io.send(batch)
            c = time.perf_counter()
            assert len(got) == calls and errors == 0, (len(got), errors)
            for p in peers:
                p.recv(2048)
            spent_receive += b - a
            spent_send += c - b
        scale = 1e6 / (calls * ticks)
        return spent_receive * scale, spent_send * scale
    finally:
        io.close()
        for sock in ours + peers:
            sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--ticks", type=int, default=300)
    args = parser.parse_args()
    print(f"media tick IO, {args.calls} calls x {args.ticks} ticks: µs per call and tick")
    results = {}
    kinds: list[tuple[str, type]] = [("python", PollingUdp)]
    if native():
        from callhook.edge._udp import Udp as NativeUdp

        kinds.insert(0, ("native", NativeUdp))
    for name, kind in kinds:
        receive, send = run(kind(6), args.calls, args.ticks)
        results[name] = receive + send
        print(f"  {name:7s}: receive {receive:5.2f}  send {send:5.2f}  total {receive + send:5.2f}")
    if len(results) == 2:
        print(f"  the native one saves {results['python'] - results['native']:.2f} µs")
    else:
        print("  (the native extension is not built: rerun scripts/setup)")


if __name__ == "__main__":
    main()
