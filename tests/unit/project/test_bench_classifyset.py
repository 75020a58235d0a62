"""bench.classifyset, the callee classification set's recipe: one seed gives the same files
every time, every class is there, and each label says what the audio holds — the beep is a
tone of the labelled frequency where labelled (a fade passes half amplitude at its labelled
edges), a fax tone is at 2100 or 1100 Hz just where labelled, speech peaks inside its labelled
span, and outside what is labelled there is only the line's noise.

espeak and the real recordings only (no piper model to load): a few seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import classifyset
from callhook.media import g711, wav

FS = 8000
VOICES = ("espeak", "fsdd")


def frame_levels(x: np.ndarray) -> np.ndarray:
    """dBFS of each 20 ms frame (RMS re full-scale square, as the labels' levels)."""
    f = x[: len(x) // 160 * 160].astype(np.float64).reshape(-1, 160)
    levels: np.ndarray = 10 * np.log10(np.mean(f * f, axis=1) / 32768.0**2 + 1e-12)
    return levels


def span(x: np.ndarray, start: float, end: float) -> np.ndarray:
    return x[round(start * FS) : round(end * FS)].astype(np.float64)


def band_share(x: np.ndarray, hz: float, width: float = 30.0) -> float:
    """The share of ``x``'s power within ``width`` Hz of ``hz`` (Hann window)."""
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x)), 8 * FS)) ** 2
    f = np.fft.rfftfreq(8 * FS, 1 / FS)
    return float(spectrum[np.abs(f - hz) <= width].sum() / spectrum.sum())


def peak_hz(x: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x)), 8 * FS))
    return float(np.fft.rfftfreq(8 * FS, 1 / FS)[np.argmax(spectrum)])


def envelope(x: np.ndarray, hz: float) -> np.ndarray:
    """The amplitude of the ``hz`` component, averaged over 10 ms."""
    t = np.arange(len(x)) / FS
    product = x * np.exp(-2j * np.pi * hz * t)
    return 2 * np.abs(np.convolve(product, np.ones(80) / 80, mode="same"))


def quiet(x: np.ndarray, start: float, end: float, e: dict[str, Any]) -> None:
    """Only the line's noise (and hum) from ``start`` to ``end`` s (whole frames inside)."""
    first, last = int(np.ceil(start * 50)), int(np.floor(end * 50))
    if last <= first:
        return
    levels = frame_levels(x[first * 160 : last * 160])
    assert levels.max() < e["noise_dbfs"] + 6.0, (e["file"], start, end, levels.max())


def check(x: np.ndarray, e: dict[str, Any]) -> None:
    """The label ``e`` against the clip's samples ``x``."""
    assert len(x) == round(e["seconds"] * FS) and len(x) % 160 == 0
    cls, beep, fax = e["class"], e["beep"], e["fax"]
    assert (e["speech_start"] is not None) == (cls in ("live", "machine"))
    assert beep is None or cls == "machine"
    assert (fax is not None) == (cls == "fax")
    busy: list[tuple[float, float]] = []  # what is labelled: nothing but noise elsewhere
    if e["speech_start"] is not None:
        start, end = e["speech_start"], e["speech_end"]
        low, high = (0.3, 1.5) if cls == "live" else (2.8, 9.0)
        assert start >= 0.2 and low - 1e-6 <= end - start <= high + 1e-6
        busy.append((start, end))
        if e["second_answer"] is not None:
            assert 2.0 <= e["second_answer"] - end <= 3.0
            busy.append((e["second_answer"], e["second_answer_end"]))
        # The speech's peak (the second answer's, if that is louder) is where it is labelled.
        peak = 32768 * 10 ** (e["speech_peak_dbfs"] / 20)
        loudest = max(np.max(np.abs(span(x, start, end))) for start, end in busy)
        assert 0.8 * peak < loudest < 1.2 * peak
    if beep is not None:
        assert beep["start"] - e["speech_end"] >= 0.2
        tone = span(x, beep["start"], beep["end"])
        if beep["kind"] == "sequence":
            for start, end, hz in beep["parts"]:
                assert abs(peak_hz(span(x, start, end)) - hz) <= 5, (e["file"], hz)
        else:
            assert abs(peak_hz(tone) - beep["hz"][0]) <= 5 or beep["kind"] == "chord"
            for hz in beep["hz"]:
                assert band_share(tone, hz) > 0.2, (e["file"], hz)
            assert sum(band_share(tone, hz) for hz in beep["hz"]) > 0.8
        if beep["kind"] == "fade":  # the labelled edges: half the tone's full amplitude
            hz = beep["hz"][0]
            env = envelope(span(x, beep["start"] - 0.4, beep["end"] + 0.4), hz)
            full = env.max()
            for edge in (0.4, 0.4 + beep["end"] - beep["start"]):
                assert 0.4 < env[round(edge * FS)] / full < 0.6, (e["file"], edge)
            busy.append((beep["start"] - 0.3, beep["end"] + 0.3))
        else:
            busy.append((beep["start"], beep["end"]))
    if fax is not None:
        hz = fax["hz"][0]
        bursts = fax.get("bursts") or [[fax["start"], fax["end"]]]
        assert fax["start"] == bursts[0][0] and fax["end"] == bursts[-1][1]
        for start, end in bursts:
            assert band_share(span(x, start, end), hz) > 0.9, (e["file"], start)
            busy.append((start, end))
    edges = sorted(busy)
    ends = [0.0] + [end for _, end in edges]
    starts = [start for start, _ in edges] + [e["seconds"]]
    for gap_start, gap_end in zip(ends, starts, strict=True):
        quiet(x, gap_start, gap_end, e)
    if cls == "silence":
        assert frame_levels(x).max() < -40.0, e["file"]


def read(directory: Path) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    labels = json.loads((directory / "labels.json").read_text())
    return labels, {e["file"]: (directory / e["file"]).read_bytes() for e in labels}


def test_a_seed_gives_the_same_set_and_its_labels_say_what_the_clips_hold(tmp_path: Path) -> None:
    made = classifyset.generate(tmp_path / "a", 8, 3, voices=VOICES)
    labels, files = read(tmp_path / "a")
    assert labels == made
    assert [e["class"] for e in labels] == list(classifyset.CLASSES) * 2
    assert {e["source"] for e in labels} == {"espeak", "fsdd", "tone", "noise"}
    # Deterministic: the same seed again gives the same bytes; another seed does not.
    classifyset.generate(tmp_path / "b", 8, 3, voices=VOICES)
    assert read(tmp_path / "b") == (labels, files)
    classifyset.generate(tmp_path / "c", 4, 4, voices=VOICES)
    assert read(tmp_path / "c")[1]["0000-live.wav"] != files["0000-live.wav"]
    for e in labels:
        info = wav.read_info(files[e["file"]])
        assert (info.format_tag, info.channels, info.sample_rate) == (wav.FORMAT_ULAW, 1, FS)
        check(wav.decode_to_8k(files[e["file"]]), e)


@pytest.mark.parametrize(
    ("i", "what"),
    [
        (9, "sequence"),
        (13, "fade"),
        (17, None),  # a machine without a beep
        (10, "CNG"),
        (6, "CED-reversals"),
        (16, "second answer"),
    ],
)
def test_each_kind_of_clip_is_labelled_as_it_sounds(i: int, what: str | None) -> None:
    speech = classifyset.Speech(classifyset.TEST_SPEECH)
    codes, e = classifyset.clip(i, 5, speech, VOICES)
    e["file"] = f"clip {i}"
    if e["class"] == "machine":
        assert (e["beep"] and e["beep"]["kind"]) == what
    elif e["class"] == "fax":
        assert e["fax"]["kind"] == what
    else:
        assert e["second_answer"] is not None
    check(g711.decode_array("ulaw", codes), e)


def test_the_shipped_set_reads_back_as_labelled() -> None:
    """tests/data/classify: every clip is there, µ-law, as its label says."""
    directory = Path(__file__).resolve().parents[2] / "data" / "classify"
    labels, files = read(directory)
    assert sorted(files) == sorted(p.name for p in directory.glob("*.wav"))
    for e in labels:
        check(wav.decode_to_8k(files[e["file"]]), e)
