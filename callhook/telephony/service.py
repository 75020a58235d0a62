"""The SIP side of ``callhook serve``: the user agent on UDP, TCP and TLS, calls to applications.

:class:`SipService` owns the sans-IO :class:`~callhook.sip.agent.Agent`: it
feeds it datagrams and the messages framed off TCP and TLS connections
(:mod:`callhook.telephony.sipstreams`), keeps one loop timer on the agent's
``deadline`` (as aioquic's protocol does), sends what the agent wants sent,
each on its transport, and hands the agent's call events to the part they are for.

Each part is built here and handed what it uses: the service's tables of calls and far
legs, its agent and media engine as they are at the time, its ``_flush``, and (to the
dialler and the connector, built before it) the lifecycle's methods as they will be;
none holds the service itself.

- An incoming call is taken by its :class:`~callhook.telephony.inbound.Inbound` (the
  application, the SDP answer, the media port and the leg), then run, answered, hung
  up and ended by its :class:`~callhook.telephony.lifecycle.Lifecycle`, which also hears
  what the agent says of a running call.
- Outbound calls are its :class:`~callhook.telephony.dialling.Dialler`'s, after
  :mod:`callhook.telephony.admission` admits them.
- A ``connect``'s far legs are its :class:`~callhook.telephony.connecting.Connector`'s,
  and a ``transfer`` its :class:`~callhook.telephony.referring.Transfers`'.
- What the HTTP API sees of it and asks of it (calls, counters, bans, trunks) is its
  :class:`~callhook.telephony.control.Control`.
- With ``[users]`` it is also the registrar of those users' phones (its
  :class:`~callhook.telephony.users.Users`).

Shutdown is graceful: new calls get 503 (and OPTIONS too, so a load balancer
stops sending), running calls may finish until a deadline, then they are
ended (their actions are aborted: a recording reports ``aborted``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from callhook.calls.services import Services
from callhook.cluster.outboundshare import OutboundShare
from callhook.cluster.sharedbans import SharedBans
from callhook.config.settings import AppConfig
from callhook.config.tls import client_context
from callhook.dialplan.outbound import OutboundCalls, OutboundPolicy
from callhook.edge.connections import Connections, ListenError
from callhook.edge.localaddress import local_address
from callhook.edge.mediaengine import MediaEngine
from callhook.edge.speechworkers import SpeechService
from callhook.monitoring import prometheus
from callhook.sip.agent import Agent, CallEvent, IncomingCall
from callhook.sip.guard import Guard, networks
from callhook.sip.transport import Target, Transport
from callhook.telephony.admission import OutboundAdmission
from callhook.telephony.conferences import CallConference, Conferences
from callhook.telephony.connecting import Connector
from callhook.telephony.control import Control
from callhook.telephony.dialling import Dialler
from callhook.telephony.farleg import FarLeg
from callhook.telephony.inbound import Inbound
from callhook.telephony.leg import ConferencePort
from callhook.telephony.lifecycle import Lifecycle
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.referring import Transfers
from callhook.telephony.roomlinks import RoomLinks
from callhook.telephony.roomrecording import RoomRecorder
from callhook.telephony.sampling import Sampler
from callhook.telephony.sipcall import SipCall
from callhook.telephony.sipstreams import SipStreams
from callhook.telephony.trunking import Trunks
from callhook.telephony.users import Users
from callhook.telephony.webclients import WebClients
from callhook.telephony.webphone import WebPhone

logger = logging.getLogger("callhook.sip")


class _SipProtocol(asyncio.DatagramProtocol):
    def __init__(self, service: SipService) -> None:
        self.service = service

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.service.datagram_received(data, (addr[0], addr[1]))

    def error_received(self, exc: Exception) -> None:
        logger.debug("SIP socket: %s", exc)


class SipService:
    """callhook's SIP endpoint on one UDP port, with the calls it runs."""

    def __init__(
        self,
        services: Services,
        host: str = "127.0.0.1",
        port: int = 5060,
        *,
        rtp_ports: tuple[int, int] = (20000, 29999),
    ) -> None:
        self.services = services
        self.host = host
        self.port = port
        self.requested_port = port
        self.rtp_ports = rtp_ports
        self.loop = asyncio.get_running_loop()
        # The address this machine has, and the one callhook advertises in Contact, Via
        # and SDP: behind NAT, [sip] external_address (the public one, forwarded here).
        self.local = local_address(host)
        self.address = services.settings.sip.external_address or self.local
        self.agent: Agent | None = None
        self.transport: asyncio.DatagramTransport | None = None
        #: SIP over TCP and TLS, and its connections (once started).
        self.streams: SipStreams | None = None
        self.connections: Connections | None = None
        #: The /metrics families of the guard, the agent, the trunks... (once started).
        self.sampler: Sampler | None = None
        self.ports: dict[Transport, int] = {}
        self.trunks = Trunks(services.settings.trunks, lambda: self.agent)
        settings = services.settings
        #: The TLS context of connections callhook opens: SIP over TLS, wss:// far legs.
        self.client_tls = client_context(settings.sip.tls_ca)
        self.guard = Guard(
            networks(settings.security.allow),
            unknown="reject" if settings.security.unknown == "reject" else "drop",
            rate=settings.security.rate,
            ban_seconds=settings.security.ban_seconds,
        )
        self._proxies = networks(settings.sip.proxies)
        self.guard.extra = self._proxies
        self.media: MediaEngine | None = None
        #: The web phone (its calls share this service's media engine and prompts).
        self.phone: WebPhone | None = None
        #: The web clients signed in to receive calls (``webrtc:`` destinations).
        self.webclients: WebClients | None = None
        #: Faults of the rooms' mixing in the media tick (a bug: see _mix).
        self.mixing_faults = 0
        #: Rooms held by other workers, and their callers in this one's (set by serve
        #: where there are other workers; None: every room is this process's).
        self.room_links: RoomLinks | None = None
        self.shared_bans: SharedBans | None = None
        self.outbound_share: OutboundShare | None = None
        self.prompts = PromptAudio(
            services.store,
            services.speech.synthesiser,
            remote=services.remote_media,
            voices={a.name: a.voice for a in services.settings.apps.values() if a.voice},
        )
        #: The server's calls by Call-ID, and the far legs of their connects by theirs.
        self.calls: dict[str, SipCall] = {}
        self.far_legs: dict[str, FarLeg] = {}
        #: The call log of each recent call, by Call-ID: (application, instance id)
        #: (``GET /api/calls/{call_id}/log``: callhook test --sip; telephony/lifecycle.py).
        self.recent_logs: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        own = [t.caller_id for t in settings.trunks.values() if t.caller_id]
        self.outbound = OutboundPolicy(
            settings.outbound.allow, [*own, *settings.numbers], settings.outbound.max_calls_per_app
        )
        # The outbound calls each application has, here and on the other workers or nodes
        # (max_calls_per_app is the installation's: cluster/outboundshare.py).
        self.outbound_calls = OutboundCalls(self.loop.time)
        #: ``[outbound]`` put to every call placed, counted until it ends.
        self.admission = OutboundAdmission(
            self.outbound, self.outbound_calls, lambda: self.outbound_share, self.loop.time
        )
        #: Outbound calls: ``callhook dial``, the REST API's, the web services'.
        self.dialler = Dialler(
            agent=lambda: self.agent,
            media=lambda: self.media,
            calls=self.calls,
            flush=self._flush,
            run=lambda call, sock: self.lifecycle.run(call, sock),
            hang_up=lambda call_id: self.lifecycle.hang_up(call_id),
            dead=lambda call_id: self.lifecycle.dead(call_id),
            attach_far_legs=lambda call: self.lifecycle.attach_far_legs(call),
            services=services,
            prompts=self.prompts,
            address=self.address,
            guard=self.guard,
            trunks=self.trunks,
            admission=self.admission,
            rtp_timeout=settings.sip.rtp_timeout,
            apps=settings.apps,
            default_app=lambda: settings.app_for("") or services.default_app(),
            loop=self.loop,
        )
        #: The registrar of ``[users]``: their phones' bindings, and the failed digests.
        self.users = Users(
            settings.users,
            secret=services.secret,
            algorithms=settings.security.digest_algorithms,
            behind_front=settings.workers.front is not None,
            lead=settings.workers.lead,
            db=services.db,
            guard=self.guard,
            trunks=self.trunks,
            shared_bans=lambda: self.shared_bans,
            loop=self.loop,
        )
        #: What the HTTP API sees of the service and may ask of it.
        self.control = Control(
            loop=self.loop,
            agent=lambda: self.agent,
            media=lambda: self.media,
            calls=self.calls,
            far_legs=self.far_legs,
            recent_logs=self.recent_logs,
            guard=self.guard,
            trunks=self.trunks,
            shared_bans=lambda: self.shared_bans,
            metrics=services.metrics,
            speech=services.speech,
            notifications=lambda: {
                **(services.notifier.snapshot() if services.notifier is not None else {}),
                # Rings from other processes on the data directory this one answered.
                **({"doorbell_rings": services.doorbell.heard} if services.doorbell else {}),
            },
            log_path=services.store.path,
            flush=self._flush,
            trunks_changed=self.trunks_changed,
        )
        #: A call's ``transfer``: its REFER and what comes of it.
        self.transfers = Transfers(
            lambda: self.agent, self.trunks, self.outbound, self.loop.time, self._flush
        )
        #: A call's ``connect_to_conference``: the rooms, mixed in the media tick.
        rooms = settings.conference
        self.conferences = Conferences(
            self.loop.time,
            limit=rooms.max_participants,
            open_dbov=rooms.talker_dbov,
            hangover=round(rooms.talker_hangover / 0.02),  # (in media ticks)
        )
        self.conferences.open_recording = RoomRecorder(
            services.store,
            services.journal,
            self.loop.time,
            lambda: settings.recordings,
        )
        #: A call's ``connect``: its far legs, placed, joined and ended.
        self.connector = Connector(
            services=services,
            loop=self.loop,
            agent=lambda: self.agent,
            media=lambda: self.media,
            address=self.address,
            trunks=self.trunks,
            guard=self.guard,
            users=self.users,
            outbound=self.outbound,
            outbound_calls=self.outbound_calls,
            admission=self.admission,
            client_tls=self.client_tls,
            prompts=self.prompts,
            calls=self.calls,
            far_legs=self.far_legs,
            webclients=lambda: self.webclients,
            flush=self._flush,
            attach_far_legs=lambda call: self.lifecycle.attach_far_legs(call),
            detach_far_legs=lambda call: self.lifecycle.detach_far_legs(call),
            web_calls=self.web_calls,
        )
        #: Every call's run, answer, hang-up, re-offers and end.
        self.lifecycle = Lifecycle(
            services=services,
            loop=self.loop,
            agent=lambda: self.agent,
            media=lambda: self.media,
            address=self.address,
            calls=self.calls,
            recent_logs=self.recent_logs,
            connector=self.connector,
            transfers=self.transfers,
            rooms=self._rooms,
            flush=self._flush,
        )
        #: The calls that arrive.
        self.inbound = Inbound(
            services=services,
            loop=self.loop,
            agent=lambda: self.agent,
            media=lambda: self.media,
            address=self.address,
            trunks=self.trunks,
            prompts=self.prompts,
            calls=self.calls,
            lifecycle=self.lifecycle,
            web_calls=self.web_calls,
        )

    def web_calls(self) -> int:
        """How many web phone calls there are (``[sip] max_calls`` counts them with
        :attr:`calls`)."""
        return len(self.phone.calls) if self.phone is not None else 0

    async def start(self, *, register: bool = True, listen: bool = True) -> None:
        """Listen (UDP, and TCP and TLS as configured, if ``listen``: ``callhook dial`` beside
        a running ``serve`` must not take its ports); register the trunks if ``register``."""
        settings = self.services.settings
        try:
            transport, _ = await self.loop.create_datagram_endpoint(
                lambda: _SipProtocol(self), local_addr=(self.host, self.port)
            )
        except OSError as exc:
            raise ListenError("udp", self.host, self.port, exc) from None
        # uvloop's UDP transport implements the interface without subclassing it.
        self.transport = transport
        self.port = transport.get_extra_info("sockname")[1]
        await self._listen_streams(listen)
        from callhook import __version__

        self.agent = Agent(
            self.address, self.port, user_agent=f"callhook/{__version__}", ports=self.ports
        )
        if settings.workers.front is not None:
            self.agent.use_front(settings.workers.front)  # a worker of serve --workers
            # Its guard bans the real sources (failed digests), which only the agent
            # sees: every request comes from Kamailio.
            self.agent.origin_banned = self.guard.banned
        tuning = settings.media
        self.media = MediaEngine(
            self.local if self.host in ("0.0.0.0", "::") else self.host,
            *self.rtp_ports,
            thread=tuning.thread,
            max_lag=tuning.max_lag,
            fifo=tuning.thread_fifo,
            nice=tuning.thread_nice,
            thread_receive=tuning.thread_receive,
        )
        self.media.mixing = self._mix
        own = {self.address, self.local, *settings.sip.domains}
        if self.host not in ("0.0.0.0", "::", ""):
            own.add(self.host)
        self.users.start(self.agent, own)
        logger.info("SIP listening on udp %s:%d", self.host, self.port)
        if self.address != self.local:
            logger.info("advertising %s in Contact, Via and SDP (external_address)", self.address)
        listening: set[str] | None = set(self.ports) if listen else None
        if settings.workers.front is not None:  # (what the world reaches is the proxy's)
            listening = set(settings.workers.front.public_ports)
        self.trunks.warn_about_transports(listening)
        self._trusted_trunks()
        register = register and settings.workers.lead
        self.trunks.elsewhere = not register
        await self.trunks.start(self.trunks_changed, register=register)
        self._trusted_trunks()
        self.sampler = Sampler(
            self.guard,
            lambda: self.agent,
            lambda: self.connections,
            self.trunks,
            self._speech_services,
            self.services.journal,
        )
        self.sampler.start()

    async def _listen_streams(self, listen: bool) -> None:
        """The TCP and TLS side (telephony/sipstreams.py), listening if ``listen``."""
        settings = self.services.settings
        self.streams = SipStreams(
            guard=self.guard,
            agent=lambda: self.agent,
            deliver=self.message_received,
            flush=self._flush,
            now=self.loop.time,
            client_tls=self.client_tls,
            max_message=settings.security.max_message_bytes,
        )
        self.connections = self.streams.connections
        if listen:
            self.ports.update(
                await self.streams.listen(
                    settings.sip, self.host, self.port, any_port=not self.requested_port
                )
            )

    # --- the agent ------------------------------------------------------------------------

    def datagram_received(self, data: bytes, source: tuple[str, int]) -> None:
        self.message_received(data, Target(*source))

    def _rooms(self, call: SipCall) -> ConferencePort:
        """``call``'s way to the conference rooms: this process's, or any worker's."""
        if self.room_links is not None:
            return self.room_links.port(call)
        return CallConference(self.conferences, call)

    def _mix(self) -> None:
        """The media tick's mixing: this process's rooms, then the frames of the links.

        A fault in them (a bug) must not stop every call's audio: the tick's sending
        comes after this. It is logged with its traceback once, then counted.
        """
        try:
            self.conferences.tick()
            if self.room_links is not None:
                self.room_links.pump()
        except Exception:
            self.mixing_faults += 1
            if self.mixing_faults == 1:
                logger.exception("conference mixing failed (logged once; counted after)")

    def _speech_services(self) -> list[SpeechService]:
        """Every speech service once: ``[speech]``'s and the applications' own engines'."""
        services = self.services
        every = (services.speech, *services.app_speech.values())
        return list({id(service): service for service in every}.values())

    def trunks_changed(self) -> None:
        """The trunks changed (resolved, registered, reloaded): the guard trusts their
        addresses, and what the agent has to send goes."""
        self._trusted_trunks()
        self._flush()

    def _trusted_trunks(self) -> None:
        """The guard admits requests from every trunk's addresses (resolved, and listed)
        and from the SIP proxies in front of callhook ([sip] proxies)."""
        extra, self.guard.names = self.trunks.trusted()
        self.guard.extra = extra + self._proxies

    def message_received(self, data: bytes, source: Target) -> None:
        """A SIP message from ``source`` (a datagram, or framed off a connection): put to
        the guard first (access, rate, bans: ``[security]``), before any parsing."""
        agent = self.agent
        if agent is None:
            return  # a listener accepted before the agent was made: the peer retransmits
        now = self.loop.time()
        request = not data.startswith(b"SIP/2.0 ") and bool(data.strip(b"\r\n"))
        verdict = self.guard.admit(source.host, now, request=request)
        notes = self.guard.take_notes()
        for host, cause in notes:
            logger.warning("SIP from %s: %s", host, cause)
        if verdict == "drop":
            return
        limit = self.services.settings.security.max_message_bytes
        if len(data) > limit:  # over UDP (a stream's framer refuses them itself)
            prometheus.PACKETS_DROPPED.labels("sip", "too_large").inc()
            self.guard.note(source.host, f"a message of {len(data)} bytes (max {limit})", now)
            for host, cause in self.guard.take_notes():
                logger.warning("SIP from %s: %s dropped", host, cause)
            return
        if verdict == "reject":
            agent.refuse(data, source, now)
        else:
            agent.receive(data, source, now)
        self._flush()

    def _flush(self) -> None:
        agent, transport = self.agent, self.transport
        assert agent is not None and transport is not None
        # Handling an event may make the agent send (a 180 for a new call): go on
        # until both are drained, so nothing waits for the next datagram.
        while True:
            datagrams, events = agent.take_datagrams(), agent.take_events()
            if not datagrams and not events:
                break
            for data, target in datagrams:
                if target.transport == "udp":
                    transport.sendto(data, (target.host, target.port))
                else:
                    assert self.connections is not None
                    self.connections.send(data, target)
            for event in events:
                self._dispatch(event)
        self.users.flush()
        self.trunks.log_changes(self.loop.time())
        deadline = agent.deadline
        if deadline != self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = deadline
            self._timer = None if deadline is None else self.loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        assert self.agent is not None
        self._timer = None
        self._timer_at = None
        self.agent.handle_timer(self.loop.time())
        self._flush()

    def _dispatch(self, event: CallEvent) -> None:
        far = self.far_legs.get(event.call_id)
        if far is not None:
            self.connector.far_event(far, event)  # a far leg of a connect
        elif isinstance(event, IncomingCall):
            self.inbound.incoming(event)
        elif (call := self.calls.get(event.call_id)) is not None:
            self.lifecycle.event(call, event)

    # --- the REST API's calls (httpserver/restapi.py ``Calls``) --------------------------------

    def active_calls(self) -> list[dict[str, Any]]:
        """The calls running now (:meth:`Control.active_calls`)."""
        return self.control.active_calls()

    def hang_up_call(self, call_id: str) -> bool:
        """End call ``call_id`` from our side (:meth:`Control.hang_up_call`)."""
        return self.control.hang_up_call(call_id)

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
        """Start calling ``target`` for ``app``; its call id (:meth:`Dialler.place_call`)."""
        return await self.dialler.place_call(
            target,
            app,
            ring_timeout,
            trunk,
            from_user=from_user,
            instance_id=instance_id,
            outbound_parameters=outbound_parameters,
            token=token,
        )

    # --- shutdown ---------------------------------------------------------------------------

    async def _unregister(self, wait: float = 2.0) -> None:
        """Unregister every trunk, waiting up to ``wait`` s for the registrars' answers."""
        self.trunks.cancel()
        self.users.stop()
        agent = self.agent
        if agent is None or not agent.registrations.by_name:
            return
        agent.unregister_all(self.loop.time())
        self._flush()
        registrations = agent.registrations.by_name.values()
        for _ in range(int(wait / 0.05)):
            if all(r.state == "unregistered" for r in registrations):
                break
            await asyncio.sleep(0.05)

    async def shutdown(self, grace: float = 30.0) -> None:
        """Stop taking calls (503), let running calls finish for ``grace`` s, then end them;
        remove the trunks' registrations (``Expires: 0``)."""
        if self.agent is not None:
            self.agent.accepting = False
        if self.sampler is not None:
            self.sampler.stop()
        tasks = [c.task for c in self.calls.values() if c.task is not None]
        if tasks:
            logger.info("waiting up to %g s for %d call(s) to finish", grace, len(tasks))
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for call in list(self.calls.values()):
                call.leg.abort("callhook is shutting down")
            if pending:
                await asyncio.wait(pending, timeout=10)
        if self.phone is not None:
            await self.phone.hang_up_all("callhook is shutting down")
        if self.webclients is not None:
            await self.webclients.sign_out_all("callhook is shutting down")
        if self.room_links is not None:
            await self.room_links.close()
        if self.media is not None:
            self.media.shutdown()
        await self._unregister()
        if self.transport is not None:
            # Let the last BYEs out before the socket closes.
            await asyncio.sleep(0.05)
            self.transport.close()
        if self.connections is not None:
            await self.connections.close()
