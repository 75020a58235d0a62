"""Outbound calls of the SIP service: ``callhook dial``, ``POST /api/calls``, the REST API's
``POST /api/v1/calls``, through a trunk or to a SIP URI.

:class:`Dialling` is the half of :class:`~callhook.telephony.service.SipService` that places
calls: the INVITE with an SDP offer (SRTP keys when the route asks for them), the wait
for an answer, then the same call runner as inbound calls. Every outbound call is first
put to the toll-fraud limits (``[outbound]``, :mod:`callhook.dialplan.outbound`): a destination
they do not allow, or one call too many for its application, is refused with the rule.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from callhook.calls.runner import CallSummary
from callhook.calls.services import Services
from callhook.cluster.outboundshare import OutboundShare
from callhook.config.settings import AppConfig
from callhook.dialplan.callerid import call_from_user
from callhook.dialplan.outbound import OutboundCalls, OutboundPolicy
from callhook.dialplan.trunks import RouteError
from callhook.edge.mediaengine import MediaEngine
from callhook.media.session import MediaSession
from callhook.media.srtp import offer_keys
from callhook.ports import CallInfo
from callhook.redact import redact
from callhook.sip import offeranswer, sdp
from callhook.sip.agent import (
    Agent,
    Credentials,
)
from callhook.sip.guard import Guard
from callhook.sip.sdes import SrtpMode
from callhook.telephony.leg import SipLeg, new_leg
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.sipcall import CallMedia, SipCall, Unanswered, media_session, nothing
from callhook.telephony.trunking import Route, Trunks

logger = logging.getLogger("callhook.sip")


class Dialling:
    """Placing calls (see the module docstring)."""

    # --- what the service provides (telephony/service.py) ---------------------------------------

    services: Services
    loop: asyncio.AbstractEventLoop
    agent: Agent | None
    media: MediaEngine | None
    prompts: PromptAudio
    address: str
    calls: dict[str, SipCall]
    trunks: Trunks
    guard: Guard
    outbound: OutboundPolicy
    _dials: set[asyncio.Task[CallSummary]]
    #: Outbound calls running (or about to) per application, for max_calls_per_app.
    outbound_calls: OutboundCalls
    #: The other workers or nodes told of this one's outbound calls (None: alone).
    outbound_share: OutboundShare | None
    #: When each (application, rule) refusal was last logged (once a minute).
    _refusals_logged: dict[tuple[str, int], float]

    def _flush(self) -> None:
        raise NotImplementedError

    async def _run(self, call: SipCall, sock: socket.socket) -> CallSummary:
        raise NotImplementedError

    def _hang_up(self, call_id: str) -> str:
        raise NotImplementedError

    def _dead(self, call_id: str) -> None:
        raise NotImplementedError

    def attach_far_legs(self, call: SipCall) -> None:
        raise NotImplementedError

    async def dial(
        self,
        target: str,
        app: AppConfig,
        *,
        credentials: Credentials | None = None,
        from_user: str = "callhook",
        ring_timeout: float = 60.0,
        placed: Callable[[str], object] | None = None,
        route: Route | None = None,
        script: Callable[[SipLeg], Awaitable[CallSummary]] | None = None,
        instance_id: str | None = None,
        outbound_parameters: str | None = None,
        token: str | None = None,
    ) -> CallSummary:
        """Call ``target`` (a SIP URI); when answered, run ``app`` on the call.

        ``route`` (from :meth:`Trunks.route`) sends it through a trunk: its request-URI,
        proxy, credentials and caller id replace ``target``, ``credentials`` and
        ``from_user``. ``placed`` is called with the call's id as soon as the INVITE is out.
        ``script`` runs on the answered call instead of ``app`` (``callhook test --sip``:
        the caller's side of a flow); ``app`` still names it and gets an unanswered call's
        final page. ``instance_id``, ``outbound_parameters``, ``token``: an outbound
        service's (Aculab's ``service_start``): its application instance's id, given out
        before the call is placed, what its ``this_call.outbound_parameters`` says, and
        the token its first page gets.
        """
        agent, media = self.agent, self.media
        assert agent is not None and media is not None
        srtp: SrtpMode = "off"
        if route is not None:
            target, credentials = route.uri, route.credentials
            from_user = route.from_user if from_user == "callhook" else from_user
            srtp = route.srtp
        keys = offer_keys() if srtp != "off" else ()
        sock, port = media.allocate()
        session_id = random.randint(1, 2**31)
        offer = offeranswer.offer(self.address, port, session_id, 1, srtp=srtp, crypto=keys)
        call_id = agent.invite(
            target,
            offer.encode(),
            self.loop.time(),
            from_user=from_user,
            credentials=credentials,
            address=route.address if route is not None else None,
            from_host=route.from_host if route is not None else None,
            fixed_transport=route is not None and route.trunk is not None,
        )
        self._flush()
        # Its answers and in-dialog requests come from the callee (or its proxy): admitted.
        peer = agent.calls[call_id].peer.host if call_id in agent.calls else ""
        self.guard.add_peer(peer)
        session = MediaSession("PCMU", 0, 101, None, label=f"call {call_id}")
        info = CallInfo(
            call_id,
            "out",
            f"sip:{from_user}@{self.address}",
            target,
            target,
            outbound_parameters=outbound_parameters,
        )
        leg = new_leg(
            self.services,
            info,
            app.name,
            session,
            self.prompts,
            answer=nothing,
            hang_up=lambda: self._hang_up(call_id),
            dead=lambda: self._dead(call_id),
        )
        call = SipCall(
            call_id,
            app,
            leg,
            CallMedia(session, port, session_id),
            srtp=srtp,
            script=script,
            instance_id=instance_id,
            token=token,
        )
        call.answered = self.loop.create_future()
        self.attach_far_legs(call)  # its application may connect it onwards
        self.calls[call_id] = call
        try:
            if placed is not None:
                placed(call_id)  # inside the try: whatever it raises, the call is cleaned up
            try:
                answer_sdp = await asyncio.wait_for(asyncio.shield(call.answered), ring_timeout)
                negotiated = offeranswer.negotiate_answer(
                    ("PCMU", "PCMA"),
                    sdp.parse(answer_sdp.decode("utf-8", "replace")),
                    srtp=srtp,
                    offered_crypto=keys,
                )
            except TimeoutError:
                agent.hang_up(call_id, self.loop.time(), cause="no_answer")
                self._flush()
                return await self.services.unanswered(
                    app, info, "no_answer", "487", instance_id, token
                )
            except Unanswered as exc:
                return await self.services.unanswered(
                    app, info, exc.cause, exc.raw, instance_id, token
                )
            except sdp.SdpError as exc:
                logger.warning("call %s: unusable SDP answer: %s", call_id, exc)
                agent.hang_up(call_id, self.loop.time(), cause="failed")
                self._flush()
                return await self.services.unanswered(
                    app, info, "failed", "488", instance_id, token
                )
            new = media_session(negotiated, call_id, self.services.settings.sip.rtp_timeout)
            if negotiated.srtp:
                call.srtp = "require"
            new.expect_rtp(self.loop.time())  # answered: the dead-call clock starts
            leg.session = new
            call.media.session = new
            leg.answered = True
            return await self._run(call, sock)
        finally:
            media.release(sock, port)  # no-op once the call's media ran (and closed it)
            self.calls.pop(call_id, None)
            leg.far = leg.referrer = None  # they point back at the call (see _run)
            self.guard.remove_peer(peer)

    def admit_outbound(self, to: str, app: AppConfig, trunk: str | None = None) -> None:
        """Put a call to ``to`` (through ``trunk``, if named) for ``app`` to ``[outbound]``
        (allow, max_calls_per_app); RouteError (403, 429) naming the rule if refused.
        Admitted, it counts towards the application's calls until :meth:`outbound_ended`."""
        why = self.outbound.refusal(to, trunk)
        status = 403
        if why is None:
            why = self.outbound.over_limit(app.name, self.outbound_calls.count(app.name))
            status = 429
        if why is not None:
            now = self.loop.time()
            key = (app.name, status)
            if now - self._refusals_logged.get(key, -60.0) >= 60.0:
                self._refusals_logged[key] = now
                logger.warning("outbound call for application %r: %s", app.name, why)
            raise RouteError(why, status)
        self.outbound_calls.add(app.name)

    async def outbound_told(self) -> None:
        """Done once the other workers or nodes know of the calls admitted here so far
        (the next request, to another of them, counts them)."""
        if self.outbound_share is not None:
            await self.outbound_share.told()

    def outbound_ended(self, app: AppConfig) -> None:
        """An admitted outbound call of ``app`` is over (or was never placed)."""
        self.outbound_calls.remove(app.name)

    def _start_dial(self, app: AppConfig, route: Route, **kwargs: Any) -> asyncio.Task[CallSummary]:
        """The background task of an admitted call; it releases the admission when done."""
        task = self.loop.create_task(self.dial(route.uri, app, route=route, **kwargs))
        self._dials.add(task)
        task.add_done_callback(self._dials.discard)
        task.add_done_callback(lambda _: self.outbound_ended(app))
        return task

    async def dial_api(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /api/calls``: ``{"to": "sip:..." | number, "trunk": name, "first_page": URL |
        "app": name, ...}``."""
        target = body.get("to")
        trunk = body.get("trunk")
        if not isinstance(target, str):
            return 400, {"error": "'to' must be a sip: URI, or a number with a 'trunk'"}
        if trunk is not None and not isinstance(trunk, str):
            return 400, {"error": "'trunk' must be the name of a trunk"}
        try:
            route = self.trunks.route(target, trunk)
        except RouteError as exc:
            return exc.status, {"error": str(exc)}
        settings = self.services.settings
        app: AppConfig | None
        if isinstance(body.get("app"), str):
            app = settings.apps.get(body["app"])
            if app is None:
                return 404, {"error": f"no application named {body['app']!r}"}
        elif isinstance(body.get("first_page"), str):
            app = AppConfig(
                name="api",
                first_page=body["first_page"],
                secret=str(body.get("secret") or self.services.secret),
                error_page=body.get("error_page"),
                final_page=body.get("final_page"),
                application_parameters=str(body.get("application_parameters", "")),
            )
            # Named with the installation secret: the operator's own application, whose
            # endpoints the egress policy lets its fetches reach.
            self.services.trust_app_hosts(app)
        else:
            app = settings.app_for("") or self.services.default_app()
            if app is None:
                return 400, {"error": "say which application: 'app' or 'first_page'"}
        try:
            self.admit_outbound(target, app, trunk)
        except RouteError as exc:
            return exc.status, {"error": str(exc)}
        self._start_dial(app, route)
        await self.outbound_told()
        answer = {"status": "calling", "to": route.uri, "application": redact(app.first_page)}
        if route.trunk is not None:
            answer["trunk"] = route.trunk
        return 202, answer

    async def place_call(
        self,
        target: str,
        app: AppConfig,
        ring_timeout: float = 60.0,
        trunk: str | None = None,
        *,
        from_user: str | None = None,
        instance_id: str | None = None,
        outbound_parameters: str | None = None,
        token: str | None = None,
    ) -> str:
        """Start calling ``target`` (a URI, or a number through ``trunk``) for ``app``; its
        call id. RouteError when it cannot be placed so.

        Returns once the INVITE is out; the call goes on in the background. ``from_user``
        (a caller id), ``instance_id``, ``outbound_parameters`` and ``token`` are an
        outbound service's (:meth:`dial`).
        """
        route = self.trunks.route(target, trunk)
        self.admit_outbound(target, app, trunk)
        placed: asyncio.Future[str] = self.loop.create_future()

        def report(call_id: str) -> None:
            if not placed.done():  # the caller may have given up waiting
                placed.set_result(call_id)

        task = self._start_dial(
            app,
            route,
            ring_timeout=ring_timeout,
            placed=report,
            from_user=call_from_user(from_user) or "callhook",
            instance_id=instance_id,
            outbound_parameters=outbound_parameters,
            token=token,
        )

        def failed_early(task: asyncio.Task[CallSummary]) -> None:
            if not placed.done():  # e.g. no RTP port free: the INVITE never went out
                exc = None if task.cancelled() else task.exception()
                placed.set_exception(exc or RuntimeError("the call ended before it was placed"))

        task.add_done_callback(failed_early)
        await self.outbound_told()
        return await placed
