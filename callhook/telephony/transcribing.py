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
from collections.abc import Awaitable, Callable
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

    def post(
        self,
        url: str,
        method: str,
        body: dict[str, Any],
        *,
        interim: bool = False,
        completed: bool = False,
    ) -> None:
        """Send ``body``; ``interim``: it holds interim phrases only, ``completed``: it is
        the transcription's last result."""
        ...


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
        body = command_result(self.command, phrases, completed=completed)
        interim = not completed and not any(p["final"] for p in phrases)
        self.poster.post(url, method, body, interim=interim, completed=completed)


#: Seconds before a result the database refused (a full disk) is tried again, doubling up
#: to :data:`RETRY_MAX` (the recordings journal's policy: store/journal.py).
RETRY_FIRST = 0.5
#: The longest wait between tries.
RETRY_MAX = 10.0
#: The most results a call holds in memory while the database refuses them. Past it a new
#: final result is dropped (counted in the log), so a long outage across many calls cannot
#: take the server's memory; the ``completed`` result is always held (it ends the stream).
HELD_MAX = 1000


class OutboxPoster:
    """Results into the durable outbox of application ``app`` (delivered, signed and
    retried by the notifier, as ``recording_available_page`` notifications are), as one
    stream: queued in the order they were made and delivered in that order, one at a time
    (:mod:`callhook.store.outbox`), so the application reads the call's phrases in order.

    A result the database refuses for a reason that passes (a full disk, a PostgreSQL
    server restarting) is held in memory with the ones after it and tried again after
    :data:`RETRY_FIRST` seconds, doubling up to :data:`RETRY_MAX`, until it is taken;
    ``sleep`` waits between tries (a virtual clock's in tests). While it is refused, a new
    interim result is dropped (stale before it could be read: its phrase's final result
    follows), and a new final one past :data:`HELD_MAX` held; the log counts both."""

    def __init__(
        self,
        services: Services,
        app: str,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.services = services
        self.app = app
        self.stream = f"transcription/{uuid.uuid4().hex}"
        self._sleep = sleep
        self._queued: deque[tuple[str, str, dict[str, Any], str | None]] = deque()
        self._adding: asyncio.Task[None] | None = None
        #: Whether the database is refusing results (from the first refusal until one is
        #: taken again), and the results dropped meanwhile: interim ones, final ones.
        self._refused = False
        self._dropped = [0, 0]

    def post(
        self,
        url: str,
        method: str,
        body: dict[str, Any],
        *,
        interim: bool = False,
        completed: bool = False,
    ) -> None:
        if self._refused and not completed and (interim or len(self._queued) >= HELD_MAX):
            if not interim and self._dropped[1] == 0:  # (once per outage)
                logger.error(
                    "transcription results for %s: %d held in memory, the most kept;"
                    " later final results are dropped until the database takes them",
                    self.app,
                    len(self._queued),
                )
            self._dropped[0 if interim else 1] += 1
            return
        traceparent = tracing.traceparent()  # (the call's: its delivery's span joins it)
        self._queued.append((url, method, body, traceparent))
        if self._adding is None or self._adding.done():  # (one at a time: in order)
            self._adding = asyncio.get_running_loop().create_task(self._add_queued())

    async def _add_queued(self) -> None:
        delay = RETRY_FIRST
        try:
            while self._queued:
                try:
                    await self._add(*self._queued[0])
                except Exception as exc:
                    if not self.services.db.passing(exc):  # a bug: retrying never helps
                        logger.exception(
                            "a transcription result for %s could not be queued", self.app
                        )
                        self._queued.popleft()
                        continue
                    if not self._refused:  # (one line for the whole refusal)
                        self._refused = True
                        logger.error(
                            "transcription results for %s cannot be queued (%s): %d held in"
                            " memory, in order, tried again until they can",
                            self.app,
                            exc,
                            len(self._queued),
                        )
                    await self._sleep(delay)
                    delay = min(RETRY_MAX, delay * 2)
                    continue
                self._queued.popleft()
                if self._refused:
                    self._refused = False
                    logger.warning(
                        "transcription results for %s are queued again%s",
                        self.app,
                        self._take_dropped(),
                    )
                    delay = RETRY_FIRST
                self.services.notify_now()
        except asyncio.CancelledError:  # callhook is stopping
            if self._queued:
                refused = " (the database refused them)" if self._refused else ""
                logger.error(
                    "%d transcription result(s) for %s not queued when callhook stopped%s%s",
                    len(self._queued),
                    self.app,
                    refused,
                    self._take_dropped(),
                )
            raise

    def _take_dropped(self) -> str:
        """The results dropped during the refusal, as the end of its log line; from zero
        again."""
        (interim, final), self._dropped = self._dropped, [0, 0]
        counts = [
            f"{n} {kind} result(s) dropped meanwhile"
            for n, kind in ((interim, "interim"), (final, "final"))
            if n
        ]
        return f"; {' and '.join(counts)}" if counts else ""

    async def _add(
        self, url: str, method: str, body: dict[str, Any], traceparent: str | None
    ) -> None:
        await self.services.outbox.add(
            self.app, url, method, body, time.time(), traceparent, self.stream
        )
