"""Two calls' media joined (callhook/media/bridge.py, MediaSession.join): audio both ways
in the one tick, µ-law <-> A-law, bounded delay that comes back down after a backlog,
30 ms packets repacked, digits relayed in the form each side negotiated, and parting
again."""

from __future__ import annotations

import itertools
import struct

from callhook.events import DigitReceived
from callhook.media import g711, tones
from callhook.media.bridge import FRAME, MAX_BUFFERED, PATIENCE, SPARE, STRIDE, WINDOW, Feed
from callhook.media.dtmf import ToneDetector
from callhook.media.dtmfsend import event_payload
from callhook.media.session import MediaSession

CALLER = ("192.0.2.10", 40000)
CALLEE = ("192.0.2.20", 50000)


def rtp(seq: int, ts: int, payload: bytes, pt: int = 0, marker: bool = False) -> bytes:
    return struct.pack("!BBHII", 0x80, (0x80 if marker else 0) | pt, seq, ts, 7) + payload


def pair() -> tuple[MediaSession, MediaSession]:
    """A caller on µ-law with telephone-event, a callee on A-law with in-band digits."""
    caller = MediaSession("PCMU", 0, 101, CALLER, label="caller")
    callee = MediaSession("PCMA", 8, None, CALLEE, label="callee")
    caller.join(callee)
    return caller, callee


def payload_of(datagram: bytes | None) -> tuple[int, bytes]:
    assert datagram is not None
    return datagram[1] & 0x7F, datagram[12:]


def test_a_feed_translates_bounds_and_repacks() -> None:
    speech = tones.tone(700, 0.1, -12)
    ulaw = g711.encode("ulaw", speech)
    alaw = g711.encode("alaw", g711.decode("ulaw", ulaw))  # what each µ-law code stands for
    feed = Feed("ulaw", "alaw")
    feed.push(ulaw[:240])  # a 30 ms packet...
    assert feed.frame() == alaw[:160]  # ...out in 20 ms frames
    assert feed.frame() is None  # 80 bytes wait for more
    feed.push(ulaw[240:480])
    assert feed.frame() == alaw[160:320] and feed.frame() == alaw[320:480]
    same = Feed("ulaw", "ulaw")
    for _ in range(30):  # 600 ms pushed, none taken: only the newest 500 ms stay
        same.push(ulaw[:FRAME])
    assert MAX_BUFFERED == 25 * FRAME
    assert len(same) == MAX_BUFFERED and same.dropped == 5 * FRAME


def test_each_side_hears_the_other_in_its_own_law_in_the_same_tick() -> None:
    caller, callee = pair()
    said = g711.encode("ulaw", tones.tone(700, 0.02, -12))
    caller.receive(rtp(1, 160, said), CALLER, 0.0)
    pt, heard = payload_of(callee.tick(0.02))
    assert (pt, heard) == (8, g711.encode("alaw", g711.decode("ulaw", said)))
    answer = g711.encode("alaw", tones.tone(900, 0.02, -12))
    callee.receive(rtp(1, 160, answer, pt=8), CALLEE, 0.0)
    pt, heard = payload_of(caller.tick(0.02))
    expected = g711.encode("ulaw", g711.decode("alaw", answer))
    assert pt == 0 and heard == expected
    # Nothing more came: silence, not a repeat.
    pt, heard = payload_of(callee.tick(0.04))
    assert heard == g711.silence("alaw", FRAME)


def test_digits_cross_in_the_form_the_other_side_negotiated() -> None:
    caller, callee = pair()
    # An RFC 4733 key press on the caller's side...
    for seq, (end, duration) in enumerate([(False, 160), (False, 320), (True, 800)], 1):
        caller.receive(
            rtp(seq, 8000, event_payload("5", end=end, duration=duration), 101), CALLER, 0.0
        )
    assert [e for e in caller.events if isinstance(e, DigitReceived)] == [DigitReceived("5")]
    # ...is an in-band tone to the callee, which has no telephone-event.
    detector = ToneDetector()
    heard = []
    for n in range(12):
        _, payload = payload_of(callee.tick(0.02 * (n + 1)))
        digit = detector.feed(g711.decode("alaw", payload))
        if digit is not None:
            heard.append(digit)
    assert heard == ["5"]
    for n in range(12, 40):  # past the window in which tones heard are taken for its echo
        callee.tick(0.02 * (n + 1))
    # An in-band key press on the callee's side travels in its audio, and the caller, who
    # negotiated telephone-event, gets it as an RFC 4733 event too.
    tone = g711.encode("alaw", tones.dtmf_tone("9", 0.1))
    for n in range(5):
        callee.receive(
            rtp(10 + n, 160 * (10 + n), tone[n * FRAME : (n + 1) * FRAME], 8),
            CALLEE,
            1.0 + n * 0.02,
        )
    assert DigitReceived("9") in callee.events
    kinds = {payload_of(caller.tick(1.0 + n * 0.02))[0] for n in range(10)}
    assert 101 in kinds  # the event packets


def test_a_prompt_on_one_side_goes_before_the_bridge_and_parting_ends_it() -> None:
    caller, callee = pair()
    said = g711.encode("ulaw", tones.tone(700, 0.02, -12))
    prompt = g711.encode("alaw", tones.tone(1200, 0.02, -12))
    callee.play_encoded(1, prompt)
    caller.receive(rtp(1, 160, said), CALLER, 0.0)
    assert payload_of(callee.tick(0.02))[1] == prompt  # its own prompt first
    assert payload_of(callee.tick(0.04))[1] != g711.silence("alaw", FRAME)  # then the caller
    caller.part(callee)
    assert caller.tells is None and callee.hears is None and callee.tells is None
    caller.receive(rtp(2, 320, said), CALLER, 0.04)
    assert payload_of(callee.tick(0.06))[1] == g711.silence("alaw", FRAME)


def frames(count: int, start: int = 0) -> list[bytes]:
    """``count`` distinct 20 ms frames, numbered from ``start`` (to see which ones arrive)."""
    return [struct.pack("!I", start + n) * (FRAME // 4) for n in range(count)]


def test_a_backlog_comes_back_down_to_the_cushion_and_no_further() -> None:
    # Five frames wait (the listening side played relayed digits meanwhile), then one
    # frame comes and goes each tick: a backlog that nothing else would ever take away.
    feed = Feed("ulaw", "ulaw")
    sent = frames(5 + 5 * PATIENCE)
    for frame in sent[:5]:
        feed.push(frame)
    heard = []
    for frame in sent[5:]:
        feed.push(frame)
        heard.append(feed.frame())
    # Speech without a pause: once the feed has waited PATIENCE for a pause in vain, one
    # frame (the oldest) goes, then one every STRIDE, until one frame of cushion is left.
    assert feed.trimmed == 4 * FRAME == feed.dropped
    assert len(feed) == SPARE
    assert all(h is not None for h in heard)
    # Heard in order but for the four trimmed; the last one still waits.
    missing = [n for n, frame in enumerate(sent[:-1]) if frame not in heard]
    assert len(missing) == 4
    assert missing[0] >= PATIENCE
    # STRIDE takes apart: the frames between were heard, one each take.
    assert [b - a - 1 for a, b in itertools.pairwise(missing)] == [STRIDE] * 3
    assert heard == [sent[n] for n in range(len(sent) - 1) if n not in missing]


def test_a_feed_keeps_the_cushion_its_jitter_needs() -> None:
    # Two frames every other tick (jitter of one packet): the feed is sometimes down to
    # the frame it gives, so nothing is trimmed and, after the first tick, nothing missed.
    feed = Feed("ulaw", "ulaw")
    sent = frames(10 * WINDOW)
    heard = []
    for tick in range(len(sent)):
        if tick % 2 == 1:
            feed.push(sent[tick - 1])
            feed.push(sent[tick])
        heard.append(feed.frame())
    assert feed.trimmed == 0 and feed.dropped == 0
    assert heard[0] is None and heard[1:] == sent[:-1]


def test_relayed_digits_do_not_leave_the_bridge_late() -> None:
    # The callee takes RFC 4733 events: each digit the caller presses is relayed as an
    # event of 200 ms, during which the caller's audio waits in the feed. Afterwards the
    # delay comes back down (it would stay at the bound, where any jitter costs audio).
    caller = MediaSession("PCMU", 0, 101, CALLER, label="caller")
    callee = MediaSession("PCMU", 0, 101, CALLEE, label="callee")
    caller.join(callee)
    said = g711.encode("ulaw", tones.tone(700, 0.02, -12))
    seq = 0
    now = 0.0
    for tick in range(5 * PATIENCE):
        seq += 1
        now += 0.02
        if tick in (25, 50, 75, 100):  # a key press: 100 ms of event, then its end
            for duration in (160, 320, 480, 640, 800):
                end = duration == 800
                payload = event_payload("5", end=end, duration=duration)
                caller.receive(rtp(seq, 160 * 25 * tick, payload, 101), CALLER, now)
                callee.tick(now)
                seq += 1
                now += 0.02
        caller.receive(rtp(seq, 160 * seq, said), CALLER, now)
        callee.tick(now + 0.01)
        if tick == 150:
            assert callee.hears is not None and len(callee.hears) >= 4 * FRAME  # late
    assert callee.hears is not None and len(callee.hears) <= SPARE


def test_a_backlog_is_trimmed_in_a_pause_not_in_speech() -> None:
    feed = Feed("ulaw", "ulaw")
    speech = frames(65)
    sent = speech + [g711.silence("ulaw", FRAME)] * (3 * WINDOW)
    for frame in sent[:5]:
        feed.push(frame)
    heard = []
    for frame in sent[5:]:
        feed.push(frame)
        heard.append(feed.frame())
    assert heard[:65] == speech  # every frame of speech, none trimmed from it
    assert feed.trimmed == 4 * FRAME and len(feed) == SPARE  # four quiet frames went


def test_a_quiet_frame_is_left_out_as_it_comes_in_when_the_feed_holds_too_much() -> None:
    """A pause between words is often one quiet frame, and the talker's packets come in
    bursts: that frame may reach the head of the feed only when it is all the feed holds,
    too late to trim it there. It goes as it comes in instead, and no speech goes."""
    feed = Feed("ulaw", "ulaw")
    quiet = g711.silence("ulaw", FRAME)
    talk = frames(2 * WINDOW)
    for frame in talk[:4]:  # a backlog of four frames (relayed digits played meanwhile)
        feed.push(frame)
    heard: list[bytes | None] = []
    for frame in talk[4 : 4 + WINDOW]:  # a window of speech: the excess is known
        feed.push(frame)
        heard.append(feed.frame())
    feed.push(quiet)  # the pause, then nothing for five ticks (a burst comes later)
    for _ in range(5):
        heard.append(feed.frame())
    for frame in talk[4 + WINDOW :]:
        feed.push(frame)
        heard.append(feed.frame())
    assert quiet not in heard and feed.trimmed == FRAME
    spoken = [h for h in heard if h is not None]
    assert spoken == talk[: len(spoken)]  # every frame of speech, in order: none trimmed
    assert len(spoken) + len(feed) // FRAME == len(talk)
