"""Benchmark of the conference mixer: CPU per participant per 20 ms tick.

    .venv/bin/python -m bench.mixing [--participants 200] [--room 5,40] [--ticks 500]

For rooms of each size (``--room``), ``--participants`` callers split into rooms, every
caller a talker sending a frame of speech-level noise each tick in its own law (half
µ-law, half A-law). One tick of :func:`callhook.media.mixing.mix_all`: every room's
frames taken from the talk feeds, decoded, gated, mixed and encoded into the hears feeds.
Printed per row: µs of CPU per tick for all rooms, and per participant, with the mix
itself in C (``_mixing.c``) and in numpy (the reference), measured in the same run; and,
as the floor beside them, the same participants' frames only decoded and encoded again
(what a bridged call's media already costs: no mixing at all).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from callhook.media import g711, mixing
from callhook.media.mixing import FRAME, RoomMix, mix_all

LAWS: tuple[g711.Law, ...] = ("ulaw", "alaw")


def rooms_of(participants: int, size: int) -> list[tuple[RoomMix, set[str], bool]]:
    made: list[tuple[RoomMix, set[str], bool]] = []
    for first in range(0, participants, size):
        room = RoomMix()
        names = set()
        for i in range(first, min(first + size, participants)):
            room.add(f"p{i}", LAWS[i % 2])
            names.add(f"p{i}")
        made.append((room, names, True))
    return made


def frames_for(participants: int, ticks: int) -> list[list[bytes]]:
    """Each tick's payload of each participant: noise at about -20 dBov."""
    rng = np.random.default_rng(5)
    noise = rng.normal(0, 3000, (ticks, participants, FRAME)).clip(-32768, 32767).astype(np.int16)
    return [
        [g711.encode(LAWS[i % 2], noise[t, i]) for i in range(participants)] for t in range(ticks)
    ]


def run(
    rooms: list[tuple[RoomMix, set[str], bool]],
    payloads: list[list[bytes]],
    step: Callable[[list[tuple[RoomMix, set[str], bool]]], object],
) -> float:
    """CPU seconds for the ticks of ``payloads``."""
    feeds = [
        (member.talk, member.hears) for room, _, _ in rooms for member in room._members.values()
    ]
    spent = 0.0
    for tick in payloads:
        for (talk, _), payload in zip(feeds, tick, strict=True):
            talk.push(payload)
        started = time.thread_time()
        step(rooms)
        spent += time.thread_time() - started
        for _, hears in feeds:
            hears.frame()
    return spent


def transcode(rooms: list[tuple[RoomMix, set[str], bool]]) -> None:
    """The floor: every frame decoded and encoded again, nothing mixed."""
    for room, _, _ in rooms:
        for member in room._members.values():
            frame = member.talk.frame()
            if frame is not None:
                member.hears.push(g711.encode(member.law, g711.decode(member.law, frame)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--participants", type=int, default=200)
    parser.add_argument("--room", default="5,40")
    parser.add_argument("--ticks", type=int, default=500)
    args = parser.parse_args()
    payloads = frames_for(args.participants, args.ticks)
    print(
        f"conference mixer: {args.participants} participants, {args.ticks} ticks, "
        f"C mix: {mixing.native()}"
    )
    print(
        " room | C: µs/tick  µs/participant | numpy: µs/tick  µs/participant "
        "| floor (transcode): µs/tick"
    )
    for size in (int(s) for s in args.room.split(",")):
        figures = []
        for mix_rooms in (mixing.mix_rooms, mixing.mix_rooms_python):
            mixing.mix_rooms = mix_rooms  # (mix_all looks it up when it runs)
            try:
                spent = run(rooms_of(args.participants, size), payloads, mix_all)
            finally:
                mixing.mix_rooms = (
                    mixing.mix_rooms_native if mixing.native() else mixing.mix_rooms_python
                )
            figures.append(spent / args.ticks * 1e6)
        floor = run(rooms_of(args.participants, size), payloads, transcode) / args.ticks * 1e6
        each = args.participants
        print(
            f" {size:4d} | {figures[0]:10.0f}  {figures[0] / each:14.2f} | "
            f"{figures[1]:14.0f}  {figures[1] / each:14.2f} | {floor:10.0f}"
        )


if __name__ == "__main__":
    main()
