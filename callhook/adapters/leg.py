"""A real call as the call runner sees it: :class:`SipLeg` (implements ``call.Leg``).

It turns the actions' media commands into work for the call's
:class:`~callhook.media.session.MediaSession` (prompt audio, recording files)
and hands the session's events to the runner, waking it when something
happens or a deadline comes. Signalling goes through the SIP service that
owns it (answer, hang up); the service tells it when the far end hangs up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from callhook.adapters.prompts import PromptAudio
from callhook.call import CallInfo
from callhook.events import (
    Aborted,
    CallEnded,
    MediaCommand,
    MediaEvent,
    PromptFinished,
    RecorderFailed,
    StartPrompt,
    StartRecognition,
    StartRecording,
    StopPrompt,
    StopRecording,
)
from callhook.media.session import MediaSession
from callhook.store.files import MediaStore, OutsideNamespace
from callhook.store.wavfile import WavWriter

logger = logging.getLogger("callhook.call")


class SipLeg:
    """One SIP call's signalling and media, for the call runner."""

    def __init__(
        self,
        info: CallInfo,
        app_name: str,
        session: MediaSession,
        prompts: PromptAudio,
        store: MediaStore,
        *,
        answer: Callable[[], Awaitable[None]],
        hang_up: Callable[[], str],
        max_recording_bytes: int | None = None,
    ) -> None:
        self.info = info
        self.app_name = app_name
        self.session = session
        self.prompts = prompts
        self.store = store
        self._answer = answer
        self._hang_up = hang_up
        self.max_recording_bytes = max_recording_bytes
        self.loop = asyncio.get_running_loop()
        self._queue: deque[MediaEvent] = deque()
        self._wake = asyncio.Event()
        self._ended: asyncio.Future[CallEnded] = self.loop.create_future()
        self._prompt_errors: dict[int, str] = {}
        self._recorders: dict[str, WavWriter] = {}
        self._speech_warned = False
        self.answered = False

    # --- from the SIP service and the media engine ----------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def far_end_ended(self, ended: CallEnded) -> None:
        """The caller hung up (or the call dropped)."""
        if not self._ended.done():
            self._ended.set_result(ended)
            self._queue.append(ended)
            self._wake.set()

    def abort(self, reason: str) -> None:
        """callhook is ending the call itself (shutdown): the running action stops now."""
        self.inject(Aborted(reason))

    def inject(self, event: MediaEvent) -> None:
        self._queue.append(event)
        self._wake.set()

    # --- call.Leg -------------------------------------------------------------------------

    def send(self, commands: Sequence[MediaCommand]) -> None:
        for command in commands:
            if isinstance(command, StartPrompt):
                audio, error = self.prompts.encoded(self.app_name, command.items, self.session.law)
                if error is not None:
                    self._prompt_errors[command.prompt_id] = error
                if not audio and error is not None:
                    self._queue.append(PromptFinished(command.prompt_id, error))
                    self._wake.set()
                else:
                    self.session.play_encoded(command.prompt_id, audio)
            elif isinstance(command, StopPrompt):
                self.session.stop_prompt(command.prompt_id)
            elif isinstance(command, StartRecording):
                self._start_recording(command)
            elif isinstance(command, StopRecording):
                self.session.stop_recording(self.loop.time())
                self._recorders.pop(command.filename, None)
            elif isinstance(command, StartRecognition) and not self._speech_warned:
                self._speech_warned = True
                logger.warning(
                    "call %s: no speech recogniser is installed yet: only digits count",
                    self.info.call_id,
                )

    def _start_recording(self, command: StartRecording) -> None:
        law = command.format or self.session.law
        try:
            path = self.store.path(self.app_name, command.filename)
            writer = WavWriter(path, law, self.max_recording_bytes)
        except (OSError, OutsideNamespace) as exc:
            self.inject(RecorderFailed("error", f"cannot create {command.filename}: {exc}"))
            return
        self._recorders[command.filename] = writer
        self.session.start_recording(writer, law, command.preroll)

    def _take(self) -> MediaEvent | None:
        events = self.session.events
        while events:
            self._queue.append(events.popleft())
        if not self._queue:
            return None
        event = self._queue.popleft()
        if isinstance(event, PromptFinished) and event.error is None:
            error = self._prompt_errors.pop(event.prompt_id, None)
            if error is not None:
                return PromptFinished(event.prompt_id, error)
        return event

    async def next_event(self, deadline: float | None) -> MediaEvent | None:
        while True:
            event = self._take()
            if event is not None:
                return event
            now = self.loop.time()
            if deadline is not None and now >= deadline:
                return None
            self._wake.clear()
            timeout = None if deadline is None else deadline - now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def take_pending(self) -> list[MediaEvent]:
        events = []
        while (event := self._take()) is not None:
            events.append(event)
        return events

    async def answer(self) -> None:
        if not self.answered:
            self.answered = True
            await self._answer()

    async def hang_up(self) -> str:
        self.finish()
        return self._hang_up()

    async def wait_ended(self) -> CallEnded:
        return await asyncio.shield(self._ended)

    def finish(self) -> None:
        """The call is over: make sure no recording is left open."""
        if self._recorders:
            self.session.stop_recording(self.loop.time())
            self._recorders.clear()
