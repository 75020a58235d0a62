"""``start_transcription`` on ``callhook test``'s simulated call (in process, no audio).

A simulated call has words, not audio: what the caller says (a ``say`` step, as the
recogniser heard its TTS audio, or as typed without one) and what the application's
prompts say (their ``text_to_say``). A running transcription posts each as a final
phrase to its ``results_page`` as it is said: the caller's ``inbound``, the prompts'
``outbound`` (``mixed``: no direction; ``inbound``/``outbound`` mode: that side only),
then ``completed`` when it is stopped, replaced or the call ends. No interim results
(there is no audio to decode twice). Each post is kept as a page request of the flow at
once, so a ``request`` step can expect it, and is sent to the application's page
(signed, one after the other in order); :meth:`FlowTranscript.drain` waits for them
before the flow's result is given.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any

from callhook.events import Alternative, Transcribe
from callhook.media.transcriber import Direction, command_result, phrase
from callhook.ports import PageError, Pages

logger = logging.getLogger("callhook.flow")


class FlowTranscript:
    """The flow's call's transcription, if one runs (see the module docstring)."""

    def __init__(self, pages: Pages, secret: str, record: Any) -> None:
        """``record(url, body)``: keep a post as a page request of the flow."""
        self.pages = pages
        self.secret = secret
        self.record = record
        self.command: Transcribe | None = None
        self._queue: deque[tuple[str, str, dict[str, Any]]] = deque()
        self._sender: asyncio.Task[None] | None = None

    def start(self, command: Transcribe) -> None:
        """A ``start_transcription``: replaces the one running (Aculab: one at a time)."""
        self.stop()
        self.command = command

    def stop(self) -> None:
        """``stop_transcription``, or the call's end: the ``completed`` result."""
        if self.command is not None:
            self._post([], completed=True)
            self.command = None

    def caller(self, alternatives: tuple[Alternative, ...]) -> None:
        """The caller said something (its recognised or typed alternatives)."""
        command = self.command
        if command is None or command.mode == "outbound" or not alternatives:
            return
        direction: Direction | None = None if command.mode == "mixed" else "inbound"
        self._post([phrase(list(alternatives), final=True, direction=direction)])

    def prompt(self, text: str) -> None:
        """The application's prompt says ``text`` (what the caller hears)."""
        command = self.command
        if command is None or command.mode == "inbound" or not text.strip():
            return
        direction: Direction | None = None if command.mode == "mixed" else "outbound"
        self._post([phrase([Alternative(text, 1.0)], final=True, direction=direction)])

    async def drain(self) -> None:
        """Wait until every post was answered (or failed)."""
        if self._sender is not None:
            await asyncio.gather(self._sender, return_exceptions=True)

    def _post(self, phrases: list[dict[str, Any]], *, completed: bool = False) -> None:
        command = self.command
        assert command is not None
        body = command_result(command, phrases, completed=completed)
        url, method = command.results
        self.record(url, body)
        self._queue.append((url, method, body))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        """The posts one after the other, in the order they were made."""
        while self._queue:
            url, method, body = self._queue.popleft()
            try:
                await self.pages.fetch(url, method, json.dumps(body).encode(), self.secret)
            except PageError as exc:
                logger.warning("transcription results page %s: %s", url, exc)
