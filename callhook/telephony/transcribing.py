"""A call's live transcription on a real call: the pieces its media session cuts
(speech/transcription.py) decoded on the speech workers, in order, and each result posted
to the application's ``results_page`` through the durable outbox (a phrase that was due
is delivered after a restart, as a recording's notification is).

The leg (telephony/leg.py) starts one on :class:`~callhook.events.Transcribe`, stops it on
:class:`~callhook.events.StopTranscribing` or when the call ends; a second start replaces
the first (Aculab REST API v2), whose last phrase and ``completed`` result still go out.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from callhook.edge.speechworkers import SpeechService
from callhook.events import Alternative, Transcribe
from callhook.media.session import MediaSession
from callhook.media.transcriber import (
    CallTranscriber,
    Direction,
    Final,
    PhraseResults,
    Piece,
    command_result,
    phrase,
)
from callhook.media.vad import VoiceActivityDetector, new_detector
from callhook.monitoring import tracing

if TYPE_CHECKING:
    from callhook.calls.services import Services

logger = logging.getLogger("callhook.speech")


class ResultPoster(Protocol):
    """Where a transcription's results go: the outbox, for the application's page."""

    def post(self, url: str, method: str, body: dict[str, Any]) -> None: ...


class LiveTranscription:
    """One ``start_transcription`` of a call (see the module docstring)."""

    def __init__(
        self,
        command: Transcribe,
        session: MediaSession,
        speech: SpeechService,
        poster: ResultPoster,
        *,
        detector: Callable[[], VoiceActivityDetector] = new_detector,
    ) -> None:
        self.command = command
        self.speech = speech
        self.poster = poster
        self.transcriber = CallTranscriber(command.mode, detector, interim=command.interim)
        self.results: dict[Direction | None, PhraseResults] = {
            d: PhraseResults() for d in self.transcriber.streams
        }
        self._pending: deque[tuple[Direction | None, Piece]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        session.reclaim()  # (the transcriber hears every frame from now: not the thread)
        session.transcriber = self.transcriber
        self.session = session

    def collect(self) -> None:
        """Take the pieces the session cut since the last call, and decode them."""
        pieces = self.transcriber.pieces
        while pieces:
            self._pending.append(pieces.popleft())
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._decode())

    def stop(self) -> None:
        """End it: the phrases in progress are finished, decoded and sent, then the
        ``completed`` result."""
        if self._stopped:
            return
        self._stopped = True
        if self.session.transcriber is self.transcriber:
            self.session.transcriber = None
        self.transcriber.stop()
        self.collect()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._decode())

    async def _decode(self) -> None:
        command = self.command
        while self._pending:
            direction, piece = self._pending.popleft()
            if not isinstance(piece, Final) and (self._stopped or len(self._pending) > 2):
                continue  # behind: an interim nobody will read in time
            try:
                alternatives = await self.speech.recognise(piece.audio, command.options)
            except Exception as exc:  # a crashed or hung recogniser: the phrase is lost
                logger.warning(
                    "transcription %r: a phrase was not decoded: %s", command.transcription_id, exc
                )
                alternatives = ()
            self._send(direction, piece, alternatives)
        if self._stopped:
            self._post([], completed=True)

    def _send(
        self, direction: Direction | None, piece: Piece, alternatives: tuple[Alternative, ...]
    ) -> None:
        results = self.results[direction]
        if isinstance(piece, Final):
            results.final(piece.phrase)
            if alternatives:
                self._post([phrase(list(alternatives), final=True, direction=direction)])
            return
        if not alternatives:
            return
        value = results.interim(piece.phrase, piece.seq, alternatives[0].text)
        if value is not None:
            self._post(
                [
                    phrase(
                        list(alternatives), final=False, direction=direction, stability_value=value
                    )
                ]
            )

    def _post(self, phrases: list[dict[str, Any]], *, completed: bool = False) -> None:
        url, method = self.command.results
        self.poster.post(url, method, command_result(self.command, phrases, completed=completed))


class OutboxPoster:
    """Results into the durable outbox of application ``app`` (delivered, signed and
    retried by the notifier, as ``recording_available_page`` notifications are), as one
    stream: queued in the order they were made and delivered in that order, one at a time
    (:mod:`callhook.store.outbox`), so the application reads the call's phrases in order."""

    def __init__(self, services: Services, app: str) -> None:
        self.services = services
        self.app = app
        self.stream = f"transcription/{uuid.uuid4().hex}"
        self._queued: deque[tuple[str, str, dict[str, Any], str | None]] = deque()
        self._adding: asyncio.Task[None] | None = None

    def post(self, url: str, method: str, body: dict[str, Any]) -> None:
        traceparent = tracing.traceparent()  # (the call's: its delivery's span joins it)
        self._queued.append((url, method, body, traceparent))
        if self._adding is None or self._adding.done():  # (one at a time: in order)
            self._adding = asyncio.get_running_loop().create_task(self._add_queued())

    async def _add_queued(self) -> None:
        while self._queued:
            await self._add(*self._queued.popleft())

    async def _add(
        self, url: str, method: str, body: dict[str, Any], traceparent: str | None
    ) -> None:
        services = self.services
        try:
            await services.outbox.add(
                self.app, url, method, body, time.time(), traceparent, self.stream
            )
        except Exception as exc:
            if not services.db.passing(exc):  # a bug: its traceback
                logger.exception("transcription result for %s could not be queued", self.app)
            else:  # the database refused it (a full disk, no server): its cause, one line
                logger.error("transcription result for %s could not be queued: %s", self.app, exc)
            return
        services.notify_now()
