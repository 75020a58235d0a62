"""The usual outgoing RTP packet made in C (callhook/media/outlet.py, _outlet.c) against
Python's ``MediaSession.tick``.

Two sessions in the same state are ticked at the same times: one through ``tick``
alone (the reference), the other through ``outlet.tick_all`` as the media tick
does, with ``tick`` for the calls it leaves. Every tick the two must send the same
bytes and be the same, field by field (the sender's numbering, the player's place
in its prompt, events). Each scenario also says which ticks C must make and which it
must leave: a fast path that made nothing would pass the comparison.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from callhook.media import outlet, srtp
from callhook.media.bridge import Feed
from callhook.media.dtmfsend import Digits
from callhook.media.session import MediaSession
from callhook.media.srtp import SrtpContext
from tests.native import without

PEER = ("192.0.2.10", 40000)


def new_pair(events: bool = True) -> tuple[MediaSession, MediaSession]:
    reference = MediaSession("PCMU", 0, 101 if events else None, PEER, label="t")
    fast = MediaSession("PCMU", 0, 101 if events else None, PEER, label="t")
    for name in ("ssrc", "sequence", "timestamp"):  # the same random start
        setattr(fast.sender, name, getattr(reference.sender, name))
    return reference, fast


def snapshot(session: MediaSession) -> dict[str, Any]:
    sender, player = session.sender, session.player
    prompt = player._prompt
    return {
        "sender": (
            sender.sequence,
            sender.timestamp,
            sender.packets,
            sender.octets,
            sender._talkspurt,
        ),
        "player": (
            player.echo_ticks,
            player.underruns,
            None if prompt is None else (prompt.prompt_id, prompt.pos, len(prompt.audio)),
            player._event is None,
        ),
        "events": list(session.events),
        "timed_out": session.timed_out,
    }


def run(
    ticks: int,
    setup: Callable[[MediaSession], None] | None = None,
    *,
    events: bool = True,
    each: Callable[[int, MediaSession], None] | None = None,
) -> tuple[list[bool], list[bytes | None]]:
    """Tick both sessions every 20 ms; which ticks C made, and what was sent."""
    reference, fast = new_pair(events)
    if setup is not None:
        setup(reference)
        setup(fast)
    made: list[bool] = []
    sent: list[bytes | None] = []
    for i in range(ticks):
        now = 1.0 + 0.02 * i
        if each is not None:
            each(i, reference)
            each(i, fast)
        expected = reference.tick(now)
        batch, rest = outlet.tick_all([(fast, 7)], now)
        if rest:
            assert batch == [] and rest == [0]
            mine = fast.tick(now)
        else:
            assert len(batch) == 1 and batch[0][0] == 7 and batch[0][2] == PEER
            mine = batch[0][1]
        assert mine == expected, f"tick {i}"
        assert snapshot(fast) == snapshot(reference), f"after tick {i}"
        made.append(not rest)
        sent.append(expected)
    return made, sent


def test_the_extension_is_built() -> None:
    assert outlet.native(), "callhook.media._outlet was not built: rerun scripts/setup"


def test_silence_is_made_in_c_from_the_first_packet() -> None:
    made, sent = run(10)
    assert all(made)
    first = sent[0]
    assert first is not None and first[1] & 0x80  # the talkspurt's marker
    assert all(p is not None and not p[1] & 0x80 for p in sent[1:])


def test_a_prompt_is_c_but_its_last_frame_which_ends_it() -> None:
    audio = bytes(range(256)) * 5  # 1280 bytes: 8 frames
    made, sent = run(12, lambda s: s.play_encoded(1, audio))
    # The first frame takes the prompt's audio up (Python), the last one ends it.
    assert made == [False] + [True] * 6 + [False] + [True] * 4
    assert b"".join(p[12:] for p in sent[:8] if p is not None) == audio


def test_a_prompt_of_segments_and_one_that_grows() -> None:
    def segments(s: MediaSession) -> None:
        s.play_segments(2, [b"\x11" * 300, b"\x22" * 500], more=True)

    def grow(i: int, s: MediaSession) -> None:
        if i == 8:
            s.append_prompt(2, b"\x33" * 400)
        if i == 14:
            s.close_prompt(2)

    made, _ = run(20, segments, each=grow)
    # Python: joining the segments (0, 1), the underruns while the prompt waits for more
    # (4-7), the appended audio taken up (8) and its end (10), then the prompt's end (11-14,
    # open: silence); C: the frames in between, and silence once it is over.
    assert "".join("C" if m else "." for m in made) == "..CC....CC.....CCCCC"


def test_digits_as_events_are_python_and_in_band_echo_counts_down_in_c() -> None:
    made, _ = run(25, lambda s: s.play_segments(3, [Digits("12")]))
    assert not any(made[:7]) and made[7]  # an event's packets: Python; its gap: C
    made, _ = run(30, lambda s: s.play_segments(3, [Digits("1")]), events=False)
    # In-band tones are audio (C, the echo ticks counting down too) but for taking them up
    # and their end.
    assert made == [False] + [True] * 8 + [False] + [True] * 20


def test_what_else_is_due_leaves_the_call_to_python() -> None:
    key = srtp.new_key()
    cases: list[Callable[[MediaSession], None]] = [
        lambda s: setattr(s, "srtp", SrtpContext(key, key)),
        lambda s: setattr(s, "sending", False),  # on hold
        lambda s: setattr(s, "remote", None),
        lambda s: setattr(s, "hears", Feed("ulaw", "ulaw")),
        lambda s: s.undetected.append(b"\xff" * 160),
        lambda s: setattr(s, "_last_audio", 0.5),  # the caller went quiet
    ]
    for setup in cases:
        made, _ = run(3, setup)
        assert not made[0], setup


def test_a_dead_call_is_found_in_python() -> None:
    def dead(s: MediaSession) -> None:
        s.rtp_timeout = 0.05
        s.expect_rtp(1.0)

    made, _ = run(6, dead)
    assert made[:3] == [True, True, True] and not made[3]  # 60 ms without RTP


def test_a_session_that_cannot_be_read_is_left_to_python() -> None:
    reference, fast = new_pair()
    del fast.player  # a bug: Python's tick meets it too (and the engine logs it)
    batch, rest = outlet.tick_all([(fast, 3), (reference, 4), ("not a session", 5)], 1.0)
    assert rest == [0, 2] and [item[0] for item in batch] == [4]
    assert struct.unpack("!H", batch[0][1][2:4])[0] == reference.sender.sequence - 1


FALLBACK = """
from callhook.media import outlet
from callhook.media.session import MediaSession
assert not outlet.native()
s = MediaSession("PCMU", 0, 101, ("192.0.2.10", 40000))
assert outlet.tick_all([(s, 3)], 1.0) == ([], [0])
first = s.sender.sequence
assert s.tick(1.0)[2:4] == first.to_bytes(2, "big") and s.sender.packets == 1
assert outlet.due_all([(s, True), (s, False)], 1.0) == [0, 1]
print("ok")
"""


def test_without_the_extension_python_makes_every_packet() -> None:
    assert without(["callhook.media._outlet"], FALLBACK).strip() == "ok"


# --- after the tick: which calls the tick's _report visits (outlet.due_all) -------------


class Reported:
    """What the media tick's ``_report`` needs of a stream, and what it did to it."""

    def __init__(self, session: MediaSession, rtcp: bool) -> None:
        self.session = session
        self.fd = -1  # (no socket on the media thread: its tally says nothing went)
        self.rtcp: Any = self if rtcp else None
        self.sent: list[bytes] = []
        self.woken = 0

    def sendto(self, data: bytes, address: Any) -> None:  # the RTCP socket
        self.sent.append(data)

    def wake(self) -> None:
        self.woken += 1


async def test_due_all_leaves_out_only_calls_the_report_has_nothing_for() -> None:
    """Every tick for 20 s, calls in each state: ``_report`` (the reference) acts on a
    call only when ``due_all`` chose it, and the quiet calls are left out."""
    from callhook.edge.mediaengine import MediaEngine
    from callhook.events import DigitReceived

    engine = MediaEngine("127.0.0.1", 41700, 41800)
    try:
        calls = {
            "rtcp": Reported(MediaSession("PCMU", 0, 101, PEER, label="a"), True),
            "no rtcp": Reported(MediaSession("PCMU", 0, 101, PEER, label="b"), False),
            "news": Reported(MediaSession("PCMU", 0, 101, PEER, label="c"), True),
            "timed out": Reported(MediaSession("PCMU", 0, 101, PEER, label="d"), False),
        }
        calls["timed out"].session.timed_out = True
        names = list(calls)
        chosen = dict.fromkeys(names, 0)
        acting = dict.fromkeys(names, 0)
        for i in range(1000):
            now, wall = 1.0 + 0.02 * i, 1.8e9 + 0.02 * i
            if i % 100 == 50:
                calls["news"].session.events.append(DigitReceived("5"))
            picked = outlet.due_all([(c.session, c.rtcp is not None) for c in calls.values()], now)
            for k, name in enumerate(names):
                call = calls[name]
                before = (len(call.sent), call.woken, call.session.reports.due)
                engine._report(call, now, wall)  # type: ignore[arg-type]
                acted = before != (len(call.sent), call.woken, call.session.reports.due)
                assert not acted or k in picked, f"{name} at tick {i}: acted but left out"
                chosen[name] += k in picked
                acting[name] += acted
                if name == "news":
                    call.session.events.clear()  # the leg took them
        # In these states due_all chooses exactly the ticks the reference acts on.
        assert chosen == acting
        reports = len(calls["rtcp"].sent)
        # Every 2.5-7.5 s (RFC 3550 §6.2, randomised by the call's SSRC, which is random):
        # each of the 1000 phases the SSRC can give makes 2 to 5 of them in 20 s.
        assert 2 <= reports <= 5
        assert acting["rtcp"] == reports + 1  # the first tick sets when the first is due
        assert calls["rtcp"].woken == 0 and calls["no rtcp"].sent == []
        assert acting["no rtcp"] == 0
        assert calls["news"].woken == 10 and acting["news"] >= 11
        assert acting["timed out"] == 1000 == calls["timed out"].woken
    finally:
        engine.shutdown()
