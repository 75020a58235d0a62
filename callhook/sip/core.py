"""The shared core of callhook's SIP user agent: calls, transactions, timers, dialogs. Sans-IO.

:class:`Core` holds what both halves of the agent use: the calls it knows,
the running transactions (``transaction.py``) and the one timer heap, the
outbox of messages with their :class:`~callhook.sip.transport.Target`, the
registrations (``registrations.py``), in-dialog requests (BYE, ACK, session
refreshes, RFC 4028) and the end of a call. The server half (``uas.py``: requests
in, our answers) and the client half (``uac.py``: our INVITEs, responses in)
build on it; ``agent.py`` puts them together. See ``agent.py`` for the theory of
operation.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from callhook.sip.callstate import Call, State, new_tag
from callhook.sip.front import DESTINATION, Front, destination_uri
from callhook.sip.message import (
    Request,
    Response,
    SipMessageError,
    parse,
    parse_name_addr,
    parse_uri,
    parse_via,
    serialize,
)
from callhook.sip.notices import (
    CallEvent,
    CallTerminated,
    ReferResponse,
)
from callhook.sip.registrar import Registrar
from callhook.sip.registration import RegistrationSpec
from callhook.sip.registrations import Registrations
from callhook.sip.responses import error_response, make_response
from callhook.sip.transaction import (
    Address,
    Deliver,
    Kind,
    Output,
    Timeout,
    Transaction,
    Transmit,
    client,
)
from callhook.sip.transport import (
    UDP_REQUEST_LIMIT,
    Local,
    Target,
    Transport,
    reliable,
)

logger = logging.getLogger("callhook.sip")

METHODS = ("INVITE", "ACK", "CANCEL", "BYE", "OPTIONS", "INFO", "UPDATE", "NOTIFY")
ALLOW = ", ".join(METHODS)
#: What a registrar for ``[users]`` adds (``use_registrar``).
REGISTRAR_METHODS = ("REGISTER",)
CONTENT_TYPES = (
    "application/sdp",
    "application/dtmf-relay",
    "application/dtmf",
    "message/sipfrag",  # a NOTIFY of a transfer's progress (RFC 3515 §2.4.5)
)
SUPPORTED = {"timer"}
#: Ends the key of the inbound half of a call callhook placed to itself (a hairpin: a
#: connect to an application of this same serve). Both halves have one Call-ID on the
#: wire and are told apart by their tags (§12); ";" is no Call-ID character (§25.1), so
#: no peer's Call-ID can end so.
HAIRPIN = ";hairpin"


class Core:
    """The agent's state and the machinery both halves share (see the module docstring)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        user_agent: str = "callhook",
        ports: dict[Transport, int] | None = None,
    ) -> None:
        """``host`` is the address advertised; ``port`` the UDP one; ``ports`` the others."""
        self.host = host
        self.port = port
        self.local = Local(host, {"udp": port, **(ports or {})})
        self.user_agent = user_agent
        self.accepting = True
        #: Messages dropped as not well-formed (answered 400 where they can be: §8.2.6.2).
        self.malformed = 0
        self.calls: dict[str, Call] = {}
        self._txs: dict[tuple[str, str, str], Transaction] = {}  # (side, branch, method)
        self._tx_call: dict[int, str] = {}  # id(transaction) -> call_id
        self._timers: list[tuple[float, int, str, object]] = []
        self._seq = itertools.count()
        self._out: list[tuple[bytes, Target]] = []
        self._events: deque[CallEvent] = deque()
        #: The trunks callhook registers with (``register``), by name.
        self.registrations = Registrations(self.local, user_agent, ALLOW, self._send_request)
        #: The registrar of callhook's own users' phones (None: no ``[users]``, and
        #: REGISTER gets 405 like any method a plain user agent does not implement).
        self.registrar: Registrar | None = None
        self.methods: tuple[str, ...] = METHODS
        self.allow = ALLOW
        #: The proxy in front of this worker (``serve --workers``): every request goes
        #: through it but a TLS trunk's (``front.py``). None: requests go where they are
        #: addressed.
        self.front: Front | None = None
        #: Whether a source the front names is banned (the adapter's guard): ``(host, now)``.
        self.origin_banned: Callable[[str, float], bool] = lambda host, now: False

    def use_front(self, front: Front) -> None:
        """Be a worker behind ``front`` (``serve --workers``): every request goes through it
        but a TLS trunk's, and the source it names for a request is believed
        (``front.py``)."""
        self.front = front
        self.registrations.front = front

    def use_registrar(self, registrar: Registrar) -> None:
        """Be the registrar of ``registrar``'s users (REGISTER; their calls challenged)."""
        self.registrar = registrar
        self.methods = METHODS + REGISTRAR_METHODS
        self.allow = ", ".join(self.methods)

    def take_datagrams(self) -> list[tuple[bytes, Target]]:
        """The messages to send, each with the target to send it to (on its transport)."""
        out, self._out = self._out, []
        if self.registrations.pings:
            out += self.registrations.pings
            self.registrations.pings = []
        return out

    def take_events(self) -> list[CallEvent]:
        events = list(self._events)
        self._events.clear()
        return events

    @property
    def deadline(self) -> float | None:
        """When ``handle_timer`` is due next (None: nothing is waiting for time)."""
        registrations = self.registrations.deadline
        while self._timers:
            when, _, kind, obj = self._timers[0]
            if self._timer_valid(when, kind, obj):
                return when if registrations is None else min(when, registrations)
            heapq.heappop(self._timers)
        return registrations

    def _timer_valid(self, when: float, kind: str, obj: object) -> bool:
        if kind == "tx":
            assert isinstance(obj, Transaction)
            return not obj.terminated and obj.deadline == when
        assert isinstance(obj, Call)
        if self.calls.get(obj.call_id) is not obj:
            return False
        if kind == "ok":
            return obj.awaiting_ack and obj.ok_next == when
        return obj.state == "confirmed" and obj.refresh_at == when

    def _schedule(self, when: float | None, kind: str, obj: object) -> None:
        if when is not None:
            heapq.heappush(self._timers, (when, next(self._seq), kind, obj))

    def handle_timer(self, now: float) -> None:
        """Fire whatever is due at ``now``: retransmissions, timeouts, refreshes."""
        registrations = self.registrations.deadline
        if registrations is not None and registrations <= now:
            self.registrations.handle_timer(now)
        while self._timers and self._timers[0][0] <= now:
            when, _, kind, obj = heapq.heappop(self._timers)
            if not self._timer_valid(when, kind, obj):
                continue
            try:
                if kind == "tx":
                    assert isinstance(obj, Transaction)
                    self._tx_outputs(obj, obj.on_timer(now), now)
                elif kind == "ok":
                    assert isinstance(obj, Call)
                    self._retransmit_ok(obj, now)
                else:
                    assert isinstance(obj, Call)
                    self._refresh(obj, now)
            except Exception:
                logger.exception("SIP timer %s failed", kind)

    def receive(self, data: bytes, source: Target | Address, now: float) -> None:
        """A message from ``source`` (a datagram, or one framed off a stream).

        A plain ``(host, port)`` source is UDP. Never raises: what cannot be handled
        is logged.
        """
        source = Target(*source)
        if not data.strip(b"\r\n"):
            return  # keep-alive (RFC 5626 §4.4.1 CRLF ping)
        try:
            self._receive(data, source, now)
        except Exception:
            # A bug: the message is lost, the agent and every other call go on.
            logger.exception("SIP message from %s could not be handled", source)

    def _receive(self, data: bytes, source: Target, now: float) -> None:
        try:
            message = parse(data)
        except SipMessageError as exc:
            self.malformed += 1
            logger.warning("SIP from %s not well-formed: %s", source, exc.reason)
            self._answer_error(exc, source)
            return
        try:
            if isinstance(message, Response):
                self._on_response(message, now)
            else:
                self._request(message, source, now)
        except SipMessageError as exc:
            logger.warning("SIP from %s refused: %s", source, exc.reason)
            if isinstance(message, Request):
                self._answer_error(
                    SipMessageError(
                        exc.reason, exc.status, headers=message.headers, is_request=True
                    ),
                    source,
                )

    def _answer_error(self, exc: SipMessageError, source: Target) -> None:
        response = error_response(exc, server=self.user_agent)
        if response is not None:
            self._out.append((serialize(response), source))

    def _tx_outputs(self, tx: Transaction, outputs: list[Output], now: float) -> None:
        for out in outputs:
            if isinstance(out, Transmit):
                self._out.append((out.data, out.address))
            elif isinstance(out, Deliver):
                if isinstance(out.message, Response) and self.registrations.owns(tx):
                    self.registrations.response(tx, out.message, now)
                elif isinstance(out.message, Response):
                    self._client_response(tx, out.message, now)
                elif out.message.method == "ACK":
                    self._ack(out.message, now)  # RFC 6026 §8
            elif isinstance(out, Timeout) and self.registrations.owns(tx):
                self.registrations.timeout(tx, now, out.timer == "transport")
            elif isinstance(out, Timeout):
                self._tx_timeout(tx, out.timer, now)
        if tx.terminated:
            self.registrations.finished(tx)
            self._txs.pop(self._tx_key(tx), None)
            call_id = self._tx_call.pop(id(tx), None)
            call = self.calls.get(call_id or "")
            if call is not None:
                call.live_txs -= 1
                self._forget_if_done(call)
        else:
            self._schedule(tx.deadline, "tx", tx)

    @staticmethod
    def _tx_key(tx: Transaction) -> tuple[str, str, str]:
        side = "c" if tx.kind in (Kind.ICT, Kind.NICT) else "s"
        branch, method = tx.key
        return (side, branch, method)

    def _link(self, tx: Transaction, call: Call) -> None:
        """Count ``tx`` as one of ``call``'s (the call is kept until they are all over)."""
        if id(tx) not in self._tx_call and not tx.terminated:
            self._tx_call[id(tx)] = call.call_id
            call.live_txs += 1

    def _start_client(
        self, request: Request, address: Target, now: float, call: Call | None
    ) -> Transaction:
        if call is None or not call.fixed_transport:
            request, address = self._fit(request, address)
        tx, outputs = client(request, address, now)
        self._txs[self._tx_key(tx)] = tx
        if call is not None:
            self._link(tx, call)
        self._tx_outputs(tx, outputs, now)
        return tx

    def _send_request(self, request: Request, address: Target, now: float) -> Transaction:
        """A REGISTER: over the transport its trunk's config names, whatever its size."""
        tx, outputs = client(request, address, now)
        self._txs[self._tx_key(tx)] = tx
        self._tx_outputs(tx, outputs, now)
        return tx

    def register(self, spec: RegistrationSpec, now: float, target: Target | None = None) -> None:
        """Register with a trunk's registrar and keep the binding (RFC 3261 §10); ``target``
        is the registrar's (or outbound proxy's) resolved address."""
        self.registrations.start(spec, now, target)

    def transport_failed(self, target: Target, now: float) -> None:
        """Requests to ``target`` could not be delivered (its connection failed): their
        transactions end now instead of at Timer B/F (§8.1.3.1: as a 503)."""
        for tx in list(self._txs.values()):
            if tx.address == target:
                self._tx_outputs(tx, tx.transport_failed(), now)

    def flow_closed(self, target: Target, now: float) -> None:
        """The connection to or from ``target`` closed: calls set up on it use their
        dialog's next hop from now on; trunks registered over it register again."""
        for call in self.calls.values():
            if call.peer == target:
                call.flow_open = False
        if self.accepting:
            self.registrations.flow_lost(target, now)

    def leave_registrations(self, now: float, reason: str) -> None:
        """Stop refreshing the trunks' bindings without removing them: another node
        registers them now (they lapse at the registrars by themselves)."""
        self.registrations.leave_all(now, reason)

    def unregister(self, name: str, now: float) -> None:
        """Remove trunk ``name``'s binding (``Expires: 0``) and forget it (a reload)."""
        self.registrations.stop(name, now)

    def unregister_all(self, now: float) -> None:
        """Remove every binding (``Expires: 0``): callhook is shutting down."""
        self.registrations.stop_all(now)

    def _fit(self, request: Request, target: Target) -> tuple[Request, Target]:
        """A request too big for UDP goes over TCP, its Via saying so (§18.1.1).

        Not for a trunk's requests (``Call.fixed_transport``, REGISTERs): its config
        names the transport, and many UDP trunks take no TCP at all.
        """
        if (
            target.transport != "udp"
            or not self.local.listens("tcp")
            or request.method in ("ACK", "CANCEL")  # they follow their INVITE's path
            or len(serialize(request)) <= UDP_REQUEST_LIMIT
        ):
            return request, target
        headers = request.headers.copy()
        vias = headers.get_all("Via")
        if vias:
            top = parse_via(vias[0])
            headers.remove("Via")
            headers.add("Via", self.local.via("tcp", branch_id=top.params.get("branch")))
            for rest in vias[1:]:
                headers.add("Via", rest)
        return Request(request.method, request.uri, headers, request.body), target._replace(
            transport="tcp"
        )

    def _respond(self, tx: Transaction, response: Response, now: float) -> None:
        self._tx_outputs(tx, tx.respond(response, now), now)

    def _reply(
        self,
        tx: Transaction,
        request: Request,
        status: int,
        reason: str | None = None,
        *,
        extra: list[tuple[str, str]] | None = None,
        body: bytes = b"",
        now: float,
    ) -> None:
        call_id = request.headers.get("Call-ID") or ""
        # A hairpin's inbound half answers its INVITE (the outbound half has the Call-ID).
        call = self.calls.get(call_id + HAIRPIN) or self.calls.get(call_id)
        tag = call.local_tag if call is not None and call.direction == "inbound" else new_tag()
        response = make_response(
            request,
            status,
            reason,
            server=self.user_agent,
            to_tag=tag,
            contact=self._contact(request, peer=tx.address),
            extra=extra or [],
            body=body,
        )
        self._respond(tx, response, now)

    def _forget_if_done(self, call: Call) -> None:
        if call.state == "ended" and call.live_txs <= 0 and self.calls.get(call.call_id) is call:
            del self.calls[call.call_id]

    def _call_for(self, request: Request) -> Call | None:
        """The call an in-dialog request belongs to: same Call-ID, its To tag our local tag
        and its From tag the remote one (§12.2.2; the two halves of a hairpin have the same
        Call-ID and the same tags, the other way round)."""
        for call in self.calls_of(request.call_id):
            dialog = call.dialog
            if (
                dialog is not None
                and request.to_tag == dialog.local_tag
                and request.from_tag == dialog.remote_tag
            ):
                return call
        return None

    def calls_of(self, call_id: str) -> list[Call]:
        """The calls with this Call-ID on the wire: one, or the two halves of a hairpin."""
        return [c for c in (self.calls.get(call_id), self.calls.get(call_id + HAIRPIN)) if c]

    def _contact(
        self,
        request: Request | None = None,
        user: str = "callhook",
        *,
        peer: Target,
        sips: bool | None = None,
    ) -> str:
        """Our Contact for a dialog with ``peer`` (§8.1.1.8), over its transport: ``sips:``
        when the dialog is a SIPS one (``sips``, else whether ``request``'s URI is
        ``sips:``: §12.1.1); with a trunk whose registrar saw us behind a NAT, the
        address it registered for us (RFC 3581), so that its requests reach us too."""
        if request is not None:
            with contextlib.suppress(ValueError):
                user = parse_uri(request.uri).user or user
            if sips is None:
                sips = request.uri.lower().startswith("sips:")
        at = self.registrations.public_address(peer)
        return self.local.contact(user, peer.transport, sips=bool(sips), at=at)

    def _via(self, transport: Transport = "udp") -> str:
        return self.local.via(transport)

    def _tx_timeout(self, tx: Transaction, timer: str, now: float) -> None:
        call = self.calls.get(self._tx_call.get(id(tx), ""))
        if call is None:
            return
        if tx is call.tx and tx.kind is Kind.ICT:
            # Timer B (nobody answers at all) or Z (no final response after our CANCEL);
            # a transport failure counts as a 503 (§8.1.3.1).
            self._end(call, "failed", "503" if timer == "transport" else "408", by_remote=True)
        elif tx.request.method == "BYE":
            self._end(call, call_state="ended")  # the peer is gone; nothing more to do
        elif tx.request.method == "REFER":  # Timer F: as a 408 (§8.1.3.1)
            self._events.append(ReferResponse(call.call_id, 408))
        elif tx.request.method in ("INVITE", "UPDATE"):
            logger.warning("call %s: session refresh got no answer; ending it", call.call_id)
            self._end(call, "dropped", "408", by_remote=True)

    def _hop(self, call: Call) -> Target:
        """Where in-dialog requests go; the peer's address when the dialog names no usable one.

        Over TCP and TLS, the connection the call was set up on is used while it is open
        when the next hop is on the same host: a phone rarely has a listener (or a TLS
        certificate) for a connection of ours, and connection reuse is what it expects
        (RFC 5923, RFC 5626 §5.3). Never another host's connection: behind one NAT
        address, several phones may share a host.
        """
        if self.front is not None and not call.direct:
            return self.front.target  # it is in every dialog's route set (it Record-Routes)
        hop = call.peer
        if call.pinned:
            return hop  # a phone behind a NAT: only where it registered from reaches it
        if call.dialog is not None:
            try:
                hop = call.dialog.next_hop(call.peer.transport)
            except ValueError as exc:
                logger.warning("call %s: %s; sending to %s", call.call_id, exc, call.peer)
                return call.peer
        peer = call.peer
        if (
            call.flow_open
            and reliable(peer.transport)
            and (hop.host, hop.transport) == (peer.host, peer.transport)
        ):
            return peer
        return hop

    def _in_dialog(self, call: Call, method: str, **kwargs: Any) -> tuple[Request, Target]:
        """A request of ``call``'s dialog, with the Via and Contact of the transport it
        goes over, and where it goes."""
        assert call.dialog is not None
        hop = self._hop(call)
        sips = call.invite.uri.lower().startswith("sips:")
        request = call.dialog.request(
            method,
            self._via(hop.transport),
            contact=self._contact(user="callhook", peer=hop, sips=sips),
            **kwargs,
        )
        if call.destination is not None:
            request.headers.add(DESTINATION, destination_uri(call.destination))
        return request, hop

    def _send_bye(self, call: Call, now: float) -> None:
        if call.dialog is None:
            self._end(call, call_state="ended")
            return
        call.bye_pending = False
        call.state = "ending"
        bye, hop = self._in_dialog(call, "BYE")
        self._start_client(bye, hop, now, call)

    def _end(
        self,
        call: Call,
        cause: str | None = None,
        raw: str = "",
        *,
        by_remote: bool = False,
        call_state: State = "ended",
    ) -> None:
        """Mark the call over (reporting ``cause`` if given and not reported yet)."""
        call.state = call_state
        call.awaiting_ack = False
        if cause is not None:
            self._report(call, cause, raw, by_remote=by_remote)
        self._forget_if_done(call)

    def _report(self, call: Call, cause: str, raw: str, *, by_remote: bool) -> None:
        """Tell the application the call is over (once); signalling may still finish after."""
        if not call.reported:
            call.reported = True
            self._events.append(CallTerminated(call.call_id, cause, raw, by_remote))

    def _schedule_refresh(self, call: Call, now: float) -> None:
        assert call.timer is not None
        call.refresh_at = now + call.timer.interval / 2  # §10
        self._schedule(call.refresh_at, "refresh", call)

    def _refresh(self, call: Call, now: float) -> None:
        if call.dialog is None or call.timer is None:
            return
        call.refresh_at = None
        allowed = {
            m.strip().upper() for v in call.invite.headers.get_all("Allow") for m in v.split(",")
        }
        method = "UPDATE" if "UPDATE" in allowed else "INVITE"
        extra = [
            ("Session-Expires", f"{call.timer.interval};refresher=uas"),
            ("Supported", "timer"),
        ]
        request, hop = self._in_dialog(
            call,
            method,
            body=call.local_sdp if method == "INVITE" else b"",
            content_type="application/sdp" if method == "INVITE" and call.local_sdp else None,
            extra=extra,
        )
        self._start_client(request, hop, now, call)

    def _refresh_response(
        self, call: Call, tx: Transaction, response: Response, now: float
    ) -> None:
        if response.status < 200:
            return
        if response.status >= 300:
            logger.warning("call %s: session refresh refused (%d)", call.call_id, response.status)
            self._end(call, "dropped", str(response.status), by_remote=True)
            return
        if tx.request.method == "INVITE" and call.dialog is not None:
            ack, hop = self._in_dialog(call, "ACK", cseq=tx.request.cseq[0])
            self._out.append((serialize(ack), hop))
        if call.state == "confirmed":
            self._schedule_refresh(call, now)

    # --- what the UAS and UAC halves provide (uas.py, uac.py) -------------------------------

    def _request(self, request: Request, source: Target, now: float) -> None:
        raise NotImplementedError

    def _ack(self, request: Request, now: float) -> None:
        raise NotImplementedError

    def _retransmit_ok(self, call: Call, now: float) -> None:
        raise NotImplementedError

    def _on_response(self, response: Response, now: float) -> None:
        raise NotImplementedError

    def _client_response(self, tx: Transaction, response: Response, now: float) -> None:
        raise NotImplementedError


def uri_text(value: str | None) -> str:
    """The URI of a name-addr header value (From, To), or the value as it is."""
    if not value:
        return ""
    try:
        return str(parse_name_addr(value).uri)
    except ValueError:
        return value
