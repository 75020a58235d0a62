"""The agent's registrations: one :class:`~callhook.sip.registration.Registration` per trunk,
their REGISTER transactions, and the keep-alives that hold a NAT binding open. Sans-IO.

:class:`Registrations` sits between the agent and the registration state
machines: it puts the agent's top Via on each REGISTER, starts its client
transaction through the ``send`` callable the agent gives it, and routes the
final response (or the timeout) back to the registration that sent it.

Keep-alives (RFC 5626 §4.4): a registered trunk is also a NAT binding that
must not expire between two REGISTERs. Every :data:`KEEPALIVE` seconds
(:data:`STREAM_KEEPALIVE` on TCP and TLS) callhook sends a double CRLF to the
registrar (or outbound proxy): over a stream it is RFC 5626's ping, answered
with a pong; over UDP it is the lightweight keep-alive common SIP phones send,
which a registrar ignores (RFC 3261 §7.5) and a NAT counts as traffic.
"""

from __future__ import annotations

from collections.abc import Callable

from callhook.sip.front import DESTINATION, Front, destination_uri
from callhook.sip.message import Request, Response
from callhook.sip.registration import Registration, RegistrationSpec, with_via
from callhook.sip.transaction import Transaction
from callhook.sip.transport import Local, Target, Transport, reliable, transport_of

#: Seconds between keep-alives over UDP (NAT UDP bindings last 30 s or more: RFC 4787 REQ-5).
KEEPALIVE = 25.0
#: Seconds between pings on a TCP or TLS connection (RFC 5626 §4.4.1 suggests 120 s or so).
STREAM_KEEPALIVE = 120.0

PING = b"\r\n\r\n"

Send = Callable[[Request, Target, float], Transaction]


class Registrations:
    """The trunks callhook registers, by trunk name."""

    def __init__(self, local: Local, user_agent: str, allow: str, send: Send) -> None:
        self.local = local
        self.user_agent = user_agent
        self.allow = allow
        self._send = send
        self.by_name: dict[str, Registration] = {}
        self._targets: dict[str, Target] = {}
        self._keepalive_at: dict[str, float] = {}
        self._txs: dict[int, Registration] = {}  # id(transaction) -> its registration
        #: Registrations stopped and forgotten (:meth:`stop`), by id: where they went.
        self._retired: dict[int, Target] = {}
        self.pings: list[tuple[bytes, Target]] = []
        #: The proxy in front of this worker (``front.py``): it is the Contact, the
        #: REGISTERs go through it, and keeping its flows open is its business (not over
        #: TLS: :meth:`_through`).
        self.front: Front | None = None

    def start(self, spec: RegistrationSpec, now: float, target: Target | None = None) -> None:
        """Register ``spec`` (again, if it was), sending to ``target`` (its registrar's address,
        resolved; default the registrar's host as written)."""
        registration = self.by_name.get(spec.name)
        if registration is None or registration.spec != spec:
            transport = transport_of(spec.transport)
            front = self._through(transport)
            host, port = self.local.host, self.local.port(transport)
            if front is not None:
                host, port = front.public_host, front.contact_port(transport)
            # Past the proxy (TLS): this worker's own address, on its connection, even
            # when the proxy listens for TLS: the provider's calls through the proxy would
            # have the proxy send the calls' requests on a TLS connection of its own,
            # whose certificate it does not check against the provider's name.
            registration = Registration(
                spec,
                host,
                port,
                user_agent=self.user_agent,
                allow=self.allow,
                follow_nat=self.front is None,
            )
            self.by_name[spec.name] = registration
        host, port = registration.destination
        self._targets[spec.name] = target or Target(host, port, transport_of(spec.transport))
        registration.start(now)
        self._pump(registration, now)

    def stop(self, name: str, now: float) -> None:
        """Unregister trunk ``name`` (``Expires: 0``) and forget it: a reloaded config left
        it out, or changed it (its new registration is :meth:`start` ed after). Its
        un-REGISTER still gets its answer (and a challenge its credentials) where it went."""
        registration = self.by_name.pop(name, None)
        if registration is None:
            return
        self._retired[id(registration)] = self._targets[name]
        self._keepalive_at.pop(name, None)
        registration.stop(now)
        self._pump(registration, now)

    def leave_all(self, now: float, reason: str) -> None:
        """Stop refreshing every trunk's binding, leaving them to lapse (another process
        registers them now: :meth:`Registration.leave`)."""
        for registration in self.by_name.values():
            registration.leave(now, reason)
            self._pump(registration, now)

    def stop_all(self, now: float) -> None:
        """Unregister every trunk (shutdown)."""
        for registration in self.by_name.values():
            registration.stop(now)
            self._pump(registration, now)

    def flow_lost(self, target: Target, now: float) -> None:
        """The connection to ``target`` closed: the trunks registered over it register again."""
        for name, registration in self.by_name.items():
            if self._targets.get(name) == target:
                registration.flow_lost(now)
                self._pump(registration, now)

    def public_address(self, peer: Target) -> tuple[str, int] | None:
        """The address a registrar on ``peer``'s host registered for us when it differs
        from ours (a NAT moved us: RFC 3581), for the Contact of dialogs with it. Never
        behind a proxy: the dialog's own requests come back through it."""
        if self.front is not None:
            return None  # (past the proxy over TLS: a connection the provider reuses)
        for name, registration in self.by_name.items():
            target = self._targets[name]
            if (target.host, target.transport) != (peer.host, peer.transport):
                continue
            at = (registration.contact_host.strip("[]"), registration.contact_port)
            if at != (self.local.host, self.local.port(target.transport)):
                return at
        return None

    def targets(self) -> set[Target]:
        """Where the registrations go (their connections must stay open)."""
        return set(self._targets.values())

    def owns(self, tx: Transaction) -> bool:
        return id(tx) in self._txs

    def response(self, tx: Transaction, response: Response, now: float) -> None:
        registration = self._txs.get(id(tx))
        if registration is not None and response.status >= 200:
            registration.on_response(tx.request, response, now)
            self._pump(registration, now)

    def timeout(self, tx: Transaction, now: float, transport: bool = False) -> None:
        """The REGISTER of ``tx`` got no answer, or (``transport``) could not be sent."""
        registration = self._txs.get(id(tx))
        if registration is not None:
            cause = f"cannot connect to {tx.address}" if transport else ""
            registration.on_timeout(tx.request, now, cause)
            self._pump(registration, now)

    def finished(self, tx: Transaction) -> None:
        self._txs.pop(id(tx), None)

    @property
    def deadline(self) -> float | None:
        times = [r.deadline for r in self.by_name.values() if r.deadline is not None]
        times += self._keepalive_at.values()
        return min(times, default=None)

    def handle_timer(self, now: float) -> None:
        for name, registration in self.by_name.items():
            if registration.deadline is not None and registration.deadline <= now:
                registration.handle_timer(now)
                self._pump(registration, now)
            due = self._keepalive_at.get(name)
            if due is not None and due <= now:
                target = self._targets[name]
                self.pings.append((PING, target))
                self._keepalive_at[name] = now + _interval(target)

    def _through(self, transport: Transport) -> Front | None:
        """The proxy a registration over ``transport`` goes through (none over TLS:
        :meth:`Front.carries`)."""
        front = self.front
        return front if front is not None and front.carries(transport) else None

    def _pump(self, registration: Registration, now: float) -> None:
        name = registration.spec.name
        retired = self._retired.get(id(registration))
        target = retired if retired is not None else self._targets[name]
        front = self._through(target.transport)
        for request in registration.take_requests():
            if front is not None:
                request = with_via(request, self.local.via(front.target.transport))
                request.headers.add(DESTINATION, destination_uri(target))
                tx = self._send(request, front.target, now)
            else:
                request = with_via(request, self.local.via(target.transport))
                tx = self._send(request, target, now)
            if not tx.terminated:
                self._txs[id(tx)] = registration
        if retired is not None:
            if registration.state == "unregistered":
                self._retired.pop(id(registration), None)  # (its last answer came)
        elif front is not None:
            pass  # no keep-alives: the proxy holds the flow to the registrar
        elif registration.state == "registered" and name not in self._keepalive_at:
            self._keepalive_at[name] = now + _interval(target)
        elif registration.state == "unregistered":
            self._keepalive_at.pop(name, None)


def _interval(target: Target) -> float:
    return STREAM_KEEPALIVE if reliable(target.transport) else KEEPALIVE
