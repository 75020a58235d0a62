"""An INVITE that arrives: the application it is for, the SDP answer, a media port and a
leg, then its run.

An incoming call is refused 503 when the server has ``[sip] max_calls`` calls already
(the web phone's calls count too: telephony/webphone.py refuses its own the same way),
or while its media runs behind (``[media] max_lag_ms``:
:class:`~callhook.edge.overload.Overload`); it is routed by its request-URI user (or the
number dialled, the To header's user) to an application, or, from one of ``[users]``
whose digest was right, to that user's ``app`` when it has one (404 when nothing
matches); its SDP offer is answered (488 when it is unusable, when no codec fits, or
when its SRTP does not match the trunk's policy); it gets an RTP port (503 when none is
free), a media session and a :class:`~callhook.telephony.leg.SipLeg`; it rings (180) and
the service's :class:`~callhook.telephony.lifecycle.Lifecycle` runs its application,
which answers it when it first needs to.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from callhook.calls.services import Services
from callhook.config.settings import AppConfig
from callhook.edge.mediaengine import MediaEngine
from callhook.ports import CallInfo
from callhook.sip import offeranswer, sdp
from callhook.sip.agent import Agent, IncomingCall
from callhook.sip.message import parse_uri
from callhook.sip.sdes import SrtpMode
from callhook.telephony.leg import new_leg
from callhook.telephony.lifecycle import Lifecycle
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.sipcall import CallMedia, SipCall, media_session
from callhook.telephony.trunking import Trunks

logger = logging.getLogger("callhook.sip")


class Inbound:
    """Taking the calls that arrive (see the module docstring)."""

    def __init__(
        self,
        *,
        services: Services,
        loop: asyncio.AbstractEventLoop,
        agent: Callable[[], Agent | None],
        media: Callable[[], MediaEngine | None],
        address: str,
        trunks: Trunks,
        prompts: PromptAudio,
        calls: dict[str, SipCall],
        lifecycle: Lifecycle,
        web_calls: Callable[[], int] = lambda: 0,
    ) -> None:
        """``agent`` and ``media``: the service's as they are at the time (made when it
        starts); ``calls``: the server's calls, where a new one goes; ``lifecycle`` runs it;
        ``web_calls``: how many web phone calls there are (``max_calls`` counts them)."""
        self.services = services
        self.loop = loop
        self._agent = agent
        self._media = media
        self.address = address
        self.trunks = trunks
        self.prompts = prompts
        self.calls = calls
        self.lifecycle = lifecycle
        self.web_calls = web_calls

    def incoming(self, event: IncomingCall) -> None:
        """The agent has a new INVITE: refuse it, or make it a call, ring and run it."""
        agent, media = self._agent(), self._media()
        assert agent is not None and media is not None
        now = self.loop.time()
        settings = self.services.settings
        limit = settings.sip.max_calls
        if limit and len(self.calls) + self.web_calls() >= limit:
            logger.warning("call %s refused: %d calls already (max_calls)", event.call_id, limit)
            agent.reject(event.call_id, 503, now, "Service Unavailable (too many calls)")
            return
        if media.overload.overloaded:
            # The calls already up keep their audio: the engine logged when this began
            # ([media] max_lag_ms); a front (serve --workers) tries another worker.
            media.overload.refused += 1
            agent.reject(event.call_id, 503, now, "Service Unavailable (media overloaded)")
            return
        trunk = self.trunks.of_source(event.source)
        if trunk is not None:
            logger.info("call %s: from trunk %s", event.call_id, trunk.name)
        # A trunk's own policy; any other caller may choose SRTP by offering it.
        srtp: SrtpMode = trunk.srtp if trunk is not None else "offer"
        app = self._application(event)
        if app is None:
            logger.warning("call %s to %r: no application for that user", event.call_id, event.user)
            agent.reject(event.call_id, 404, now, "Not Found (no application for this user)")
            return
        try:
            offer = sdp.parse(event.offer.decode("utf-8", "replace"))
        except sdp.SdpError as exc:
            logger.warning("call %s: unusable SDP offer: %s", event.call_id, exc)
            agent.reject(event.call_id, 488, now, f"Not Acceptable Here ({exc})")
            return
        try:
            sock, port = media.allocate()
        except OSError as exc:
            logger.error("call %s: %s", event.call_id, exc)
            agent.reject(event.call_id, 503, now, "Service Unavailable (no media port)")
            return
        session_id = random.randint(1, 2**31)
        try:
            answer, negotiated = offeranswer.answer(
                offer, self.address, port, session_id, 1, srtp=srtp
            )
        except sdp.SdpError as exc:  # NoCommonCodec, SrtpMismatch
            media.release(sock, port)
            logger.warning("call %s: %s", event.call_id, exc)
            why = "SRTP" if isinstance(exc, offeranswer.SrtpMismatch) else "no common codec"
            agent.reject(event.call_id, 488, now, f"Not Acceptable Here ({why})")
            return
        session = media_session(negotiated, event.call_id, settings.sip.rtp_timeout)
        info = CallInfo(
            call_id=event.call_id,
            direction="in",
            call_from=event.from_uri,
            call_to=event.to_uri,
            call_target=event.user,
            divert=event.divert,
            attestation=event.attestation,
            trunk=trunk.name if trunk is not None else "",
        )
        call_id = event.call_id
        lifecycle = self.lifecycle
        leg = new_leg(
            self.services,
            info,
            app.name,
            session,
            self.prompts,
            answer=lambda: lifecycle.answer(call_id),
            hang_up=lambda: lifecycle.hang_up(call_id),
            dead=lambda: lifecycle.dead(call_id),
        )
        call = SipCall(call_id, app, leg, CallMedia(session, port, session_id), answer.encode())
        call.srtp = "require" if negotiated.srtp else srtp  # no quiet downgrade on a re-offer
        lifecycle.attach_far_legs(call)
        self.calls[call_id] = call
        agent.ring(call_id, now)
        call.task = self.loop.create_task(lifecycle.run(call, sock))

    def _application(self, event: IncomingCall) -> AppConfig | None:
        """The application a call is for: its user's ``app`` (a digest-checked call from
        one of ``[users]``), else the one its request-URI user or dialled number routes to,
        else the default one."""
        settings = self.services.settings
        user = settings.users.get(event.caller_user) if event.caller_user else None
        if user is not None:
            logger.info("call %s: from user %s", event.call_id, user.name)
        if user is not None and user.app is not None:
            return settings.apps[user.app]
        return settings.app_for(event.user, _user_of(event.to_uri)) or self.services.default_app()


def _user_of(uri: str) -> str:
    """The user part of a SIP URI (the To header's: a dialled number), or ""."""
    try:
        return parse_uri(uri).user or ""
    except ValueError:
        return ""
