"""Far legs of a ``connect`` that are no SIP call: a WebSocket server (``wss://``), another
application of this installation (``loc:``) and a web client (``webrtc:``). (A
conference room, ``con:``, is no far leg: its connect runs as ``connect_to_conference``,
actions/conference.py.)

:class:`AttachedLegs` places them for the
:class:`~callhook.telephony.connecting.Connector`, which ends and joins them as it does
its SIP far legs. Each is a media session of the tick with no socket
(:meth:`MediaEngine.attach <callhook.edge.mediaengine.MediaEngine.attach>`), answered when
its server's handshake is done (telephony/websocketleg.py), when the called application
answers (telephony/localcall.py) or when the web client's user does
(telephony/webclientleg.py); from then on it is joined, recorded and ended like a SIP
far leg.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import uuid
from collections.abc import Callable

from callhook.calls.runner import CallRunner
from callhook.calls.services import Services
from callhook.dialplan import destinations
from callhook.dialplan.outbound import OutboundCalls, OutboundPolicy
from callhook.edge.mediaengine import MediaEngine
from callhook.events import CalleeAnswered, CalleeEnded, CalleeRinging
from callhook.media.session import MediaSession
from callhook.ports import CallInfo
from callhook.telephony.farleg import FarLeg
from callhook.telephony.localcall import LocalCall
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.sipcall import CallMedia, SipCall
from callhook.telephony.trunking import Route
from callhook.telephony.webclientleg import WebClientLeg
from callhook.telephony.webclients import Busy, NotSignedIn, WebClients
from callhook.telephony.websocketleg import WebSocketLeg

logger = logging.getLogger("callhook.sip")


class AttachedLegs:
    """Placing the far legs that are no SIP call (see the module docstring)."""

    def __init__(
        self,
        *,
        services: Services,
        loop: asyncio.AbstractEventLoop,
        media: Callable[[], MediaEngine | None],
        prompts: PromptAudio,
        far_legs: dict[str, FarLeg],
        outbound: OutboundPolicy,
        outbound_calls: OutboundCalls,
        client_tls: ssl.SSLContext,
        calls: dict[str, SipCall],
        webclients: Callable[[], WebClients | None],
        ended: Callable[[FarLeg, str, str], None],
        wake: Callable[[FarLeg, MediaSession], None],
        limit: Callable[[FarLeg], None],
        attach_far_legs: Callable[[SipCall], None],
        detach_far_legs: Callable[[SipCall], None],
        web_calls: Callable[[], int] = lambda: 0,
    ) -> None:
        """``far_legs`` and ``calls``: the tables of far legs and of the server's calls
        (a ``loc:`` call is one of these; ``web_calls``: how many web phone calls there
        are besides, which ``max_calls`` counts too); ``ended``, ``wake`` and ``limit``: the
        connector's handling of a far leg's end, of its session's news and of its
        duration; ``attach_far_legs`` and ``detach_far_legs``: a ``loc:`` call's ways to
        the service (its own connect, its transfer), given and taken back as any call's
        are (telephony/lifecycle.py)."""
        self.services = services
        self.loop = loop
        self._media = media
        self.prompts = prompts
        self.far_legs = far_legs
        self.outbound = outbound
        self.web_calls = web_calls
        self.outbound_calls = outbound_calls
        self.client_tls = client_tls
        self.calls = calls
        self._webclients = webclients
        self._ended = ended
        self._far_wake = wake
        self._limit = limit
        self._attach_far_legs = attach_far_legs
        self._detach_far_legs = detach_far_legs
        self._ringing: set[asyncio.Task[None]] = set()  # web clients being rung

    # --- a WebSocket server -----------------------------------------------------------------

    def place_websocket(self, primary: SipCall, attempt: int, destination: str) -> None:
        """Call the WebSocket server ``destination`` (telephony/websocketleg.py). It is no
        telephone call (``[outbound] allow`` is for those), but it counts towards the
        application's ``max_calls_per_app`` and obeys the egress policy."""
        media = self._media()
        assert media is not None
        far = self._attached_far(primary, attempt, destination, "ws")
        if far is None:
            return
        call_id = far.call_id
        caller = primary.leg.info
        call = {
            "call_id": call_id,
            "primary_call_id": primary.call_id,
            "call_from": caller.call_from,
            "call_to": destination,
        }
        far.websocket = WebSocketLeg(
            destination,
            call,
            media,
            label=f"far leg {call_id}",
            egress=self.services.egress,
            ca=self.client_tls,
            answered=lambda session, key: self._attached_answered(far, session, key),
            ended=lambda cause, raw: self._ended(far, cause, raw),
            wake=lambda session: self._far_wake(far, session),
        )
        self.far_legs[call_id] = far
        logger.info("call %s: calling %s (far leg %s)", primary.call_id, destination, call_id)
        far.websocket.start()

    def _attached_far(
        self, primary: SipCall, attempt: int, destination: str, prefix: str
    ) -> FarLeg | None:
        """A far leg with no socket to ``destination``, counted towards the caller's
        application's ``max_calls_per_app`` (its end gives the count back: _ended); None,
        the attempt failed ``429`` and logged, when the application is at its limit."""
        app = primary.app
        why = self.outbound.over_limit(app.name, self.outbound_calls.count(app.name))
        if why is not None:
            logger.warning("call %s: cannot call %s: %s", primary.call_id, destination, why)
            primary.leg.inject(CalleeEnded(attempt, "failed", "429"))
            return None
        self.outbound_calls.add(app.name)
        call_id = f"{prefix}-{uuid.uuid4().hex}"
        route = Route(destination, None, None, "callhook", None)
        return FarLeg(primary, attempt, destination, call_id, None, 0, (), route, "")

    def _attached_answered(self, far: FarLeg, session: MediaSession, key: int) -> None:
        far.session, far.port = session, key
        if far.ended:
            return
        far.mark_answered()
        self._limit(far)
        far.info = {
            "call_id": far.call_id,
            "call_direction": "out",
            "call_to": far.destination,
            "call_state": "answered",
        }
        far.primary.leg.inject(CalleeAnswered(far.attempt, far.info))

    # --- another application, a web client, a conference ----------------------------------

    def place_elsewhere(
        self,
        primary: SipCall,
        attempt: int,
        target: destinations.Destination,
        call_from: str | None,
    ) -> None:
        """A destination that is no SIP call: another application of this installation
        (``loc:``), a web client (``webrtc:``)."""
        if target.kind == "local":
            self._place_local(primary, attempt, target.value, call_from)
            return
        if target.kind == "webrtc":
            self._place_webrtc(primary, attempt, target.value, call_from)
            return
        # (A room, con:, is joined by its own machine: a connect never places it.)
        logger.error("call %s: %s %r is no far leg", primary.call_id, target.kind, target.value)
        primary.leg.inject(CalleeEnded(attempt, "unobtainable", "404"))

    def _place_local(
        self, primary: SipCall, attempt: int, name: str, call_from: str | None
    ) -> None:
        """Call application ``name`` of this installation (telephony/localcall.py): no SIP,
        no packet; ``[outbound] allow`` is for the telephone network, but it counts
        towards the caller's application's ``max_calls_per_app``."""
        media = self._media()
        assert media is not None
        app = self.services.settings.apps.get(name)
        if app is None:
            logger.warning(
                "call %s: cannot call loc:%s: no such application", primary.call_id, name
            )
            primary.leg.inject(CalleeEnded(attempt, "unobtainable", "404"))
            return
        caller = primary.app
        why = self.outbound.over_limit(caller.name, self.outbound_calls.count(caller.name))
        limit = self.services.settings.sip.max_calls
        if why is None and limit and len(self.calls) + self.web_calls() >= limit:
            why = f"{limit} calls already (max_calls)"  # it is a call of this server too
        if why is not None:
            logger.warning("call %s: cannot call loc:%s: %s", primary.call_id, name, why)
            primary.leg.inject(CalleeEnded(attempt, "failed", "429"))
            return
        call_id = f"loc-{uuid.uuid4().hex}"
        destination = f"loc:{name}"
        route = Route(destination, None, None, "callhook", None)
        far = FarLeg(primary, attempt, destination, call_id, None, 0, (), route, "")
        info = CallInfo(
            call_id=call_id,
            direction="in",
            call_from=call_from or primary.leg.info.call_from,
            call_to=destination,
            call_target=name,
        )
        holder: list[SipCall] = []  # the called application's call, as the server's calls

        def started(runner: CallRunner) -> None:
            holder[0].instance_id = runner.instance_id

        def done() -> None:
            called = holder[0]
            self._detach_far_legs(called)
            self.calls.pop(called.call_id, None)

        far.local = local = LocalCall(
            call_id,
            app,
            info,
            self.services,
            media,
            self.prompts,
            answered=lambda session, key: self._attached_answered(far, session, key),
            ended=lambda cause, raw: self._ended(far, cause, raw),
            wake=lambda session: self._far_wake(far, session),
            started=started,
            done=done,
        )
        far.port = local.far_key
        # The called application's call is one of this server's calls: listed by the REST
        # API (and hung up through it), counted in max_calls, ended at shutdown; its own
        # connect places far legs of its own.
        called = SipCall(call_id, app, local.leg, CallMedia(local.near, local.near_key, 0))
        holder.append(called)
        self.calls[call_id] = called
        self._attach_far_legs(called)
        local.leg.referrer = None  # no SIP dialog to send a REFER in
        # Counted once it exists: its end (_ended) gives the count back.
        self.outbound_calls.add(caller.name)
        self.far_legs[call_id] = far
        logger.info("call %s: calling %s (far leg %s)", primary.call_id, destination, call_id)
        local.start()
        called.task = local.task  # (shutdown waits for it, as for any call)
        primary.leg.inject(CalleeRinging(attempt))

    def _place_webrtc(
        self, primary: SipCall, attempt: int, client_id: str, call_from: str | None
    ) -> None:
        """Ring the web client ``client_id`` of the caller's application, wherever it is
        signed in (telephony/webclients.py). It is no telephone call (``[outbound] allow``
        is for those), but it counts towards the application's ``max_calls_per_app``."""
        media, clients = self._media(), self._webclients()
        assert media is not None
        destination = f"webrtc:{client_id}"
        if clients is None:
            logger.warning("call %s: cannot call %s: no web server", primary.call_id, destination)
            primary.leg.inject(CalleeEnded(attempt, "unobtainable", "404"))
            return
        app = primary.app
        far = self._attached_far(primary, attempt, destination, "webrtc")
        if far is None:
            return
        call_id = far.call_id

        def ringing() -> None:
            if not far.ended:
                primary.leg.inject(CalleeRinging(attempt))

        far.webclient = leg = WebClientLeg(
            media,
            f"far leg {call_id}",
            ringing=ringing,
            answered=lambda session, key: self._attached_answered(far, session, key),
            ended=lambda cause, raw: self._ended(far, cause, raw),
            wake=lambda session: self._far_wake(far, session),
        )
        self.far_legs[call_id] = far
        incoming = {
            "call_from": call_from or primary.leg.info.call_from,
            "call_to": destination,
            "app": app.name,
        }

        async def ring() -> None:
            try:
                channel, where = await clients.ring(app.name, client_id, call_id, leg, incoming)
            except NotSignedIn:
                logger.warning(
                    "call %s: cannot call %s: no such client is signed in",
                    primary.call_id,
                    destination,
                )
                leg.failed("unobtainable", "404")
            except Busy:
                logger.info("call %s: %s is busy", primary.call_id, destination)
                leg.failed("busy", "486")
            except Exception:  # a bug: this attempt fails, the call goes on
                logger.exception("call %s: calling %s failed", primary.call_id, destination)
                leg.failed("failed", "500")
            else:
                logger.info(
                    "call %s: ringing %s (far leg %s, signed in %s)",
                    primary.call_id,
                    destination,
                    call_id,
                    where,
                )
                leg.rung(channel, local=where == "here")

        logger.info("call %s: calling %s (far leg %s)", primary.call_id, destination, call_id)
        task = self.loop.create_task(ring())
        self._ringing.add(task)  # (held: the loop keeps only weak references to tasks)
        task.add_done_callback(self._ringing.discard)
