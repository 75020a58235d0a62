"""Live transcription's stream (callhook/media/transcriber.py): real recordings of
spoken digits through the call's voice-activity detector, cut into phrases with interim
snapshots; local-agreement stability; the result bodies in Aculab's shape."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from callhook.events import Alternative
from callhook.media import wav
from callhook.media.player import FRAME
from callhook.media.transcriber import (
    Final,
    Interim,
    PhraseResults,
    Piece,
    TranscriptStream,
    phrase,
    result_body,
    stability,
)
from callhook.media.vad import new_detector

DATA = Path(__file__).parents[2] / "data" / "speech"
SILENCE = np.zeros(8000, dtype=np.int16)  # 1 s


def spoken(*names: str, gap: npt.NDArray[np.int16] = SILENCE) -> npt.NDArray[np.int16]:
    parts: list[npt.NDArray[np.int16]] = [gap]
    for name in names:
        parts += [wav.decode_to_8k((DATA / name).read_bytes()), gap]
    return np.concatenate(parts)


def run(stream: TranscriptStream, samples: npt.NDArray[np.int16]) -> list[tuple[int, Piece]]:
    """Every piece with the frame index that completed it."""
    out: list[tuple[int, Piece]] = []
    for i in range(len(samples) // FRAME):
        out += [(i, p) for p in stream.feed(samples[i * FRAME : (i + 1) * FRAME])]
    return out


def test_three_spoken_digits_are_three_final_phrases_in_order() -> None:
    audio = spoken("1_jackson_1.wav", "2_jackson_2.wav", "3_jackson_3.wav")
    pieces = [p for _, p in run(TranscriptStream(new_detector()), audio)]
    assert [type(p) for p in pieces] == [Final, Final, Final]
    assert [p.phrase for p in pieces] == [0, 1, 2]
    for piece, name in zip(pieces, ("1_jackson_1", "2_jackson_2", "3_jackson_3"), strict=True):
        said = wav.decode_to_8k((DATA / f"{name}.wav").read_bytes())
        assert isinstance(piece, Final) and not piece.truncated
        # the phrase holds the word (with pre-roll and the detector's hangover)
        assert len(piece.audio) >= 0.8 * len(said), name


def test_interim_snapshots_grow_until_the_phrase_is_final() -> None:
    # A long phrase: three digits said without a pause.
    words = [
        wav.decode_to_8k((DATA / n).read_bytes()) for n in ("4_jackson_4.wav", "5_jackson_5.wav")
    ]
    audio = np.concatenate([SILENCE, *words, *words, SILENCE])
    stream = TranscriptStream(new_detector(), interim=True, interim_every=0.2)
    pieces = [p for _, p in run(stream, audio)]
    interims = [p for p in pieces if isinstance(p, Interim)]
    finals = [p for p in pieces if isinstance(p, Final)]
    assert finals and interims
    first = [p for p in interims if p.phrase == finals[0].phrase]
    assert len(first) >= 2
    assert [p.seq for p in first] == list(range(1, len(first) + 1))
    assert all(len(b.audio) > len(a.audio) for a, b in itertools.pairwise(first))
    assert len(finals[0].audio) >= len(first[-1].audio)
    # an interim of a phrase never comes after that phrase's final piece
    final_at = pieces.index(finals[0])
    assert all(
        p.phrase != finals[0].phrase for p in pieces[final_at + 1 :] if isinstance(p, Interim)
    )


def test_without_interim_results_there_are_no_snapshots() -> None:
    audio = spoken("6_jackson_6.wav")
    pieces = [p for _, p in run(TranscriptStream(new_detector(), interim=False), audio)]
    assert pieces and all(isinstance(p, Final) for p in pieces)


def test_a_speaker_who_never_pauses_still_gets_final_phrases() -> None:
    word = wav.decode_to_8k((DATA / "7_jackson_7.wav").read_bytes())
    audio = np.concatenate([SILENCE, *([word] * 8)])
    stream = TranscriptStream(new_detector(), max_frames=50)  # 1 s at most
    pieces = [p for _, p in run(stream, audio)]
    cut = [p for p in pieces if isinstance(p, Final) and p.truncated]
    assert cut and all(len(p.audio) == 50 * FRAME for p in cut)


def test_stopping_mid_phrase_finishes_it_and_silence_gives_nothing() -> None:
    word = wav.decode_to_8k((DATA / "8_jackson_8.wav").read_bytes())
    stream = TranscriptStream(new_detector())
    run(stream, np.concatenate([SILENCE, word[: len(word) * 2 // 3]]))
    (last,) = stream.flush()
    assert isinstance(last, Final) and last.truncated and last.phrase == 0
    assert stream.flush() == []
    quiet = TranscriptStream(new_detector())
    run(quiet, np.concatenate([SILENCE, SILENCE]))
    assert quiet.flush() == []


@pytest.mark.parametrize(
    ("previous", "current", "value"),
    [
        ("", "that's all", 0.0),
        ("that's", "that's all", 0.5),
        ("That's all", "that's all folks", 0.67),
        ("that's all forks", "that's all folks", 0.67),
        ("hello there", "goodbye", 0.0),
        ("one two", "one two", 1.0),
        ("anything", "", 0.0),
    ],
)
def test_stability_is_the_share_of_words_two_decodes_agree_on(
    previous: str, current: str, value: float
) -> None:
    assert stability(previous, current) == value


def test_stale_interim_results_are_dropped_and_stability_follows_the_last() -> None:
    results = PhraseResults()
    assert results.interim(0, 1, "that's") == 0.0
    assert results.interim(0, 3, "that's all") == 0.5
    assert results.interim(0, 2, "that's a") is None  # decoded after a later snapshot
    results.final(0)
    assert results.interim(0, 4, "that's all folks") is None  # the final is out
    assert results.interim(1, 1, "again") == 0.0  # the next phrase starts afresh


def test_phrases_and_bodies_have_aculabs_shape() -> None:
    interim = phrase(
        [Alternative("that's all", 0.5)], final=False, direction="inbound", stability_value=0.92
    )
    assert interim == {
        "alternatives": [{"text": "that's all"}],
        "final": False,
        "stability": 0.92,
        "direction": "inbound",
    }
    final = phrase(
        [Alternative("that's all folks", 0.931), Alternative("that's all forks", 0.05)],
        final=True,
        direction=None,  # mixed: no direction
    )
    assert final == {
        "alternatives": [
            {"text": "that's all folks", "confidence": 0.93},
            {"text": "that's all forks", "confidence": 0.05},
        ],
        "final": True,
    }
    body = result_body("inst", "logs/inst.log", "54321", [final], completed=False)
    assert body["token"] == "" and "this_call" not in body and body["is_notification"]
    assert body["action_result"] == {
        "action": "start_transcription",
        "result": {"transcription": [final], "id": "54321", "completed": False},
    }
