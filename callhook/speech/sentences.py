"""Text into the pieces a voice speaks one at a time: sentences, and long ones at their
commas (the first audio of a prompt comes when its first piece is ready)."""

from __future__ import annotations

import re

# A sentence ends at . ! ? ; or a line break, followed by space, when the next
# sentence starts. Abbreviations such as "Dr. Smith" split too: harmless, the
# two pieces play back to back.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
#: Sentences longer than this are split at commas too, so the first audio comes early
#: (piper needs ~0.1 s of CPU per second of speech; a 3 s sentence would keep the caller
#: waiting ~0.3 s, more on a busy core).
LONG_SENTENCE = 80


def sentences(text: str) -> list[str]:
    """``text`` split into the pieces synthesised one at a time (never empty pieces)."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        if not sentence:
            continue
        if len(sentence) > LONG_SENTENCE:
            pieces += [p.strip() for p in re.split(r"(?<=,)\s+", sentence) if p.strip()]
        else:
            pieces.append(sentence)
    return pieces
