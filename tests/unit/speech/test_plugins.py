"""Plug-in speech engines: found by their package's entry points (a package made here, on
``sys.path``, as pip would install it), named in the config, their answers checked; and
the worked example in ``examples/speech_plugin`` with real recordings and a real model."""

from __future__ import annotations

import logging
import math
import textwrap
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from callhook.config import speechengines
from callhook.config.settings import load
from callhook.config.values import ConfigError
from callhook.edge.remotespeech import remote_recogniser, remote_voice
from callhook.events import Alternative, RecognitionOptions
from callhook.speech import plugins
from callhook.speech.plugins import PluginError, PluginRecogniser, PluginVoice
from callhook.speech.remote import RemoteSpeechError
from callhook.speech.synthesis import Synthesiser
from callhook.speech.tts import SynthesisError
from tests.unit.speech.test_remote import _Local

DATA = Path(__file__).parents[2] / "data" / "speech"
EXAMPLE = Path(__file__).parents[3] / "examples" / "speech_plugin"

#: A plug-in package: its answers are whatever the test puts in ``BEHAVIOUR``.
PACKAGE = """
import numpy as np
from callhook.events import Alternative
from callhook.speech.tts import SynthesisError

BEHAVIOUR = {"answer": None, "audio": None, "made": 0}


class Ears:
    languages = frozenset({"en", "de"})

    def __init__(self, name, options):
        if options.get("fail"):
            raise ValueError("no such account")
        BEHAVIOUR["made"] += 1
        self.name, self.options = name, options

    def warm_up(self):
        if self.options.get("offline"):
            raise OSError("api.example.com: name not known")
        BEHAVIOUR["warm"] = True

    def recognise(self, audio, options):
        answer = BEHAVIOUR["answer"]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Listener(Ears):
    # A recogniser that streams: its answer is what it was fed, or BEHAVIOUR's.

    def stream(self, options):
        if BEHAVIOUR.get("stream") is not None:
            return BEHAVIOUR["stream"]
        return ListenerStream(options)


class ListenerStream:
    def __init__(self, options):
        self.fed = []

    def feed(self, audio):
        self.fed.append(len(audio))

    def finish(self):
        answer = BEHAVIOUR["answer"]
        return answer if answer else [Alternative(f" {sum(self.fed)} samples ", 0.7)]


class Mouth:
    def __init__(self, name, options):
        self.name = name

    def voices(self):
        if BEHAVIOUR.get("no_voices"):
            raise OSError("the voice list is on a server that is down")
        return ["Anna", "Ben"]

    def voice_for(self, language):
        if language == "xx":
            raise KeyError(language)
        return "Anna" if language.startswith("en") else None

    def synthesize(self, text, voice, rate=1.0):
        BEHAVIOUR["voice"] = voice
        audio = BEHAVIOUR["audio"]
        if isinstance(audio, Exception):
            raise audio
        return audio


class Streamer(Mouth):
    def stream(self, text, voice, rate=1.0):
        for piece in BEHAVIOUR["pieces"]:
            if isinstance(piece, Exception):
                raise piece
            yield piece
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """``testplug``, installed as pip would: its module and its ``*.dist-info`` on the path."""
    site = tmp_path / "site"
    (site / "testplug").mkdir(parents=True)
    (site / "testplug" / "__init__.py").write_text(PACKAGE)
    (site / "broken.py").write_text("raise ImportError('needs libfoo')\n")
    info = site / "testplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: testplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent("""
        [callhook.recognisers]
        ears = testplug:Ears
        listener = testplug:Listener
        broken = broken:Thing

        [callhook.voices]
        mouth = testplug:Mouth
        streamer = testplug:Streamer
        """)
    )
    monkeypatch.syspath_prepend(str(site))
    import testplug  # type: ignore[import-not-found]

    behaviour: dict[str, object] = testplug.BEHAVIOUR
    behaviour.update(
        answer=(), audio=np.zeros(0, dtype=np.int16), made=0, no_voices=False, stream=None
    )
    return behaviour


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "callhook.toml"
    path.write_text(text)
    return path


def test_the_groups_are_the_same_in_the_config_and_the_loader() -> None:
    assert speechengines.RECOGNISER_PLUGINS == plugins.RECOGNISERS
    assert speechengines.VOICE_PLUGINS == plugins.VOICES


def test_a_plugin_engine_is_read_from_the_config(tmp_path: Path, package: object) -> None:
    settings = load(
        config(
            tmp_path,
            '[speech]\nrecogniser = "ears"\n'
            '[speech.engines.ears]\nprotocol = "plugin"\n'
            '[speech.engines.ears.options]\nregion = "eu"\nbeam = 3\n'
            '[speech.engines.voices]\nprotocol = "plugin"\nplugin = "mouth"\nlanguages = ["en"]\n',
        )
    )
    ears, voices = settings.speech.engines["ears"], settings.speech.engines["voices"]
    assert (ears.plugin, ears.options, ears.languages) == ("ears", {"region": "eu", "beam": 3}, ())
    assert ears.plugin_groups == {plugins.RECOGNISERS} and ears.recognises
    assert voices.plugin == "mouth" and not voices.recognises
    assert settings.speech.recogniser == "ears"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            '[speech.engines.x]\nprotocol = "plugin"\nplugin = "nothere"',
            "no installed package has a plug-in named 'nothere'",
        ),
        ('[speech.engines.ears]\nprotocol = "plugin"\noptions = 3', "options must be a table"),
        ('[speech.engines.ears]\nprotocol = "plugin"\nuri = "tcp://h:1"', "unknown keys: uri"),
        # A plug-in with only a voice is no recogniser.
        (
            '[speech]\nrecogniser = "v"\n[speech.engines.v]\nprotocol = "plugin"\nplugin = "mouth"',
            "recogniser must be one of",
        ),
    ],
)
def test_a_bad_plugin_engine_is_a_config_error(
    tmp_path: Path, package: object, table: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(config(tmp_path, table))


def test_a_plugin_recogniser_answers_through_callhook_checks(package: dict[str, object]) -> None:
    ears = PluginRecogniser("cloud", "ears", {"region": "eu"})
    assert ears.name == "cloud" and ears.languages == {"en", "de"}  # the plug-in's own
    assert PluginRecogniser("cloud", "ears", {}, ("fr-FR",)).languages == {"fr"}  # the config's
    ears.warm_up()
    assert package["warm"] is True
    # Its start failing is one line (the speech service's log), not a traceback.
    with pytest.raises(RemoteSpeechError, match="the ears plug-in did not start: OSError: api"):
        PluginRecogniser("cloud", "ears", {"offline": True}).warm_up()
    audio = np.zeros(800, dtype=np.int16)
    options = RecognitionOptions(max_alternatives=2)
    package["answer"] = [Alternative(" yes ", 1.7), Alternative("", 0.5), Alternative("no", -1)]
    package["answer"] += [Alternative("maybe", 0.1)]  # type: ignore[operator]
    # Confidences kept in [0, 1], empty texts dropped, at most max_alternatives.
    assert ears.recognise(audio, options) == (Alternative("yes", 1.0), Alternative("no", 0.0))
    for garbage in ("yes", [("yes", 0.9)], None, [Alternative("yes", math.nan)]):
        package["answer"] = garbage
        with pytest.raises(RemoteSpeechError, match="not Alternatives"):
            ears.recognise(audio, options)
    package["answer"] = TimeoutError("the service did not answer")
    with pytest.raises(TimeoutError):  # a crash: the speech service's supervisor's to handle
        ears.recognise(audio, options)
    made = package["made"]
    assert ears.restarted() is not ears and package["made"] == made + 1  # type: ignore[operator]


def test_a_plugin_recogniser_that_streams_is_fed_and_its_answer_checked(
    package: dict[str, object],
) -> None:
    assert not PluginRecogniser("cloud", "ears", {}).streaming
    listener = PluginRecogniser("cloud", "listener", {})
    assert listener.streaming
    options = RecognitionOptions(max_alternatives=1)
    stream = listener.stream(options)
    for samples in (1600, 800):
        stream.feed(np.zeros(samples, dtype=np.int16))
    assert stream.finish() == (Alternative("2400 samples", 0.7),)
    # Its answer is checked as recognise()'s.
    package["answer"] = [Alternative("yes", 3.0), Alternative("no", 0.5)]
    assert listener.stream(options).finish() == (Alternative("yes", 1.0),)
    package["answer"] = "yes"
    with pytest.raises(RemoteSpeechError, match="the listener plug-in answered str"):
        listener.stream(options).finish()
    # A stream that is not one: a failed engine, named.
    package["stream"] = object()
    with pytest.raises(RemoteSpeechError, match="answered object, which has no feed"):
        listener.stream(options)


def test_a_plugin_that_cannot_be_made_says_why(
    package: object, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(PluginError, match=r"testplug:Ears\('cloud'\) failed: ValueError: no such"):
        PluginRecogniser("cloud", "ears", {"fail": True})
    with pytest.raises(PluginError, match="broken:Thing: cannot be imported: ImportError: needs"):
        PluginRecogniser("b", "broken", {})
    engine = speechengines.RemoteEngine(
        "cloud",
        "plugin",
        "plugin:ears",
        plugin="ears",
        plugin_groups=frozenset({plugins.RECOGNISERS}),
        options={"fail": True},
    )
    with caplog.at_level(logging.ERROR, "callhook.speech"):
        assert remote_recogniser(engine) is None
        assert remote_voice(engine) is None  # (it has no voice)
    (line,) = caplog.messages
    assert "speech recogniser 'cloud' is not available" in line and "only digits count" in line


def test_a_plugin_voice_is_guarded_like_a_remote_one(package: dict[str, object]) -> None:
    voice = PluginVoice("studio", "mouth", {})
    assert voice.voices() == ["anna", "ben"] and voice.voice_for("en-GB") == "anna"
    assert voice.voice_for("xx") is None  # its bug: no voice for that language (logged once)
    package["audio"] = np.full(80, 5, dtype=np.int16)
    assert voice.synthesize("Hello.", "ben").tolist() == [5] * 80
    assert package["voice"] == "Ben"  # the plug-in's own spelling
    # A text it cannot say: that sentence fails, the voice stays in use.
    package["audio"] = SynthesisError("no recording of 'zebra'")
    with pytest.raises(SynthesisError, match="studio: no recording of 'zebra'"):
        voice.synthesize("Zebra.", "anna")
    assert not voice.snapshot()["open"] and voice.snapshot()["failed"] == 0
    # Audio that is not 8 kHz int16 samples, or an exception: the breaker opens.
    package["audio"] = np.zeros(80, dtype=np.float32)
    with pytest.raises(SynthesisError, match="answered an array of float32"):
        voice.synthesize("Hello.", "anna")
    assert voice.snapshot()["open"]
    package["audio"] = np.full(80, 5, dtype=np.int16)
    with pytest.raises(SynthesisError, match="not asked for a while"):
        voice.synthesize("Hello.", "anna")
    assert (voice.snapshot()["failed"], voice.snapshot()["refused"]) == (1, 1)
    package["no_voices"] = True  # its voices unknown: the plug-in is left out, said once
    with pytest.raises(PluginError, match="mouth: voices\\(\\) failed: OSError: the voice"):
        PluginVoice("studio", "mouth", {})


def test_a_failing_plugin_voice_is_replaced_by_the_embedded_one(
    package: dict[str, object],
) -> None:
    package["audio"] = RuntimeError("GPU out of memory")
    studio = PluginVoice("studio", "mouth", {})
    synthesiser = Synthesiser([_Local(), studio], "studio:anna", fallback_voice="piper:joe")
    assert synthesiser.speak("Hello.").tolist() == [7] * 80
    assert studio.snapshot()["cause"] == "RuntimeError: GPU out of memory"


def test_a_plugin_voice_that_streams_hands_over_checked_pieces(
    package: dict[str, object],
) -> None:
    assert not PluginVoice("studio", "mouth", {}).streaming
    voice = PluginVoice("live", "streamer", {})
    assert voice.streaming
    one, two = np.full(80, 1, dtype=np.int16), np.full(80, 2, dtype=np.int16)
    package["pieces"] = [one, two]
    assert [p.tolist() for p in voice.stream("Hi.", "anna")] == [one.tolist(), two.tolist()]
    # A failure after the first piece: that piece was handed over, then the breaker opens.
    package["pieces"] = [one, ConnectionResetError("gone")]
    pieces = voice.stream("Hi.", "anna")
    assert next(pieces).tolist() == one.tolist()
    with pytest.raises(SynthesisError, match="live: ConnectionResetError: gone"):
        next(pieces)
    assert voice.snapshot()["open"]
    package["pieces"] = [one]
    with pytest.raises(SynthesisError, match="not asked for a while"):
        list(voice.stream("Hi.", "anna"))


async def test_a_blocking_iterator_is_taken_off_the_loop() -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from callhook.edge.threaditer import iterate

    threads: list[str] = []

    def numbers() -> Iterator[int]:
        for n in (1, 2, 3):
            threads.append(threading.current_thread().name)
            yield n
        raise ValueError("done badly")

    with ThreadPoolExecutor(1, thread_name_prefix="pool") as pool:
        got = []
        with pytest.raises(ValueError, match="done badly"):
            async for n in iterate(pool, numbers()):
                got.append(n)
    assert got == [1, 2, 3] and all(t.startswith("pool") for t in threads)


# --- the worked example -------------------------------------------------------------------


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's package importable even where it is not installed."""
    monkeypatch.syspath_prepend(str(EXAMPLE))


def digit_voice(folder: Path) -> Path:
    """A voice ``jackson`` of the spoken-digit recordings, one file per word."""
    names = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    (folder / "jackson").mkdir(parents=True)
    for digit, name in enumerate(names):
        (folder / "jackson" / f"{name}.wav").write_bytes(
            (DATA / f"{digit}_jackson_{digit}.wav").read_bytes()
        )
    (folder / "notes.txt").write_text("not a voice")
    return folder


def samples(path: Path) -> np.ndarray:
    with wave.open(str(path)) as wav:
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")


def test_the_recorded_words_voice_says_digits_from_its_recordings(
    tmp_path: Path, example: None
) -> None:
    from callhook_example_speech.recorded import RecordedWords

    voice = RecordedWords("studio", {"directory": str(digit_voice(tmp_path)), "gap_ms": 100})
    assert voice.voices() == ["jackson"] and voice.voice_for("en-GB") == "jackson"
    assert voice.voice_for("fr-FR") is None
    audio = voice.synthesize("42.", "jackson")
    four, two = samples(tmp_path / "jackson/four.wav"), samples(tmp_path / "jackson/two.wav")
    assert len(audio) == len(four) + 800 + len(two)
    # The recordings themselves, levelled: the same shape.
    assert np.corrcoef(audio[: len(four)], four)[0, 1] > 0.99
    assert not audio[len(four) : len(four) + 800].any()
    assert len(voice.synthesize("4 2", "jackson", rate=2.0)) == len(four) + 400 + len(two)
    # Streamed a word at a time (and the gaps between), the same audio.
    pieces = list(voice.stream("42.", "jackson"))
    assert [len(p) for p in pieces] == [len(four), 800, len(two)]
    assert np.array_equal(np.concatenate(pieces), audio)
    with pytest.raises(SynthesisError, match="jackson has no recording of 'code'"):
        voice.synthesize("Code 42.", "jackson")
    with pytest.raises(ValueError, match="unknown options: colour"):
        RecordedWords("studio", {"directory": str(tmp_path), "colour": "blue"})


def test_the_faster_whisper_plugin_recognises_a_spoken_digit(example: None) -> None:
    from callhook_example_speech.fasterwhisper import FasterWhisperRecogniser

    from callhook.speech.models import model_path

    engine = FasterWhisperRecogniser("gpu", {"model": str(model_path("tiny.en")), "beam_size": 1})
    assert engine.languages == {"en"}
    hints = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    (best,) = engine.recognise(
        samples(DATA / "4_jackson_4.wav"), RecognitionOptions(word_hints=hints)
    )
    assert best.text == "four" and 0 < best.confidence <= 1, best
    silence = np.zeros(8000, dtype=np.int16)
    assert engine.recognise(silence, RecognitionOptions()) == ()
    with pytest.raises(ValueError, match="English only"):
        FasterWhisperRecogniser("gpu", {"model": "tiny.en", "languages": ["fr"]})


def test_the_pocketsphinx_plugin_decodes_an_utterance_as_it_is_fed(example: None) -> None:
    from callhook_example_speech.sphinxstream import PocketsphinxLive

    engine = PocketsphinxLive("live", {})
    engine.warm_up()
    hints = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    options = RecognitionOptions(word_hints=hints)
    audio = samples(DATA / "4_jackson_4.wav")
    stream = engine.stream(options)
    for start in range(0, len(audio), 1600):  # callhook's pieces: 200 ms
        stream.feed(audio[start : start + 1600])
    (best,) = stream.finish()
    assert best.text == "four" and 0 < best.confidence <= 1, best
    # A cancelled stream gives its decoder back: the next stream decodes on it.
    engine.stream(options).cancel()
    assert engine._idle.qsize() == 1
    silence = engine.stream(RecognitionOptions())
    silence.feed(np.zeros(8000, dtype=np.int16))
    assert silence.finish() == () and engine._idle.qsize() == 1
    with pytest.raises(ValueError, match="unknown options: model"):
        PocketsphinxLive("live", {"model": "x"})


def test_callhook_voices_lists_a_configs_plugin_voices(
    tmp_path: Path, package: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from callhook.cli import main

    path = config(tmp_path, '[speech.engines.studio]\nprotocol = "plugin"\nplugin = "mouth"\n')
    assert main(["voices", "--config", str(path)]) == 0
    listed = capsys.readouterr().out.split()
    assert "studio:anna" in listed and "studio:ben" in listed and "piper:joe" in listed
    assert main(["voices"]) == 0
    assert "studio:anna" not in capsys.readouterr().out  # (without the config: embedded only)
