"""Which languages a recogniser recognises, asked in the BCP-47 tags applications use.

``speech_recognition_options.language`` is a BCP-47 tag (``en-US``, ``es-ES``,
``cmn-Hans-CN``). Whisper names a language by a short code (``en``, ``es``,
``zh``) and recognises the language, not the region: ``es-ES`` and ``es-MX``
are both ``es``. :func:`code` maps one to the other; :data:`WHISPER` is every
language a multilingual Whisper model knows; English-only models (``tiny.en``)
and pocketsphinx's model know :data:`ENGLISH`.
"""

from __future__ import annotations

from typing import Any, Final

# faster-whisper's table of the multilingual vocabulary's language tokens (<|es|>, ...),
# the languages the models were trained on. It is private to faster_whisper, so
# tests/unit/speech/test_languages.py pins that it is there and matches base's tokenizer.
from faster_whisper.tokenizer import _LANGUAGE_CODES

#: Languages a multilingual Whisper model recognises (its language tokens). Cantonese
#: ("yue") came with large-v3: base and small have no token for it.
WHISPER: Final[frozenset[str]] = frozenset(_LANGUAGE_CODES) - {"yue"}
#: Languages of an English-only model.
ENGLISH: Final[frozenset[str]] = frozenset({"en"})

# BCP-47 primary subtags whose Whisper code differs: Mandarin and Cantonese (as the
# reference's cmn-Hans-CN names them), Norwegian Bokmål, Filipino, Hebrew and Javanese
# (Whisper keeps the deprecated ISO 639 codes "iw"-era "he" and "jw").
_ALIASES: Final = {"cmn": "zh", "nb": "no", "fil": "tl", "iw": "he", "jv": "jw"}


def code(tag: str) -> str:
    """The Whisper language code of a BCP-47 tag (its primary language subtag)."""
    primary = tag.strip().split("-", 1)[0].split("_", 1)[0].lower()
    return _ALIASES.get(primary, primary)


def unsupported(tag: str, languages: frozenset[str], engine: str) -> str | None:
    """Why ``engine`` (knowing ``languages``) cannot recognise ``tag``; None if it can."""
    if code(tag) in languages:
        return None
    if languages == ENGLISH:
        hint = (
            '; Whisper\'s multilingual models do: [speech] recogniser = "whisper", model = "base"'
            if code(tag) in WHISPER
            else ""
        )
        return f"speech language {tag} is not recognised by {engine} (English only{hint})"
    return f"speech language {tag} is not one {engine} recognises"


def for_model(recogniser: str, model: str) -> frozenset[str]:
    """The languages a configured recogniser knows, by its name alone (no model loaded):
    Whisper's English-only models (``tiny.en``) and pocketsphinx English, any other Whisper
    model or cascade (``base``, ``tiny.en+base``) :data:`WHISPER`, ``none`` nothing."""
    if recogniser == "none":
        return frozenset()
    if recogniser == "whisper" and not model.endswith(".en"):
        return WHISPER
    return ENGLISH


def warnings(
    document: Any, recogniser: str, model: str, spoken: tuple[str, ...] | None = None
) -> list[str]:
    """What ``callhook validate`` warns of: every ``language`` (or ``language_outbound``) of
    a page response ``document`` that the configured recogniser does not recognise. The
    page is valid, but only digits will count. ``spoken``: the languages configured for a
    remote or plug-in recogniser (``[speech.engines.NAME] languages``), in place of what
    an embedded engine's name says."""
    if recogniser == "none":
        return []
    if spoken is not None:
        known = frozenset(code(tag) for tag in spoken)
    else:
        known = for_model(recogniser, model)
    engine = f"{recogniser} {model}" if recogniser == "whisper" else recogniser
    out: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}.{key}"
                if key in ("language", "language_outbound") and isinstance(value, str):
                    cause = unsupported(value, known, engine)
                    if cause is not None:
                        out.append(f"{here}: {cause}; speech input will not be recognised")
                else:
                    walk(value, here)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(document, "$")
    return out
