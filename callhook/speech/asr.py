"""Speech recognition: the interface every recogniser engine implements.

A call's recognition stream (:mod:`callhook.media.utterances`) cuts the caller's
audio into utterances with the voice-activity detector; each utterance is
handed to a :class:`Recogniser` on a worker thread (never on the event loop),
and what it returns becomes the ``speech_input`` phrase of ``get_input``.

Engines: :mod:`callhook.speech.whisper` (Whisper tiny.en via CTranslate2) and
:mod:`callhook.speech.sphinx` (pocketsphinx). Which one is the default, and
why, is in ``docs/speech.md``.

An engine that decodes while the caller speaks (a cloud service's streaming API, an
incremental decoder) may also have ``stream(options)``, returning a
:class:`RecognitionStream`: it is then handed each utterance in pieces as the caller
says it, and only the last piece arrives after the voice-activity detector has
found the utterance's end, so its answer comes sooner.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, RecognitionOptions

#: Sample rate of the audio recognisers are given (the call's: G.711 is 8 kHz).
SAMPLE_RATE = 8000


class RecognitionStream(Protocol):
    """One utterance, handed over as it is spoken (see :meth:`Recogniser.recognise` for
    the audio and the answer).

    Its methods are called on a worker thread, one at a time and in order: ``feed``
    for each piece (the first starts with the audio before the detector's onset), then
    ``finish`` once; or ``cancel`` instead of ``finish`` when nobody wants the answer
    any more (the action ended, the caller hung up), if the stream has that method.
    """

    def feed(self, audio: npt.NDArray[np.int16]) -> None:
        """More of the utterance: 8 kHz mono int16, following the last piece."""

    def finish(self) -> tuple[Alternative, ...]:
        """The utterance has ended: its hypotheses, as :meth:`Recogniser.recognise`'s."""
        ...


class Recogniser(Protocol):
    """Turns one utterance of a caller into text.

    Implementations must be safe to call from several worker threads at once
    (one call's utterances are never decoded concurrently, but different
    calls' are). One that waits for a server may have a ``timeout`` attribute
    (seconds it waits for an answer): the supervisor then takes it for hung only
    past that (:mod:`callhook.speech.supervisor`).
    """

    #: Short engine name, as configured (``whisper``, ``sphinx``).
    name: str

    @property
    def languages(self) -> frozenset[str]:
        """The languages it recognises, as Whisper codes (:mod:`callhook.speech.languages`:
        ``es-ES`` asks for ``es``). Known without loading a model."""
        ...

    def warm_up(self) -> None:
        """Load models now (called once off the event loop at start-up)."""

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        """The hypotheses for ``audio``, best first, at most ``options.max_alternatives``.

        ``audio`` is 8 kHz mono int16: one utterance as the voice-activity
        detector cut it, with a little audio before and after. With
        ``options.word_hints`` the result should be one of the hints (and carry
        a low confidence when it is not). An empty tuple means nothing was
        recognised (noise, a cough): the caller is asked again.
        """
        ...
