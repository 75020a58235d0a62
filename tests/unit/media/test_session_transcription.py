"""A call's live transcription fed by its media session (media/session.py with
speech/transcription.py's CallTranscriber): the caller's RTP is the inbound direction, what
the session sends (a prompt) the outbound one; mixed sums them. Real recordings of spoken
digits, the call's own voice-activity detector, no network (RTP as bytes, ticks by hand)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from callhook.media import g711, wav
from callhook.media.player import FRAME
from callhook.media.session import MediaSession
from callhook.media.transcriber import CallTranscriber, Final, TranscriptionMode
from callhook.media.vad import new_detector

DATA = Path(__file__).parents[2] / "data" / "speech"
PEER = ("192.0.2.10", 40000)
QUIET = np.zeros(8000, dtype=np.int16)


def said(name: str) -> npt.NDArray[np.int16]:
    return wav.decode_to_8k((DATA / name).read_bytes())


def call(
    mode: TranscriptionMode, caller: npt.NDArray[np.int16], prompt: npt.NDArray[np.int16]
) -> CallTranscriber:
    """The caller says ``caller`` while the session plays ``prompt`` to them; every frame
    20 ms apart, the session ticked after each, as the media engine does."""
    session = MediaSession("PCMU", 0, 101, PEER)
    transcriber = CallTranscriber(mode, new_detector)
    session.transcriber = transcriber
    session.play(1, prompt)
    encoded = g711.encode("ulaw", caller)
    for i in range(len(encoded) // FRAME):
        header = struct.pack("!BBHII", 0x80, 0, 100 + i, 1000 + i * FRAME, 7)
        session.receive(header + encoded[i * FRAME : (i + 1) * FRAME], PEER, i * 0.02)
        session.tick(i * 0.02)
    transcriber.stop()
    return transcriber


def finals(transcriber: CallTranscriber) -> dict[str | None, list[Final]]:
    out: dict[str | None, list[Final]] = {}
    for direction, piece in transcriber.pieces:
        if isinstance(piece, Final):
            out.setdefault(direction, []).append(piece)
    return out


# The caller speaks two digits early; the prompt (one digit) plays later, on its own.
CALLER = np.concatenate(
    [QUIET, said("1_jackson_1.wav"), QUIET, said("2_nicolas_12.wav"), QUIET, QUIET, QUIET, QUIET]
)
PROMPT = np.concatenate([QUIET, QUIET, QUIET, QUIET, QUIET, said("3_theo_23.wav"), QUIET])


def test_separate_mode_gives_each_direction_its_own_phrases() -> None:
    got = finals(call("separate", CALLER, PROMPT))
    assert set(got) == {"inbound", "outbound"}
    assert len(got["inbound"]) == 2  # the caller's two digits
    assert len(got["outbound"]) == 1  # the prompt's one
    # The prompt's phrase is the prompt's audio (as sent: through µ-law and back).
    prompt_word = said("3_theo_23.wav")
    assert len(got["outbound"][0].audio) >= 0.8 * len(prompt_word)


@pytest.mark.parametrize(("mode", "direction"), [("inbound", "inbound"), ("outbound", "outbound")])
def test_one_direction_only(mode: TranscriptionMode, direction: str) -> None:
    got = finals(call(mode, CALLER, PROMPT))
    assert set(got) == {direction}


def test_mixed_mode_is_one_stream_without_direction() -> None:
    got = finals(call("mixed", CALLER, PROMPT))
    assert set(got) == {None}
    assert len(got[None]) == 3  # both of the caller's digits and the prompt's, in one stream
