"""The pacer: a far end's bursts played out a frame a tick (counted in ticks, no clock)."""

from __future__ import annotations

import numpy as np

from callhook.media.pacer import CUSHION, FRAME_BYTES, Pacer


def pcm(samples: int, start: int = 0) -> bytes:
    """``samples`` distinct samples (a ramp), to tell frames apart."""
    return (np.arange(start, start + samples) % 30000).astype("<i2").tobytes()


def test_a_burst_is_played_whole_one_frame_a_tick_in_order() -> None:
    pacer = Pacer()
    burst = pcm(8000)  # a second, in one message
    pacer.push(burst)
    frames = [pacer.frame() for _ in range(60)]
    played = [f for f in frames if f is not None]
    assert len(played) == 50 and frames[:50] == played  # 50 ticks in a row, then dry
    assert b"".join(played) == burst
    assert pacer.buffered == 0


def test_real_time_pieces_with_jitter_play_without_a_gap_after_the_cushion() -> None:
    pacer = Pacer()
    out: list[bytes | None] = []
    # 20 ms pieces, one a tick, but every fifth arrives a tick late (two come together).
    arrivals = {tick: 1 for tick in range(100)}
    for tick in range(0, 100, 5):
        arrivals[tick] = 0
        arrivals[tick + 1] = 2
    sent = 0
    for tick in range(110):
        for _ in range(arrivals.get(tick, 0)):
            pacer.push(pcm(160, 160 * sent))
            sent += 1
        out.append(pacer.frame())
    played = [f for f in out if f is not None]
    first = next(i for i, f in enumerate(out) if f is not None)
    assert first >= CUSHION - 1  # it waited for its cushion first
    # then no gap until everything sent was played
    assert all(f is not None for f in out[first : first + sent])
    assert b"".join(played) == pcm(160 * sent)
    assert pacer.underruns == 1  # only at the very end


def test_a_short_last_piece_is_played_once_nothing_more_comes() -> None:
    pacer = Pacer()
    pacer.push(pcm(100))  # less than a frame, and less than the cushion
    out = [pacer.frame() for _ in range(CUSHION + 2)]
    played = [f for f in out if f is not None]
    assert len(played) == 1
    assert played[0] == pcm(100) + bytes(FRAME_BYTES - 200)  # the tail, then silence


def test_an_odd_byte_waits_for_its_pair() -> None:
    pacer = Pacer(cushion=1)
    data = pcm(160)
    pacer.push(data[:101])
    pacer.push(data[101:])
    assert pacer.frame() == data


def test_clear_drops_what_is_not_yet_played() -> None:
    pacer = Pacer(cushion=1)
    pacer.push(pcm(1600))
    assert pacer.frame() == pcm(160)
    assert pacer.clear() == 1440
    assert pacer.frame() is None
    pacer.push(pcm(160, 5000))
    assert pacer.frame() == pcm(160, 5000)  # what comes after the clear plays


def test_more_than_the_limit_costs_the_oldest_audio_not_memory() -> None:
    pacer = Pacer(cushion=1, limit_seconds=0.1)  # 800 samples
    pacer.push(pcm(1000))
    assert pacer.buffered == 800 and pacer.dropped == 400
    assert pacer.frame() == pcm(160, 200)  # the newest 800 samples are kept
