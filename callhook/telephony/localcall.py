"""A ``connect`` to ``loc:NAME``: another application of this installation answers.

Aculab's ``loc`` prefix calls "an inbound service hosted on the same cloud region".
callhook places no SIP call for it and sends no packet: the far leg and the called
application's call are two media sessions of the one media tick with no socket
(:meth:`MediaEngine.attach <callhook.edge.mediaengine.MediaEngine.attach>`), back to
back: what one sends is what the other receives at the next tick (20 ms), in
µ-law with RFC 4733 events, so the caller's digits reach the called application as
digits and its prompts reach the caller.

The called application runs as an inbound call of its own (its own
``application_instance_id``, pages, log and final page; the SIP service lists it
among its calls, so the REST API shows it and can hang it up): ``this_call`` has
``call_direction`` ``"in"``, ``call_from`` the caller's (or the connect's
``call_from``), ``call_to`` ``loc:NAME`` and ``call_target`` ``NAME``. It "rings"
until its application answers (its first action that uses the audio); then the
connect's far leg is answered. Its application refusing the call (``hang_up``
before any answer) ends the attempt ``failed`` with raw cause ``603``, as a SIP
Decline does; hanging up later ends the bridge as a far end hanging up
(``hung_up``, ``BYE``). The caller hanging up, or the connect dropping this
attempt, is the called application's caller hanging up (``hung_up``, ``BYE``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from callhook.calls.runner import CallRunner, CallSummary
from callhook.calls.services import Services
from callhook.config.settings import AppConfig
from callhook.edge.mediaengine import MediaEngine
from callhook.events import CallEnded
from callhook.media.session import MediaSession
from callhook.ports import CallInfo
from callhook.telephony.leg import new_leg
from callhook.telephony.prompts import PromptAudio

logger = logging.getLogger("callhook.sip")

#: µ-law and RFC 4733 telephone-events between the two sessions (as on the wire).
PCMU, TELEPHONE_EVENT = 0, 101
#: The address each session sees the other at (no socket: a name, never sent to).
_PEER = ("loc", 0)


class LocalCall:
    """One call to ``loc:NAME`` (see the module docstring).

    ``answered(session, key)`` when the called application answers (the far leg's
    session and its stream key); ``ended(cause, raw_cause)`` exactly once, at the end.
    """

    def __init__(
        self,
        call_id: str,
        app: AppConfig,
        info: CallInfo,
        services: Services,
        media: MediaEngine,
        prompts: PromptAudio,
        *,
        answered: Callable[[MediaSession, int], None],
        ended: Callable[[str, str], None],
        wake: Callable[[MediaSession], None],
        started: Callable[[CallRunner], object] | None = None,
        done: Callable[[], object] | None = None,
    ) -> None:
        self.call_id = call_id
        self.app = app
        self.media = media
        self._answered = answered
        self._ended = ended
        self.far = MediaSession("PCMU", PCMU, TELEPHONE_EVENT, _PEER, label=f"far leg {call_id}")
        self.near = MediaSession("PCMU", PCMU, TELEPHONE_EVENT, _PEER, label=f"call {call_id}")
        self.leg = new_leg(
            services, info, app.name, self.near, prompts, answer=self._answer, hang_up=self._hang_up
        )
        # (Attached last, when nothing can fail any more: no stream is left behind.)
        keys: dict[str, int] = {}
        self.far_key = keys["far"] = media.attach(
            self.far,
            lambda data: media.deliver(keys["near"], data, _PEER),
            lambda: wake(self.far),
        )
        self.near_key = keys["near"] = media.attach(
            self.near, lambda data: media.deliver(keys["far"], data, _PEER), self.leg.wake
        )
        self.services = services
        self._started = started
        self._done = done
        self.was_answered = False
        self.over = False
        self.task: asyncio.Task[CallSummary] | None = None

    def start(self) -> None:
        """Run the called application on its call."""
        self.task = asyncio.get_running_loop().create_task(self._run())

    def hang_up(self, cause: str) -> None:
        """The caller's side ends the call with ``cause`` (the caller hung up, the attempt
        was dropped, the connect timed out): to the called application, its caller hung
        up. The raw cause is a SIP one's: 200 once answered, 487 while it rang."""
        self.leg.far_end_ended(CallEnded("hung_up", "BYE"))
        self._end(cause, "200" if self.was_answered else "487")

    async def _run(self) -> CallSummary:
        try:
            return await self.services.run_call(self.app, self.leg, started=self._started)
        except Exception:  # a bug of ours: the attempt fails, the caller's call goes on
            logger.exception("call %s: the called application failed inside callhook", self.call_id)
            self._end("failed", "500")
            return CallSummary("", "failed", "500")
        finally:
            self.leg.finish()
            self.media.close(self.near_key)
            self._end("failed", "500")  # (no-op when it ended already)
            if self._done is not None:
                self._done()

    async def _answer(self) -> None:
        if not self.was_answered and not self.over:
            self.was_answered = True
            self._answered(self.far, self.far_key)

    def _hang_up(self) -> str:
        """The called application hangs up: before it answered, it refused the call."""
        if self.was_answered:
            self._end("hung_up", "BYE")
            return "200"
        self._end("failed", "603")
        return "603"

    def _end(self, cause: str, raw_cause: str) -> None:
        if self.over:
            return
        self.over = True
        if not self.was_answered:
            self.media.close(self.far_key)  # (an answered one is closed by its far leg)
        self._ended(cause, raw_cause)
