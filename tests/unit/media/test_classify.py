"""Who answered, from the callee's audio (callhook/media/classify.py), on the audio's own
clock: every clip of the evaluation set in tests/data/classify (live answers, voicemail
greetings with beeps of several kinds and without, fax tones, silence: real recordings
and the embedded voices, on a noisy µ-law line) is classified as its label says, and a
machine's beep is placed within 150 ms of where it was put; the same through a call's
media session, frame by frame as RTP brings them and as the media tick batches them."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from callhook.events import ClassifyOptions, DigitReceived, FarEndClassified, GreetingEnded
from callhook.media import frames, g711, tones, wav
from callhook.media.classify import CalleeClassifier, News
from callhook.media.session import MediaSession

SET = Path(__file__).parents[2] / "data" / "classify"
LABELS: list[dict[str, Any]] = json.loads((SET / "labels.json").read_text())
WANTED = {
    "live": "live",
    "machine": "answering_machine",
    "fax": "fax_machine",
    "silence": "unknown",
}
PEER = ("192.0.2.10", 40000)


def clip(entry: dict[str, Any]) -> npt.NDArray[np.int16]:
    return wav.decode_to_8k((SET / entry["file"]).read_bytes())


def classify(samples: npt.NDArray[np.int16], options: ClassifyOptions) -> list[News]:
    classifier = CalleeClassifier(options)
    news: list[News] = []
    for i in range(0, len(samples) - 159, 160):
        news += classifier.feed(samples[i : i + 160])
        if classifier.done:
            return news
    return news + classifier.finish()


@pytest.mark.parametrize("entry", LABELS, ids=[e["file"] for e in LABELS])
def test_each_clip_of_the_set_is_what_its_label_says(entry: dict[str, Any]) -> None:
    news = classify(clip(entry), ClassifyOptions())
    decision = news[0]
    assert isinstance(decision, FarEndClassified)
    assert decision.far_end_type == WANTED[entry["class"]], decision
    if entry["class"] == "silence":
        assert decision.reason == "silence" and decision.seconds == 5.0
    if entry["class"] == "live":
        # The after-greeting silence after the answer's end: the label's end is the last
        # 10 ms within 35 dB of the peak, a soft tail (up to 0.25 s here) that may be
        # below the line's noise, where the classifier counts silence from.
        assert entry["speech_end"] + 0.55 <= decision.seconds <= entry["speech_end"] + 1.0
    if entry["class"] != "machine":
        assert len(news) == 1
        return
    assert decision.reason == "long_greeting"
    (ended,) = news[1:]
    assert isinstance(ended, GreetingEnded)
    beep = entry["beep"]
    if beep is None:
        assert ended.how == "silence" and ended.beep_start is None
        # Its silence is counted from the greeting's end.
        assert ended.seconds == pytest.approx(entry["speech_end"] + 4.0, abs=0.5)
        return
    assert ended.how == "beep"
    assert ended.beep_start is not None and ended.beep_end is not None
    assert abs(ended.beep_start - beep["start"]) <= 0.15, (ended, beep)
    assert abs(ended.beep_end - beep["end"]) <= 0.15, (ended, beep)
    # The greeting is over after the beep's post-beep silence, not before.
    assert ended.seconds >= beep["end"] + 1.0 - 0.05
    assert any(abs(hz - beep["hz"][0]) <= 40 for hz in ended.beep_hz)


def test_without_waiting_for_the_beep_a_machine_is_all() -> None:
    machine = next(e for e in LABELS if e["class"] == "machine" and e["beep"])
    news = classify(clip(machine), ClassifyOptions(wait_for_beep=False))
    assert [type(n) for n in news] == [FarEndClassified]


def test_a_beep_inside_the_greeting_is_not_its_end() -> None:
    """A tone the greeting goes on after (music, a chime before the words) is forgotten:
    the beep is the tone followed by the post-beep silence."""
    machine = next(e for e in LABELS if e["class"] == "machine" and e["beep"])
    samples = clip(machine)
    start = int(machine["speech_start"] * 8000) + 8000  # a second into the greeting
    chime = tones.tone(1200.0, 0.4, level_dbfs=-15.0)
    mixed = samples.copy()
    mixed[start : start + len(chime)] = chime
    news = classify(mixed, ClassifyOptions())
    ended = news[-1]
    assert isinstance(ended, GreetingEnded) and ended.beep_start is not None
    assert abs(ended.beep_start - machine["beep"]["start"]) <= 0.15


def test_the_greeting_timeout_and_the_end_of_the_audio() -> None:
    machine = next(e for e in LABELS if e["class"] == "machine" and e["beep"])
    samples = clip(machine)[: int(machine["speech_end"] * 8000)]  # cut before the beep
    news = classify(samples, ClassifyOptions())
    assert isinstance(news[-1], GreetingEnded) and news[-1].how == "timeout"
    # No audio at all: nothing heard is silence; some speech then nothing is a timeout.
    assert classify(np.zeros(0, np.int16), ClassifyOptions())[0] == FarEndClassified(
        "unknown", "silence", 0.0
    )
    live = next(e for e in LABELS if e["class"] == "live")
    half = clip(live)[: int((live["speech_start"] + 0.2) * 8000)]
    decision = classify(half, ClassifyOptions())[0]
    assert isinstance(decision, FarEndClassified) and decision.reason == "timeout"


def test_frames_of_other_lengths_are_taken_too() -> None:
    """A 30 ms packetisation: the classifier hears every sample whatever the frame size."""
    live = next(e for e in LABELS if e["class"] == "live")
    samples = clip(live)
    classifier = CalleeClassifier(ClassifyOptions())
    news: list[News] = []
    for i in range(0, len(samples) - 239, 240):
        news += classifier.feed(samples[i : i + 240])
    decision = news[0]
    assert isinstance(decision, FarEndClassified) and decision.far_end_type == "live"


# --- through a call's media session -----------------------------------------------------


@pytest.mark.parametrize("batched", [False, True])
def test_a_media_session_classifies_what_it_receives(batched: bool) -> None:
    """RTP in, the classifier's news out in the session's events; done, it is let go (the
    usual fast paths again). Batched: as the media tick decodes every call's frames at
    once and hands them to detect()."""
    machine = next(e for e in LABELS if e["class"] == "machine" and e["beep"])
    session = MediaSession("PCMU", 0, 101, PEER)
    session.batched = batched
    session.classify(ClassifyOptions())
    encoded = g711.encode("ulaw", clip(machine))
    for i in range(len(encoded) // 160):
        header = struct.pack("!BBHII", 0x80, 0, 100 + i, 1000 + i * 160, 7)
        session.receive(header + encoded[i * 160 : (i + 1) * 160], PEER, i * 0.02)
        if batched and session.undetected:
            measured = frames.measure("ulaw", session.undetected)
            session.undetected.clear()
            session.detect(measured.samples, measured.powers)
        session.tick(i * 0.02)
        if session.classifier is None:
            break
    news = [e for e in session.events if isinstance(e, FarEndClassified | GreetingEnded)]
    assert [type(n) for n in news] == [FarEndClassified, GreetingEnded]
    ended = news[1]
    assert isinstance(ended, GreetingEnded) and ended.beep_start is not None
    assert abs(ended.beep_start - machine["beep"]["start"]) <= 0.15
    assert session.classifier is None


def test_stopping_a_session_classifying_drops_what_it_said() -> None:
    """The action gave up waiting: what the classifier said meanwhile is not taken by
    the next action; other events stay."""
    session = MediaSession("PCMU", 0, 101, PEER)
    session.classify(ClassifyOptions())
    assert session.classifier is not None
    session.events.append(FarEndClassified("live", "short_greeting", 1.5))
    session.events.append(DigitReceived("5"))
    session.stop_classifying()
    assert session.classifier is None and list(session.events) == [DigitReceived("5")]


def _line(*parts: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    """``parts`` one after another on a quiet µ-law line (-60 dBFS of noise)."""
    joined = np.concatenate(parts).astype(np.float64)
    noise = np.random.default_rng(7).normal(0.0, 32768 * 10 ** (-60 / 20), len(joined))
    mixed = np.clip(joined + noise, -32768, 32767).astype(np.int16)
    return g711.decode("ulaw", g711.encode("ulaw", mixed))


def test_a_short_greeting_then_a_beep_is_a_machine() -> None:
    """A few words, then the beep ("It's Sam, leave a message" *beep*): too short a
    greeting to tell by its length; the beep and its silence tell it."""
    live = next(e for e in LABELS if e["class"] == "live")
    words = clip(live)[: int((live["speech_end"] + 0.3) * 8000)]
    samples = _line(words, tones.tone(1000.0, 0.4, level_dbfs=-15.0), tones.silence(3.0))
    news = classify(samples, ClassifyOptions())
    decision, ended = news
    assert isinstance(decision, FarEndClassified)
    assert (decision.far_end_type, decision.reason) == ("answering_machine", "beep")
    assert isinstance(ended, GreetingEnded) and ended.how == "beep"
    assert ended.beep_start == pytest.approx(len(words) / 8000, abs=0.03)


def test_a_late_beep_is_not_taken_for_silence() -> None:
    """A machine that only beeps, late: its tone and its silence decide, not the
    initial silence's limit passing meanwhile."""
    samples = _line(
        tones.silence(4.3), tones.tone(850.0, 0.5, level_dbfs=-12.0), tones.silence(2.0)
    )
    decision = classify(samples, ClassifyOptions())[0]
    assert isinstance(decision, FarEndClassified)
    assert (decision.far_end_type, decision.reason) == ("answering_machine", "beep")


def test_a_special_information_tone_is_no_one() -> None:
    sit = [tones.tone(hz, 0.33, level_dbfs=-15.0) for hz in (913.8, 1370.6, 1776.7)]
    samples = _line(tones.silence(0.5), *sit, tones.silence(3.0))
    decision = classify(samples, ClassifyOptions())[0]
    assert isinstance(decision, FarEndClassified)
    assert (decision.far_end_type, decision.reason) == ("unknown", "special_information_tone")


def test_silence_is_counted_from_the_last_sound_and_broken_by_the_next() -> None:
    """A greeting's words, a pause just short of the after-greeting silence, more words:
    the pause ends with the first frame of sound, not when the voice detector has
    confirmed the new words (3 frames and the model's say later), so it is a machine;
    and the same words then silence are a live answer decided the after-greeting
    silence after the last sound, not after the model has let the words go."""
    live = next(e for e in LABELS if e["class"] == "live")
    words = clip(live)[int(live["speech_start"] * 8000) : int(live["speech_end"] * 8000)]
    options = ClassifyOptions(milliseconds_greeting=1000 + int(len(words) / 8))
    gap = tones.silence(0.78)
    samples = _line(tones.silence(0.3), words, gap, words, words, tones.silence(3.0))
    decision = classify(samples, options)[0]
    assert isinstance(decision, FarEndClassified)
    assert (decision.far_end_type, decision.reason) == ("answering_machine", "long_greeting")
    decision = classify(_line(tones.silence(0.3), words, tones.silence(3.0)), options)[0]
    assert isinstance(decision, FarEndClassified)
    assert decision.far_end_type == "live"
    assert decision.seconds == pytest.approx(0.3 + len(words) / 8000 + 0.8, abs=0.1)
