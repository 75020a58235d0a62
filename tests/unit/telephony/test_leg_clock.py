"""A real call's leg times events and deadlines on the media's clock (telephony/leg.py,
telephony/mediaevents.py).

While the event loop runs behind the wire, the media engine works the media thread's
slots late, each at its own time; the actions' clock is how far the media has been
worked (``MediaSession.media_clock``), not the loop's. Here that clock is set by hand,
:data:`BEHIND` seconds behind the loop's, as a loop that is behind sees it (times below
are seconds from the media clock's start, ``T``); the real session takes the packets.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from callhook.clock import TickClock
from callhook.events import DigitReceived, StartRecording, StopRecording, VoiceActivity
from callhook.media import g711
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession
from callhook.ports import CallInfo
from callhook.store.files import MediaStore
from callhook.telephony import mediaevents
from callhook.telephony.leg import SipLeg
from callhook.telephony.prompts import PromptAudio

PEER = ("192.0.2.10", 40000)
#: How far the loop's clock is ahead of the media's.
BEHIND = 100.0


def leg(tmp_path: Path) -> tuple[SipLeg, MediaSession, TickClock, float]:
    """The leg, its session, the media clock (at 10 s) and ``T``, the clock's start."""
    store = MediaStore(tmp_path)
    session = MediaSession("PCMU", 0, 101, PEER)
    clock = session.media_clock = TickClock()
    t = asyncio.get_running_loop().time() - BEHIND - 10
    clock.at = t + 10.0
    the_leg = SipLeg(
        CallInfo("c1"),
        "app",
        session,
        PromptAudio(store, None),
        store,
        answer=_nothing,
        hang_up=lambda: "200",
    )
    return the_leg, session, clock, t


async def _nothing() -> None:
    return None


def note(the_leg: SipLeg, session: MediaSession, clock: TickClock, at: float, *events) -> None:
    """The engine's tick at ``at`` noted ``events`` and woke the leg."""
    clock.advance(at)
    session.events.extend(events)
    the_leg.wake()


async def test_events_carry_the_media_time_they_were_noted_at_not_the_loops(tmp_path):
    the_leg, session, clock, t = leg(tmp_path)
    note(the_leg, session, clock, t + 10.02, VoiceActivity(True))
    note(the_leg, session, clock, t + 10.04, DigitReceived("5"))
    note(the_leg, session, clock, t + 10.06)  # a tick with nothing to say
    assert the_leg.now() == t + 10.06
    assert await the_leg.next_event(None) == (VoiceActivity(True), t + 10.02)
    assert await the_leg.next_event(None) == (DigitReceived("5"), t + 10.04)


async def test_a_deadline_the_loops_clock_has_passed_waits_for_the_media(tmp_path):
    the_leg, session, clock, t = leg(tmp_path)
    waiting = asyncio.create_task(the_leg.next_event(t + 10.5))
    for _ in range(5):  # several of the leg's looks at the clock
        await asyncio.sleep(0.01)
    assert not waiting.done()  # the loop's clock is far past T + 10.5, the media's is not
    # The media is worked on: a key press at T + 10.2 comes first, the deadline after.
    note(the_leg, session, clock, t + 10.2, DigitReceived("1"))
    assert await asyncio.wait_for(waiting, 1) == (DigitReceived("1"), t + 10.2)
    waiting = asyncio.create_task(the_leg.next_event(t + 10.5))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    clock.advance(t + 10.48)  # a tick with no news, short of the deadline
    await asyncio.sleep(0.01)
    assert not waiting.done()
    clock.advance(t + 10.52)  # the tick that reaches it wakes the leg
    assert await asyncio.wait_for(waiting, 0.2) == (None, t + 10.5)


async def test_an_event_noted_after_the_deadline_comes_after_it(tmp_path):
    the_leg, session, clock, t = leg(tmp_path)
    # The loop got to both ticks at once: the silence's end at T + 10.6, a key at T + 10.8.
    note(the_leg, session, clock, t + 10.6, VoiceActivity(False))
    note(the_leg, session, clock, t + 10.8, DigitReceived("2"))
    assert await the_leg.next_event(t + 10.7) == (VoiceActivity(False), t + 10.6)
    assert await the_leg.next_event(t + 10.7) == (None, t + 10.7)
    assert await the_leg.next_event(None) == (DigitReceived("2"), t + 10.8)


async def test_events_injected_by_the_leg_follow_the_media_noted_before_them(tmp_path):
    the_leg, session, clock, t = leg(tmp_path)
    clock.advance(t + 10.3)
    session.events.append(DigitReceived("3"))  # noted, the engine has not woken the leg yet
    the_leg.abort("shutdown")
    first, at = await the_leg.next_event(None)
    assert (first, at) == (DigitReceived("3"), t + 10.3)
    second, at = await the_leg.next_event(None)
    assert type(second).__name__ == "Aborted" and at == t + 10.3


async def test_the_media_clock_never_goes_back_from_the_loops_stand_in(tmp_path):
    the_leg, session, clock, t = leg(tmp_path)
    session.media_clock = None  # not in a tick yet: the loop's clock stands in
    before = the_leg.now()
    assert before > t + BEHIND
    session.media_clock = clock  # the engine's first tick is a little behind the loop
    clock.at = before - 0.015
    assert the_leg.now() == before
    clock.at = before + 0.005
    assert the_leg.now() == before + 0.005


async def test_a_recording_stopped_late_is_padded_to_the_media_time_only(tmp_path):
    """A caller who went quiet: the file is padded with silence up to the media time of
    the stop, however far the loop's clock is ahead."""
    the_leg, session, clock, t = leg(tmp_path)
    the_leg.send([StartRecording("r.wav", None, None, max_seconds=60)])
    voice = g711.encode("ulaw", np.full(160, 1000, dtype=np.int16))
    for i in range(50):  # one second of audio, T + 10.00 to T + 10.98
        now = t + 10.0 + i * 0.02
        data = RtpPacket(0, False, i, i * 160, 7, voice).serialize()
        session.receive(data, PEER, now)
        session.tick(now)
    clock.advance(t + 11.5)  # the stop comes half a second after the last packet, on the wire
    the_leg.send([StopRecording("r.wav")])
    seconds = the_leg.recorded_seconds("r.wav")
    assert seconds is not None and abs(seconds - 1.5) < 0.03, seconds
    data = the_leg.store.path("app", "r.wav").read_bytes()
    at = data.index(b"data")
    samples = int.from_bytes(data[at + 4 : at + 8], "little")  # G.711: a byte a sample
    assert abs(samples / 8000 - 1.5) < 0.03


async def test_a_call_that_leaves_the_tick_while_waiting_reads_the_loops_clock(tmp_path):
    the_leg, session, clock, t = leg(tmp_path)
    waiting = asyncio.create_task(the_leg.next_event(t + 10.5))
    await asyncio.sleep(0.01)
    session.media_clock = None  # the engine closed the call's stream...
    clock.stop()  # ...its last: the clock stops, and whoever waited on it looks again
    assert await asyncio.wait_for(waiting, 0.2) == (None, t + 10.5)


def test_the_tick_clock_calls_back_once_the_media_reaches_a_time():
    clock = TickClock()
    called: list[str] = []
    clock.call_at(1.0, lambda: called.append("a"))
    cancel = clock.call_at(0.5, lambda: called.append("cancelled"))
    clock.call_at(0.7, lambda: called.append("b"))
    cancel()
    clock.advance(0.6)
    assert (called, clock.at) == ([], 0.6)
    clock.advance(1.0)
    assert called == ["b", "a"]
    clock.advance(2.0)
    assert called == ["b", "a"]  # once each
    clock.call_at(5.0, lambda: called.append("c"))
    clock.stop()
    assert (called[-1], clock.at) == ("c", None)


async def test_a_recording_the_runner_starts_late_begins_where_it_decided(tmp_path):
    """The caller's voice began at T + 10.5 on the wire, and the loop took that event
    only once the media had been worked to T + 10.9: the recording still begins 0.3 s
    before the voice (the pre-roll), not 0.3 s before the loop got there."""
    the_leg, session, clock, t = leg(tmp_path)
    frames = [g711.encode("ulaw", np.full(160, 100 * (i + 1), dtype=np.int16)) for i in range(50)]

    def receive(first: int, last: int) -> None:
        for i in range(first, last):
            now = t + 10.0 + i * 0.02
            session.receive(RtpPacket(0, False, i, i * 160, 7, frames[i]).serialize(), PEER, now)
            session.tick(now)

    receive(0, 26)  # (the tick at T + 10.5 took the frame of T + 10.5, and heard the voice)
    note(the_leg, session, clock, t + 10.5, VoiceActivity(True))
    receive(26, 45)  # the loop is behind: the media goes on to T + 10.9
    clock.advance(t + 10.9)
    event, at = await the_leg.next_event(None)
    assert (event, at) == (VoiceActivity(True), t + 10.5)
    the_leg.send([StartRecording("r.wav", None, None, preroll=0.3, max_seconds=60)])
    receive(45, 50)
    the_leg.send([StopRecording("r.wav")])
    data = the_leg.store.path("app", "r.wav").read_bytes()
    audio = data[data.index(b"data") + 8 :]
    # The 15 frames up to the voice's (as at once), then every frame once.
    assert audio == b"".join(frames[11:50])


@pytest.mark.parametrize(
    ("frames", "until"),
    [
        pytest.param(40, 10.8, id="the-caller-talking-up-to-it"),
        # (10.00-10.18, then nothing: a phone's silence suppression)
        pytest.param(10, 13.0, id="after-a-quiet-spell"),
    ],
)
async def test_a_recording_that_heard_nothing_stays_empty(tmp_path, frames, until):
    """The action started and stopped its file at once (no sound before its timeout):
    nothing is caught up for it, whatever came on the wire since, and no silence is
    made up for a caller whose phone sent nothing for the last seconds."""
    the_leg, session, clock, t = leg(tmp_path)
    voice = g711.encode("ulaw", np.full(160, 1000, dtype=np.int16))
    for i in range(frames):
        now = t + 10.0 + i * 0.02
        session.receive(RtpPacket(0, False, i, i * 160, 7, voice).serialize(), PEER, now)
        session.tick(now)
    clock.advance(t + until)
    assert await the_leg.next_event(t + until - 0.3) == (None, t + until - 0.3)
    the_leg.send(
        [
            StartRecording("r.wav", None, None, preroll=0.0, max_seconds=60),
            StopRecording("r.wav"),
        ]
    )
    data = the_leg.store.path("app", "r.wav").read_bytes()
    assert data[data.index(b"data") + 4 : data.index(b"data") + 8] == bytes(4)
    assert the_leg.recorded_seconds("r.wav") == 0.0


async def test_a_tick_that_stops_while_the_call_is_in_it_leaves_the_loops_clock(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(mediaevents, "BACKSTOP", 0.02)
    the_leg, session, _, t = leg(tmp_path)
    # The clock is at T + 10 and never moves again.
    got = await asyncio.wait_for(the_leg.next_event(t + 10.01), 1)
    assert got == (None, t + 10.01)
    assert session.media_clock is None  # from now on, the loop's clock
    assert [r.getMessage() for r in caplog.records] == [
        "call c1: the media tick stopped; the call's timers run on the loop's clock"
    ]
    assert await asyncio.wait_for(the_leg.next_event(t + 10.02), 1) == (None, t + 10.02)


async def test_one_backstop_with_the_clock_unmoved_is_no_stopped_tick(tmp_path, monkeypatch):
    """(A stall of the whole machine holds the slots back once: they come after it.)"""
    monkeypatch.setattr(mediaevents, "BACKSTOP", 0.2)
    the_leg, session, clock, t = leg(tmp_path)
    waiting = asyncio.create_task(the_leg.next_event(t + 10.01))
    await asyncio.sleep(0.3)  # past the first backstop (0.21 s), short of the second (0.42)
    clock.advance(t + 10.005)  # the slots come: the clock moved, short of the deadline
    await asyncio.sleep(0.25)  # the second backstop finds it moved: no stopped tick
    assert not waiting.done() and session.media_clock is clock
    clock.advance(t + 10.02)
    assert await asyncio.wait_for(waiting, 0.2) == (None, t + 10.01)


async def test_a_session_replaced_after_the_answer_is_the_one_whose_events_and_clock_count(
    tmp_path,
):
    """(An outbound call's session is made anew from the callee's answer: dialling.py.)"""
    the_leg, old, clock, t = leg(tmp_path)
    new = MediaSession("PCMU", 0, 101, PEER)
    new.media_clock = clock
    the_leg.session = new
    assert the_leg.session is new and the_leg.events.session is new
    old.events.append(DigitReceived("1"))  # the old session's: nobody's any more
    note(the_leg, new, clock, t + 10.1, DigitReceived("2"))
    assert the_leg.take_pending() == [DigitReceived("2")]
    assert the_leg.now() == t + 10.1
