"""What every remote speech engine shares, whatever its protocol: its errors, and a
transcript made an answer to ``get_input`` (its confidence, its word hints)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from callhook.events import Alternative

#: The confidence of a transcript from a protocol that carries none, and of one that
#: matches none of the hints it was asked with.
CONFIDENCE = 0.8
UNHINTED_CONFIDENCE = 0.2


class RemoteSpeechError(Exception):
    """A remote engine could not be reached, or answered what it should not."""


class Refused(RemoteSpeechError):
    """The server answered with an error (it is there: a voice it lacks, a text it
    cannot say)."""


def matched(text: str, hints: Sequence[str]) -> Alternative:
    """A transcript against the hints it was asked with: the hint it says (its words, case
    and punctuation aside), else the transcript itself with a low confidence."""
    if not hints:
        return Alternative(text, CONFIDENCE)
    said = f" {_words(text)} "
    for hint in sorted(hints, key=len, reverse=True):
        if f" {_words(hint)} " in said:
            return Alternative(hint, CONFIDENCE)
    return Alternative(text, UNHINTED_CONFIDENCE)


def _words(text: str) -> str:
    return " ".join(re.findall(r"[\w']+", text.lower()))
