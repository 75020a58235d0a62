"""A call's life on the SIP service, once it has a leg: its run, its answer, its hang-up,
its re-offers, its end.

Every SIP call of the server, inbound (:mod:`callhook.telephony.inbound`) or outbound
(:mod:`callhook.telephony.dialling`), is a :class:`~callhook.telephony.sipcall.SipCall`
in the server's table of calls. :class:`Lifecycle` runs it: it opens the call's media
session in the tick, runs the application (a :class:`~callhook.calls.runner.CallRunner`,
through ``Services.run_call``), answers it when the application first needs it answered,
hangs it up when the application or the caller's RTP says so, answers its re-offers
(RFC 3264 §8: hold, a new address), and when the run is over ends what it holds (its far
legs, its media port, its place in the table). The agent's events for a call (a BYE, a
re-INVITE, a REFER's news, a SIP INFO digit) come here from the service's dispatch
(:meth:`Lifecycle.event`). The calls that are no SIP dialog (another application's
``loc:`` call, :mod:`callhook.telephony.localcall`; a web phone call) run themselves and
only borrow :meth:`~Lifecycle.attach_far_legs` and :meth:`~Lifecycle.detach_far_legs`, so
that their own ``connect`` works as any call's.

A fault inside callhook while a call runs is named in the log at once and the caller
released (500 before the answer, BYE after) rather than left ringing.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import OrderedDict
from collections.abc import Callable

from callhook.calls.runner import CallRunner, CallSummary
from callhook.calls.services import Services
from callhook.edge.mediaengine import MediaEngine
from callhook.events import CallEnded
from callhook.media.dtmf import parse_dtmf_relay
from callhook.sip import sdp
from callhook.sip.agent import (
    Agent,
    CallAnswered,
    CallEvent,
    CallProgress,
    CallTerminated,
    InfoReceived,
    Reoffer,
)
from callhook.sip.notices import ReferProgress, ReferResponse
from callhook.telephony.connecting import CallFarLegs, Connector
from callhook.telephony.leg import ConferencePort
from callhook.telephony.referring import CallReferrer, Transfers
from callhook.telephony.sipcall import SipCall, Unanswered, reoffer
from callhook.telephony.transcribing import OutboxPoster

logger = logging.getLogger("callhook.sip")

#: Recent calls whose logs ``GET /api/calls/{call_id}/log`` finds by Call-ID.
RECENT_LOGS = 1000


class Lifecycle:
    """Running the server's calls, from their media's start to their end (see the module
    docstring)."""

    def __init__(
        self,
        *,
        services: Services,
        loop: asyncio.AbstractEventLoop,
        agent: Callable[[], Agent | None],
        media: Callable[[], MediaEngine | None],
        address: str,
        calls: dict[str, SipCall],
        recent_logs: OrderedDict[str, tuple[str, str]],
        connector: Connector,
        transfers: Transfers,
        rooms: Callable[[SipCall], ConferencePort],
        flush: Callable[[], None],
    ) -> None:
        """``agent`` and ``media``: the service's as they are at the time (made when it
        starts); ``calls``: the server's calls by Call-ID; ``recent_logs``: where each call's
        log is noted as its runner starts (the last RECENT_LOGS); ``connector`` places a call's
        ``connect`` far legs, ``transfers`` sends its ``transfer`` REFERs, ``rooms`` gives
        its ``connect_to_conference`` its way to the rooms; ``flush``
        sends what the agent wants sent."""
        self.services = services
        self.loop = loop
        self._agent = agent
        self._media = media
        self.address = address
        self.calls = calls
        self.connector = connector
        self.transfers = transfers
        self.rooms = rooms
        self._flush = flush
        self.recent_logs = recent_logs

    # --- a call's ways to the service -------------------------------------------------------

    def attach_far_legs(self, call: SipCall) -> None:
        """Let the call's ``connect`` place far legs, its ``transfer`` send REFERs and its
        ``connect_to_conference`` join rooms, through this service."""
        call.leg.far = CallFarLegs(self.connector, call)
        call.leg.referrer = CallReferrer(self.transfers, call)
        call.leg.conference = self.rooms(call)
        call.leg.transcripts = OutboxPoster(self.services, call.app.name)

    def detach_far_legs(self, call: SipCall) -> None:
        """The call is over: its far legs end, and its leg lets go of the service's
        helpers, which point back at the call (without them the call's objects go when
        the last reference does, not in one of the collector's full passes, which stop
        every call's audio for as long as they take)."""
        self.connector.drop_all_callees(call)
        if call.leg.conference is not None:
            call.leg.conference.leave()
        call.leg.far = call.leg.referrer = call.leg.conference = None

    # --- the run ----------------------------------------------------------------------------

    async def run(self, call: SipCall, sock: socket.socket) -> CallSummary:
        """Run ``call``'s application (or its script) on media port ``sock`` until it ends."""
        media = self._media()
        assert media is not None
        try:
            await media.open(call.media.session, sock, call.media.port, call.leg.wake)
            if call.script is not None:
                summary = await call.script(call.leg)
            else:

                def started(runner: CallRunner) -> None:
                    call.instance_id = runner.instance_id
                    self.recent_logs[call.call_id] = (call.app.name, runner.instance_id)
                    while len(self.recent_logs) > RECENT_LOGS:
                        self.recent_logs.popitem(last=False)

                summary = await self.services.run_call(
                    call.app,
                    call.leg,
                    started=started,
                    instance_id=call.instance_id,
                    token=call.token,
                    began=call.started,
                )
            return summary
        except Exception as exc:
            # A fault inside callhook (a bug): named in the log at once, and the caller
            # released (500 before the answer, BYE after) rather than left ringing.
            logger.exception("call %s: failed inside callhook (%r); ending it", call.call_id, exc)
            self._release(call.call_id)
            return CallSummary(call.instance_id or "", "failed", "500")
        finally:
            call.leg.finish()
            self.detach_far_legs(call)
            media.close(call.media.port)
            self.calls.pop(call.call_id, None)
            self._flush()

    async def answer(self, call_id: str) -> None:
        """Answer call ``call_id`` (200 OK with its SDP answer): its application needs it."""
        call, agent = self.calls.get(call_id), self._agent()
        if call is None or agent is None:
            return
        agent.answer(call_id, call.answer_sdp, self.loop.time())
        self._flush()

    def hang_up(self, call_id: str) -> str:
        """End call ``call_id`` from our side (its application's ``hang_up``); the raw
        cause of its end: ``603`` declined before the answer, ``200`` after."""
        agent = self._agent()
        assert agent is not None
        sip_call = agent.calls.get(call_id)
        raw = "603" if sip_call is not None and sip_call.state in ("offered", "early") else "200"
        agent.hang_up(call_id, self.loop.time())
        self._flush()
        return raw

    def dead(self, call_id: str) -> None:
        """The call's RTP stopped for ``rtp_timeout``: hang up, and tell the runner it dropped."""
        call, agent = self.calls.get(call_id), self._agent()
        if call is None or agent is None:
            return
        seconds = self.services.settings.sip.rtp_timeout
        logger.warning("call %s: no RTP for %g s (rtp_timeout): hanging up", call_id, seconds)
        agent.hang_up(call_id, self.loop.time())
        self._flush()
        call.leg.far_end_ended(CallEnded("dropped", "rtp_timeout"))

    def _release(self, call_id: str) -> None:
        agent = self._agent()
        if agent is None:
            return
        sip_call = agent.calls.get(call_id)
        if sip_call is not None and sip_call.state in ("offered", "early"):
            agent.reject(call_id, 500, self.loop.time(), "Server Internal Error")
        else:
            agent.hang_up(call_id, self.loop.time(), cause="failed")
        self._flush()

    # --- what the agent says of a call ------------------------------------------------------

    def event(self, call: SipCall, event: CallEvent) -> None:
        """What the SIP agent says of ``call`` (not of a far leg: the connector's)."""
        if isinstance(event, CallTerminated):
            if event.by_remote:
                call.leg.far_end_ended(CallEnded(event.cause, event.raw_cause))
            if call.answered is not None and not call.answered.done():
                call.answered.set_exception(Unanswered(event.cause, event.raw_cause))
        elif isinstance(event, Reoffer):
            self._reoffer(call, event.offer)
        elif isinstance(event, ReferResponse | ReferProgress):
            self.transfers.news(call, event)  # a transfer (telephony/referring.py)
        elif isinstance(event, InfoReceived):
            digit = parse_dtmf_relay(event.content_type, event.body)
            if digit is not None:
                call.media.session.inject_digit(digit)
                call.leg.wake()
        elif isinstance(event, CallAnswered):
            if call.answered is not None and not call.answered.done():
                call.answered.set_result(event.answer)
        elif isinstance(event, CallProgress):
            logger.info("call %s: %d", event.call_id, event.status)

    def _reoffer(self, call: SipCall, body: bytes) -> None:
        agent = self._agent()
        assert agent is not None
        now = self.loop.time()
        try:
            answer, on_hold = reoffer(call, body, self.address, now)
        except sdp.SdpError as exc:
            logger.warning("call %s: re-offer refused: %s", call.call_id, exc)
            agent.reject_reoffer(call.call_id, 488, now)
            self._flush()
            return
        logger.info("call %s: re-offer: %s", call.call_id, "on hold" if on_hold else "active")
        agent.answer_reoffer(call.call_id, answer, now)
        self._flush()
