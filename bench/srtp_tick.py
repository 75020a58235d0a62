"""The 20 ms media tick with SRTP on and off, at N calls at once: CPU per call-second.

    .venv/bin/python -m bench.srtp_tick [--calls 200,400] [--seconds 10]

SIPp in Debian (3.6.1) has no SRTP, so the load kit's caller cannot speak it;
this measures what SRTP adds to callhook's own media work instead, on the
path every call takes each 20 ms (``MediaSession.receive`` of the caller's
packet, then ``MediaSession.tick`` for the packet we send: RFC 4733/jitter
buffer, prompt frame, RTP header; with SRTP, ``unprotect`` and ``protect``).
The caller's packets are made (and, with SRTP, protected with the caller's
key) before the clock starts. No sockets: the socket IO floor is the same
with or without SRTP (bench/ivr_load.py measures the whole call).

Per N and mode it prints CPU ms per call-second (what one call's media costs
for each second it lasts) and the time one whole tick takes for all N calls,
p50/p99/max, against the 20 ms budget.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from callhook.media import g711, tones
from callhook.media.rtp import pack_header
from callhook.media.session import MediaSession
from callhook.media.srtp import SrtpContext, new_key

TICK = 0.02
PEER = ("192.0.2.10", 40000)


def build(calls: int, ticks: int, srtp: bool) -> tuple[list[MediaSession], list[list[bytes]]]:
    """``calls`` sessions playing a prompt, and each one's caller packets for ``ticks`` ticks."""
    prompt = g711.encode("ulaw", tones.tone(440.0, ticks * TICK + 1))
    speech = g711.encode("ulaw", tones.tone(300.0, 0.02))
    sessions, packets = [], []
    for n in range(calls):
        session = MediaSession("PCMU", 0, 101, PEER, label=f"bench {n}")
        session.play_encoded(1, prompt)
        stream = [
            pack_header(0, seq, seq * 160, 1000 + n, seq == 0) + speech for seq in range(ticks)
        ]
        if srtp:
            ours, theirs = new_key(), new_key()
            session.srtp = SrtpContext(ours, theirs)
            caller = SrtpContext(theirs, ours)
            stream = [caller.protect(p) for p in stream]
        sessions.append(session)
        packets.append(stream)
    return sessions, packets


def run(calls: int, seconds: float, srtp: bool) -> tuple[float, list[float]]:
    ticks = int(seconds / TICK)
    sessions, packets = build(calls, ticks, srtp)
    gc.collect()
    durations = []
    cpu0 = time.process_time()
    for t in range(ticks):
        now = t * TICK
        start = time.perf_counter()
        for session, stream in zip(sessions, packets, strict=True):
            session.receive(stream[t], PEER, now)
            session.tick(now)
        durations.append((time.perf_counter() - start) * 1000)
    cpu_ms = (time.process_time() - cpu0) * 1000
    sent = sum(s.sender.packets for s in sessions)
    assert sent == calls * ticks, "every session sent a packet every tick"
    return cpu_ms / (calls * ticks * TICK), sorted(durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", default="200,400")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print("media tick, receive + send per call per 20 ms, one core, no sockets")
    print(f"{'calls':>6} {'srtp':>5} {'CPU ms/call-s':>14} {'tick p50':>9} {'p99':>7} {'max':>7}")
    for calls in (int(c) for c in args.calls.split(",")):
        for srtp in (False, True):
            per_call_second, durations = run(calls, args.seconds, srtp)
            p50 = statistics.median(durations)
            p99 = durations[int(len(durations) * 0.99)]
            print(
                f"{calls:>6} {'on' if srtp else 'off':>5} {per_call_second:>14.3f} "
                f"{p50:>7.2f}ms {p99:>5.2f}ms {durations[-1]:>5.2f}ms"
            )


if __name__ == "__main__":
    main()
