"""A conference room's audio: each participant hears the sum of the others. Sans-IO.

Theory of operation
-------------------
Every 20 ms the media tick hands a room's participants' frames (decoded to linear
samples, a row each, zeros where a participant sent nothing) and says whose are mixed:
the talkers that are not muted, in a room that is active
(:meth:`callhook.conference.room.Room.talkers`). :func:`mix` sums the mixed rows once,
then gives each participant that sum less its own row, so nobody hears itself, with the
sum held within the 16-bit range (saturated, never wrapped: a wrapped sum is a loud
click). Each row is then encoded in the participant's own law (µ-law or A-law).

A room of many lines adds up their noise, and one noisy line is heard by everyone. So a
talker is mixed only while its :class:`TalkerGate` is open: a frame at or above
:data:`OPEN_DBOV` opens it, and it stays open :data:`HANGOVER` frames after the last such
frame, so the ends of words and the short pauses between them are heard whole. (Asterisk's
ConfBridge does the same with its ``dsp_drop_silence`` option, off there by default; here
the gate is on, its thresholds options of the room.)

A participant's call takes part through two :class:`~callhook.media.bridge.Feed` objects,
as a bridged call does (:meth:`MediaSession.join <callhook.media.session.MediaSession.join>`):
what it receives goes into its *talk* feed, and what it sends, when its own player has
nothing to play (a beep, an announcement, the music while the room holds), comes from its
*hears* feed. :class:`RoomMix` takes a frame from every talk feed each tick, mixes them and
puts each participant's frame into its hears feed; a feed's cushion absorbs the jitter of
a talker's packets.

This is the reference the native mixer is tested against, row by row.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from callhook.media import g711
from callhook.media.bridge import Feed
from callhook.media.frames import frame_power

FRAME = 160  # samples of 20 ms at 8 kHz
#: A frame at or above this level (dB relative to a full-scale square wave's power) opens
#: a talker's gate: about ten dB above a quiet telephone line's noise, below soft speech.
OPEN_DBOV = -45.0
#: Frames a talker's gate stays open after its last frame at or above :data:`OPEN_DBOV`
#: (300 ms: a word's quiet end and the pause before the next).
HANGOVER = 15

Samples = npt.NDArray[np.int16]
_FULL_SCALE = 32768.0**2  # the mean square of a full-scale square wave


def power_of_dbov(dbov: float) -> float:
    """The mean square (16-bit scale, as :func:`callhook.media.frames.frame_power`) of a
    frame ``dbov`` below full scale."""
    return _FULL_SCALE * 10 ** (dbov / 10)


def dbov_of_power(power: float) -> float:
    """A mean square's level in dBov (-inf for silence)."""
    return -math.inf if power <= 0 else 10 * math.log10(power / _FULL_SCALE)


class TalkerGate:
    """Whether one talker is mixed: open on a loud frame, closed :data:`HANGOVER` frames
    after the last one (see the module docstring)."""

    def __init__(self, open_dbov: float = OPEN_DBOV, hangover: int = HANGOVER) -> None:
        self.threshold = power_of_dbov(open_dbov)
        self.hangover = hangover
        self._left = 0  # frames the gate stays open without another loud one

    def feed(self, power: float) -> bool:
        """One frame of mean square ``power``: whether it is mixed."""
        if power >= self.threshold:
            self._left = self.hangover + 1
        if self._left:
            self._left -= 1
            return True
        return False

    def close(self) -> None:
        """The talker is out of the mix (muted, or the room holds): it opens afresh."""
        self._left = 0


def mix(frames: npt.NDArray[np.int16], mixed: Sequence[bool]) -> npt.NDArray[np.int16]:
    """What each participant hears: ``frames`` holds a row of :data:`FRAME` samples for
    each, ``mixed[i]`` says whether row ``i`` is in the room's sum; row ``i`` of the
    answer is that sum less row ``i`` where it is in it, saturated to 16 bits."""
    rows = np.asarray(frames, dtype=np.int32)
    if rows.ndim != 2 or len(rows) != len(mixed):
        raise ValueError(f"{len(mixed)} participants, frames of shape {rows.shape}")
    use = np.asarray(mixed, dtype=bool)
    total = rows[use].sum(axis=0, dtype=np.int32)
    heard = total[np.newaxis, :] - np.where(use[:, np.newaxis], rows, 0)
    out: npt.NDArray[np.int16] = np.clip(heard, -32768, 32767).astype(np.int16)
    return out


def mix_rooms_python(
    frames: npt.NDArray[np.int16], mixed: Sequence[bool], bounds: Sequence[int]
) -> npt.NDArray[np.int16]:
    """Every room of a tick at once: room ``r``'s participants are rows ``bounds[r]`` to
    ``bounds[r + 1]`` of ``frames`` (and of ``mixed``); each room's rows as :func:`mix`
    gives them. The reference of the native :func:`mix_rooms`."""
    heard = np.empty((len(mixed), FRAME), dtype=np.int16)
    for first, last in itertools.pairwise(bounds):
        heard[first:last] = mix(frames[first:last], mixed[first:last])
    return heard


def mix_rooms_native(
    frames: npt.NDArray[np.int16], mixed: Sequence[bool], bounds: Sequence[int]
) -> npt.NDArray[np.int16]:
    """:func:`mix_rooms_python` in C (``_mixing.c``): the same rows, to the bit."""
    rows = np.ascontiguousarray(frames, dtype=np.int16)
    if rows.shape != (len(mixed), FRAME):
        raise ValueError(f"{len(mixed)} participants, frames of shape {rows.shape}")
    heard = np.empty_like(rows)
    flags = np.asarray(mixed, dtype=np.uint8)
    _mixing.mix_rooms(rows, flags, np.asarray(bounds, dtype=np.int64), heard)
    return heard


try:
    from callhook.media import _mixing
except ImportError:  # no C compiler where callhook was installed
    mix_rooms = mix_rooms_python
else:
    mix_rooms = mix_rooms_native


def native() -> bool:
    """Whether the rooms are mixed in C (the extension was built)."""
    return mix_rooms is mix_rooms_native


def encode(heard: npt.NDArray[np.int16], laws: Sequence[g711.Law]) -> list[bytes]:
    """Each row of ``heard`` in its participant's law: the payloads to send."""
    return [g711.encode(law, row) for law, row in zip(laws, heard, strict=True)]


@dataclass(slots=True)
class _Member:
    law: g711.Law
    talk: Feed
    hears: Feed
    gate: TalkerGate


class RoomMix:
    """One room's participants' feeds, mixed a tick at a time (see the module docstring)."""

    def __init__(self, open_dbov: float = OPEN_DBOV, hangover: int = HANGOVER) -> None:
        self.open_dbov = open_dbov
        self.hangover = hangover
        self._members: dict[str, _Member] = {}

    def add(self, pid: str, law: g711.Law) -> tuple[Feed, Feed]:
        """Participant ``pid``, whose call sends and hears ``law``: its talk and hears feeds."""
        if pid in self._members:
            raise ValueError(f"{pid!r} is in the mix already")
        member = _Member(
            law, Feed(law, law), Feed(law, law), TalkerGate(self.open_dbov, self.hangover)
        )
        self._members[pid] = member
        return member.talk, member.hears

    def remove(self, pid: str) -> None:
        self._members.pop(pid, None)

    @property
    def pids(self) -> list[str]:
        """The participants, in the order :meth:`take` gives their frames."""
        return list(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def take(self, talkers: Collection[str]) -> tuple[npt.NDArray[np.int16], list[bool]]:
        """This tick's frame of every participant (a row each, zeros where it sent
        nothing), and whether each is mixed: ``talkers`` alone, each while its gate is open."""
        members = list(self._members.items())
        rows = np.zeros((len(members), FRAME), dtype=np.int16)
        mixed = [False] * len(members)
        for i, (pid, member) in enumerate(members):
            frame = member.talk.frame()
            if frame is not None:
                rows[i] = g711.decode(member.law, frame)
            if pid in talkers:
                mixed[i] = member.gate.feed(frame_power(rows[i]) if frame is not None else 0.0)
            else:
                member.gate.close()
        return rows, mixed

    def give(self, heard: npt.NDArray[np.int16]) -> None:
        """Each participant's row of ``heard`` (in :meth:`take`'s order) into its hears feed."""
        for member, row in zip(self._members.values(), heard, strict=True):
            member.hears.push(g711.encode(member.law, row))

    def tick(self, talkers: Collection[str], active: bool) -> None:
        """One 20 ms tick of this room alone: :meth:`take`, and while the room is
        ``active``, :meth:`give` of the mix (:func:`mix_all` does every room at once)."""
        rows, mixed = self.take(talkers)
        if active:
            self.give(mix(rows, mixed))


def mix_all(
    rooms: Sequence[tuple[RoomMix, Collection[str], bool]],
) -> list[tuple[npt.NDArray[np.int16], list[bool]]]:
    """One tick of every room: ``(mix, talkers, active)`` each; the active rooms mixed in
    one call (:func:`mix_rooms`), each room's frames taken all the same. Returns what was
    taken of each room (its frames, and which the mix took), in ``rooms``' order."""
    taken = [(room, *room.take(talkers)) for room, talkers, _ in rooms]
    live = [
        (room, rows, mixed)
        for (room, rows, mixed), (_, _, active) in zip(taken, rooms, strict=True)
        if active and len(mixed)
    ]
    if not live:
        return [(rows, mixed) for _, rows, mixed in taken]
    bounds = [0]
    for _, _, mixed in live:
        bounds.append(bounds[-1] + len(mixed))
    frames = np.concatenate([rows for _, rows, _ in live])
    flags = [flag for _, _, mixed in live for flag in mixed]
    heard = mix_rooms(frames, flags, bounds)
    for (room, _, _), first, last in zip(live, bounds[:-1], bounds[1:], strict=True):
        room.give(heard[first:last])
    return [(rows, mixed) for _, rows, mixed in taken]
