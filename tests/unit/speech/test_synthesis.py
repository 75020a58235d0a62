"""Which voice speaks, sentence splitting and the sentence cache (speech/synthesis.py).

The engines here are small stand-ins (this is a unit test of the synthesis
layer alone); the real engines are tested in test_tts_engines.py and end to
end in tests/e2e/test_speech.py.
"""

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from callhook.speech.sentences import sentences
from callhook.speech.synthesis import Synthesiser
from callhook.speech.tts import SynthesisError


class Engine:
    def __init__(self, name: str, voices: dict[str, str]) -> None:
        self.name = name
        self._voices = voices  # voice -> language
        self.calls: list[tuple[str, str]] = []

    def voices(self) -> Sequence[str]:
        return list(self._voices)

    def voice_for(self, language: str) -> str | None:
        for voice, lang in self._voices.items():
            if lang.lower() == language.lower():
                return voice
        return None

    def warm_up(self) -> None:
        pass

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> np.ndarray:
        self.calls.append((text, voice))
        if text == "fail":
            raise SynthesisError("cannot")
        if text == "crash":
            raise RuntimeError("engine bug")
        return np.full(len(text) * 10, len(voice), dtype=np.int16)


def synth(**kw) -> tuple[Synthesiser, Engine, Engine]:
    piper = Engine("piper", {"joe": "en-US"})
    espeak = Engine("espeak", {"en-us": "en-US", "fr": "fr", "de": "de"})
    return Synthesiser([piper, espeak], "piper:joe", **kw), piper, espeak


def test_sentences_split_at_ends_and_long_ones_at_commas():
    assert sentences("Hello there. How are you?  Fine!\nNext") == [
        "Hello there.",
        "How are you?",
        "Fine!",
        "Next",
    ]
    assert sentences("  ") == []
    long = ", ".join(["word " * 8] * 6).strip()
    assert len(long) > 80
    assert len(sentences(long)) == 6


@pytest.mark.parametrize(
    ("tts_voice", "language", "label", "noted"),
    [
        (None, None, "piper:joe", False),
        (None, "en-US", "piper:joe", False),
        (None, "en-GB", "piper:joe", False),  # the default voice keeps other English variants
        (None, "fr", "espeak:fr", False),
        (None, "xx", "piper:joe", True),
        ("espeak:fr", None, "espeak:fr", False),
        ("ESPEAK:FR", None, "espeak:fr", False),
        ("espeak", "de", "espeak:de", False),
        ("espeak", None, "espeak:en-us", False),
        ("fr", None, "espeak:fr", False),
        ("joe", None, "piper:joe", False),
        ("English US Female Polly Joanna", None, "piper:joe", True),
        ("espeak:klingon", None, "piper:joe", True),
    ],
)
def test_voice_choice(tts_voice, language, label, noted):
    s, _, _ = synth()
    choice = s.choose(tts_voice, language)
    assert choice.label == label
    assert (choice.note is not None) == noted


def test_unknown_default_voice_is_refused():
    with pytest.raises(ValueError, match="not installed"):
        Synthesiser([Engine("piper", {"joe": "en-US"})], "piper:amy")


def test_a_sentence_is_synthesised_once_then_served_from_the_cache():
    s, piper, _ = synth()
    choice = s.choose(None, None)
    assert s.cached(choice, "Hello.") is None
    first = s.sentence(choice, "Hello.")
    again = s.sentence(choice, "Hello.")
    assert piper.calls == [("Hello.", "joe")]
    assert again is first and not first.flags.writeable
    assert s.cached(choice, "Hello.") is first
    # another voice is another entry
    s.sentence(s.choose("espeak:fr", None), "Hello.")
    assert s.misses == 2


def test_the_cache_is_bounded_by_bytes_oldest_out_first():
    s, _, _ = synth(cache_bytes=3 * 200 * 2)  # three 200-sample sentences
    choice = s.choose(None, None)
    texts = [f"sentence {i:02d} " + "x" * 8 for i in range(5)]  # 20 chars -> 200 samples
    for t in texts:
        s.sentence(choice, t)
    assert [s.cached(choice, t) is not None for t in texts] == [False, False, True, True, True]


def test_engine_failures_become_synthesis_errors_and_are_not_cached():
    s, _piper, _ = synth()
    choice = s.choose(None, None)
    with pytest.raises(SynthesisError, match="cannot"):
        s.sentence(choice, "fail")
    with pytest.raises(SynthesisError, match="RuntimeError: engine bug"):
        s.sentence(choice, "crash")
    assert s.cached(choice, "crash") is None


def test_speak_joins_the_sentences():
    s, piper, _ = synth()
    audio = s.speak("One. Two three.")
    assert len(audio) == (len("One.") + len("Two three.")) * 10
    assert [c[0] for c in piper.calls] == ["One.", "Two three."]


def test_the_cache_is_safe_across_threads():
    s, _piper, _ = synth()
    choice = s.choose(None, None)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(200):
                s.sentence(choice, f"text {(i * 7 + k) % 50}")
        except BaseException as exc:  # pragma: no cover - shown by the assert
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(s.cached(choice, f"text {i}") is not None for i in range(50))
