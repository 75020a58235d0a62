"""Other languages: text-to-speech → the call's path → Whisper in that language, per language.

    .venv/bin/python -m bench.languages [--model base] [--languages es-ES,fr-FR,de-DE]

For each language, :data:`WORDS` (the ten digits, yes and no, and a few IVR answers) are
spoken by the installed voices for it (espeak-ng always; a piper voice when one is
installed), put on a phone line as ``bench.asr`` does (1 s of −50 dBFS hiss either side,
G.711 µ-law, the call's voice-activity detector and utterance cutter), and recognised by
Whisper with ``speech_recognition_options.language`` set: once with every word of the
language as ``word_hints`` (closed set) and once without hints (free transcription,
compared after lower-casing and dropping punctuation and accents); then
:data:`SENTENCES`, transcribed freely, scored by word error rate. English is the
reference row. A multilingual model is needed (``tiny.en`` is English only).
"""

from __future__ import annotations

import argparse
import time
import unicodedata

from bench.asr import on_the_line
from callhook.events import RecognitionOptions
from callhook.speech.espeak import EspeakEngine
from callhook.speech.whisper import WhisperRecogniser

#: What a caller might say to an IVR, per language (BCP-47 tag → words).
WORDS: dict[str, tuple[str, ...]] = {
    "en-US": (
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
        "yes", "no", "sales", "support", "operator", "billing",
    ),
    "es-ES": (
        "cero", "uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve",
        "sí", "no", "ventas", "soporte", "operador", "facturación",
    ),
    "fr-FR": (
        "zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf",
        "oui", "non", "ventes", "assistance", "opérateur", "facturation",
    ),
    "de-DE": (
        "null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun",
        "ja", "nein", "Verkauf", "Kundendienst", "Vermittlung", "Rechnung",
    ),
}  # fmt: skip
#: Whole sentences a caller might say (free transcription: word error rate).
SENTENCES: dict[str, tuple[str, ...]] = {
    "en-US": (
        "I would like to pay my bill.",
        "Please put me through to customer service.",
        "My account number is four five six.",
    ),
    "es-ES": (
        "Quiero pagar mi factura.",
        "Por favor, páseme con atención al cliente.",
        "Mi número de cuenta es cuatro cinco seis.",
    ),
    "fr-FR": (
        "Je voudrais payer ma facture.",
        "Passez-moi le service client, s'il vous plaît.",
        "Mon numéro de compte est quatre cinq six.",
    ),
    "de-DE": (
        "Ich möchte meine Rechnung bezahlen.",
        "Bitte verbinden Sie mich mit dem Kundendienst.",
        "Meine Kontonummer ist vier fünf sechs.",
    ),
}


def word_errors(reference: str, hypothesis: str) -> int:
    """Word-level edit distance (substitutions, insertions, deletions)."""
    ref, hyp = plain(reference).split(), plain(hypothesis).split()
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def plain(text: str) -> str:
    """Lower case, no accents, letters and spaces only: how two transcripts are compared."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    letters = "".join(c for c in decomposed if c.isalnum() or c.isspace())
    return " ".join(letters.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="base", help="a multilingual Whisper model")
    parser.add_argument("--languages", default="en-US,es-ES,fr-FR,de-DE")
    args = parser.parse_args()
    recogniser = WhisperRecogniser(model=args.model)
    recogniser.warm_up()
    tts = EspeakEngine()
    print(f"Whisper {args.model}, espeak-ng voices; each word with hints and without")
    print(f"{'language':9} {'voice':7} {'words':>5} {'hints':>6} {'free':>6} {'WER':>5}  misses")
    for tag in args.languages.split(","):
        words = WORDS[tag]
        voice = tts.voice_for(tag)
        if voice is None:
            print(f"{tag:9} no espeak-ng voice")
            continue
        hinted = RecognitionOptions(language=tag, word_hints=words)
        free = RecognitionOptions(language=tag)
        ok_h = ok_f = 0
        misses: list[str] = []
        started = time.perf_counter()
        for i, word in enumerate(words):
            utterance = on_the_line(tts.synthesize(word, voice), 20_000 + i)
            if utterance is None:
                misses.append(f"{word}: not detected")
                continue
            h = recogniser.recognise(utterance, hinted)
            f = recogniser.recognise(utterance, free)
            got_h = h[0].text if h else ""
            got_f = f[0].text if f else ""
            ok_h += got_h == word
            ok_f += plain(got_f) == plain(word)
            if got_h != word or plain(got_f) != plain(word):
                misses.append(f"{word}→{got_h or '-'}/{got_f or '-'}")
        errors = total = 0
        for i, sentence in enumerate(SENTENCES[tag]):
            utterance = on_the_line(tts.synthesize(sentence, voice), 30_000 + i)
            got = recogniser.recognise(utterance, free) if utterance is not None else ()
            errors += word_errors(sentence, got[0].text if got else "")
            total += len(plain(sentence).split())
            if got and word_errors(sentence, got[0].text):
                misses.append(f"«{got[0].text}»")
        seconds = time.perf_counter() - started
        print(
            f"{tag:9} {voice:7} {len(words):>5} {ok_h:>6} {ok_f:>6} {errors / total:>5.0%}"
            f"  {', '.join(misses)}  ({seconds:.0f} s)"
        )


if __name__ == "__main__":
    main()
