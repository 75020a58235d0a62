"""The media tick's Python per call and tick, in isolation: µs of each step for N calls.

    .venv/bin/python -m bench.media_tick [--calls 300] [--ticks 250] [--sweep-mb 0]

N sessions (PCMU) each receive one 20 ms packet per tick, exactly as the engine
(``edge/mediaengine.py``) drives them, with no sockets and nothing else running:

* ``receive``: each call's packet, the usual ones taken in C (``inlet.take_all``),
  the rest by :meth:`MediaSession.receive`;
* ``measure``: every call's frame decoded and measured at once (media/frames.py);
* ``detect``: each session's detectors, the usual frames in C (``gate.feed_all``),
  the rest by :meth:`MediaSession.detect`;
* ``tick``: each call's packet to send, the usual ones made in C (``outlet.tick_all``),
  the rest by :meth:`MediaSession.tick`.

Then the same with the Python path alone (what runs where the extensions were not
built, and the reference the C paths follow).

Two kinds of call: digits as RFC 4733 events (the load kit's), and digits in the
audio (no telephone-event: the in-band detector runs on every frame). A call's
socket IO (one ``recvfrom`` and one ``sendto`` per tick) comes on top; so does,
under load, what the rest of the process does to the CPU's caches:
``bench.ivr_load`` measures the whole. Issue 19's note compares the two.
``--sweep-mb N`` writes N MB between ticks (not timed), as the rest of a loaded
process does, so the tick starts with cold caches.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from callhook.media import frames, gate, inlet, outlet
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession

PEER = ("127.0.0.1", 5004)


def run(calls: int, ticks: int, events: bool, native: bool, sweep_mb: int = 0) -> dict[str, float]:
    """µs per call and tick of each step (see the module docstring); ``native``: with
    the C paths of the usual packets and frames, as the engine runs; ``sweep_mb``: MB
    written between ticks."""
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
    sweep = np.zeros(sweep_mb << 17, dtype=np.float64)  # 8 bytes each
    for t in range(ticks):
        now += 0.02
        if sweep_mb:
            sweep += 1.0  # the caches, as the rest of the process leaves them
        a = clock()
        received = [((None, s), packets[i][t], PEER) for i, s in enumerate(sessions)]
        rest = inlet.take_all(received, now)[0] if native else received
        for (_, session), data, source in rest:
            session.receive(data, source, now)
        b = clock()
        payloads = [p for s in sessions for p in s.undetected]
        samples, powers, verdicts = frames.measure("ulaw", payloads, tones=not events)
        c = clock()
        for session in sessions:
            session.undetected = []
        # (One frame per call: each call's is at its own place.)
        left = gate.feed_all(sessions, samples, powers) if native else range(len(sessions))
        for i in left:
            sessions[i].detect(samples[i : i + 1], powers[i : i + 1], verdicts[i : i + 1])
        d = clock()
        calls_fd = [(s, 0) for s in sessions]
        undone = outlet.tick_all(calls_fd, now)[1] if native else range(len(sessions))
        for i in undone:
            sessions[i].tick(now)
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
    parser.add_argument("--sweep-mb", type=int, default=0)
    args = parser.parse_args()
    sweep = f", {args.sweep_mb} MB swept between ticks" if args.sweep_mb else ""
    print(f"media tick, {args.calls} calls x {args.ticks} ticks{sweep}: µs per call and tick")
    for native in (True, False):
        print("  the usual packets and frames in C:" if native else "  Python alone:")
        for events in (True, False):
            kind = "digits as events " if events else "digits in the audio"
            figures = run(args.calls, args.ticks, events, native, args.sweep_mb)
            steps = "  ".join(f"{step} {us:5.2f}" for step, us in figures.items())
            print(f"    {kind}: {steps}  total {sum(figures.values()):5.2f}")


if __name__ == "__main__":
    main()
