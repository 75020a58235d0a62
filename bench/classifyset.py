"""Callee classification: the labelled evaluation set of answered calls, and its recipe.

    .venv/bin/python -m bench.classifyset --out DIR [--count N] [--seed S]
                                          [--voices piper,espeak,fsdd] [--fsdd DIR]
    .venv/bin/python -m bench.classifyset --larger [--count 400] [--seed 1]

What answered an outbound call, from the callee's audio after the answer: a live person (a
short "Hello?" and then silence, waiting), an answering machine (a long greeting, then a
beep, then silence: the recording), a fax machine (its tones) or nobody (line noise). Each
clip starts at the answer; ``labels.json`` says what it is and when each part sounds, exactly
as the generator placed it, so a classifier's decisions and its beep times can be scored.

Classes take turns (clip i is ``CLASSES[i % 4]``) and every clip has a random generator of
its own, seeded by ``(seed, i)``: the first N clips of a seed are the same whatever the count,
and one seed always gives the same files (the TTS engines are made to run deterministically,
below; the same voices and recordings directory assumed).

- live: a short answer (0.3–1.5 s) 0.2–0.9 s after the answer, then silence to the end
  (6–8 s); every fifth live clip says a second, short answer 2–3 s after the first ends (a
  real person who heard nothing back).
- machine: a greeting of 2.8–9 s of continuous speech (the voice's own pauses between its
  sentences) from 0.2–1.2 s, then 0.2–1.0 s later a beep, then 3–4 s of silence. Beeps, in
  turn: a single tone (400–2000 Hz, 200–800 ms; often a common one: 1000 Hz 500 ms, 440 Hz
  250 ms, 1400 Hz 200 ms, 850 Hz 400 ms), a two-tone chord, a rising sequence of three
  80–120 ms tones, and a tone with slow fades; one machine in 8 has no beep (the greeting
  just ends, and 5–6 s of silence follow: a classifier waits 4 s by default). Beeps are
  −25 to −8 dBFS; none is within 50 Hz of 1100 or 2100 Hz (fax tones).
- fax: CED, 2100 Hz for 2.6–4.0 s after 0–2.5 s of silence, plain or (V.25 ANS with phase
  reversals, V.8 ANSam) with a 180° phase reversal every 450 ms, half of those also with
  ANSam's 15 Hz 20 % amplitude modulation; or CNG, 1100 Hz 0.5 s on, 3 s off, from 0–1.5 s.
  −25 to −10 dBFS. 8 s.
- silence: line noise only, 8 s.

Voices, in turn per class: piper (``callhook.speech.piper``'s embedded voice, joe), espeak-ng
(``callhook.speech.espeak``, eight English voices) and real recordings (FSDD spoken digits:
a live answer is one real digit; a machine greeting a real "number readout", 8–15 digits of
one speaker back to back with 0.05–0.25 s gaps). Piper runs its model through
:class:`~callhook.speech.piper.PiperEngine`'s loaded voice with the generator noise off
(``noise_scale`` and ``noise_w_scale`` 0, which makes it deterministic: the engine's own
synthesis draws new noise on every run, so the same text differs from run to run) and with a
speaking rate of 0.85–1.2 (``length_scale``); espeak speaks through
:class:`~callhook.speech.espeak.EspeakEngine` (which has no rate setting), each text in a
new worker process (espeak-ng's output depends on what it said before in the process), then
is played 0.9–1.12 times as fast by resampling (rate and pitch together: a variant of the
voice).
Every utterance is cut to its speech: from the first to the last 10 ms frame within 35 dB
of its loudest, with 5 ms fades; those edges are the labels' ``speech_start`` and
``speech_end``. The speech of a clip is scaled to a peak of −25 to −3 dBFS.

The line: white or pink noise at −65 to −45 dBFS throughout, in one clip of 4 also 50 or 60
Hz hum with harmonics 3–10 dB under the noise; everything through G.711 µ-law. dBFS: peaks
are relative to 32768; noise, hum and tones are RMS relative to a full-scale square wave,
:mod:`callhook.media.tones`' scale (a sine at −3 dBFS peaks at full scale). Clips are stored
as µ-law WAV (format tag 7, which :func:`callhook.media.wav.decode_to_8k` reads bit-exactly),
8 kHz mono, each a whole number of 20 ms frames long.

Real recordings come from ``tests/data/speech`` (40 FSDD clips) unless told otherwise;
:func:`larger_set` takes all 1500 from ``../shared/data/speech/fsdd`` when that exists.

Labels (``labels.json``, one entry per clip; times in seconds from the clip's start, exact to
the sample): ``file``, ``class``; ``speech_start``/``speech_end`` (the first answer, or the
whole greeting; null without speech); ``second_answer`` (and ``second_answer_end``);
``beep``: null or {start, end, hz, kind, dbfs} (a tone's first and last sample, its 4 ms
raised-cosine ramps inside; a fade's half-amplitude points; a sequence also has ``parts``,
[start, end, hz] of each tone); ``fax``: null or {kind, start, end, hz, dbfs} (CNG also has
its ``bursts``, CED ``am_15hz``); ``voice`` (``piper:joe``, ``espeak:en-gb-x-rp``,
``fsdd:theo``), ``source`` (piper, espeak, fsdd, tone, noise), ``rate``, ``text`` (and
``second_text``), ``recordings`` (the FSDD files used, in order); ``noise_dbfs``, ``noise``
(white, pink), ``hum`` (null or {hz, dbfs}), ``speech_peak_dbfs``, ``speech_level_dbfs``
(active speech level), ``seconds``.

(Past 600 lines: the recipe is one file so that the set can be remade from it alone:
its texts, its voices, its beeps and fax tones, its line, and its labels.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import time
import wave
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr

from bench.vad import FSDD as SHARED_FSDD
from bench.vad import at_level, hum
from callhook.media import g711, wav
from callhook.speech.tts import telephone_audio

Floats = npt.NDArray[np.float64]
Label = dict[str, Any]

FS = 8000
FRAME = 160  # 20 ms: clips are whole frames long
CLASSES = ("live", "machine", "fax", "silence")
VOICES = ("piper", "espeak", "fsdd")
TEST_SPEECH = Path(__file__).resolve().parent.parent / "tests" / "data" / "speech"
CACHE = Path.home() / ".cache" / "callhook-bench"
#: Bumped when the recipe changes what a seed gives: a cached set of another recipe is remade.
RECIPE = 1

#: espeak-ng's English voices used (en-shaw, Shavian spelling, is left out).
ESPEAK_VOICES = (
    "en-us",
    "en",
    "en-gb-x-rp",
    "en-gb-scotland",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-029",
    "en-us-nyc",
)
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
NAMES = ("Sam", "Maria", "David", "Priya", "Tom", "Olivia", "James", "Chen", "Laura", "Ahmed")
COMPANIES = ("Northside Dental", "Acme Plumbing", "the Riverside Clinic", "Baker and Sons")
LIVE_TEXTS = (
    "Hello?",
    "Hello.",
    "Yes?",
    "Hi.",
    "Yes, speaking.",
    "Hello, who's this?",
    "Speaking.",
    "Hi there.",
    "Good morning.",
    "Good afternoon.",
    "Hello, {name} speaking.",
    "Yeah, hello?",
    "Hi, this is {name}.",
    "Hey.",
    "Who is it?",
    "Hello, {company}.",
)
MACHINE_TEXTS = (
    "Hi, you've reached {name}, I can't take your call right now, "
    "please leave a message after the tone.",
    "The person you are calling is not available. Please record your message after the tone.",
    "Hello, this is {name}. Sorry I missed your call. "
    "Leave your name and number and I'll get back to you.",
    "The number you have dialed is not available. At the tone, please record your message. "
    "When you have finished recording, you may hang up.",
    "You have reached the voicemail of {name}. Please leave a message.",
    "Hey, it's {name}! I'm not around right now. You know what to do.",
    "Hello. You have reached {number}. Nobody is available to take your call. "
    "Please leave a message after the beep.",
    "Your call has been forwarded to an automatic voice message system. "
    "{number} is not available. At the tone, please record your message.",
    "Hi, this is {name} and {name2}. We're not home right now, but if you leave a message, "
    "we'll call you back as soon as we can. Thanks!",
    "Welcome to the voice mailbox of {name}. The subscriber is unavailable. "
    "Please leave a message after the tone.",
    "Thank you for calling {company}. Our office is currently closed. "
    "Please leave a message after the tone and we will call you back.",
    "Hello, you've reached {company}. Please leave your name, number, "
    "and a brief message, and someone will return your call.",
    "This is {name}. I'm away from my desk. Please leave a message, or call my mobile.",
    "Good day, you have reached {name} at {company}. I am either on the phone or away "
    "from my desk. Please leave a message after the tone.",
    "The subscriber you have called is not available. "
    "Please try again later, or leave a message after the tone.",
    "Hi! Sorry, I can't get to the phone. Leave a message and I'll call you back.",
)

#: The fields of every label, in order (null where they do not apply).
LABEL_FIELDS = (
    "file",
    "class",
    "speech_start",
    "speech_end",
    "second_answer",
    "second_answer_end",
    "beep",
    "fax",
    "voice",
    "source",
    "rate",
    "text",
    "second_text",
    "recordings",
    "noise_dbfs",
    "noise",
    "hum",
    "speech_peak_dbfs",
    "speech_level_dbfs",
    "seconds",
)
#: Machines' beeps in turn (None: the greeting just ends); one in 8 has none.
BEEP_CYCLE: tuple[str | None, ...] = (
    "single",
    "chord",
    "sequence",
    "fade",
    None,
    "single",
    "chord",
    "sequence",
)
COMMON_BEEPS = ((1000.0, 0.5), (440.0, 0.25), (1400.0, 0.2), (850.0, 0.4))
COMMON_CHORDS = ((440.0, 480.0), (350.0, 440.0), (480.0, 620.0), (950.0, 1400.0), (800.0, 1200.0))
FAX_CYCLE = ("CED", "CED-reversals", "CNG")
FAX_HZ = (1100.0, 2100.0)
RAMP = 0.004  # s, the raised-cosine ends of every tone (no click)


# ----------------------------------------------------------------------------- helpers


def _samples(seconds: float) -> int:
    return round(seconds * FS)


def _s(n: int) -> float:
    """Samples → seconds, exactly (n / 8000 has at most 6 decimals)."""
    return round(n / FS, 6)


def _ramp(x: Floats, n: int) -> None:
    """Raised-cosine fade in and out over ``n`` samples each end, in place."""
    n = min(n, len(x) // 2)
    if n > 0:
        w = 0.5 - 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n)
        x[:n] *= w
        x[len(x) - n :] *= w[::-1]


def _amplitude(dbfs: float) -> float:
    """Peak of a sine at ``dbfs`` RMS (re a full-scale square wave, as callhook.media.tones)."""
    return float(32768.0 * np.sqrt(2.0) * 10 ** (dbfs / 20))


def _sine(hz: float, n: int, dbfs: float, phase: float = 0.0) -> Floats:
    return _amplitude(dbfs) * np.sin(2 * np.pi * hz * np.arange(n) / FS + phase)


def _away_from_fax(hz: float) -> float:
    """``hz`` moved at least 50 Hz away from the fax tones (1100, 2100 Hz)."""
    for fax in FAX_HZ:
        if abs(hz - fax) < 50.0:
            hz = fax - 50.0 if hz < fax else fax + 50.0
    return hz


def trim(x: Floats, range_db: float = 35.0) -> Floats:
    """The speech of an utterance: first to last 10 ms frame within ``range_db`` of the
    loudest, with 5 ms fades (so neither end clicks); what the labels' edges are."""
    n = len(x) // 80
    if n == 0:
        return x.copy()
    power = np.mean(x[: n * 80].reshape(n, 80) ** 2, axis=1)
    loud = np.nonzero(power >= power.max() * 10 ** (-range_db / 10))[0]
    y = x[loud[0] * 80 : (loud[-1] + 1) * 80].copy()
    _ramp(y, 40)
    return y


def pink(n: int, rng: np.random.Generator) -> Floats:
    """Pink line hiss: 3 dB per octave down from 100 Hz (flat below, nothing under 20 Hz).

    Not bench.vad's, which is 1/f down to the lowest bin: over a clip of 8 s most of its power
    is then a sub-10 Hz wander that no telephone line carries, and its 20 ms frames swing from
    −7 to +8 dB around the level (this one's: −3 to +4 dB).
    """
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / FS)
    spectrum /= np.sqrt(np.maximum(f, 100.0))
    spectrum[f < 20.0] = 0
    return np.fft.irfft(spectrum, n)


def active_level(x: Floats) -> float:
    """Active speech level, dBFS: the RMS of the 20 ms frames within 30 dB of the loudest
    (pauses and silence do not count), as :func:`callhook.speech.tts.telephone_audio` sets it."""
    n = len(x) // FRAME
    power = np.mean(x[: n * FRAME].reshape(n, FRAME) ** 2, axis=1)
    active = power[power >= power.max() * 10 ** (-30 / 10)]
    return float(10 * np.log10(np.mean(active) / 32768.0**2))


def _peak_to(x: Floats, dbfs: float) -> Floats:
    peak = float(np.max(np.abs(x))) or 1.0
    return x * (32768.0 * 10 ** (dbfs / 20) / peak)


def read_clip(path: Path) -> npt.NDArray[np.int16]:
    """The samples of one clip of the set (µ-law WAV), as callhook reads them."""
    return wav.decode_to_8k(path.read_bytes())


# ----------------------------------------------------------------------------- speech


def _espeak_fresh(text: str, voice: str) -> bytes:
    """``text`` in espeak's ``voice`` (8 kHz int16 bytes), said by a process that has not
    spoken before: run in a new worker each time (:meth:`Speech._espeak_raw`)."""
    from callhook.speech.espeak import EspeakEngine

    engine = EspeakEngine()
    missing = [v for v in ESPEAK_VOICES if v not in engine.voices()]
    if missing:
        raise RuntimeError(f"espeak-ng lacks voices {missing}")
    return engine.synthesize(text, voice).tobytes()


class Speech:
    """Speech from the three sources: piper, espeak (each synthesised once per text and
    voice) and FSDD recordings (files grouped by speaker). Close it when done (it may hold a
    worker process for espeak)."""

    def __init__(self, fsdd: Path) -> None:
        self.fsdd = fsdd
        files = sorted(fsdd.glob("*.wav"))
        if not files:
            raise FileNotFoundError(f"no FSDD recordings (*.wav) in {fsdd}")
        self.speakers: dict[str, list[Path]] = {}
        for path in files:
            self.speakers.setdefault(path.stem.split("_")[1], []).append(path)
        self._espeak: ProcessPoolExecutor | None = None
        self._piper: Any = None
        self._said: dict[tuple[str, str, float], Floats] = {}
        self._recorded: dict[Path, Floats] = {}

    def close(self) -> None:
        """Stop the espeak worker, if any."""
        if self._espeak is not None:
            self._espeak.shutdown()
            self._espeak = None

    def __enter__(self) -> Speech:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _espeak_raw(self, text: str, voice: str) -> Floats:
        key = ("espeak", f"{voice}:{text}", 1.0)
        if key in self._said:
            return self._said[key]
        if self._espeak is None:
            # espeak-ng's output depends on everything it said before in the process (its
            # pitch flutter and wave phase are C statics that run on from one text to the
            # next), so the same text comes out slightly different each time. Each text is
            # said by a new worker forked from a fork server that has never spoken (~50 ms):
            # the same text and voice give the same samples whatever ran before.
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context(
                "forkserver" if "forkserver" in methods else "spawn"
            )
            if context.get_start_method() == "forkserver":
                context.set_forkserver_preload(["bench.vad", "callhook.speech.espeak"])
            self._espeak = ProcessPoolExecutor(1, mp_context=context, max_tasks_per_child=1)
        pcm = self._espeak.submit(_espeak_fresh, text, voice).result()
        x = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
        self._said[key] = x
        return x

    def espeak(self, text: str, voice: str, rate: float) -> Floats:
        """``text`` in espeak's ``voice``, ``rate`` times as fast (resampled: pitch too)."""
        x = self._espeak_raw(text, voice)
        if rate != 1.0:
            x = np.asarray(soxr.resample(x, FS * rate, FS, quality="HQ"), dtype=np.float64)
        return trim(x)

    def piper(self, text: str, rate: float) -> Floats:
        """``text`` in piper's joe, deterministic (no generator noise), at ``rate``."""
        key = ("piper", text, rate)
        if key in self._said:
            return self._said[key]
        from piper.config import SynthesisConfig

        if self._piper is None:
            from callhook.speech.piper import PiperEngine

            # The engine finds and loads the voice package's model; its synthesize() is not
            # used because it draws fresh noise on each call (the same text differs per run).
            self._piper = PiperEngine()._load("joe")
        model = self._piper
        config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0 / rate)
        parts = []
        for phonemes in model.phonemize(text):
            if phonemes:
                out = model.phoneme_ids_to_audio(model.phonemes_to_ids(phonemes), config)
                audio = out[0] if isinstance(out, tuple) else out
                parts.append(np.asarray(audio, dtype=np.float32).reshape(-1))
        pcm = telephone_audio(np.concatenate(parts), int(model.config.sample_rate))
        self._said[key] = trim(pcm.astype(np.float64))
        return self._said[key]

    def recording(self, path: Path) -> Floats:
        """One FSDD file's speech, peak-normalised to 1 (takes are recorded at any level)."""
        if path in self._recorded:
            return self._recorded[path]
        with wave.open(str(path)) as w:
            if w.getframerate() != FS or w.getnchannels() != 1 or w.getsampwidth() != 2:
                raise ValueError(f"{path}: not 8 kHz mono 16-bit")
            x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)
        y = trim(x)
        self._recorded[path] = y / (float(np.max(np.abs(y))) or 1.0)
        return self._recorded[path]


def _fill(template: str, rng: np.random.Generator) -> str:
    number = ", ".join(
        " ".join(DIGITS[int(d)] for d in rng.integers(0, 10, size=k)) for k in (3, 3, 4)
    )
    first, second = rng.choice(len(NAMES), size=2, replace=False)
    return template.format(
        name=NAMES[first],
        name2=NAMES[second],
        company=COMPANIES[int(rng.integers(len(COMPANIES)))],
        number=number,
    )


class _Voice:
    """One clip's voice: which source, which voice, how fast."""

    def __init__(self, source: str, speech: Speech, rng: np.random.Generator) -> None:
        self.source, self.speech = source, speech
        self.rate = 1.0
        if source == "piper":
            self.name = "piper:joe"
            self.rate = round(float(rng.uniform(0.85, 1.2)), 3)
        elif source == "espeak":
            self.name = "espeak:" + ESPEAK_VOICES[int(rng.integers(len(ESPEAK_VOICES)))]
            self.rate = round(float(rng.uniform(0.9, 1.12)), 3)
        else:
            speakers = sorted(speech.speakers)
            self.speaker = speakers[int(rng.integers(len(speakers)))]
            self.name = "fsdd:" + self.speaker

    def say(self, text: str) -> Floats:
        if self.source == "piper":
            return self.speech.piper(text, self.rate)
        return self.speech.espeak(text, self.name.split(":", 1)[1], self.rate)

    def digit(self, rng: np.random.Generator) -> tuple[Floats, Path]:
        """One real spoken digit of this voice's speaker."""
        files = self.speech.speakers[self.speaker]
        path = files[int(rng.integers(len(files)))]
        return self.speech.recording(path), path


def _spoken(path: Path) -> str:
    return DIGITS[int(path.stem.split("_")[0])]


# ----------------------------------------------------------------------------- classes


def _live(rng: np.random.Generator, j: int, voice: _Voice) -> tuple[Floats, Floats, Label]:
    """A live answer: its speech, no tones, its label."""
    recordings: list[str] = []

    def answer(texts: Sequence[str], instead: str | None = None) -> tuple[Floats, str]:
        for _ in range(50):
            if voice.source == "fsdd":
                x, path = voice.digit(rng)
                text = _spoken(path)
            else:
                text = _fill(texts[int(rng.integers(len(texts)))], rng)
                x = voice.say(text)
            if 0.3 <= len(x) / FS <= 1.5:
                if voice.source == "fsdd":
                    recordings.append(path.name)
                return x, text
        if instead is not None and voice.source != "fsdd":
            # (A fast voice's "Hello?" can be under 0.3 s, every time: piper is deterministic.)
            return answer((instead,))
        raise RuntimeError(f"{voice.name}: no answer of 0.3-1.5 s")

    first, text = answer(LIVE_TEXTS)
    onset = _samples(rng.uniform(0.2, 0.9))
    parts = [(onset, first)]
    second_text = None
    if j % 5 == 4:  # a second "Hello?" when nobody answers the answer
        second, second_text = answer(("Hello?",), instead="Hello? Hello?")
        second_at = onset + len(first) + _samples(rng.uniform(2.0, 3.0))
        parts.append((second_at, second * 10 ** (rng.uniform(-3.0, 3.0) / 20)))
    end = parts[-1][0] + len(parts[-1][1])
    length = max(_samples(rng.uniform(6.0, 8.0)), end + FS)
    track = np.zeros(-(-length // FRAME) * FRAME)
    for at, x in parts:
        track[at : at + len(x)] += x
    label: Label = {
        "speech_start": _s(onset),
        "speech_end": _s(onset + len(first)),
        "second_answer": _s(parts[1][0]) if len(parts) > 1 else None,
        "second_answer_end": _s(end) if len(parts) > 1 else None,
        "text": text,
        "second_text": second_text,
        "recordings": recordings or None,
    }
    return track, np.zeros(len(track)), label


def _greeting(rng: np.random.Generator, voice: _Voice) -> tuple[Floats, str, list[str]]:
    """2.8–9 s of continuous speech: a TTS greeting, or a real readout of digits."""
    if voice.source != "fsdd":
        for _ in range(50):
            text = _fill(MACHINE_TEXTS[int(rng.integers(len(MACHINE_TEXTS)))], rng)
            x = voice.say(text)
            if 2.8 <= len(x) / FS <= 9.0:
                return x, text, []
        raise RuntimeError(f"{voice.name}: no greeting of 2.8-9 s")
    wanted = int(rng.integers(8, 16))
    pieces: list[Floats] = []
    words: list[str] = []
    names: list[str] = []
    length = 0
    while len(words) < wanted or length < 2.8 * FS:
        x, path = voice.digit(rng)
        gap = _samples(rng.uniform(0.05, 0.25)) if pieces else 0
        if length + gap + len(x) > 9.0 * FS:
            if length >= 2.8 * FS:
                break
            continue
        x = x * 10 ** (rng.uniform(-2.0, 2.0) / 20)  # takes differ in level a little
        pieces += [np.zeros(gap), x]
        words.append(_spoken(path))
        names.append(path.name)
        length += gap + len(x)
    return np.concatenate(pieces), " ".join(words), names


def _beep(rng: np.random.Generator, kind: str) -> tuple[Floats, dict[str, Any], int]:
    """A beep of ``kind``, its label (times from its first sample) and the offset of its
    labelled start into the samples (a fade starts before it is half up)."""
    dbfs = round(float(rng.uniform(-25.0, -8.0)), 2)
    ramp = _samples(RAMP)
    lead = 0
    parts: list[list[float]] = []
    if kind in ("single", "fade"):
        if kind == "single" and rng.random() < 0.4:
            hz, seconds = COMMON_BEEPS[int(rng.integers(len(COMMON_BEEPS)))]
        else:
            hz = _away_from_fax(float(round(rng.uniform(400.0, 2000.0))))
            seconds = rng.uniform(0.3 if kind == "fade" else 0.2, 0.8)
        n = _samples(seconds)
        x = _sine(hz, n, dbfs)
        if kind == "fade":
            # Slow raised-cosine fades of 80–250 ms; the labelled start and end are where
            # the envelope passes half amplitude, half a fade in from either end.
            fade = _samples(rng.uniform(0.08, min(0.25, seconds / 2.5)))
            _ramp(x, fade)
            lead = fade // 2
        else:
            _ramp(x, ramp)
        freqs = [hz]
    elif kind == "chord":
        if rng.random() < 0.5:
            low, high = COMMON_CHORDS[int(rng.integers(len(COMMON_CHORDS)))]
        else:
            low = _away_from_fax(float(round(rng.uniform(400.0, 1000.0))))
            high = _away_from_fax(float(round(low * rng.uniform(1.1, 1.6))))
        n = _samples(rng.uniform(0.2, 0.8))
        # Each component 3 dB under the beep's level: the chord's RMS is the level.
        x = _sine(low, n, dbfs - 3.01) + _sine(high, n, dbfs - 3.01, rng.uniform(0, 2 * np.pi))
        _ramp(x, ramp)
        freqs = [low, high]
    elif kind == "sequence":
        base = float(round(rng.uniform(450.0, 900.0)))
        step = float(round(rng.uniform(120.0, 350.0)))
        freqs = [_away_from_fax(base + k * step) for k in range(3)]
        pieces = []
        at = 0
        for hz in freqs:
            piece = _sine(hz, _samples(rng.uniform(0.08, 0.12)), dbfs)
            _ramp(piece, ramp)
            pieces.append(piece)
            parts.append([_s(at), _s(at + len(piece)), hz])
            at += len(piece)
        x = np.concatenate(pieces)
    else:
        raise ValueError(f"no beep kind {kind!r}")
    label: dict[str, Any] = {
        "start": 0.0,
        "end": _s(len(x) - 2 * lead),
        "hz": freqs,
        "kind": kind,
        "dbfs": dbfs,
    }
    if parts:
        label["parts"] = parts  # [start, end, hz] of each tone, from the beep's start
    return x, label, lead


def _machine(rng: np.random.Generator, j: int, voice: _Voice) -> tuple[Floats, Floats, Label]:
    """A machine: its greeting, its beep (apart: the speech level is set on its own), its
    label."""
    greeting, text, names = _greeting(rng, voice)
    onset = _samples(rng.uniform(0.2, 1.2))
    end = onset + len(greeting)
    kind = BEEP_CYCLE[j % len(BEEP_CYCLE)]
    beep: dict[str, Any] | None = None
    tone = np.zeros(0)
    at = last = end
    if kind is not None:
        tone, beep, lead = _beep(rng, kind)
        start = end + _samples(rng.uniform(0.2, 1.0))  # the labelled start
        at = start - lead
        last = at + len(tone)
        beep["start"] = _s(start)
        beep["end"] = round(beep["end"] + _s(start), 6)
        for part in beep.get("parts", []):
            part[0], part[1] = round(part[0] + _s(start), 6), round(part[1] + _s(start), 6)
    # Silence after the beep, or longer after a greeting with none: a classifier waits
    # seconds of silence (4 by default) before it takes a greeting to have ended unbeeped.
    tail = rng.uniform(3.0, 4.0) if kind is not None else rng.uniform(5.0, 6.0)
    length = -(-(last + _samples(tail)) // FRAME) * FRAME
    speech = np.zeros(length)
    speech[onset:end] = greeting
    tones = np.zeros(length)
    tones[at : at + len(tone)] = tone
    label: Label = {
        "speech_start": _s(onset),
        "speech_end": _s(end),
        "beep": beep,
        "text": text,
        "recordings": names or None,
    }
    return speech, tones, label


def _fax(rng: np.random.Generator, j: int) -> tuple[Floats, Label]:
    kind = FAX_CYCLE[j % len(FAX_CYCLE)]
    length = 8 * FS
    x = np.zeros(length)
    dbfs = round(float(rng.uniform(-25.0, -10.0)), 2)
    ramp = _samples(RAMP)
    fax: dict[str, Any] = {"kind": kind, "dbfs": dbfs}
    if kind == "CNG":
        start = _samples(rng.uniform(0.0, 1.5))
        bursts = []
        at = start
        while at + _samples(0.5) <= length:
            burst = _sine(1100.0, _samples(0.5), dbfs)
            _ramp(burst, ramp)
            x[at : at + len(burst)] = burst
            bursts.append([_s(at), _s(at + len(burst))])
            at += _samples(3.5)
        fax |= {"start": _s(start), "end": bursts[-1][1], "hz": [1100.0], "bursts": bursts}
    else:
        start = _samples(rng.uniform(0.0, 2.5))
        n = _samples(rng.uniform(2.6, 4.0))
        t = np.arange(n) / FS
        reversals = kind == "CED-reversals"
        phase = np.pi * np.floor(t / 0.45) if reversals else 0.0  # 180° every 450 ms
        tone = _amplitude(dbfs) * np.sin(2 * np.pi * 2100.0 * t + phase)
        am = reversals and bool(rng.random() < 0.5)
        if am:  # ANSam: 15 Hz amplitude modulation, 20 %
            tone *= 1.0 + 0.2 * np.sin(2 * np.pi * 15.0 * t)
        _ramp(tone, ramp)
        x[start : start + n] = tone
        fax |= {"start": _s(start), "end": _s(start + n), "hz": [2100.0], "am_15hz": am}
    return x, {"fax": fax}


# ----------------------------------------------------------------------------- a clip


def clip(
    i: int, seed: int, speech: Speech, voices: Sequence[str] = VOICES
) -> tuple[npt.NDArray[np.uint8], Label]:
    """Clip ``i`` of a seed's set: its µ-law codes and its label (without ``file``)."""
    rng = np.random.default_rng([seed, i])
    cls = CLASSES[i % len(CLASSES)]
    j = i // len(CLASSES)  # the clip's turn within its class
    source = voices[j % len(voices)] if cls in ("live", "machine") else None
    label: Label = dict.fromkeys(LABEL_FIELDS[1:]) | {"class": cls}  # every field, null
    if source is not None:
        voice = _Voice(source, speech, rng)
        make = _live if cls == "live" else _machine
        said, tones, found = make(rng, j, voice)
        label |= found
        peak = round(float(rng.uniform(-25.0, -3.0)), 2)
        said = _peak_to(said, peak)
        label["speech_peak_dbfs"] = peak
        label["speech_level_dbfs"] = round(active_level(said), 2)
        label["voice"] = voice.name
        label["rate"] = voice.rate if source != "fsdd" else None
        signal = said + tones
    elif cls == "fax":
        signal, found = _fax(rng, j)
        label |= found
    else:
        signal = np.zeros(8 * FS)
    n = len(signal)
    noise_kind = "pink" if rng.random() < 0.5 else "white"
    noise_dbfs = round(float(rng.uniform(-65.0, -45.0)), 2)
    noise = rng.standard_normal(n) if noise_kind == "white" else pink(n, rng)
    line = at_level(noise, noise_dbfs)
    mains = None
    if rng.random() < 0.25:
        hz = 50.0 if rng.random() < 0.5 else 60.0
        hum_dbfs = round(noise_dbfs - float(rng.uniform(3.0, 10.0)), 2)
        line += at_level(hum(n, rng, hz), hum_dbfs)
        mains = {"hz": hz, "dbfs": hum_dbfs}
    pcm = np.clip(np.rint(signal + line), -32768, 32767).astype(np.int16)
    codes = g711.encode_array("ulaw", pcm)
    label |= {
        "source": source or ("tone" if cls == "fax" else "noise"),
        "noise_dbfs": noise_dbfs,
        "noise": noise_kind,
        "hum": mains,
        "seconds": _s(n),
    }
    assert set(label) == set(LABEL_FIELDS[1:]), set(label) ^ set(LABEL_FIELDS[1:])
    return codes, {k: label[k] for k in LABEL_FIELDS[1:]}


# ----------------------------------------------------------------------------- sets


def generate(
    out: Path,
    count: int,
    seed: int,
    *,
    voices: Sequence[str] = VOICES,
    fsdd: Path = TEST_SPEECH,
) -> list[Label]:
    """Write ``count`` clips (µ-law WAV) and ``labels.json`` into ``out``; return the labels.

    Clips of an earlier run in ``out`` (``NNNN-class.wav``) are removed first; nothing
    else there is touched. ``voices``: the speech sources to take turns with (a subset of
    piper, espeak, fsdd; the tests use espeak and fsdd, which need no model).
    """
    unknown = [v for v in voices if v not in VOICES]
    if unknown or not voices:
        raise ValueError(f"voices must be some of {VOICES}, not {list(voices)}")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("[0-9][0-9][0-9][0-9]-*.wav"):
        old.unlink()
    labels = []
    with Speech(fsdd) as speech:
        for i in range(count):
            codes, label = clip(i, seed, speech, voices)
            name = f"{i:04d}-{label['class']}.wav"
            (out / name).write_bytes(wav.g711_file("ulaw", codes.tobytes()))
            labels.append({"file": name, **label})
    text = json.dumps(labels, indent=1, ensure_ascii=False) + "\n"
    (out / "labels.json").write_text(text, encoding="utf-8")
    return labels


def larger_set(count: int = 400, seed: int = 1) -> Path:
    """The cached larger set, ``~/.cache/callhook-bench/classify-<seed>-<count>/``: made
    (a minute or two) only when missing or made by another recipe. Real recordings from
    ``../shared/data/speech/fsdd`` when present, else ``tests/data/speech``."""
    target = CACHE / f"classify-{seed}-{count}"
    marker = target / "recipe.json"
    fsdd = SHARED_FSDD if any(SHARED_FSDD.glob("*.wav")) else TEST_SPEECH
    made = {"recipe": RECIPE, "seed": seed, "count": count, "fsdd": str(fsdd)}
    made_before = json.loads(marker.read_text()) if marker.is_file() else {}
    if made_before.get("recipe") == RECIPE and (target / "labels.json").is_file():
        return target
    work = target.with_name(f"{target.name}.part{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    generate(work, count, seed, fsdd=fsdd)
    (work / "recipe.json").write_text(json.dumps(made, indent=1) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    return target


def load_labels(directory: Path) -> list[Label]:
    """A set's labels, one entry per clip."""
    labels: list[Label] = json.loads((directory / "labels.json").read_text(encoding="utf-8"))
    return labels


def summary(directory: Path, labels: list[Label]) -> None:
    """Print what a set holds: clips, seconds, bytes, and each class by source or kind."""
    size = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    seconds = sum(float(e["seconds"]) for e in labels)
    print(f"{len(labels)} clips, {seconds:.0f} s of audio, {size} bytes in {directory}")
    for cls in CLASSES:
        of = [e for e in labels if e["class"] == cls]
        sources: dict[str, int] = {}
        for e in of:
            if cls == "machine":
                key = e["source"] + "/" + (e["beep"]["kind"] if e["beep"] else "no beep")
            else:
                key = e["fax"]["kind"] if cls == "fax" else e["source"]
            sources[key] = sources.get(key, 0) + 1
        shown = ", ".join(f"{k} {v}" for k, v in sorted(sources.items()))
        print(f"  {cls:8} {len(of):>4}  {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="directory to write the clips into")
    parser.add_argument("--count", type=int, default=None, help="clips (default 24; 400 larger)")
    parser.add_argument("--seed", type=int, default=None, help="default 3 (--larger: 1)")
    parser.add_argument("--voices", default=",".join(VOICES), help="speech sources, in turn")
    parser.add_argument("--fsdd", type=Path, default=TEST_SPEECH, help="FSDD recordings")
    parser.add_argument("--larger", action="store_true", help="make/find the cached larger set")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.larger:
        directory = larger_set(args.count or 400, 1 if args.seed is None else args.seed)
    elif args.out is None:
        parser.error("give --out DIR (or --larger)")
    else:
        directory = args.out
        voices = tuple(v.strip() for v in args.voices.split(",") if v.strip())
        seed = 3 if args.seed is None else args.seed
        generate(directory, args.count or 24, seed, voices=voices, fsdd=args.fsdd)
    summary(directory, load_labels(directory))
    print(f"  {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
