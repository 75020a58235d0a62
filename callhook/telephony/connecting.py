"""The far legs of a ``connect``: calls the SIP service places for a call and joins to it.

callhook is a B2BUA for a bridged call: the caller's dialog and each far leg's
are separate SIP dialogs, and the media goes through callhook (the two media
sessions are joined in the one tick: :meth:`MediaSession.join
<callhook.media.session.MediaSession.join>`). The SIP service's :class:`Connector`
places the far legs (``CallCallee``), ends them (``DropCallee``: CANCEL while ringing, BYE once up),
joins one (``JoinCallee``) and tells the call's action what happens to each
(``CalleeRinging``, ``CalleeAnswered``, ``CalleeEnded``, injected into the
call's leg; each call's leg reaches it through its :class:`CallFarLegs`). A far leg
runs an application only for ``secondary_call`` pages (its
:class:`~callhook.telephony.screening.Screening`).

Destinations: a ``sip:``/``sips:`` URI is called directly; a number goes through
the first configured trunk (docs/behaviour.md). Every far leg is an outbound
call and obeys ``[outbound]`` (allow, max_calls_per_app) like any other. A
``wss://`` (``ws://``) URL is a call to a WebSocket server
(:mod:`callhook.telephony.websocketleg`): answered when its handshake is done,
counted towards ``max_calls_per_app``, and held to the egress policy rather
than ``allow`` (it reaches no telephone network); ``loc:NAME`` is another application
of this installation (:mod:`callhook.telephony.localcall`). Those, and ``webrtc:``, are
placed by its :class:`~callhook.telephony.attachedlegs.AttachedLegs`.

``user:NAME`` calls every phone NAME has registered (``callhook/sip/registrar.py``)
at once, a fork (:class:`Fork`): the action still sees one attempt. It rings when
the first phone rings; the first phone to answer is the attempt's answer, and
the others get CANCEL (or BYE, if they answered too late); it ends when that
phone hangs up or, unanswered, when every phone has failed, with the most
telling of their causes (busy, no answer, unobtainable, failed: the action's own
order). These are the installation's own phones: ``[outbound] allow`` does not
apply, ``max_calls_per_app`` does (each phone is a call). A user that does not
exist fails ``unobtainable`` (404), one with no phone registered ``unobtainable``
(480).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Callable
from dataclasses import replace

from callhook.calls.services import Services
from callhook.dialplan import destinations
from callhook.dialplan.callerid import call_from_user
from callhook.dialplan.outbound import OutboundCalls, OutboundPolicy
from callhook.dialplan.trunks import RouteError
from callhook.edge.mediaengine import MediaEngine
from callhook.events import (
    CalleeAnswered,
    CalleeEnded,
    CalleeRinging,
    CallEnded,
    ClassifyOptions,
    FarEndClassified,
    GreetingEnded,
    MediaEvent,
    SecondaryPages,
)
from callhook.media.session import MediaSession
from callhook.media.srtp import offer_keys
from callhook.sip import offeranswer, sdp
from callhook.sip.agent import Agent, CallAnswered, CallEvent, CallProgress, CallTerminated
from callhook.sip.guard import Guard
from callhook.sip.registrar import Binding
from callhook.telephony.admission import OutboundAdmission
from callhook.telephony.attachedlegs import AttachedLegs
from callhook.telephony.farleg import FarLeg, Fork
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.screening import Screening
from callhook.telephony.sipcall import SipCall, media_session
from callhook.telephony.trunking import Route, Trunks
from callhook.telephony.users import Users
from callhook.telephony.webclients import WebClients

logger = logging.getLogger("callhook.sip")


class Connector:
    """Placing, ending and joining far legs (see the module docstring)."""

    def __init__(
        self,
        *,
        services: Services,
        loop: asyncio.AbstractEventLoop,
        agent: Callable[[], Agent | None],
        media: Callable[[], MediaEngine | None],
        address: str,
        trunks: Trunks,
        guard: Guard,
        users: Users,
        outbound: OutboundPolicy,
        outbound_calls: OutboundCalls,
        admission: OutboundAdmission,
        client_tls: ssl.SSLContext,
        prompts: PromptAudio,
        calls: dict[str, SipCall],
        far_legs: dict[str, FarLeg],
        webclients: Callable[[], WebClients | None],
        flush: Callable[[], None],
        attach_far_legs: Callable[[SipCall], None],
        detach_far_legs: Callable[[SipCall], None],
        web_calls: Callable[[], int] = lambda: 0,
    ) -> None:
        """``agent``, ``media`` and ``webclients``: the service's as they are at the time
        (the agent and the media engine are made when it starts, the web clients set by
        serve once it is built); ``calls``: the server's calls; ``far_legs``: the far legs
        by their SIP call id, which the service reads to send the agent's events for them
        here (:meth:`far_event`); ``flush``: sends what the agent wants sent;
        ``attach_far_legs`` and ``detach_far_legs``: give a new call (a ``loc:`` callee)
        its ways to the service, and take them back when it ends; ``web_calls``: how many
        web phone calls there are (``max_calls`` counts them with ``calls``)."""
        self.services = services
        self.loop = loop
        self._agent = agent
        self._media = media
        self.address = address
        self.trunks = trunks
        self.guard = guard
        #: The registrar of ``[users]`` and its phones' bindings.
        self.users = users
        self.outbound = outbound
        self.outbound_calls = outbound_calls
        #: ``[outbound]`` put to every far leg placed (telephony/admission.py).
        self.admission = admission
        self.calls = calls
        self.far_legs = far_legs
        self._flush = flush
        #: (call, attempt) of the connects to a user whose phones are being read (a worker
        #: following the stored bindings): placed when the read is in, unless dropped.
        self._reading_phones: set[tuple[str, int]] = set()
        self._reads: set[asyncio.Task[None]] = set()
        #: Far legs' ``secondary_call`` pages, and their duration limit.
        self.screening = Screening(
            services=services,
            loop=loop,
            prompts=prompts,
            address=address,
            far_legs=far_legs,
            hang_up_far=self._hang_up_far,
        )
        #: The far legs that are no SIP call: ``wss://``, ``loc:``, ``webrtc:``.
        self.attached = AttachedLegs(
            services=services,
            loop=loop,
            media=media,
            prompts=prompts,
            far_legs=far_legs,
            outbound=outbound,
            outbound_calls=outbound_calls,
            client_tls=client_tls,
            calls=calls,
            webclients=webclients,
            ended=self._ended,
            wake=self._far_wake,
            limit=self.screening.limit_far,
            attach_far_legs=attach_far_legs,
            detach_far_legs=detach_far_legs,
            web_calls=web_calls,
        )

    # --- what a call's leg asks (telephony/leg.py's FarLegs) -------------------------------

    def place_callee(
        self, primary: SipCall, attempt: int, destination: str, call_from: str | None
    ) -> None:
        """Call ``destination`` as far leg ``attempt`` of ``primary``'s connect."""
        try:
            target = destinations.parse(destination)
        except destinations.BadDestination as exc:  # (validation refuses these first)
            logger.warning("call %s: cannot call %s", primary.call_id, exc)
            primary.leg.inject(CalleeEnded(attempt, "unobtainable", "400"))
            return
        if target.kind == "user":
            self._place_user(primary, attempt, destination, call_from)
            return
        if target.kind == "websocket":
            self.attached.place_websocket(primary, attempt, target.value)
            return
        if target.kind in ("local", "webrtc", "conference"):
            self.attached.place_elsewhere(primary, attempt, target, call_from)
            return
        try:
            route, trunk = self._route(target.value)
            self.admission.admit(target.value, primary.app, trunk)
        except RouteError as exc:
            logger.warning("call %s: cannot call %s: %s", primary.call_id, destination, exc)
            cause = "unobtainable" if exc.status in (400, 404) else "failed"
            primary.leg.inject(CalleeEnded(attempt, cause, str(exc.status)))
            return
        failure = self._start_far(primary, attempt, destination, route, trunk, call_from)
        if failure is not None:
            primary.leg.inject(CalleeEnded(attempt, *failure))

    def _place_user(
        self, primary: SipCall, attempt: int, destination: str, call_from: str | None
    ) -> None:
        """Call every phone ``user:NAME`` has registered at once (a :class:`Fork`); on a
        worker that follows worker 0's bindings, as they are stored now (a phone that
        registered a moment ago included)."""
        if not self.users.follows_bindings():
            self._place_phones(primary, attempt, destination, call_from)
            return
        key = (primary.call_id, attempt)
        self._reading_phones.add(key)

        async def read_then_place() -> None:
            await self.users.read_bindings()
            wanted = key in self._reading_phones
            self._reading_phones.discard(key)
            if not wanted or self.calls.get(primary.call_id) is not primary:
                return  # the call ended, or gave up this attempt, while the read ran
            try:
                self._place_phones(primary, attempt, destination, call_from)
            except Exception:  # a bug: this attempt fails, the call goes on
                logger.exception("call %s: calling %s failed", primary.call_id, destination)
                primary.leg.inject(CalleeEnded(attempt, "failed", "500"))
            self._flush()

        task = self.loop.create_task(read_then_place())
        self._reads.add(task)  # (held: the loop keeps only weak references to tasks)
        task.add_done_callback(self._reads.discard)

    def _place_phones(
        self, primary: SipCall, attempt: int, destination: str, call_from: str | None
    ) -> None:
        name = destination.strip()[len("user:") :]
        registrar, leg = self.users.registrar, primary.leg
        if registrar is None or not registrar.knows(name):
            logger.warning("call %s: cannot call %s: no such user", primary.call_id, destination)
            leg.inject(CalleeEnded(attempt, "unobtainable", "404"))
            return
        phones = registrar.bindings(name, self.loop.time())
        if not phones:
            logger.info("call %s: %s has no phone registered", primary.call_id, destination)
            leg.inject(CalleeEnded(attempt, "unobtainable", "480"))
            return
        fork = Fork()
        for phone in phones:
            why = self.outbound.over_limit(
                primary.app.name, self.outbound_calls.count(primary.app.name)
            )
            if why is not None:
                logger.warning("call %s: cannot call %s: %s", primary.call_id, phone.contact, why)
                fork.causes.append(("failed", "429"))
                continue
            self.outbound_calls.add(primary.app.name)
            route = _phone_route(phone)
            to = f"sip:{name}@{self.address}"  # the address of record; the Contact is the URI
            failure = self._start_far(
                primary, attempt, destination, route, None, call_from, fork, to
            )
            if failure is not None:
                fork.causes.append(failure)
        fork.placing = False
        if all(device.ended for device in fork.devices) and fork.winner is None:
            leg.inject(CalleeEnded(attempt, *fork.most_telling()))

    def _start_far(
        self,
        primary: SipCall,
        attempt: int,
        destination: str,
        route: Route,
        trunk: str | None,
        call_from: str | None,
        fork: Fork | None = None,
        to: str | None = None,
    ) -> tuple[str, str] | None:
        """INVITE one far leg (admitted already); its cause and raw cause if it could not."""
        agent, media = self._agent(), self._media()
        assert agent is not None and media is not None
        try:
            sock, port = media.allocate()
        except OSError as exc:
            logger.error("call %s: cannot call %s: %s", primary.call_id, destination, exc)
            self.admission.ended(primary.app)
            return ("failed", "503")
        keys = offer_keys() if route.srtp != "off" else ()
        offer = offeranswer.offer(
            self.address, port, random.randint(1, 2**31), 1, srtp=route.srtp, crypto=keys
        )
        # Aculab: without call_from, the caller's identity is presented; through a trunk
        # the trunk's own caller id (a provider refuses numbers that are not the account's).
        caller = call_from_user(primary.leg.info.call_from) if trunk is None else None
        from_user = call_from_user(call_from) or caller or route.from_user
        try:
            call_id = agent.invite(
                route.uri,
                offer.encode(),
                self.loop.time(),
                from_user=from_user,
                credentials=route.credentials,
                address=route.address,
                from_host=route.from_host,
                fixed_transport=route.trunk is not None,
                to=to,
                pinned=route.pinned,
            )
        except ValueError as exc:  # a destination the agent cannot send to
            logger.warning("call %s: cannot call %s: %s", primary.call_id, destination, exc)
            media.release(sock, port)
            self.admission.ended(primary.app)
            return ("unobtainable", "")
        peer = agent.calls[call_id].peer.host if call_id in agent.calls else ""
        self.guard.add_peer(peer)
        far = FarLeg(primary, attempt, destination, call_id, sock, port, keys, route, peer)
        far.from_user = from_user
        self.far_legs[call_id] = far
        if fork is not None:
            far.fork = fork
            fork.devices.append(far)
        logger.info(
            "call %s: calling %s (far leg %s%s)",
            primary.call_id,
            route.uri,
            call_id,
            f", a phone of {destination}" if fork is not None else "",
        )
        self._flush()
        return None

    def drop_callee(self, primary: SipCall, attempt: int) -> None:
        """End far leg ``attempt`` of ``primary``: CANCEL while it rings, BYE once up."""
        self._reading_phones.discard((primary.call_id, attempt))  # not placed: never will be
        for far in list(self.far_legs.values()):
            if far.primary is primary and far.attempt == attempt and not far.ended:
                if far.fork is not None:
                    far.fork.dropped = True  # a phone answering after this is hung up
                far.dropped = True
                self._hang_up_far(far)

    def join_callee(self, primary: SipCall, attempt: int, early: bool) -> None:
        """Bridge ``primary``'s media with far leg ``attempt``'s (``early``: one way)."""
        far = self._winner(primary, attempt)
        if far is None or far.session is None:
            return
        if early:
            primary.media.session.listen_to(far.session)
        else:
            primary.media.session.join(far.session)

    def classify_callee(
        self, primary: SipCall, attempt: int, options: ClassifyOptions | None
    ) -> None:
        """Classify far leg ``attempt``'s far end from its audio (None: stop); what is
        decided is told to ``primary``'s action (:meth:`_far_wake`). One that is not a
        telephone call (``wss:``, ``loc:``, ``webrtc:``) is ``unknown``, at once."""
        far = self._winner(primary, attempt)
        if far is None:
            return  # (ended meanwhile: the action hears that)
        session = far.session
        if options is None:
            if session is not None:
                session.stop_classifying()
        elif session is None or far.websocket or far.local or far.webclient:
            primary.leg.inject(FarEndClassified("unknown", "not_classified", 0.0, attempt))
        else:
            session.classify(options)

    def _winner(self, primary: SipCall, attempt: int) -> FarLeg | None:
        """Far leg ``attempt`` of ``primary``, not ended (of a user's phones, the winner)."""
        for far in self.far_legs.values():
            ours = far.primary is primary and far.attempt == attempt and not far.ended
            if ours and (far.fork is None or far.fork.winner is far):
                return far
        return None

    def drop_all_callees(self, primary: SipCall) -> None:
        """``primary`` is over: every far leg of it ends."""
        self._reading_phones = {k for k in self._reading_phones if k[0] != primary.call_id}
        for far in list(self.far_legs.values()):
            if far.primary is primary and not far.ended:
                self._hang_up_far(far)

    # --- the agent's events for far legs (the SIP service's dispatch) ---------------------

    def far_event(self, far: FarLeg, event: CallEvent) -> None:
        """What the SIP agent says of far leg ``far``."""
        leg = far.primary.leg
        fork = far.fork
        if isinstance(event, CallProgress) and event.status in (180, 183) and fork is not None:
            # A user's phones: the first to ring makes the destination ring. Their early
            # media is not passed (which of them would the caller hear?).
            logger.info("far leg %s (%s): %d", far.call_id, far.destination, event.status)
            if not fork.rang and fork.winner is None:
                fork.rang = True
                leg.inject(CalleeRinging(far.attempt))
        elif isinstance(event, CallProgress) and event.status in (180, 183):
            early = bool(event.sdp) and far.session is None and self._media_for(far, event.sdp)
            if not early:
                leg.inject(CalleeRinging(far.attempt))
        elif isinstance(event, CallAnswered) and fork is not None:
            if fork.winner is not None or fork.dropped:
                logger.info("far leg %s answered too late: hanging up", far.call_id)
                far.mark_answered()
                self._hang_up_far(far)  # BYE
                return
            fork.winner = far
            logger.info("far leg %s answered %s first", far.call_id, far.destination)
            for other in fork.devices:
                if other is not far and not other.ended:
                    other.dropped = True
                    self._hang_up_far(other)  # CANCEL (BYE if it answered meanwhile)
            self._answered(far, event.answer)
        elif isinstance(event, CallAnswered):
            self._answered(far, event.answer)
        elif isinstance(event, CallTerminated):
            self._ended(far, event.cause, event.raw_cause)

    def _answered(self, far: FarLeg, answer_sdp: bytes) -> None:
        far.mark_answered()
        self.screening.limit_far(far)  # secondary_call's own limit replaces it (RunCallee)
        far.info = {
            "call_id": far.call_id,
            "call_direction": "out",
            "call_to": far.route.uri,
            "call_state": "answered",
        }
        answered = CalleeAnswered(far.attempt, far.info)
        if far.session is not None:  # its early media's session goes on (RFC 3960)
            far.primary.leg.inject(answered)
            return
        self._media_for(far, answer_sdp, then=answered)

    def _media_for(self, far: FarLeg, description: bytes, then: MediaEvent | None = None) -> bool:
        """Make far leg ``far``'s media session from its SDP (an answer, or early media's);
        when it takes part in the tick, tell the call ``then`` (else: that it rings with
        early media). False when the SDP is unusable (then the far leg is ended)."""
        media = self._media()
        assert media is not None
        try:
            negotiated = offeranswer.negotiate_answer(
                ("PCMU", "PCMA"),
                sdp.parse(description.decode("utf-8", "replace")),
                srtp=far.route.srtp,
                offered_crypto=far.keys,
            )
        except sdp.SdpError as exc:
            logger.warning("far leg %s: unusable SDP: %s", far.call_id, exc)
            self._hang_up_far(far, cause="failed")
            return False
        session = media_session(negotiated, far.call_id, self.services.settings.sip.rtp_timeout)
        session.expect_rtp(self.loop.time())
        far.session = session

        def wake() -> None:
            self._far_wake(far, session)

        event = then if then is not None else CalleeRinging(far.attempt, early_media=True)
        assert far.sock is not None
        task = self.loop.create_task(media.open(session, far.sock, far.port, wake))
        task.add_done_callback(lambda _: far.primary.leg.inject(event))
        return True

    def _far_wake(self, far: FarLeg, session: MediaSession) -> None:
        """The far leg's session has news (the media tick)."""
        if far.leg is not None:  # its secondary_call pages run on it
            far.leg.wake()
            return
        # Nobody runs an application on this far leg: what its session noted is
        # dropped (its digits were relayed across the bridge already), but who answered
        # goes to the call's connect; a dead one ends.
        for event in session.events:
            if isinstance(event, FarEndClassified | GreetingEnded):
                far.primary.leg.inject(replace(event, attempt=far.attempt))
        session.events.clear()
        session.utterances.clear()
        if session.timed_out and not far.ended:
            self._hang_up_far(far, cause="failed")

    def _hang_up_far(self, far: FarLeg, cause: str | None = None) -> None:
        if cause is None:
            cause = "completed" if far.answered else "no_answer"
        if far.websocket is not None:
            far.websocket.hang_up(cause)  # it reports its end (_ended) when it is over
            return
        if far.local is not None:
            far.local.hang_up(cause)  # (it reports its end at once)
            return
        if far.webclient is not None:
            far.webclient.hang_up(cause)  # (it reports its end at once)
            return
        agent = self._agent()
        assert agent is not None
        agent.hang_up(far.call_id, self.loop.time(), cause=cause)
        self._flush()
        if far.call_id in self.far_legs and not agent.calls.get(far.call_id):
            self._ended(far, cause, "")  # the agent had nothing left to end

    def _ended(self, far: FarLeg, cause: str, raw_cause: str) -> None:
        if far.ended:
            return
        far.ended = True
        worker = self.services.settings.workers.index
        self.services.records.add(far.record(cause, raw_cause, self.address, worker))
        self.far_legs.pop(far.call_id, None)
        if far.limit is not None:
            far.limit.cancel()
        if far.leg is not None:  # its pages' runner: the final page is due
            far.leg.far_end_ended(CallEnded(cause, raw_cause))
        if far.dropped:
            far.primary.dropped_calls.append(
                {
                    "call_id": far.call_id,
                    "call_direction": "out",
                    "call_from": f"sip:{far.from_user}@{self.address}",
                    "call_to": far.route.uri,
                    "call_target": far.destination,
                    "call_divert": "",
                    "call_state": "idle",
                    "call_cause": "dropped",  # Aculab: dropped during the connect action
                    "call_raw_cause": raw_cause,
                }
            )
        media = self._media()
        assert media is not None
        dropped = ""
        if far.session is not None:
            caller = far.primary.media.session
            to_far, to_caller = _dropped(caller, far.session), _dropped(far.session, caller)
            if to_far or to_caller:
                dropped = (
                    f"; the bridge dropped {to_far} ms of the caller's audio"
                    f" and {to_caller} ms of the far end's"
                )
            caller.part(far.session)
            media.close(far.port)
        elif far.sock is not None:
            media.release(far.sock, far.port)
        if far.peer:
            self.guard.remove_peer(far.peer)
        self.admission.ended(far.primary.app)
        logger.info("far leg %s ended: %s (%s)%s", far.call_id, cause, raw_cause, dropped)
        fork = far.fork
        if fork is None or far is fork.winner:
            far.primary.leg.inject(CalleeEnded(far.attempt, cause, raw_cause))
            return
        if fork.winner is not None:
            return  # a phone that lost to the one that answered: the destination goes on
        fork.causes.append((cause, raw_cause))
        if not fork.placing and all(device.ended for device in fork.devices):
            # Every phone failed: the destination failed, as the most telling of them.
            far.primary.leg.inject(CalleeEnded(far.attempt, *fork.most_telling()))

    # --- inside -----------------------------------------------------------------------------

    def _route(self, destination: str) -> tuple[Route, str | None]:
        """How a far leg to ``destination`` goes: a URI directly, a number through the
        first configured trunk (RouteError when there is none)."""
        text = destination.strip()
        if text.lower().startswith(("sip:", "sips:")):
            return self.trunks.route(text, None), None
        names = list(self.trunks.config)
        if not names:
            raise RouteError(f"{text} is a number and no trunk is configured", 404)
        return self.trunks.route(text, names[0]), names[0]


def _phone_route(phone: Binding) -> Route:
    """How a far leg to a registered phone goes: to its Contact, sent where the registrar
    says it is reached (its connection, its Contact, or its NAT's address)."""
    return Route(
        uri=phone.contact,
        address=phone.target,
        credentials=None,
        from_user="callhook",
        from_host=None,
        pinned=True,  # ACK, BYE, re-INVITEs go where the INVITE went, not to its Contact
    )


class CallFarLegs:
    """One call's :class:`~callhook.telephony.leg.FarLegs`: its leg's way to the service."""

    def __init__(self, connector: Connector, call: SipCall) -> None:
        self.connector = connector
        self.call = call

    def place(self, attempt: int, destination: str, call_from: str | None) -> None:
        self.connector.place_callee(self.call, attempt, destination, call_from)

    def drop(self, attempt: int) -> None:
        self.connector.drop_callee(self.call, attempt)

    def join(self, attempt: int, early: bool) -> None:
        self.connector.join_callee(self.call, attempt, early)

    def run(self, attempt: int, pages: SecondaryPages) -> None:
        self.connector.screening.run_callee(self.call, attempt, pages)

    def classify(self, attempt: int, options: ClassifyOptions | None) -> None:
        self.connector.classify_callee(self.call, attempt, options)


def _dropped(talker: MediaSession, listener: MediaSession) -> int:
    """Milliseconds of ``talker``'s audio that the bridge to ``listener`` left out
    (media/bridge.py: beyond its bound, or trimmed from a backlog)."""
    feed = listener.hears
    if feed is None or talker.tells is not feed:
        return 0
    return feed.dropped // 8
