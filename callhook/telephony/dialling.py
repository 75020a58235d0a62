"""Outbound calls of the SIP service: ``callhook dial``, ``POST /api/calls``, the REST API's
``POST /api/v1/calls``, through a trunk or to a SIP URI.

:class:`Dialler` is the part of :class:`~callhook.telephony.service.SipService` that places
calls: the INVITE with an SDP offer (SRTP keys when the route asks for them), the wait
for an answer, then the same call runner as inbound calls. Every outbound call is first
put to the toll-fraud limits (``[outbound]``, :mod:`callhook.telephony.admission`): a
destination they do not allow, or one call too many for its application, is refused with
the rule.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from callhook.actions.connectschema import classify_options
from callhook.calls.runner import CallSummary
from callhook.config.settings import AppConfig
from callhook.dialplan.callerid import call_from_user
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
from callhook.telephony.admission import OutboundAdmission
from callhook.telephony.leg import LegServices, SipLeg, new_leg
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.sipcall import CallMedia, SipCall, Unanswered, media_session, nothing
from callhook.telephony.trunking import Route, Trunks

logger = logging.getLogger("callhook.sip")


class DiallingServices(LegServices, Protocol):
    """What placing a call takes of the parts calls share
    (:class:`~callhook.calls.services.Services`)."""

    @property
    def secret(self) -> str: ...

    def trust_app_hosts(self, *apps: AppConfig) -> None: ...

    async def unanswered(
        self,
        app: AppConfig,
        info: CallInfo,
        cause: str,
        raw: str,
        instance_id: str | None = None,
        token: str | None = None,
        *,
        placed: float | None = None,
    ) -> CallSummary: ...


class Dialler:
    """Placing calls (see the module docstring).

    The SIP service lends it its call machinery: ``agent`` and ``media`` (None before it
    starts), its table of ``calls``, ``flush`` (send what the agent has to send), ``run``
    (an answered call's media and application), ``hang_up`` and ``dead`` (a call's end,
    from our side or for lack of RTP) and ``attach_far_legs`` (a call's ``connect`` and
    ``transfer``). ``apps`` names the applications ``POST /api/calls`` may name, and
    ``default_app`` the one it runs when it names none.
    """

    def __init__(
        self,
        *,
        agent: Callable[[], Agent | None],
        media: Callable[[], MediaEngine | None],
        calls: dict[str, SipCall],
        flush: Callable[[], None],
        run: Callable[[SipCall, socket.socket], Awaitable[CallSummary]],
        hang_up: Callable[[str], str],
        dead: Callable[[str], None],
        attach_far_legs: Callable[[SipCall], None],
        services: DiallingServices,
        prompts: PromptAudio,
        address: str,
        guard: Guard,
        trunks: Trunks,
        admission: OutboundAdmission,
        rtp_timeout: float,
        apps: Mapping[str, AppConfig],
        default_app: Callable[[], AppConfig | None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._agent = agent
        self._media = media
        self.calls = calls
        self._flush = flush
        self._run = run
        self._hang_up = hang_up
        self._dead = dead
        self._attach_far_legs = attach_far_legs
        self.services = services
        self.prompts = prompts
        self.address = address
        self.guard = guard
        self.trunks = trunks
        self.admission = admission
        self.rtp_timeout = rtp_timeout
        self.apps = apps
        self._default_app = default_app
        self.loop = loop
        #: The calls placed in the background (the REST API's, the web services').
        self._dials: set[asyncio.Task[CallSummary]] = set()

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
        agent, media = self._agent(), self._media()
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
        placed_at = time.time()  # (its call record's start, if it is never answered)
        try:
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
        except ValueError as exc:  # (no INVITE went out: the port goes back, or every
            # such request would take one for good)
            media.release(sock, port)
            raise RouteError(f"'to' cannot be called: {exc}") from None
        except BaseException:
            media.release(sock, port)
            raise
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
            trunk=route.trunk or "" if route is not None else "",
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
        self._attach_far_legs(call)  # its application may connect it onwards
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
                    app, info, "no_answer", "487", instance_id, token, placed=placed_at
                )
            except Unanswered as exc:
                return await self.services.unanswered(
                    app, info, exc.cause, exc.raw, instance_id, token, placed=placed_at
                )
            except sdp.SdpError as exc:
                logger.warning("call %s: unusable SDP answer: %s", call_id, exc)
                agent.hang_up(call_id, self.loop.time(), cause="failed")
                self._flush()
                return await self.services.unanswered(
                    app, info, "failed", "488", instance_id, token, placed=placed_at
                )
            new = media_session(negotiated, call_id, self.rtp_timeout)
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

    def _start_dial(self, app: AppConfig, route: Route, **kwargs: Any) -> asyncio.Task[CallSummary]:
        """The background task of an admitted call; it releases the admission when done."""
        task = self.loop.create_task(self.dial(route.uri, app, route=route, **kwargs))
        self._dials.add(task)
        task.add_done_callback(self._dials.discard)
        task.add_done_callback(lambda _: self.admission.ended(app))
        return task

    async def dial_api(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /api/calls``: ``{"to": "sip:..." | number, "trunk": name, "first_page": URL |
        "app": name, "classify_callee": true | {...}, ...}``."""
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
        app: AppConfig | None
        if isinstance(body.get("app"), str):
            app = self.apps.get(body["app"])
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
            app = self._default_app()
            if app is None:
                return 400, {"error": "say which application: 'app' or 'first_page'"}
        if "classify_callee" in body:
            try:
                classify = classify_options(body["classify_callee"])
            except ValueError as exc:
                return 400, {"error": str(exc)}
            app = dataclasses.replace(app, classify_callee=classify)
        try:
            self.admission.admit(target, app, trunk)
        except RouteError as exc:
            return exc.status, {"error": str(exc)}
        self._start_dial(app, route)
        await self.admission.told()
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
        self.admission.admit(target, app, trunk)
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
        await self.admission.told()
        return await placed
