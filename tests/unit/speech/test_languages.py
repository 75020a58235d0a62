"""Recognition languages (callhook.speech.languages): BCP-47 tags to Whisper's codes."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from callhook.speech import languages
from callhook.speech.models import model_path


@pytest.mark.parametrize(
    ("tag", "code"),
    [
        ("en-US", "en"),
        ("es-ES", "es"),
        ("es-MX", "es"),
        ("fr-FR", "fr"),
        ("de-DE", "de"),
        ("cmn-Hans-CN", "zh"),  # the reference's Mandarin
        ("nb-NO", "no"),
        ("pt_BR", "pt"),
        ("EN", "en"),
    ],
)
def test_a_tag_names_its_language(tag: str, code: str) -> None:
    assert languages.code(tag) == code


def test_whispers_languages_are_the_tokens_of_its_vocabulary() -> None:
    # The list comes from faster_whisper (a private name): it must be there, hold the
    # languages callhook documents, and each must be a token the vocabulary has.
    assert {"en", "es", "fr", "de", "zh", "ja", "ar"} <= languages.WHISPER
    assert len(languages.WHISPER) >= 99
    tokenizer = Tokenizer.from_file(str(model_path("base") / "tokenizer.json"))
    assert all(tokenizer.token_to_id(f"<|{c}|>") is not None for c in languages.WHISPER)
    assert set(languages._ALIASES.values()) <= languages.WHISPER


def test_what_an_engine_cannot_recognise_is_said_with_the_way_out() -> None:
    english, whisper = languages.ENGLISH, languages.WHISPER
    assert languages.unsupported("en-GB", english, "whisper tiny.en") is None
    assert languages.unsupported("es-ES", whisper, "whisper base") is None
    assert languages.unsupported("es-ES", english, "whisper tiny.en") == (
        "speech language es-ES is not recognised by whisper tiny.en (English only; Whisper's"
        ' multilingual models do: [speech] recogniser = "whisper", model = "base")'
    )
    # A language no Whisper model knows: no way out to suggest.
    assert languages.unsupported("tlh-QO", english, "sphinx") == (
        "speech language tlh-QO is not recognised by sphinx (English only)"
    )
    assert languages.unsupported("tlh-QO", whisper, "whisper base") == (
        "speech language tlh-QO is not one whisper base recognises"
    )


def test_a_configured_recognisers_languages_by_its_name() -> None:
    assert languages.for_model("whisper", "tiny.en") == languages.ENGLISH
    assert languages.for_model("whisper", "base") == languages.WHISPER
    assert languages.for_model("whisper", "tiny.en+base") == languages.WHISPER
    assert languages.for_model("sphinx", "base") == languages.ENGLISH
    assert languages.for_model("none", "tiny.en") == frozenset()
