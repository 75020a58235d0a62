"""One utterance handed to a streaming recogniser while the caller says it.

A recogniser with ``stream(options)`` (:class:`~callhook.speech.asr.RecognitionStream`)
gets a call's utterance in pieces as the media session cuts them
(:class:`~callhook.media.utterances.UtterancePiece`), so it decodes during the speech
and its answer comes soon after the end. :class:`UtteranceStream` is the event loop's
side of one such utterance:

* :meth:`~UtteranceStream.feed` never blocks (the media tick must not wait for an
  engine): the piece is queued, and one job at a time hands what is queued to the
  engine on the recognition threads, joined, so a slow engine gets fewer, larger
  pieces rather than a queue that grows;
* :meth:`~UtteranceStream.finish` hands over the tail and waits for the answer;
* :meth:`~UtteranceStream.cancel` drops it (the stream's ``cancel``, if it has one, is
  called once the pieces under way are in).

Every job runs under the speech service's supervision as a whole utterance's decode does
(a deadline, a fault restarts the engine, :class:`RecognitionFailed` names the cause);
a stream whose engine was replaced meanwhile fails, since its state went with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, RecognitionOptions
from callhook.speech.asr import SAMPLE_RATE, Recogniser, RecognitionStream

logger = logging.getLogger("callhook.speech")

T = TypeVar("T")

#: How the service runs a job on the current engine: ``run(work, audio_seconds)``.
Runner = Callable[[Callable[[Recogniser], Any], float], Awaitable[Any]]


class RecognitionFailed(Exception):
    """The recogniser crashed, hung or is being restarted: nothing was recognised (why)."""


class UtteranceStream:
    """One utterance for a streaming recogniser, on the event loop (see the module
    docstring); ``run`` is the speech service's supervised runner."""

    def __init__(self, run: Runner, options: RecognitionOptions) -> None:
        self._run = run
        self.options = options
        self._queued: list[npt.NDArray[np.int16]] = []
        self._feeding: asyncio.Task[None] | None = None
        self._failed: RecognitionFailed | None = None
        self._closed = False
        self._cancelling: asyncio.Task[None] | None = None
        # Set on the recognition thread by the first job (the engine may connect there).
        self._engine: Recogniser | None = None
        self._stream: RecognitionStream | None = None
        #: Samples and pieces handed over so far (``/api/stats``).
        self.samples = 0
        self.pieces = 0

    def feed(self, audio: npt.NDArray[np.int16]) -> None:
        """The next piece of the utterance; queued, never waited for."""
        if self._closed or self._failed is not None or not len(audio):
            return
        self._queued.append(audio)
        self.samples += len(audio)
        self.pieces += 1
        if self._feeding is None or self._feeding.done():
            self._feeding = asyncio.get_running_loop().create_task(self._hand_over())

    async def finish(self, tail: npt.NDArray[np.int16]) -> tuple[Alternative, ...]:
        """The utterance ended with ``tail`` (the part not yet fed): the engine's answer.
        Raises :class:`RecognitionFailed`."""
        self.feed(tail)
        self._closed = True
        try:
            if self._feeding is not None:
                await asyncio.shield(self._feeding)
        except asyncio.CancelledError:  # (the call ended): the engine's stream is let go
            self._cancelling = asyncio.get_running_loop().create_task(self._cancel())
            raise
        if self._failed is not None:
            raise self._failed
        if self._stream is None:
            return ()  # (nothing was heard: an empty utterance)
        # Once asked, the engine finishes even if nobody waits for the answer any more:
        # that is how its stream's resources (a connection, a decoder) are let go.
        finishing = asyncio.ensure_future(self._run(self._finish, self.samples / SAMPLE_RATE))
        finishing.add_done_callback(_retrieved)
        answer: tuple[Alternative, ...] = await asyncio.shield(finishing)
        return answer

    def cancel(self) -> None:
        """Nobody wants the answer: no more pieces; the engine's ``cancel``, if any, once
        the pieces under way are in (not waited for)."""
        if self._closed:
            return
        self._closed = True
        self._queued.clear()
        self._cancelling = asyncio.get_running_loop().create_task(self._cancel())

    async def _hand_over(self) -> None:
        while self._queued and self._failed is None:
            audio = np.concatenate(self._queued) if len(self._queued) > 1 else self._queued[0]
            self._queued.clear()
            try:
                await self._run(partial(self._feed, audio=audio), len(audio) / SAMPLE_RATE)
            except RecognitionFailed as exc:
                self._failed = exc
                self._queued.clear()

    async def _cancel(self) -> None:
        if self._feeding is not None:
            with contextlib.suppress(Exception):
                await self._feeding
        cancel = getattr(self._stream, "cancel", None)
        if self._failed is not None or not callable(cancel):
            return
        with contextlib.suppress(RecognitionFailed):  # (its failure was logged there)
            await self._run(lambda engine: self._on_engine(engine) and cancel(), 0.0)

    # --- on a recognition thread -----------------------------------------------------------

    def _feed(self, engine: Recogniser, audio: npt.NDArray[np.int16]) -> None:
        if self._stream is None:
            self._engine = engine
            self._stream = engine.stream(self.options)  # type: ignore[attr-defined]
        else:
            self._on_engine(engine)
        self._stream.feed(audio)

    def _finish(self, engine: Recogniser) -> tuple[Alternative, ...]:
        self._on_engine(engine)
        assert self._stream is not None
        return self._stream.finish()

    def _on_engine(self, engine: Recogniser) -> bool:
        if engine is not self._engine:
            raise RecognitionFailed(
                "the speech recogniser was restarted during this utterance: its stream is lost"
            )
        return True


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A finish nobody waited for: its failure was logged by the service, not lost."""
    if not task.cancelled():
        task.exception()
