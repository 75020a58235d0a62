"""What every remote speech engine shares, whatever its protocol: its errors, and a
transcript made an answer to ``get_input`` (its confidence, its word hints)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from callhook.events import Alternative
from callhook.speech.breaker import Breaker
from callhook.speech.tts import SynthesisError

logger = logging.getLogger("callhook.speech")
T = TypeVar("T")

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


class Guard:
    """A remote voice's circuit breaker (:mod:`callhook.speech.breaker`) at work: each
    sentence asked through :meth:`call`, refused at once while it is open, its failures
    opening it, said once in the log each."""

    def __init__(self, name: str, breaker: Breaker | None = None) -> None:
        self.name = name
        self.breaker = breaker or Breaker()
        self._lock = threading.Lock()

    def call(self, work: Callable[[], T]) -> T:
        """``work``'s answer; SynthesisError when the breaker is open, when the server
        refused (it stays in use), or when it failed (the breaker opens)."""
        self.enter()
        try:
            result = work()
        except RemoteSpeechError as exc:
            raise self.failed(exc) from None
        self.succeeded()
        return result

    def stream(self, chunks: Iterable[T]) -> Iterator[T]:
        """``chunks`` as they come, guarded as :meth:`call` guards one answer (a failure
        after some chunks opens the breaker too)."""
        self.enter()
        iterator = iter(chunks)
        while True:
            try:
                chunk = next(iterator)
            except StopIteration:
                break
            except RemoteSpeechError as exc:
                raise self.failed(exc) from None
            yield chunk
        self.succeeded()

    def enter(self) -> None:
        """SynthesisError while the breaker is open."""
        with self._lock:
            if not self.breaker.allow(time.monotonic()):
                raise SynthesisError(
                    f"{self.name} is not asked for a while after failing ({self.breaker.cause})"
                )

    def failed(self, exc: RemoteSpeechError) -> SynthesisError:
        """The error to raise for ``exc`` (a failure opens the breaker, a refusal not)."""
        if not isinstance(exc, Refused):
            with self._lock:
                wait = self.breaker.failure(time.monotonic(), str(exc))
            logger.warning("%s: %s; not asked again for %g s", self.name, exc, wait)
        return SynthesisError(f"{self.name}: {exc}")

    def succeeded(self) -> None:
        with self._lock:
            if self.breaker.is_open:
                logger.warning("%s answers again", self.name)
            self.breaker.success()

    def snapshot(self) -> dict[str, Any]:
        """The breaker, for ``/api/stats``."""
        b = self.breaker
        return {"open": b.is_open, "failed": b.failed, "refused": b.refused, "cause": b.cause}
