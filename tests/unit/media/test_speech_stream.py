"""The recognition stream: utterances cut along voice-activity edges (media/utterances.py)."""

from pathlib import Path

import numpy as np
import pytest

from callhook.events import SpeechStarted
from callhook.media import wav
from callhook.media.session import MediaSession
from callhook.media.utterances import (
    FRAME,
    PREROLL_FRAMES,
    Utterance,
    UtteranceCutter,
    UtterancePiece,
    cut_utterances,
)

DATA = Path(__file__).parents[2] / "data" / "speech"


def frame(value: int) -> np.ndarray:
    return np.full(FRAME, value, dtype=np.int16)


def test_cutter_follows_edges_with_preroll():
    cutter = UtteranceCutter(preroll_frames=3)
    for i in range(5):
        assert cutter.feed(frame(i), None) == []
    out = cutter.feed(frame(10), True)
    assert out == [SpeechStarted()]
    assert cutter.feed(frame(11), None) == []
    (utterance,) = cutter.feed(frame(12), False)
    assert isinstance(utterance, Utterance) and not utterance.truncated
    # the last 3 frames before the edge, then the edge frame up to the falling edge
    assert [int(v) for v in utterance.audio[::FRAME]] == [2, 3, 4, 10, 11, 12]
    assert cutter.feed(frame(13), None) == []


def test_cutter_cuts_long_utterances():
    cutter = UtteranceCutter(preroll_frames=0, max_frames=4)
    cutter.feed(frame(1), True)
    out = [cutter.feed(frame(2), None) for _ in range(5)]
    assert [len(o) for o in out] == [0, 0, 1, 0, 0]
    cut = out[2][0]
    assert isinstance(cut, Utterance)
    assert cut.truncated and len(cut.audio) == 4 * FRAME
    flushed = cutter.flush()
    assert flushed is not None and len(flushed.audio) == 2 * FRAME
    assert cutter.flush() is None


def test_a_streaming_cutter_hands_out_pieces_while_the_caller_speaks():
    cutter = UtteranceCutter(preroll_frames=2, piece_frames=3)
    for i in range(4):
        cutter.feed(frame(i), None)
    assert cutter.feed(frame(10), True) == [SpeechStarted()]
    out = [cutter.feed(frame(11 + i), None) for i in range(6)]
    pieces = [item for items in out for item in items]
    # The first piece: the pre-roll, the onset frame and the one after it; then every 3.
    assert [p.first for p in pieces if isinstance(p, UtterancePiece)] == [True, False]
    first, second = pieces
    assert isinstance(first, UtterancePiece) and isinstance(second, UtterancePiece)
    assert [int(v) for v in first.audio[::FRAME]] == [2, 3, 10, 11]
    assert [int(v) for v in second.audio[::FRAME]] == [12, 13, 14]
    (whole,) = cutter.feed(frame(20), False)
    assert isinstance(whole, Utterance)
    # The whole utterance still, and where its tail begins: what no piece held.
    assert [int(v) for v in whole.audio[::FRAME]] == [2, 3, 10, 11, 12, 13, 14, 15, 16, 20]
    assert whole.streamed == 7 * FRAME
    assert [int(v) for v in whole.audio[whole.streamed :: FRAME]] == [15, 16, 20]
    # The next utterance starts afresh.
    cutter.feed(frame(30), True)
    (piece,) = cutter.feed(frame(31), None) + cutter.feed(frame(32), None)
    assert isinstance(piece, UtterancePiece) and piece.first


def test_a_streaming_cutter_cut_at_its_limit_starts_the_next_utterances_pieces():
    cutter = UtteranceCutter(preroll_frames=0, max_frames=5, piece_frames=2)
    cutter.feed(frame(1), True)
    items = [item for _ in range(7) for item in cutter.feed(frame(2), None)]
    kinds = [(type(i).__name__, getattr(i, "first", None)) for i in items]
    assert kinds == [
        ("UtterancePiece", True),
        ("UtterancePiece", False),
        ("Utterance", None),
        ("UtterancePiece", True),
    ]
    cut = items[2]
    assert isinstance(cut, Utterance) and cut.truncated and cut.streamed == 4 * FRAME
    flushed = cutter.flush()
    assert flushed is not None and flushed.streamed == 2 * FRAME and len(flushed.audio) == 3 * FRAME


def noisy(samples: np.ndarray, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pad = np.zeros(8000, dtype=np.int16)
    signal = np.concatenate([pad, samples, pad]).astype(np.float64)
    noise = rng.normal(0.0, 32768 * 10 ** (-50 / 20), signal.size)
    return np.clip(signal + noise, -32768, 32767).astype(np.int16)


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.wav"))[::4])
def test_a_spoken_digit_is_one_utterance_holding_the_speech(name):
    speech = wav.decode_to_8k((DATA / name).read_bytes())
    utterances = cut_utterances(noisy(speech), law="ulaw")
    assert len(utterances) >= 1
    longest = max(utterances, key=len)
    # the utterance holds (nearly) all of the spoken energy
    energy = float(np.sum(speech.astype(np.float64) ** 2))
    held = float(np.sum(longest.astype(np.float64) ** 2))
    assert held >= 0.9 * energy
    assert len(longest) >= PREROLL_FRAMES * FRAME


def test_session_hands_utterances_over_only_while_recognising():
    session = MediaSession("PCMU", 0, None, ("127.0.0.1", 4000))
    speech = wav.decode_to_8k((DATA / "5_jackson_5.wav").read_bytes())
    audio = noisy(speech)
    frames = [audio[i : i + FRAME] for i in range(0, len(audio) // FRAME * FRAME, FRAME)]
    for f in frames:
        session._detect(f)
    assert not session.utterances and not any(isinstance(e, SpeechStarted) for e in session.events)
    session.start_recognition()
    for f in frames:
        session._detect(f)
    assert len(session.utterances) >= 1
    assert any(isinstance(e, SpeechStarted) for e in session.events)
    session.stop_recognition()
    assert not session.utterances


def test_a_session_streaming_recognition_hands_out_pieces_that_make_the_utterance():
    session = MediaSession("PCMU", 0, None, ("127.0.0.1", 4000))
    speech = wav.decode_to_8k((DATA / "5_jackson_5.wav").read_bytes())
    audio = noisy(speech)
    session.start_recognition(piece_frames=10)
    for i in range(0, len(audio) // FRAME * FRAME, FRAME):
        session._detect(audio[i : i + FRAME])
    items = list(session.utterances)
    whole = [i for i in items if isinstance(i, Utterance)]
    assert len(whole) == 1, items
    pieces = [i for i in items[: items.index(whole[0])] if isinstance(i, UtterancePiece)]
    assert len(pieces) >= 2 and pieces[0].first and not any(p.first for p in pieces[1:])
    fed = np.concatenate([p.audio for p in pieces])
    assert whole[0].streamed == len(fed)
    tail = whole[0].audio[whole[0].streamed :]
    assert np.array_equal(np.concatenate([fed, tail]), whole[0].audio)
    # Without piece_frames (an engine that does not stream): whole utterances only.
    session.stop_recognition()
    session.start_recognition()
    for i in range(0, len(audio) // FRAME * FRAME, FRAME):
        session._detect(audio[i : i + FRAME])
    assert session.utterances and all(isinstance(i, Utterance) for i in session.utterances)
