"""A playing prompt's cover: the media thread plays the prompt on while Python is late.

Python gives the thread each playing prompt's coming frames beyond the one it makes
(``outlet.cover_all``, ``Plane.cover``); a slot whose frame Python made too late gets the
prompt's own audio instead of silence. Run on the virtual clock (``Plane.step``), then
``cover_all`` on real sessions.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from callhook.edge.mediaengine import MediaEngine
from callhook.edge.plane import AHEAD, Plane
from callhook.media import outlet
from callhook.media.dtmfsend import Digits
from callhook.media.player import MAX_HOLD
from callhook.media.session import MediaSession
from tests.unit.edge.conftest import T0
from tests.unit.edge.test_plane import at, drain, header, rtp, run, udp

FRAME = 160


def frames(*marks: int) -> bytes:
    """Frames of G.711, frame i all of byte ``marks[i]``."""
    return b"".join(bytes([m]) * FRAME for m in marks)


def payloads(got: list[bytes]) -> list[int]:
    """Each packet's payload, by its first byte (0xFF: μ-law silence)."""
    return [p[12] for p in got]


@contextmanager
def started(plane: Plane) -> Iterator[tuple[int, socket.socket, tuple[str, int]]]:
    """A call's line on ``plane`` whose first frame (byte 1, sequence 10, timestamp 8000)
    is queued for slot 0: its descriptor, the peer's socket and address."""
    line, peer = udp(), udp()
    with line, peer:
        to = peer.getsockname()
        plane.add(line, "call")
        plane.send([(line.fileno(), rtp(10, 8000, frames(1)), to)], 0)
        yield line.fileno(), peer, to


def test_a_late_slot_gets_the_prompts_cover_and_silence_after_it(plane: Plane) -> None:
    with started(plane) as (fd, peer, _to):
        assert plane.cover([(fd, 1, False, frames(2, 3, 4))], 0) == 0
        for slot in range(5):
            run(plane, slot)
        got = drain(peer)
        assert payloads(got) == [1, 2, 3, 4, 0xFF]
        # Numbered and timed as the fillers are: the call's media clock goes on.
        assert [header(p)[2:] for p in got] == [(10 + i, 8000 + 160 * i) for i in range(5)]
        assert (plane.covered, plane.fillers) == (3, 1)


def test_a_frame_python_makes_in_time_goes_instead_of_the_cover(plane: Plane) -> None:
    with started(plane) as (fd, peer, to):
        plane.cover([(fd, 1, False, frames(2, 3, 4))], 0)
        plane.send([(fd, rtp(12, 8320, frames(9)), to)], 2)
        for slot in range(4):
            run(plane, slot)
        assert payloads(drain(peer)) == [1, 2, 9, 4]


def test_a_prompt_stopped_withdraws_its_cover_from_the_slot_given(plane: Plane) -> None:
    with started(plane) as (fd, peer, _to):
        plane.cover([(fd, 1, False, frames(2, 3, 4))], 0)
        plane.cover([(fd, 2, True, b"")], 0)  # from slot 2: none
        plane.cover([(fd, 3, False, frames(7))], 0)  # another prompt's
        for slot in range(5):
            run(plane, slot)
        assert payloads(drain(peer)) == [1, 2, 0xFF, 7, 0xFF]


def test_a_skip_moves_the_cover_on_with_the_prompt(plane: Plane) -> None:
    with started(plane) as (fd, peer, _to):
        plane.cover([(fd, 1, False, frames(2, 3))], 0)
        run(plane, 0)
        # The thread stalls 10 slots (more than it catches up): it skips them, and so does
        # Python; the prompt goes on where it was.
        slot, _when, _late, skipped, _ = run(plane, 11)
        assert (slot, skipped) == (11, 10)
        run(plane, 12)
        assert payloads(drain(peer)) == [1, 2, 3]


def test_srtp_and_what_is_not_whole_frames_get_no_cover(plane: Plane) -> None:
    line, peer = udp(), udp()
    with line, peer:
        to, fd = peer.getsockname(), line.fileno()
        plane.add(line, "call")
        assert plane.cover([(fd, 1, False, b"\x02" * 100)], 0) == 1
        plane.send([(fd, rtp(1, 0, frames(1)) + b"tag-of-ten", to)], 0, True)
        plane.cover([(fd, 1, False, frames(2, 3))], 0)
        for slot in range(3):
            run(plane, slot)
        assert len(drain(peer)) == 1  # verbatim (SRTP): never filled in
        assert plane.covered == 0


def tick(session: MediaSession) -> None:
    """One tick's frame, made in C or (the prompt's first) by the session, as the engine does."""
    _batch, rest = outlet.tick_all([(session, 7)], T0)
    if rest:
        session.tick(T0)


def test_cover_all_gives_a_playing_prompts_coming_frames_a_few_at_a_time() -> None:
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    prompt = frames(*range(1, 41))  # 40 frames
    session.play_encoded(1, prompt)
    calls = [(session, 7)]
    tick(session)  # frame 1
    got = outlet.cover_all(calls, 24)
    # Frames 2 to 25, three to a command, from the slot after this tick's frame.
    assert [(fd, first, clear) for fd, first, clear, _ in got] == [
        (7, 1 + 3 * i, False) for i in range(8)
    ]
    assert b"".join(audio for *_, audio in got) == prompt[FRAME : 25 * FRAME]
    for _ in range(2):  # two more frames made: 22 ahead, not topped up yet
        tick(session)
        assert outlet.cover_all(calls, 24) == []
    tick(session)  # 21 ahead: three more, after the 24 given
    assert outlet.cover_all(calls, 24) == [(7, 22, False, prompt[25 * FRAME : 28 * FRAME])]
    session.stop_prompt(1)
    # Withdrawn from this tick's own slot on (its frame may come late).
    assert outlet.cover_all(calls, 24) == [(7, 0, True, b"")]
    assert outlet.cover_all(calls, 24) == []  # (said once)


def test_the_prompts_end_is_not_covered_and_a_new_prompt_clears_first() -> None:
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    session.play_encoded(1, frames(1, 2, 3) + b"\x04" * 80)  # three frames and a half
    tick(session)
    got = outlet.cover_all([(session, 7)], 24)
    assert got == [(7, 1, False, frames(2, 3))]  # (the half frame is the session's)
    session.play_encoded(2, frames(5, 6))
    tick(session)
    assert outlet.cover_all([(session, 7)], 24) == [(7, 0, True, b""), (7, 1, False, frames(6))]


def sent(session: MediaSession) -> bytes:
    """One tick's frame, made in C or (the prompt's first) by the session: its payload."""
    batch, _rest = outlet.tick_all([(session, 7)], T0)
    datagram = batch[0][1] if batch else session.tick(T0)
    assert datagram is not None
    return datagram[12:]


def covering(session: MediaSession, ticks: int) -> tuple[list[bytes], dict[int, bytes]]:
    """``ticks`` ticks of ``session``, each followed by its cover as the engine gives it:
    the frames made, and the cover the thread would hold for each slot (tick k's frame is
    slot k's; a command for ``first`` covers from slot k + ``first``)."""
    made: list[bytes] = []
    cover: dict[int, bytes] = {}
    for k in range(ticks):
        made.append(sent(session))
        for _, first, clear, audio in outlet.cover_all([(session, 7)], 24):
            if clear:
                cover = {slot: f for slot, f in cover.items() if slot < k + first}
            for i in range(len(audio) // FRAME):
                cover[k + first + i] = audio[i * FRAME : (i + 1) * FRAME]
    return made, cover


def test_the_cover_reaches_across_a_play_lists_next_file() -> None:
    """A play list's next file is joined to the audio playing once that audio ends within
    the cover's reach (what the player does when it runs out, done early): a late slot
    at the join gets the next file's frames, and the frames made are the same bytes."""
    first, second = frames(*range(1, 11)), frames(*range(11, 51))  # 10 and 40 frames
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    session.player.play(1, [first, second])
    made, cover = covering(session, 2)
    # By the second tick (the first file has 8 frames left), the cover runs 24 frames
    # ahead of it, across the join at slot 10.
    assert sorted(cover) == list(range(1, 26))
    assert [cover[slot][0] for slot in range(1, 26)] == list(range(2, 27))
    made += covering(session, 10)[0]
    assert made == [frames(m) for m in range(1, 13)]
    # The same frames as a player whose cover never looked ahead.
    plain = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="plain")
    plain.player.play(1, [first, second])
    assert [sent(plain) for _ in range(12)] == made


def test_a_segment_joined_as_the_same_object_goes_on_being_covered() -> None:
    # The same cached audio played twice: the second is that very object again.
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    again = frames(1, 2, 3, 4)
    session.player.play(1, [again, again, again])
    made, cover = covering(session, 3)
    marks = [1, 2, 3, 4] * 3
    # By the third tick, across both joins to the end.
    assert [cover[slot][0] for slot in sorted(cover)] == marks[1:]
    made += covering(session, 9)[0]
    assert made == [frames(m) for m in marks]


def test_the_cover_is_what_python_makes_for_its_slot_across_digits_sent_as_events() -> None:
    """Audio, a digit sent as an RFC 4733 event (7 packets, then 60 ms of silence), audio:
    nothing is covered while the event is sent, and every slot covered gets the frame
    Python makes for it."""
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    session.player.play(1, [frames(1, 2, 3), Digits("1"), frames(*range(4, 40))])
    made, cover = covering(session, 40)
    assert [len(m) for m in made[3:10]] == [4] * 7  # the event's packets
    assert made[13:] == [frames(m) for m in range(4, 31)]  # (after the gap)
    assert all(cover[slot] == made[slot] for slot in cover if slot < len(made))
    assert not set(cover) & set(range(3, 10))


def test_the_cover_stops_at_digits_to_send() -> None:
    """Digits in a play list are not audio the thread could send: the cover ends before."""
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    session.player.play(1, [frames(1, 2, 3), Digits("1"), frames(4, 5)])
    _, cover = covering(session, 2)
    assert sorted(cover) == [1, 2]  # frames 2 and 3 only


def test_what_the_thread_could_not_take_is_withdrawn_and_given_again() -> None:
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    session.play_encoded(1, frames(*range(1, 11)))
    calls = [(session, 7)]
    tick(session)
    assert len(outlet.cover_all(calls, 24)) == 3  # frames 2 to 10
    outlet.uncover(calls)
    again = outlet.cover_all(calls, 24)
    assert again[0] == (7, 0, True, b"")
    assert b"".join(a for *_, a in again[1:]) == frames(*range(2, 11))


def test_a_held_prompt_stays_the_players_and_begins_after_at_most_max_hold_ticks() -> None:
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    player = session.player
    session.play_encoded(1, frames(1, 2))
    assert player.hold_start()
    player.relay(Digits("5"))  # (a bridged partner's digit, in the same tick)
    assert not player.idle  # the prompt is still the player's: the digit waits for it
    assert outlet.cover_all([(session, 7)], 24) == []  # not begun: no cover yet
    assert session.tick(T0) is not None and player._prompt is not None
    player.resume()
    for _ in range(MAX_HOLD - 1):
        assert player.hold_start()
        player.resume()
    assert not player.hold_start()  # it has waited long enough: it begins, late or not
    assert player.next_frame(0) == (frames(1), None)
    assert not player.hold_start()  # (begun)


def test_a_prompt_given_a_lead_begins_with_that_much_silence_and_is_not_held() -> None:
    session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 9), label="call")
    player = session.player
    session.play_encoded(1, frames(1, 2))
    assert not player.hold_start(3)  # begins now, three frames of silence first
    made = [player.next_frame(0)[0]]
    assert not player.hold_start(3)  # (begun: no second lead)
    made += [player.next_frame(0)[0] for _ in range(4)]
    assert made == [player.silence] * 3 + [frames(1), frames(2)]
    # Digits first: a lead is no use to an event (the cover stops at digits): held.
    player.play(2, [Digits("1"), frames(3)])
    assert player.hold_start(3)
    player.resume()


@pytest.mark.parametrize("events", [True, False], ids=["rfc4733", "in-band"])
def test_digits_about_to_start_are_held_and_each_digit_starts_whole(events: bool) -> None:
    """On a late tick, digits about to start wait (silence meanwhile), at most MAX_HOLD
    ticks each, as a prompt's start does; the audio before them is never held."""
    session = MediaSession("PCMU", 0, 101 if events else None, ("127.0.0.1", 9), label="call")
    player = session.player
    player.play(1, [frames(1), Digits("12")])
    assert player.hold_start()  # (not begun)
    player.resume()
    assert player.next_frame(0) == (frames(1), None)
    for _ in range(MAX_HOLD):  # the digits are next: held on every late tick
        assert player.hold_start()
        assert player.next_frame(0) == (player.silence, None)
        player.resume()
    assert not player.hold_start()  # waited long enough
    player.next_frame(0)
    if not events:  # both digits' tones are the prompt's audio now: nothing more to hold
        assert not player.hold_start()
        return
    assert player.event_packet() is not None  # the first digit's event began
    while player._event is not None:  # (its packets; then its gap of silence)
        assert not player.hold_start()
        player.next_frame(0)
        player.event_packet()
    while player._prompt is not None and player._prompt.pos < len(player._prompt.audio):
        assert not player.hold_start()
        player.next_frame(0)
    assert player.hold_start()  # the second digit is held too
    player.resume()
    player.next_frame(0)
    assert player.event_packet() is not None


@contextlib.asynccontextmanager
async def engine_call() -> AsyncIterator[tuple[MediaEngine, Plane, MediaSession, socket.socket]]:
    """A media engine on the plane's virtual clock (its tick the test's to run) with one
    call open on it, whose audio goes to the caller's socket."""
    engine = MediaEngine("127.0.0.1", 43600, 43700)
    caller = udp()
    try:
        session = MediaSession("PCMU", 0, 101, caller.getsockname(), label="call")
        sock, port = engine.allocate()
        plane = engine.plane
        assert plane is not None
        plane.set_origin(T0)
        engine._start = lambda: None  # type: ignore[method-assign]  # the test's clock
        await engine.open(session, sock, port, lambda: None)
        yield engine, plane, session, caller
    finally:
        caller.close()
        engine.shutdown()


async def test_a_prompt_python_starts_late_is_heard_from_its_start() -> None:
    """Python falls eight slots behind the thread and starts a prompt then: the prompt
    begins with silence up to a slot to come, and the caller hears it from its first
    frame, whole, after the thread's silence."""
    async with engine_call() as (engine, plane, session, caller):

        def step(slot: int) -> tuple[int, float, float, int, list[Any]]:
            assert plane is not None
            plane.step(at(slot))
            got = plane.next_slot()
            assert got is not None and got[0] == slot
            return got

        def work(got: tuple[int, float, float, int, list[Any]]) -> None:
            engine._work(got[1], got[4], got[0] + AHEAD)

        for slot in range(10):  # on time: silence
            work(step(slot))
        behind = [step(slot) for slot in range(10, 18)]  # the thread goes on alone
        session.play_encoded(1, frames(*range(1, 31)))  # 30 frames of 1 to 30
        for got in behind:  # Python catches up, late
            work(got)
        for slot in range(18, 60):
            work(step(slot))
        marks = payloads(drain(caller))
        start = next(i for i, m in enumerate(marks) if m != 0xFF)
        assert set(marks[:start]) == {0xFF}
        assert marks[start : start + 30] == list(range(1, 31))
        assert engine.stale_frames == 5  # (slots 13 to 17: silence, nothing playing yet)


@pytest.mark.parametrize("on_time", [10, 0], ids=["after-ten-slots", "from-the-start"])
async def test_a_prompt_python_starts_while_it_stays_behind_is_heard_from_its_start(
    on_time: int,
) -> None:
    """Python runs eight slots behind the thread and stays there: a tick on time never
    comes. The prompt begins at once with silence up to a slot the thread has still to
    run, the cover takes it there, and the caller hears it whole, without its start
    waiting for Python to catch up. Also where Python was behind from the call's first
    frame (the line learns from that frame, too late for its slot, where to send)."""
    async with engine_call() as (engine, plane, session, caller):
        behind: list[tuple[int, float, float, int, list[Any]]] = []
        started_at = None
        for slot in range(120):
            plane.step(at(slot))
            got = plane.next_slot()
            assert got is not None and got[0] == slot
            behind.append(got)
            if slot < on_time or len(behind) > 8:  # on time; then eight slots behind
                worked = behind.pop(0)
                if worked[0] == 20:
                    session.play_encoded(1, frames(*range(1, 31)))  # 30 frames of 1 to 30
                    started_at = plane.slot
                engine._work(worked[1], worked[4], worked[0] + AHEAD)
        marks = payloads(drain(caller))
        start = next(i for i, m in enumerate(marks) if m != 0xFF)
        assert set(marks[:start]) == {0xFF}
        assert marks[start : start + 30] == list(range(1, 31))
        # It began AHEAD slots after the thread's next when it was started, no later (a
        # packet went in every slot from the first to the last, 119).
        assert started_at is not None and 120 - len(marks) + start == started_at + AHEAD


async def test_a_stall_of_the_thread_does_not_play_the_prompt_ahead_or_twice() -> None:
    """Python runs five slots behind, the thread playing the prompt's cover, when the
    thread itself stalls long enough to skip slots (and Python skips them too: the
    prompt resumes where it was). The cover given before the stall is given again from
    the prompt's place: the caller hears the prompt's frames in order, each once, with
    the stall's gap only."""
    async with engine_call() as (engine, plane, session, caller):
        behind: list[tuple[int, float, float, int, list[Any]]] = []
        now = 0
        while now < 140:
            if now == 40:
                now += 8  # the thread stalls for eight slots: it skips them
            plane.step(at(now))
            got = plane.next_slot()
            assert got is not None
            behind.append(got)
            now = got[0] + 1
            if got[0] < 10 or len(behind) > 5:  # on time; then five slots behind
                worked = behind.pop(0)
                if worked[0] == 12:
                    session.play_encoded(1, frames(*range(1, 101)))  # 2 s: 1 to 100
                engine._work(worked[1], worked[4], worked[0] + AHEAD)
        assert plane.skipped == 8
        marks = [m for m in payloads(drain(caller)) if m != 0xFF]
        # Every frame, in order, each once: the frames the thread did not send while it
        # stalled are the ones Python did not make meanwhile (its audio resumed).
        assert marks == list(range(1, 101))
