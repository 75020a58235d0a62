"""What the call runner needs from the outside world, and what it gives it.

:class:`~callhook.calls.runner.CallRunner` is written against these: a :class:`Leg`
(the SIP/RTP call, the terminal phone, the scripted caller of
``callhook.devtools.harness``), :class:`Pages` (HTTP to the application, or pages in
memory), :class:`Recordings` (the journal) and :class:`Files` (the media
store). :class:`PageError` is how a page request fails (docs/behaviour.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from callhook.events import CallEnded, MediaCommand, MediaEvent


@dataclass(frozen=True)
class CallInfo:
    """Who is calling whom: the ``this_call`` facts that do not change.

    ``direction`` is Aculab's ``"in"`` or ``"out"``; ``divert`` the caller's original
    target when an inbound call was diverted; ``attestation`` an inbound call's
    STIR/SHAKEN level (``A``, ``B``, ``C`` or empty); ``outbound_parameters`` what the
    service that started an outbound call gave it (None: not started with parameters).
    """

    call_id: str
    direction: Literal["in", "out"] = "in"
    call_from: str = ""
    call_to: str = ""
    call_target: str = ""
    divert: str = ""
    attestation: str = ""
    outbound_parameters: str | None = None
    #: The trunk the call came in through or went out by (empty: none).
    trunk: str = ""
    #: Who answered an outbound call or a far leg, when it was classified: the
    #: ``far_end_classification`` object (None: not classified).
    far_end: dict[str, Any] | None = None


class Leg(Protocol):
    """One call as the runner sees it: its signalling and its media session.

    Implemented by the SIP/RTP call, by the terminal phone, and by the scripted
    caller of ``callhook.devtools.harness``.
    """

    info: CallInfo

    def send(self, commands: Sequence[MediaCommand]) -> None:
        """Carry out media commands (start a prompt, start recording, ...)."""

    def now(self) -> float:
        """The call's media time: the clock of the events and of ``next_event``'s deadlines."""

    def media_time(self) -> float:
        """The call's media time, as :meth:`now` says it, without acting at it: the clock
        of the call's log lines."""

    async def next_event(self, deadline: float | None) -> tuple[MediaEvent | None, float]:
        """The next media event and the media time it was noted at, or (None,
        ``deadline``) once ``deadline`` has come, before an event noted after it."""

    def take_pending(self) -> list[MediaEvent]:
        """The events that have arrived and not been taken yet, without waiting."""

    async def answer(self) -> None:
        """Answer the call (a no-op once answered)."""

    async def hang_up(self) -> str:
        """End the call from our side; returns the raw cause (the SIP status)."""

    async def wait_ended(self) -> CallEnded:
        """Resolve when the far end ends the call."""

    def recorded_seconds(self, filename: str) -> float | None:
        """Seconds of audio written to a stopped recording (None: the leg does not know)."""


class Recordings(Protocol):
    """Where the runner reports recordings (``store.journal.RecordingJournal``)."""

    def started(
        self,
        app: str,
        filename: str,
        *,
        encrypted: bool,
        record_id: str,
        notify: tuple[str, str] | None,
        body: dict[str, Any],
        traceparent: str | None = None,
    ) -> object:
        """A recording began; ``notify`` is its recording_available_page (URL, method);
        ``traceparent``: the call's span it began in."""

    def completed(self, app: str, filename: str, result: dict[str, Any]) -> object:
        """The record action completed with ``result``."""


class Files(Protocol):
    """The media file store, as ``delete_file`` uses it (``store.files.MediaStore``)."""

    def delete(self, app: str, name: str) -> None:
        """Delete ``name`` of ``app``'s namespace; FileNotFoundError if there is none."""


#: Why a page request failed (:class:`PageError`'s ``kind``).
PageErrorKind = Literal["unreachable", "timeout", "status", "invalid"]


class PageError(Exception):
    """A page request that failed, and why (docs/behaviour.md)."""

    def __init__(
        self,
        kind: PageErrorKind,
        url: str,
        detail: str,
        status: int | None = None,
    ) -> None:
        self.kind = kind
        self.url = url
        self.detail = detail
        self.status = status
        super().__init__(f"{kind}: {url}: {detail}")

    def as_json(self) -> dict[str, Any]:
        """The ``error_result`` object sent to the error page."""
        result: dict[str, Any] = {"cause": self.kind, "url": self.url, "description": self.detail}
        if self.status is not None:
            result["status"] = self.status
        return result


class Pages(Protocol):
    """Requests application pages (``callhook.edge.pages`` over HTTP)."""

    async def fetch(self, url: str, method: str, body: bytes, secret: str) -> bytes:
        """The response body of a 2xx answer; raises :class:`PageError` otherwise."""
