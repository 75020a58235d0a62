"""A call's usual packets taken by the media thread (callhook/edge/_rx.h, _rxpy.h).

The same recorded streams through two engines on the virtual clock, both with the media
thread: one where Python takes every packet (the reference), one where the thread takes
the usual packets of a call whose detector runs no model (resting, listening to a quiet
line, or in an utterance the energy holds), recording them where a recording runs, and
gives the call back for any other. Every field the receive changes (the receiver's
counts and jitter, the pre-roll, the noise floor, the detector's gate, pre-roll and
model gain, the clocks, the counters of what was dropped), what was recorded, and every
event come out the same; each stream also shows that the thread did take packets, and
gave the call back where it had to (a loss, another source, a flood, digits, the gate
opening, the hangover of an utterance, a dead line, a recording's frames to write).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from callhook.edge.mediaengine import MediaEngine
from callhook.events import DigitReceived, RecorderFailed, VoiceActivity
from callhook.media import g711, wav
from callhook.media.rtp import RtpPacket
from callhook.media.session import PREROLL_FRAMES, MediaSession
from callhook.media.sink import SinkFull
from callhook.media.vad import new_detector
from tests.unit.edge.conftest import T0
from tests.unit.edge.test_plane import at, udp

SPEECH = Path(__file__).parents[2] / "data" / "speech"

pytest.importorskip("callhook.edge._plane", reason="scripts/setup builds it")
pytestmark = pytest.mark.skipif(
    new_detector().model is None,
    reason="no speech model: a detector of energy alone never rests (scripts/setup)",
)

SSRC = 77


def audio(n: int, *, ssrc: int = SSRC, loud: bool = False, pt: int = 0) -> bytes:
    """Packet ``n`` of the caller's stream: a quiet frame that changes, or a loud one."""
    level = 0x20 if loud else 0x70 + n % 7
    return RtpPacket(pt, False, 1000 + n, 50_000 + 160 * n, ssrc, bytes([level]) * 160).serialize()


def event(n: int, digit: int, duration: int, end: bool) -> bytes:
    payload = bytes([digit, 0x80 | 10 if end else 10]) + duration.to_bytes(2, "big")
    return RtpPacket(101, duration == 160, 1000 + n, 50_000 + 160 * 40, SSRC, payload).serialize()


class Memory:
    """A recording's sink in memory; it refuses what would take it past ``limit`` bytes."""

    opened: ClassVar[list[Memory]] = []  # (each run's, in order)

    def __init__(self, limit: int | None = None) -> None:
        self.data = bytearray()
        self.closed = False
        self.limit = limit
        Memory.opened.append(self)

    def write(self, data: bytes) -> None:
        if self.limit is not None and len(self.data) + len(data) > self.limit:
            raise SinkFull(f"past {self.limit} bytes")
        self.data += data

    def close(self) -> None:
        self.closed = True


def payloads(samples: npt.NDArray[np.int16], law: str = "ulaw") -> list[bytes]:
    """``samples`` as 20 ms frames in ``law``."""
    encoded = g711.encode(law, samples.astype(np.int16))  # type: ignore[arg-type]
    return [encoded[i : i + 160] for i in range(0, len(encoded) - 159, 160)]


def noise(seconds: float, dbfs: float, seed: int) -> npt.NDArray[np.int16]:
    """Line noise at about ``dbfs``."""
    rms = 32768 * 10 ** (dbfs / 20)
    return np.random.default_rng(seed).normal(0, rms, int(8000 * seconds)).astype(np.int16)


def hum(seconds: float, dbfs: float) -> npt.NDArray[np.int16]:
    """A steady 250 Hz hum at about ``dbfs``: every 20 ms frame of it has the same
    power (five whole periods), so the gate stays closed on it. (On random noise, once a
    stray frame has opened it, the gate's lower threshold keeps it open: the model, not
    the energy, decides there, frame by frame: Python's.)"""
    amplitude = 32768 * 10 ** (dbfs / 20) * 2**0.5
    t = np.arange(int(8000 * seconds), dtype=np.float64) / 8000
    hummed: npt.NDArray[np.int16] = np.round(amplitude * np.sin(2 * np.pi * 250 * t)).astype(
        np.int16
    )
    return hummed


def said(*names: str) -> npt.NDArray[np.int16]:
    """Real spoken digits, one after the other."""
    return np.concatenate([wav.decode_to_8k((SPEECH / name).read_bytes()) for name in names])


def slots_of(frames: list[bytes], start: int) -> list[list[tuple[int, bytes]]]:
    """Each frame in a packet of its own, numbered on from packet ``start``."""
    return [
        [(0, RtpPacket(0, False, 1000 + n, 50_000 + 160 * n, SSRC, f).serialize())]
        for n, f in enumerate(frames, start)
    ]


@dataclass
class Script:
    """Each slot's datagrams (``(sender, data)``: 0 the caller, 1 a stranger), what
    Python does to the session before a slot (``actions``: as the slot begins, where
    Python is on time; where it is behind, once it has worked the slot before), and the
    slots during which Python is busy (``stalls``: the thread runs them, Python works
    them after), and how far Python stays behind the thread while it runs a slot
    (``behind``: slot -> slots, Python working each slot that many after the thread, as
    a loaded loop does). ``parks`` is set by the run: the times the thread held the
    call's datagrams for a hand-over."""

    slots: list[list[tuple[int, bytes]]]
    actions: dict[int, Callable[[MediaSession], None]] = field(default_factory=dict)
    stalls: set[int] = field(default_factory=set)
    law: str = "PCMU"
    rtp_timeout: float = 0.0
    behind: dict[int, int] = field(default_factory=dict)
    parks: int = 0


def snapshot(session: MediaSession) -> dict[str, Any]:
    """What the receive changes. (Not the flood limit's window: it starts at a datagram's
    arrival, which the kernel stamps on the real clock.)"""
    r, v = session.receiver, session.vad
    return {
        "detector": (
            v._gate_quiet,
            v._says_speech,
            v.model_gain_db,
            v._gain,
            v._gain_floor,
            [frame.tolist() for frame in v._preroll],
        ),
        "recorded": [(bytes(m.data), m.closed) for m in Memory.opened],
        "receiver": (
            r.received,
            r._max_seq,
            r._cycles,
            r._next,
            r._last_ts,
            r._history,
            r._jitter,
            r._last_arrival,
            r.cumulative_lost,
            r.ssrc,
        ),
        "session": (
            session._last_audio,
            session._rtp_since,
            session.timed_out,
            session.flood_dropped,
            session.foreign_dropped,
            session.malformed,
            session.latched,
            session.remote is not None,  # (each run's caller has its own port)
        ),
        # (The last frame's arrival, the kernel's, is within its slot: whoever took it.)
        "heard": abs(session._last_audio - session._last_heard) < 0.02,
        "preroll": list(session._preroll),
        "vad": (
            v._run,
            v._closed_for,
            v._block_count,
            v._block_min,
            v._history_floor,
            v._prior,
            v._gate,
            v.active,
            list(v._blocks),
        ),
        "events": list(session.events),
    }


async def run(script: Script, thread_receive: bool) -> tuple[dict[str, Any], int, int]:
    """The script through an engine; the session's state at the end, the packets the
    thread took and the times it gave the call back."""
    first = 44000 if thread_receive else 44100
    Memory.opened.clear()
    engine = MediaEngine("127.0.0.1", first, first + 100, thread_receive=thread_receive)
    senders = [udp(), udp()]
    try:
        law = script.law
        session = MediaSession(law, 0 if law == "PCMU" else 8, 101, None, label="call")  # type: ignore[arg-type]
        session.rtp_timeout = script.rtp_timeout
        sock, port = engine.allocate()
        plane = engine.plane
        assert plane is not None
        plane.set_origin(T0)
        engine._start = lambda: None  # type: ignore[method-assign]  # the test's clock
        await engine.open(session, sock, port, lambda: None)
        session.expect_rtp(at(0))
        worked = 0
        timeline: list[int] = []
        done: set[int] = set()
        for slot, datagrams in enumerate(script.slots):
            action = script.actions.get(slot)
            if action is not None and worked == slot:
                action(session)  # (Python on time: the thread has not begun the slot)
                done.add(slot)
            for who, data in datagrams:
                senders[who].sendto(data, ("127.0.0.1", port))
            await asyncio.sleep(0.003)  # (the loopback delivers them)
            plane.step(at(slot))
            if slot in script.stalls and slot < len(script.slots) - 1:
                continue
            # Python works the slots it has not, in order, each read just before its
            # work (as edge/slots.py reads them).
            lag = script.behind.get(slot, 0) if slot < len(script.slots) - 1 else 0
            while worked <= slot - lag:
                action = script.actions.get(worked)
                if action is not None and worked not in done:
                    action(session)  # (Python behind: the thread ran the slot already)
                got = plane.next_slot()
                assert got is not None and got[0] == worked
                engine._slot(got[0], got[1], got[4])
                timeline.append(len(session.events))
                worked += 1
        session.reclaim()
        script.parks = plane.parks
        state = snapshot(session)
        state["events by slot"] = timeline  # (each event in its slot)
        return state, plane.rx_taken, plane.rx_returned
    finally:
        for each in senders:
            each.close()
        engine.shutdown()


async def compare(script: Script, *, timing: bool = True) -> tuple[dict[str, Any], int, int]:
    """Both runs' states, equal (``timing``: each event in the same slot too)."""
    reference, taken, _ = await run(script, False)
    assert taken == 0
    threaded, taken, returned = await run(script, True)
    if not timing:
        del reference["events by slot"], threaded["events by slot"]
    assert threaded == reference
    return reference, taken, returned


def steady(slots: int, start: int = 0) -> list[list[tuple[int, bytes]]]:
    return [[(0, audio(n))] for n in range(start, start + slots)]


async def test_a_resting_calls_packets_are_taken_by_the_thread_as_python_takes_them() -> None:
    state, taken, returned = await compare(Script(steady(120)))
    # (The first packet latches the call: Python's; the thread takes the rest.)
    assert taken >= 115 and returned == 0
    assert state["receiver"][0] == 120 and len(state["preroll"]) == PREROLL_FRAMES


@pytest.mark.parametrize("law", ["PCMU", "PCMA"])
async def test_loss_reordering_and_a_burst_give_the_call_back_and_it_goes_again(law: str) -> None:
    pt = 0 if law == "PCMU" else 8
    slots: list[list[tuple[int, bytes]]] = []
    for n in range(100):
        if n in (10, 40):
            slots.append([])  # lost
        elif n == 20:
            slots.append([(0, audio(21, pt=pt)), (0, audio(20, pt=pt))])  # reordered
        elif n == 21:
            slots.append([])
        elif n == 60:
            slots.append([(0, audio(60, pt=pt)), (0, audio(61, pt=pt)), (0, audio(62, pt=pt))])
        elif n in (61, 62):
            slots.append([])
        else:
            slots.append([(0, audio(n, pt=pt))])
    state, taken, returned = await compare(Script(slots, law=law))
    assert state["receiver"][8] == 2  # two lost
    assert taken > 50 and returned >= 2


async def test_digits_a_stranger_and_another_source_go_to_python() -> None:
    slots = steady(40)
    slots += [
        [(0, event(40, 5, 160, False))],
        [(0, event(41, 5, 320, False))],
        [(0, event(42, 5, 480, True)), (0, event(43, 5, 480, True))],
        [(1, audio(44))],  # a stranger: dropped
    ]
    slots += steady(30, 44)
    slots += [[(0, audio(n, ssrc=99))] for n in range(74, 120)]  # the caller's new source
    state, taken, returned = await compare(Script(slots))
    assert DigitReceived("5") in state["events"]
    assert state["session"][4] == 1 and state["receiver"][9] == 99
    assert taken > 80 and returned >= 2


async def test_a_flood_is_cut_as_python_cuts_it() -> None:
    slots = steady(5)
    slots += [[(0, audio(n * 6 + k)) for k in range(6)] for n in range(1, 31)]  # 300/s
    # (Nothing while the limit's second ends: when it ends is the kernel's real clock.)
    slots += [[] for _ in range(25)]
    slots += steady(30, 185)
    state, taken, _ = await compare(Script(slots))
    assert state["session"][3] > 0  # flood_dropped
    assert taken > 20


async def test_silence_between_talkspurts_is_fed_by_the_thread_and_a_dead_line_goes_back() -> None:
    slots = steady(30)
    slots += [[] for _ in range(20)]  # silence suppressed: the detector hears silence
    slots += steady(30, 50)
    slots += [[] for _ in range(40)]  # then nothing at all: dead after 0.5 s
    state, taken, returned = await compare(Script(slots, rtp_timeout=0.5))
    assert state["session"][2] is True  # timed out
    assert taken > 40 and returned >= 1


async def test_the_end_of_an_utterance_while_resting_is_pythons_to_say() -> None:
    def talking(session: MediaSession) -> None:
        session.reclaim()  # (as any change of the receive's state does first)
        session.vad._active = True  # the caller was talking when the detector rested

    slots = steady(10) + steady(60, 10)
    state, taken, returned = await compare(Script(slots, actions={5: talking}))
    assert VoiceActivity(False) in state["events"]
    assert taken > 40 and returned >= 1


async def test_python_takes_the_call_back_to_listen_and_gives_it_again() -> None:
    slots = steady(40) + [[(0, audio(n, loud=True))] for n in range(40, 60)] + steady(40, 60)
    actions: dict[int, Callable[[MediaSession], None]] = {
        30: lambda s: s.detect_voice(True),
        70: lambda s: s.detect_voice(False),
    }
    _, taken, _ = await compare(Script(slots, actions=actions))
    # (Taken before the detector listened, and again once it rested: 40 + 30 at most.)
    assert taken > 50


async def test_python_behind_the_thread_hands_over_and_takes_back_in_the_wires_time() -> None:
    """Python stalls for 15 slots at a time: it hands the call over while the thread is
    ahead, takes it back while it is behind (to listen, and for the RTCP report due after
    five seconds), and meanwhile the thread ends the slots of a silence (fed to the
    detector once each, never twice) and of a line gone dead."""
    slots = steady(60)
    slots += [[] for _ in range(30)]  # silence
    slots += steady(120, 90) + [[(0, audio(n, loud=True))] for n in range(210, 230)]
    slots += steady(60, 230)
    slots += [[] for _ in range(60)]  # dead
    stalls = {
        s for start in (20, 70, 100, 150, 200, 245, 300, 340) for s in range(start, start + 15)
    }
    actions: dict[int, Callable[[MediaSession], None]] = {
        80: lambda s: s.detect_voice(True),  # during the silence, Python behind
        95: lambda s: s.detect_voice(False),
        205: lambda s: s.detect_voice(True),  # the loud part
        250: lambda s: s.detect_voice(False),
    }
    script = Script(slots, actions=actions, stalls=stalls, rtp_timeout=1.0)
    state, taken, returned = await compare(script)
    assert state["session"][2] is True  # dead
    assert taken > 150 and returned >= 1


async def test_a_dead_line_during_a_stall_is_said_in_its_slot() -> None:
    """Python listens, then rests while it is behind the thread, and the line dies during
    that stall: the call is handed over only once Python has caught up, so the slots'
    ends (the silence, the dead-call check) come each in its own slot."""
    slots = steady(300) + [[] for _ in range(60)]
    stalls = set(range(330, 345)) | set(range(100, 115))
    actions: dict[int, Callable[[MediaSession], None]] = {
        300: lambda s: s.detect_voice(True),
        332: lambda s: s.detect_voice(False),
    }
    script = Script(slots, actions=actions, stalls=stalls, rtp_timeout=0.8)
    state, taken, _ = await compare(script)
    assert state["session"][2] is True
    assert taken > 250


async def test_a_call_python_is_behind_on_is_handed_over_and_the_thread_takes_what_it_held() -> (
    None
):
    """Python works each slot ten after the thread (a loaded loop), and a lost packet
    gives the call back twice: it is not handed over again in the slot Python works, as
    the thread has run on; the thread holds the call's packets, each with its slot, until
    Python has worked the last one it gave Python, then takes them in their slots, and
    the call is the same as Python's alone."""
    slots = [[] if n in (50, 120) else [(0, audio(n))] for n in range(240)]
    script = Script(slots, behind=dict.fromkeys(range(10, 220), 10))
    _, taken, returned = await compare(script)
    assert script.parks >= 2 and taken > 180 and returned >= 2


async def test_digits_and_a_silence_held_for_python_come_in_their_slots() -> None:
    """Python eight slots behind throughout: the digits' events and a silence (the
    caller's packets stop for 0.4 s, then for good) among the packets the thread held;
    the event it does not take gives the call back with the ones after it, which Python
    works each in its slot; each event, the silence fed and the dead line in the same
    slot as Python's alone."""
    slots = steady(40)
    slots += [
        [(0, event(40, 5, 160, False))],
        [(0, event(41, 5, 320, False))],
        [(0, event(42, 5, 480, True)), (0, event(43, 5, 480, True))],
    ]
    slots += steady(40, 44) + [[] for _ in range(20)] + steady(60, 84) + [[] for _ in range(40)]
    script = Script(slots, rtp_timeout=0.5, behind=dict.fromkeys(range(len(slots)), 8))
    state, taken, returned = await compare(script)
    assert DigitReceived("5") in state["events"] and state["session"][2] is True
    assert script.parks >= 2 and taken > 100 and returned >= 1


async def test_python_held_back_past_what_the_line_holds_loses_no_packet() -> None:
    """Python stays 90 slots behind, and a lost packet gives the call back: the line
    holds 64 of its packets, the rest wait in the kernel and are taken as they are read.
    No packet is lost or taken twice, and the state the packets make is Python's alone,
    bar the clocks of the ones taken late (their jitter, the time of the last audio)."""
    slots = [[] if n == 30 else [(0, audio(n))] for n in range(400)]
    script = Script(slots, behind=dict.fromkeys(range(20, 300), 90))
    reference, _, _ = await run(script, False)
    threaded, taken, _ = await run(script, True)
    # (The jitter differs: packets were taken late, as read, past what the line held.)
    assert threaded["receiver"][6] != reference["receiver"][6]
    for state in (reference, threaded):
        state["receiver"] = state["receiver"][:6] + state["receiver"][8:]  # (not jitter)
        state["session"] = state["session"][2:]  # (not the clocks)
    assert threaded == reference
    assert script.parks >= 1 and taken > 250


def recording(limit: int | None = None) -> Callable[[MediaSession], None]:
    """The record action's start: the caller recorded from 0.3 s back, and listened to."""

    def start(session: MediaSession) -> None:
        session.start_recording(Memory(limit), None, 0.3)
        session.detect_voice(True)

    return start


def stop(slot: int) -> Callable[[MediaSession], None]:
    def end(session: MediaSession) -> None:
        session.stop_recording(at(slot))
        session.detect_voice(False)

    return end


async def test_a_recording_of_words_and_pauses_is_the_same_whoever_takes_its_packets() -> None:
    """Line noise, a recording that listens from slot 20: the quiet line's frames are the
    thread's (the gate closed, its pre-roll kept); the gate opens on the first word
    (Python's: the model runs), the energy holds the utterance (the thread's again), its
    end is Python's; every frame is in the recording, in order."""
    line = noise(1.6, -55, 1)
    words = said("1_jackson_1.wav", "2_jackson_2.wav")
    samples = np.concatenate([line, words, noise(2.4, -55, 2), said("3_jackson_3.wav"), line])
    frames = payloads(samples)
    script = Script(
        slots_of(frames, 0), actions={20: recording(), len(frames) - 5: stop(len(frames) - 5)}
    )
    state, taken, returned = await compare(script)
    assert [VoiceActivity(True), VoiceActivity(False)] * 2 == [
        e for e in state["events"] if isinstance(e, VoiceActivity)
    ]
    ((recorded, closed),) = state["recorded"]
    assert closed and len(recorded) >= 160 * (len(frames) - 30)
    # (After each utterance the line's noise keeps the gate open, the model deciding
    # frame by frame that it is not speech: those frames are Python's.)
    assert taken > len(frames) // 2 and returned >= 3


async def test_the_models_gain_follows_a_quiet_lines_floor_on_the_thread() -> None:
    """A listening detector on a line whose hum falls, then rises slowly (1 dB a second,
    under the gate's margin): the floor moves, and the model's gain is judged for it
    (vad.py's _follow_floor: 0, 10, 20 dB, then down again by 3 dB steps) frame by frame
    as Python does."""
    levels = [-50, -60, -70, *range(-69, -59)]
    samples = np.concatenate([hum(1.0, level) for level in levels])
    frames = payloads(samples)
    # (Listening with no recording: the thread holds the call to the end, so the state
    # compared is the thread's, with no frame of Python's after it to catch up.)
    listen: dict[int, Callable[[MediaSession], None]] = {10: lambda s: s.detect_voice(True)}
    state, taken, _ = await compare(Script(slots_of(frames, 0), actions=listen))
    gain_db = state["detector"][2]
    assert 0 < gain_db < 20 and not [e for e in state["events"] if isinstance(e, VoiceActivity)]
    assert taken > len(frames) - 40


async def test_a_long_recording_is_written_as_it_goes_and_waits_for_python_when_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six seconds of a quiet line recorded: Python writes the thread's frames of the
    recording every ten frames while the thread goes on with the call; while Python is
    behind (a stall of 1.4 s) the thread holds a second of them, then gives the call back
    for Python to write them, and has it again at once."""
    written: list[int] = []
    write = MediaSession._recorded

    def counted(session: MediaSession, frames: list[tuple[int, bytes, float]]) -> None:
        written.append(len(frames))
        write(session, frames)

    monkeypatch.setattr(MediaSession, "_recorded", counted)
    frames = payloads(hum(6.4, -60))
    actions = {5: recording(), 310: stop(310)}
    state, taken, returned = await compare(
        Script(slots_of(frames, 0), actions=actions, stalls=set(range(150, 220)))
    )
    ((recorded, _),) = state["recorded"]
    assert len(recorded) >= 160 * 300
    assert written.count(10) >= 15 and max(written) == 50  # (the reference writes each)
    assert taken > 260 and returned >= 1


@pytest.mark.parametrize("stop_at", [120, 135, 141])
async def test_a_recording_stopped_while_python_is_behind_ends_where_pythons_would(
    stop_at: int,
) -> None:
    """Python stalls (slots 100-140) while the thread takes the recording's frames, and
    stops the recording, once caught up, in a slot of the stall: the frames the thread
    took after that slot are not the recording's, so the file ends where it ends when
    Python takes every packet (up to 0.4 s longer before)."""
    frames = payloads(hum(4.0, -60))
    actions = {5: recording(), stop_at: stop(stop_at)}
    state, taken, _ = await compare(
        Script(slots_of(frames, 0), actions=actions, stalls=set(range(100, 141)))
    )
    ((recorded, closed),) = state["recorded"]
    # (It begins 0.3 s before slot 5's frame, 10 frames before the line's first: silence.)
    assert closed and len(recorded) == 160 * (stop_at + 10)
    assert recorded[: 160 * 10] == b"\xff" * 160 * 10
    assert taken > 100


async def test_a_recording_that_fails_on_frames_the_thread_took_stops_as_in_python() -> None:
    """The sink refuses the recording past 2 s: the frames before are written, the
    failure said once, and the thread goes on with the line resting. (Said when Python
    writes the thread's frames: up to 200 ms later than Python alone says it.)"""
    frames = payloads(hum(5.0, -60))
    script = Script(slots_of(frames, 0), actions={5: recording(limit=160 * 100)})
    state, taken, _ = await compare(script, timing=False)
    ((recorded, closed),) = state["recorded"]
    assert len(recorded) == 160 * 100 and closed
    assert [e.reason for e in state["events"] if isinstance(e, RecorderFailed)] == ["filesize"]
    assert taken > 150


class Broken(Memory):
    """A sink with a bug: past ``limit`` bytes it raises what no sink's failure raises."""

    def write(self, data: bytes) -> None:
        if self.limit is not None and len(self.data) + len(data) > self.limit:
            raise RuntimeError("a bug in the sink")
        self.data += data


async def test_a_bug_writing_the_threads_frames_ends_the_recording_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The frames the thread took, written by Python, meet a sink that raises (a bug):
    the recording ends as a write error ends it (RecorderFailed "error", what was written
    kept), one log line says why, and the call goes on with the thread."""

    def start(session: MediaSession) -> None:
        session.start_recording(Broken(160 * 100), None, 0.3)
        session.detect_voice(True)

    frames = payloads(hum(5.0, -60))
    with caplog.at_level("ERROR", logger="callhook.media"):
        state, taken, _ = await run(Script(slots_of(frames, 0), actions={5: start}), True)
    ((recorded, closed),) = state["recorded"]
    assert len(recorded) == 160 * 100 and closed
    assert [e for e in state["events"] if isinstance(e, RecorderFailed)] == [
        RecorderFailed("error", "RuntimeError: a bug in the sink")
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "call: recording stopped: RuntimeError: a bug in the sink"
    ]
    assert not any(r.exc_info for r in caplog.records)
    assert taken > 200


async def test_a_recording_python_is_behind_on_is_the_same_whoever_takes_its_packets() -> None:
    """The recording of words and pauses, Python twelve slots behind the thread once it
    has begun: the first loud frame of each word is among the packets the thread held,
    and gives the call back with the ones after it, which Python works each in its slot.
    (The recording begins with Python on time: one begun while Python is behind the
    thread starts from the wire's time, architecture.md says.)"""
    line = noise(1.6, -55, 1)
    words = said("1_jackson_1.wav", "2_jackson_2.wav")
    samples = np.concatenate([line, words, noise(2.4, -55, 2), said("3_jackson_3.wav"), line])
    frames = payloads(samples)
    script = Script(
        slots_of(frames, 0),
        actions={20: recording(), len(frames) - 5: stop(len(frames) - 5)},
        behind=dict.fromkeys(range(30, len(frames)), 12),
    )
    state, taken, returned = await compare(script)
    assert [VoiceActivity(True), VoiceActivity(False)] * 2 == [
        e for e in state["events"] if isinstance(e, VoiceActivity)
    ]
    ((recorded, closed),) = state["recorded"]
    assert closed and len(recorded) >= 160 * (len(frames) - 30)
    assert script.parks >= 2 and taken > len(frames) // 3 and returned >= 2


@pytest.mark.parametrize("stalls", [set(), set(range(90, 150))])
async def test_a_recording_across_a_quiet_spell_and_a_new_source_keeps_real_time(
    stalls: set[int],
) -> None:
    """The caller's phone sends nothing for half a second (silence suppression), then
    its stream comes back from another source whose timestamps are far behind: the
    file has silence for the half second and every frame of both sources, in the same
    bytes whoever takes the packets, Python on time or behind."""
    old = payloads(hum(2.0, -60))
    new = payloads(hum(2.0, -50))
    back = 50_000 + 160 * 100 - 3_000_000  # the new source's first timestamp
    slots: list[list[tuple[int, bytes]]] = [
        *slots_of(old, 0),
        *[[] for _ in range(25)],  # slots 100-124: nothing sent
        *[
            [(0, RtpPacket(0, False, 7000 + n, (back + 160 * n) & 0xFFFFFFFF, 88, f).serialize())]
            for n, f in enumerate(new)
        ],
        *[[] for _ in range(15)],
    ]
    stop_at = len(slots) - 1
    actions = {5: recording(), stop_at: stop(stop_at)}
    state, _, _ = await compare(Script(slots, actions=actions, stalls=stalls))
    ((recorded, closed),) = state["recorded"]
    silence = b"\xff" * 160
    # 0.3 s before slot 5 (10 frames before the line's first), the old source, the half
    # second, the new one, and the quiet after it up to the stop.
    head = silence * 10 + b"".join(old) + silence * 25 + b"".join(new)
    assert closed and recorded[: len(head)] == head
    assert set(recorded[len(head) :]) == {0xFF} and len(recorded) - len(head) in (
        160 * 14,
        160 * 15,
    )
