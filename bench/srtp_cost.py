"""Cost of SRTP per packet (µs), one core, this process, next to a plain RTP header parse.

    .venv/bin/python -m bench.srtp_cost [--n 100000] [--runs 5]

For 172-byte G.711 packets (12-byte header + 160-byte PCMU payload), for both
suites callhook speaks (AES_CM_128_HMAC_SHA1_80 and _32), best of ``--runs``
runs of ``--n`` packets each, loop overhead included:

* ``SrtpContext.protect`` of a stream with increasing sequence numbers, and
  ``pylibsrtp.Session.protect`` alone (what the wrapper costs on top);
* ``SrtpContext.unprotect`` of that stream, in order (a fresh receiver per run:
  replay protection would refuse a second pass);
* ``SrtpContext.unprotect`` of packets whose payload was altered: the cost of
  refusing a forged packet (an RTP flood against an SRTP call);
* ``RtpPacket.parse`` of the same plain packet: the baseline every received
  packet pays anyway (~0.3 µs here; the socket IO floor is
  ~6.4 µs with uvloop to ~22 µs with asyncio per received+sent pair).

The last lines convert to CPU per call-second: 50 packets protected and 50
unprotected per second per call (20 ms G.711).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pylibsrtp

from callhook.media import srtp
from callhook.media.rtp import RtpPacket, pack_header
from callhook.media.srtp import SUITES, SrtpContext

PAYLOAD = b"\xff" * 160  # 20 ms of PCMU


def best_of(runs: int, n: int, setup: Callable[[], Callable[[], None]]) -> float:
    """Best time of ``runs`` calls of the body ``setup()`` returns (``n`` ops), µs per op.

    ``setup`` runs outside the timed region: each run gets fresh SRTP state.
    """
    best = float("inf")
    for _ in range(runs):
        body = setup()
        start = time.perf_counter()
        body()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def stream(n: int) -> list[bytes]:
    """``n`` RTP packets of one source, sequence numbers and timestamps increasing."""
    return [
        pack_header(0, i & 0xFFFF, i * 160 & 0xFFFFFFFF, 0x1234, False) + PAYLOAD for i in range(n)
    ]


def suite_costs(suite: srtp.Suite, packets: list[bytes], runs: int) -> list[tuple[str, float]]:
    n = len(packets)
    ours, theirs = srtp.new_key(suite), srtp.new_key(suite)
    short = suite.removeprefix("AES_CM_128_HMAC_")

    def protect() -> Callable[[], None]:
        do = SrtpContext(ours, theirs).protect

        def body() -> None:
            for packet in packets:
                do(packet)

        return body

    def raw_protect() -> Callable[[], None]:
        profile = srtp.PROFILES[suite]
        policy = pylibsrtp.Policy(
            key=ours.key, ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND, srtp_profile=profile
        )
        do = pylibsrtp.Session(policy).protect

        def body() -> None:
            for packet in packets:
                do(packet)

        return body

    sender = SrtpContext(ours, theirs)
    protected = [sender.protect(p) for p in packets]
    forged = [p[:20] + bytes([p[20] ^ 1]) + p[21:] for p in protected]

    def unprotect(data: list[bytes]) -> Callable[[], Callable[[], None]]:
        def setup() -> Callable[[], None]:
            receiver = SrtpContext(theirs, ours)
            do = receiver.unprotect

            def body() -> None:
                for packet in data:
                    do(packet)

            return body

        return setup

    check = SrtpContext(theirs, ours)
    assert all(check.unprotect(p) == q for p, q in zip(protected[:100], packets, strict=False))
    assert check.unprotect(forged[200]) is None and check.auth_failures == 1
    return [
        (f"SrtpContext.protect, {short}", best_of(runs, n, protect)),
        (f"pylibsrtp Session.protect alone, {short}", best_of(runs, n, raw_protect)),
        (f"SrtpContext.unprotect, {short}", best_of(runs, n, unprotect(protected))),
        (
            f"SrtpContext.unprotect, forged packet refused, {short}",
            best_of(runs, n, unprotect(forged)),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="packets per run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    n: int = args.n
    runs: int = args.runs
    packets = stream(n)
    parse = RtpPacket.parse

    def parse_all() -> Callable[[], None]:
        def body() -> None:
            for packet in packets:
                parse(packet)

        return body

    results = [("RtpPacket.parse, 172-byte packet (baseline)", best_of(runs, n, parse_all))]
    for suite in SUITES:
        results += suite_costs(suite, packets, runs)

    width = max(len(name) for name, _ in results)
    print(f"srtp cost: best of {runs} runs x {n} packets of 172 bytes, µs per packet")
    for name, micros in results:
        print(f"  {name:<{width}}  {micros:6.3f} µs")
    costs = dict(results)
    print("per call-second (50 packets protected + 50 unprotected):")
    for suite in SUITES:
        short = suite.removeprefix("AES_CM_128_HMAC_")
        both = costs[f"SrtpContext.protect, {short}"] + costs[f"SrtpContext.unprotect, {short}"]
        print(f"  {suite:<{width}}  {both * 50 / 1000:6.3f} ms CPU")


if __name__ == "__main__":
    main()
