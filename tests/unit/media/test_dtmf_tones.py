"""In-band DTMF (callhook.media.dtmf.ToneDetector, ToneDetectorBank) against ITU-T Q.24 limits.

Tones are generated (callhook.media.tones); speech is real (tests/data/speech, see its README).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from callhook.media import g711, tones
from callhook.media.dtmf import ToneDetector, ToneDetectorBank

DIGITS = "0123456789*#ABCD"
SPEECH = sorted((Path(__file__).parents[2] / "data" / "speech").glob("*.wav"))
Samples = npt.NDArray[np.int16]


def frames(x: Samples) -> npt.NDArray[np.int16]:
    """``x`` cut into 20 ms frames, the last one padded with silence."""
    x = np.concatenate([x, np.zeros((-len(x)) % 160, np.int16)])
    return x.reshape(-1, 160)


def detect(x: Samples, detector: ToneDetector | None = None) -> str:
    detector = detector or ToneDetector()
    return "".join(d for f in frames(x) if (d := detector.feed(f)) is not None)


def cat(*parts: Samples) -> Samples:
    return np.concatenate(parts)


def gap(seconds: float) -> Samples:
    return tones.silence(seconds)


def key(
    digit: str,
    seconds: float = 0.08,
    dbm0: float = -10.0,
    twist_db: float = 0.0,
    deviation: float = 0.0,
) -> Samples:
    level = tones.dbm0_to_dbfs(dbm0)
    return tones.dtmf_tone(digit, seconds, level, twist_db=twist_db, deviation=deviation)


def g711_round_trip(x: Samples, law: g711.Law) -> Samples:
    return g711.decode(law, g711.encode(law, x))


def add_noise(x: Samples, snr_db: float, tone_dbm0: float, seed: int) -> Samples:
    """White noise ``snr_db`` below the power of the two tones (each at ``tone_dbm0``)."""
    noise_dbfs = tones.dbm0_to_dbfs(tone_dbm0) + 10 * np.log10(2) - snr_db
    noise = tones.white_noise(len(x) / 8000, float(noise_dbfs), seed=seed)
    noisy: Samples = np.clip(x.astype(np.int32) + noise, -32768, 32767).astype(np.int16)
    return noisy


def load(path: Path) -> Samples:
    with wave.open(str(path)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (8000, 1, 2)
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)


OFFSETS = range(0, 160, 9)  # where in a frame the tone starts


# ----------------------------------------------------------------------------- the digits


@pytest.mark.parametrize("digit", list(DIGITS))
@pytest.mark.parametrize("dbm0", [-3.0, -10.0, -25.0])
def test_each_digit_is_detected_once(digit: str, dbm0: float) -> None:
    assert detect(cat(gap(0.1), key(digit, 0.1, dbm0), gap(0.1))) == digit


def test_a_dialled_number() -> None:
    signal = cat(*[cat(key(d, 0.05), gap(0.05)) for d in DIGITS])
    assert detect(signal) == DIGITS


def test_a_long_press_is_one_digit() -> None:
    assert detect(cat(gap(0.1), key("7", 3.0), gap(0.3))) == "7"


def test_the_digit_comes_after_about_40_ms_of_tone() -> None:
    detector = ToneDetector()
    for f in frames(gap(0.1)):
        assert detector.feed(f) is None
    out = [detector.feed(f) for f in frames(key("3", 0.2))]
    assert out.index("3") in (1, 2)  # frame 2 or 3 of the tone: 20-60 ms in
    assert out.count("3") == 1


# ----------------------------------------------------------------------------- Q.24 limits


@pytest.mark.parametrize("deviation", [-0.014, 0.014])
def test_frequencies_off_by_1_4_percent_are_accepted(deviation: float) -> None:
    got = [detect(cat(gap(0.05), key(d, 0.08, deviation=deviation), gap(0.1))) for d in DIGITS]
    assert "".join(got) == DIGITS


# (Beyond about 6 % a shifted pair comes within tolerance of another digit's: 8 % down turns
# "0" into "7".)
@pytest.mark.parametrize("deviation", [-0.036, 0.036, -0.05, 0.05, -0.06, 0.06])
def test_frequencies_off_by_3_6_percent_or_more_are_rejected(deviation: float) -> None:
    got = [detect(cat(gap(0.05), key(d, 0.08, deviation=deviation), gap(0.1))) for d in DIGITS]
    assert got == [""] * 16


@pytest.mark.parametrize("group", ["low", "high"])
@pytest.mark.parametrize("deviation", [-0.036, 0.036])
def test_one_tone_off_is_enough_to_reject(group: str, deviation: float) -> None:
    for digit in DIGITS:
        low, high = tones.dtmf_frequencies(digit)
        if group == "low":
            low *= 1 + deviation
        else:
            high *= 1 + deviation
        level = tones.dbm0_to_dbfs(-10)
        signal = tones.sines([(low, level), (high, level)], 0.08)
        assert detect(cat(gap(0.05), signal, gap(0.1))) == "", digit


@pytest.mark.parametrize(("twist_db", "expected"), [(-7.0, True), (-10.0, False)])
def test_normal_twist_low_group_louder_up_to_8_db(twist_db: float, expected: bool) -> None:
    got = "".join(detect(cat(gap(0.05), key(d, 0.08, twist_db=twist_db), gap(0.1))) for d in DIGITS)
    assert got == (DIGITS if expected else "")


@pytest.mark.parametrize(("twist_db", "expected"), [(3.0, True), (6.0, False)])
def test_reverse_twist_high_group_louder_up_to_4_db(twist_db: float, expected: bool) -> None:
    got = "".join(detect(cat(gap(0.05), key(d, 0.08, twist_db=twist_db), gap(0.1))) for d in DIGITS)
    assert got == (DIGITS if expected else "")


@pytest.mark.parametrize(("dbm0", "expected"), [(-25.0, "5"), (-28.0, "5"), (-40.0, "")])
def test_level(dbm0: float, expected: str) -> None:
    assert detect(cat(gap(0.05), key("5", 0.08, dbm0), gap(0.1))) == expected


@pytest.mark.parametrize("seconds", [0.02, 0.025, 0.03])
def test_tones_of_30_ms_or_less_are_too_short(seconds: float) -> None:
    for offset in OFFSETS:
        signal = cat(gap(0.1 + offset / 8000), key("8", seconds), gap(0.1))
        assert detect(signal) == "", offset


@pytest.mark.parametrize("seconds", [0.04, 0.045])
def test_tones_of_40_ms_and_more_are_detected(seconds: float) -> None:
    for offset in OFFSETS:
        signal = cat(gap(0.1 + offset / 8000), key("8", seconds), gap(0.1))
        assert detect(signal) == "8", offset


@pytest.mark.parametrize("pause", [0.04, 0.05])
def test_two_presses_of_one_key_with_a_short_pause_are_two_digits(pause: float) -> None:
    for offset in OFFSETS:
        signal = cat(gap(0.1 + offset / 8000), key("9", 0.05), gap(pause), key("9", 0.05), gap(0.1))
        assert detect(signal) == "99", offset


@pytest.mark.parametrize("dropout", [0.005, 0.01, 0.02])
def test_a_dropout_within_a_tone_does_not_split_it(dropout: float) -> None:
    # A lost 20 ms packet replaced by silence must not turn one press into two.
    for offset in OFFSETS:
        signal = cat(gap(0.1 + offset / 8000), key("4", 0.1), gap(dropout), key("4", 0.1), gap(0.1))
        assert detect(signal) == "4", offset


def test_different_keys_back_to_back_are_both_detected() -> None:
    assert detect(cat(gap(0.05), key("1", 0.08), key("2", 0.08), gap(0.1))) == "12"


# ----------------------------------------------------------------------------- real conditions


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
@pytest.mark.parametrize("dbm0", [-3.0, -25.0])
def test_after_g711(law: g711.Law, dbm0: float) -> None:
    signal = cat(gap(0.05), *[cat(key(d, 0.06, dbm0), gap(0.06)) for d in DIGITS])
    assert detect(g711_round_trip(signal, law)) == DIGITS


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
@pytest.mark.parametrize("dbm0", [-10.0, -25.0])
def test_in_noise_at_15_db_snr_after_g711(law: g711.Law, dbm0: float) -> None:
    signal = cat(gap(0.1), *[cat(key(d, 0.06, dbm0), gap(0.06)) for d in DIGITS], gap(0.1))
    noisy = add_noise(signal, snr_db=15.0, tone_dbm0=dbm0, seed=int(-dbm0))
    assert detect(g711_round_trip(noisy, law)) == DIGITS


@pytest.mark.parametrize("seed", range(4))
def test_noise_alone_is_not_a_digit(seed: int) -> None:
    for level in (-60.0, -40.0, -20.0):
        assert detect(tones.white_noise(2.0, level, seed=seed)) == ""


@pytest.mark.parametrize(
    "components",
    [
        [(1000.0, -10.0)],  # the record beep
        [(697.0, -10.0)],  # one DTMF tone alone
        [(1336.0, -10.0)],
        [(350.0, -13.0), (440.0, -13.0)],  # dial tone (North America)
        [(480.0, -13.0), (620.0, -13.0)],  # busy tone
        [(697.0, -10.0), (770.0, -10.0)],  # two low-group tones
        [(1209.0, -10.0), (1336.0, -10.0)],  # two high-group tones
    ],
)
def test_other_tones_are_not_digits(components: list[tuple[float, float]]) -> None:
    assert detect(cat(gap(0.1), tones.sines(components, 1.0), gap(0.1))) == ""


@pytest.mark.parametrize(("other_db", "expected"), [(-10.0, "5"), (0.0, ""), (6.0, "")])
def test_a_key_must_hold_most_of_the_energy(other_db: float, expected: str) -> None:
    # A third tone (speech, music) ``other_db`` relative to the power of the pair: talk-off
    # protection rejects the pair once it holds less than 80 % of the energy.
    pair = tones.dbm0_to_dbfs(-20.0)
    other = pair + 3.01 + other_db
    signal = tones.sines([(770.0, pair), (1336.0, pair), (400.0, other)], 0.2)
    assert detect(cat(gap(0.1), signal, gap(0.1))) == expected


def test_there_are_forty_speech_recordings() -> None:
    assert len(SPEECH) == 40
    assert {p.name.split("_")[1] for p in SPEECH} == {"jackson", "nicolas", "theo"}


@pytest.mark.parametrize("path", SPEECH, ids=lambda p: p.stem)
def test_speech_is_never_a_digit(path: Path) -> None:
    speech = load(path)
    assert detect(speech) == ""
    assert detect(g711_round_trip(speech, "ulaw")) == ""
    assert detect(g711_round_trip(speech, "alaw")) == ""
    louder = np.clip(speech.astype(np.int32) * 4, -32768, 32767).astype(np.int16)
    assert detect(g711_round_trip(louder, "ulaw")) == ""


def test_a_key_right_after_speech_is_detected() -> None:
    speech = load(SPEECH[0])
    assert detect(cat(speech, gap(0.02), key("#", 0.06), gap(0.1))) == "#"


# ----------------------------------------------------------------------------- many calls


def test_the_bank_finds_what_single_detectors_find() -> None:
    calls = 12
    signals = []
    for i in range(calls):
        if i % 3 == 0:
            x = load(SPEECH[i])
        elif i % 3 == 1:
            x = cat(gap(0.01 * i), *[cat(key(d, 0.05), gap(0.05)) for d in DIGITS[i:] + DIGITS[:i]])
        else:
            x = tones.white_noise(1.0, -50.0, seed=i)
        signals.append(frames(g711_round_trip(x, "ulaw")))
    length = max(len(s) for s in signals) + 10
    stacked = np.zeros((calls, length, 160), np.int16)
    for i, s in enumerate(signals):
        stacked[i, : len(s)] = s
    bank = ToneDetectorBank(calls)
    assert bank.calls == calls
    got = [""] * calls
    for t in range(length):
        for i, digit in bank.feed_many(stacked[:, t]).items():
            got[i] += digit
    expected = [detect(stacked[i].ravel()) for i in range(calls)]
    assert got == expected
    assert got[1] == DIGITS[1:] + DIGITS[:1] and got[0] == got[2] == ""


def test_a_reset_slot_starts_fresh() -> None:
    # 50 ms of silence, then a 60 ms tone: slot 1 is reset half-way through the tone.
    signal = frames(cat(gap(0.05), key("6", 0.06), gap(0.1)))
    bank = ToneDetectorBank(2)
    out: dict[int, str] = {}
    for t, f in enumerate(signal):
        if t == 4:
            bank.reset(1)
        out |= bank.feed_many(np.stack([f, f]))
    assert out == {0: "6"}  # slot 1 heard only the last 30 ms of the tone


def test_a_reset_detector_starts_fresh() -> None:
    signal = frames(cat(gap(0.05), key("6", 0.06), gap(0.1)))
    assert detect(signal.ravel()) == "6"
    detector = ToneDetector()
    got = []
    for t, f in enumerate(signal):
        if t == 4:
            detector.reset()
        got.append(detector.feed(f))
    assert got == [None] * len(signal)
