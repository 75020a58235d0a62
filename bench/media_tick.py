"""The media tick's Python per call and tick, in isolation: µs of each step for N calls.

    .venv/bin/python -m bench.media_tick [--calls 300] [--ticks 250]

N sessions (PCMU) each receive one 20 ms packet per tick, exactly as the engine
(``adapters/media.py``) drives them, with no sockets and nothing else running:

* ``receive``: :meth:`MediaSession.receive` of each call's packet;
* ``measure``: every call's frame decoded and measured at once (media/frames.py);
* ``detect``: each session's detectors (:meth:`MediaSession.detect`);
* ``tick``: each session's :meth:`MediaSession.tick` (the packet it sends).

Two kinds of call: digits as RFC 4733 events (the load kit's), and digits in the
audio (no telephone-event: the in-band detector runs on every frame). A call's
socket IO (one ``recvfrom`` and one ``sendto`` per tick) comes on top; so does,
under load, what the rest of the process does to the CPU's caches:
``bench.ivr_load`` measures the whole. Issue 19's note compares the two.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from callhook.media import frames
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession

PEER = ("127.0.0.1", 5004)


def run(calls: int, ticks: int, events: bool) -> dict[str, float]:
    """µs per call and tick of each step (see the module docstring)."""
    sessions = [
        MediaSession("PCMU", 0, 101 if events else None, PEER, label=f"call {i}")
        for i in range(calls)
    ]
    for session in sessions:
        session.batched = True
    rng = np.random.default_rng(1)
    audio = rng.integers(0x70, 0x80, (ticks, 160), dtype=np.uint8)  # quiet line noise
    packets = [
        [
            RtpPacket(0, False, t, t * 160, 1000 + i, audio[t].tobytes()).serialize()
            for t in range(ticks)
        ]
        for i in range(calls)
    ]
    spent = dict.fromkeys(("receive", "measure", "detect", "tick"), 0.0)
    now = 1000.0
    clock = time.perf_counter
    for t in range(ticks):
        now += 0.02
        a = clock()
        for i, session in enumerate(sessions):
            session.receive(packets[i][t], PEER, now)
        b = clock()
        payloads = [p for s in sessions for p in s.undetected]
        samples, powers, verdicts = frames.measure("ulaw", payloads, tones=not events)
        c = clock()
        first = 0
        for session in sessions:
            last = first + len(session.undetected)
            session.undetected = []
            session.detect(samples[first:last], powers[first:last], verdicts[first:last])
            first = last
        d = clock()
        for session in sessions:
            session.tick(now)
        e = clock()
        spent["receive"] += b - a
        spent["measure"] += c - b
        spent["detect"] += d - c
        spent["tick"] += e - d
    return {step: seconds / (calls * ticks) * 1e6 for step, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--ticks", type=int, default=250)
    args = parser.parse_args()
    print(f"media tick, {args.calls} calls x {args.ticks} ticks: µs per call and tick")
    for events in (True, False):
        kind = "digits as events " if events else "digits in the audio"
        figures = run(args.calls, args.ticks, events)
        steps = "  ".join(f"{step} {us:5.2f}" for step, us in figures.items())
        print(f"  {kind}: {steps}  total {sum(figures.values()):5.2f}")


if __name__ == "__main__":
    main()
