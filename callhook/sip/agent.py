"""The SIP user agent core: calls in and out over UDP, sans-IO.

Theory of operation
-------------------
:class:`Agent` is callhook's SIP endpoint (RFC 3261 §8 UA behaviour, §9
CANCEL, §11 OPTIONS, §12 dialogs, §13-14 INVITE and re-INVITE, §15 BYE;
RFC 3581 rport; RFC 4028 session timers; RFC 6026). It does no IO, like
aioquic's connection: the adapter feeds it

* ``receive(data, source, now)`` for each datagram,
* ``handle_timer(now)`` when ``deadline`` has come,
* call-control commands from the application side (``ring``, ``answer``,
  ``reject``, ``hang_up``, ``invite``, ``answer_reoffer``, ``reject_reoffer``),

and after each, takes the datagrams to send (``take_datagrams``) and what
happened to calls (``take_events``, see ``notices.py``). Transactions
(``transaction.py``) make each request/response exchange reliable; the agent
owns the dialogs and the calls, and forgets a call once it has ended and its
last transaction has finished.

What the agent answers on its own: ``100 Trying`` at once to an INVITE;
``200`` to OPTIONS (``503`` while shutting down), BYE, CANCEL, INFO and
UPDATE; ``487`` to a cancelled INVITE (and to the INVITE of an early dialog a
BYE ends); ``481`` to requests for unknown dialogs; ``405``/``501`` for
methods it does not implement; ``420`` for unsupported ``Require``
extensions (``100rel`` included); ``415`` for bodies it cannot read; ``422``
for a ``Session-Expires`` below 90 s; ``491`` for a re-INVITE before the call
is up; ``500`` for an out-of-order CSeq or a re-INVITE while one is pending;
``503`` to new INVITEs while shutting down; ``400`` with the reason to
requests that are not well-formed. It retransmits its ``2xx`` to an INVITE
(and re-INVITE) until the ACK comes and, if none comes within 64*T1, ends the
call with BYE (§13.3.1.4). When RFC 4028 makes it the refresher it refreshes
the session at half the interval. Nothing a peer sends raises out of
``receive``: a message that cannot be handled is answered (if it is a request
that can be answered) and logged.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import secrets
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from callhook.sip import digest
from callhook.sip.checks import check_request, check_response, unsupported_options
from callhook.sip.dialog import Dialog
from callhook.sip.message import (
    Headers,
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
    CallAnswered,
    CallConfirmed,
    CallEvent,
    CallProgress,
    CallTerminated,
    Credentials,
    IncomingCall,
    InfoReceived,
    Reoffer,
)
from callhook.sip.registration import RegistrationSpec
from callhook.sip.registrations import Registrations
from callhook.sip.responses import cause_of, error_response, make_response
from callhook.sip.sessiontimer import MIN_SE, IntervalTooSmall, SessionTimer, negotiate
from callhook.sip.transaction import (
    T1,
    T2,
    Address,
    Deliver,
    Kind,
    Output,
    Timeout,
    Transaction,
    Transmit,
    client,
    server,
)
from callhook.sip.transport import (
    UDP_REQUEST_LIMIT,
    Local,
    Target,
    Transport,
    reliable,
    target_of,
)

logger = logging.getLogger("callhook.sip")

METHODS = ("INVITE", "ACK", "CANCEL", "BYE", "OPTIONS", "INFO", "UPDATE")
ALLOW = ", ".join(METHODS)
CONTENT_TYPES = ("application/sdp", "application/dtmf-relay", "application/dtmf")
SUPPORTED = {"timer"}

__all__ = [
    "ALLOW",
    "Agent",
    "CallAnswered",
    "CallConfirmed",
    "CallEvent",
    "CallProgress",
    "CallTerminated",
    "Credentials",
    "IncomingCall",
    "InfoReceived",
    "Reoffer",
]

State = Literal["offered", "early", "answered", "confirmed", "ending", "ended"]
_NOWHERE = Target("", 0)


@dataclass
class _Call:
    call_id: str
    direction: Literal["inbound", "outbound"]
    invite: Request
    tx: Transaction
    local_tag: str
    peer: Target  # inbound: where the INVITE came from; outbound: where it went
    state: State = "offered"
    dialog: Dialog | None = None
    reported: bool = False  # CallTerminated was emitted
    live_txs: int = 0  # transactions of the call still running (it is forgotten at 0)
    # Our 2xx to an INVITE or re-INVITE, retransmitted until the ACK (§13.3.1.4).
    ok: bytes = b""
    ok_to: Target = _NOWHERE
    ok_next: float = 0.0
    ok_interval: float = T1
    ok_give_up: float = 0.0
    awaiting_ack: bool = False
    bye_pending: bool = False  # hang up as soon as the ACK comes (§15)
    reoffer_tx: Transaction | None = None
    local_sdp: bytes = b""
    timer: SessionTimer | None = None
    refresh_at: float | None = None
    # Outbound calls.
    credentials: Credentials | None = None
    auth_tries: int = 0
    provisional: bool = False  # a 1xx came: a CANCEL may be sent (§9.1)
    cancel_wanted: bool = False
    cancel_sent: bool = False
    ack: bytes = b""  # our ACK for the 2xx, sent again for its retransmissions


def _token() -> str:
    return secrets.token_hex(8)


class Agent:
    """callhook's SIP user agent (see the module docstring)."""

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
        self.calls: dict[str, _Call] = {}
        self._txs: dict[tuple[str, str, str], Transaction] = {}  # (side, branch, method)
        self._tx_call: dict[int, str] = {}  # id(transaction) -> call_id
        self._timers: list[tuple[float, int, str, object]] = []
        self._seq = itertools.count()
        self._out: list[tuple[bytes, Target]] = []
        self._events: deque[CallEvent] = deque()
        #: The trunks callhook registers with (``register``), by name.
        self.registrations = Registrations(self.local, user_agent, ALLOW, self._send_request)

    # --- the adapter's side ---------------------------------------------------------------

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
        assert isinstance(obj, _Call)
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
                    assert isinstance(obj, _Call)
                    self._retransmit_ok(obj, now)
                else:
                    assert isinstance(obj, _Call)
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
            message = parse(data)
        except SipMessageError as exc:
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
        except Exception:
            logger.exception("SIP message from %s could not be handled", source)

    def _answer_error(self, exc: SipMessageError, source: Target) -> None:
        response = error_response(exc, server=self.user_agent)
        if response is not None:
            self._out.append((serialize(response), source))

    # --- transactions -----------------------------------------------------------------

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
                self.registrations.timeout(tx, now)
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

    def _link(self, tx: Transaction, call: _Call) -> None:
        """Count ``tx`` as one of ``call``'s (the call is kept until they are all over)."""
        if id(tx) not in self._tx_call and not tx.terminated:
            self._tx_call[id(tx)] = call.call_id
            call.live_txs += 1

    def _start_client(
        self, request: Request, address: Target, now: float, call: _Call | None
    ) -> Transaction:
        request, address = self._fit(request, address)
        tx, outputs = client(request, address, now)
        self._txs[self._tx_key(tx)] = tx
        if call is not None:
            self._link(tx, call)
        self._tx_outputs(tx, outputs, now)
        return tx

    def _send_request(self, request: Request, address: Target, now: float) -> Transaction:
        return self._start_client(request, address, now, None)

    # --- registrations (registrations.py) --------------------------------------------------

    def register(self, spec: RegistrationSpec, now: float, target: Target | None = None) -> None:
        """Register with a trunk's registrar and keep the binding (RFC 3261 §10); ``target``
        is the registrar's (or outbound proxy's) resolved address."""
        self.registrations.start(spec, now, target)

    def unregister_all(self, now: float) -> None:
        """Remove every binding (``Expires: 0``): callhook is shutting down."""
        self.registrations.stop_all(now)

    def _fit(self, request: Request, target: Target) -> tuple[Request, Target]:
        """A request too big for UDP goes over TCP, its Via saying so (§18.1.1)."""
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
        call = self.calls.get(request.headers.get("Call-ID") or "")
        tag = call.local_tag if call is not None and call.direction == "inbound" else _token()
        response = make_response(
            request,
            status,
            reason,
            server=self.user_agent,
            to_tag=tag,
            contact=self._contact(request, transport=tx.address.transport),
            extra=extra or [],
            body=body,
        )
        self._respond(tx, response, now)

    def _forget_if_done(self, call: _Call) -> None:
        if call.state == "ended" and call.live_txs <= 0 and self.calls.get(call.call_id) is call:
            del self.calls[call.call_id]

    # --- requests in ------------------------------------------------------------------

    def _request(self, request: Request, source: Target, now: float) -> None:
        self._mark_received(request, source)
        method = request.method
        key = ("s", _server_branch(request), "INVITE" if method == "ACK" else method)
        existing = self._txs.get(key)
        if existing is not None:
            # A retransmission, or the ACK of a non-2xx final response (§17.2.3).
            self._tx_outputs(existing, existing.receive(request, now), now)
            return
        if method == "ACK":
            self._ack(request, now)
            return
        problem = check_request(request, SUPPORTED, methods=METHODS, content_types=CONTENT_TYPES)
        tx = server(request, self._response_address(request, source))
        tx.match = key[1]
        self._txs[self._tx_key(tx)] = tx
        if problem is not None:
            status, reason = problem
            extra = []
            if status == 420:
                extra = [("Unsupported", ", ".join(unsupported_options(request, SUPPORTED)))]
            elif status in (405, 501):
                extra = [("Allow", ALLOW)]
            elif status == 415:
                extra = [("Accept", ", ".join(CONTENT_TYPES))]
            self._reply(tx, request, status, reason, extra=extra, now=now)
            return
        handlers = {
            "INVITE": self._invite,
            "BYE": self._bye,
            "CANCEL": self._cancel,
            "OPTIONS": self._options,
            "INFO": self._info,
            "UPDATE": self._update,
        }
        handlers[method](tx, request, now)

    def _mark_received(self, request: Request, source: Target) -> None:
        """Record where the request really came from in its top Via (§18.2.1, RFC 3581 §4)."""
        vias = request.headers.get_all("Via")
        if not vias:
            return
        try:
            via = parse_via(vias[0])
        except ValueError:
            return
        changed = False
        if via.host.strip("[]") != source[0]:
            via.params["received"] = source[0]
            changed = True
        if "rport" in via.params:
            via.params["rport"] = str(source[1])
            via.params["received"] = source[0]
            changed = True
        if changed:
            request.headers.remove("Via")
            request.headers.add("Via", str(via))
            for rest in vias[1:]:
                request.headers.add("Via", rest)

    @staticmethod
    def _response_address(request: Request, source: Target) -> Target:
        """Where responses go (§18.2.2): back on a stream's connection; over UDP to the
        Via's address, or the source port when rport was asked (RFC 3581 §4)."""
        if reliable(source.transport):
            return source
        try:
            via = request.top_via
        except (ValueError, IndexError):
            return source
        if via.params.get("rport"):
            return source
        return Target(via.params.get("received") or source.host, via.port or 5060)

    def _invite(self, tx: Transaction, request: Request, now: float) -> None:
        if request.to_tag:
            self._reinvite(tx, request, now)
            return
        if not self.accepting:
            self._reply(tx, request, 503, "Service Unavailable (shutting down)", now=now)
            return
        try:
            timer = negotiate(request)
        except IntervalTooSmall as exc:
            self._reply(tx, request, 422, extra=[("Min-SE", str(MIN_SE))], now=now)
            logger.info("INVITE %s refused: %s", request.call_id, exc)
            return
        call = _Call(request.call_id, "inbound", request, tx, _token(), tx.address, timer=timer)
        self.calls[call.call_id] = call
        self._link(tx, call)
        self._reply(tx, request, 100, now=now)
        user = ""
        with contextlib.suppress(ValueError):
            user = parse_uri(request.uri).user or ""
        self._events.append(
            IncomingCall(
                call.call_id,
                user,
                _uri_text(request.headers.get("From")),
                _uri_text(request.headers.get("To")),
                request.uri,
                request.body,
                tx.address,
            )
        )

    def _reinvite(self, tx: Transaction, request: Request, now: float) -> None:
        call = self._call_for(request)
        if call is None or call.dialog is None:
            self._reply(tx, request, 481, now=now)
            return
        if call.state not in ("confirmed",):
            # §14.2: the call is not set up yet (or our 2xx awaits its ACK).
            self._reply(tx, request, 491, extra=[("Retry-After", "1")], now=now)
            return
        if not call.dialog.accept_remote_cseq(request):
            self._reply(tx, request, 500, "Server Internal Error (CSeq out of order)", now=now)
            return
        if call.reoffer_tx is not None:
            # §14.2: a re-INVITE while another is pending gets 500 with Retry-After.
            self._reply(tx, request, 500, extra=[("Retry-After", "1")], now=now)
            return
        call.dialog.update_target(request)
        call.reoffer_tx = tx
        self._link(tx, call)
        self._reply(tx, request, 100, now=now)
        self._events.append(Reoffer(call.call_id, request.body))

    def _update(self, tx: Transaction, request: Request, now: float) -> None:
        call = self._call_for(request)
        if call is None or call.dialog is None:
            self._reply(tx, request, 481, now=now)
            return
        if not call.dialog.accept_remote_cseq(request):
            self._reply(tx, request, 500, "Server Internal Error (CSeq out of order)", now=now)
            return
        call.dialog.update_target(request)
        if request.body:
            # An UPDATE with an offer (RFC 3311): answered like a re-INVITE, with no ACK.
            if call.reoffer_tx is not None:
                self._reply(tx, request, 500, extra=[("Retry-After", "1")], now=now)
                return
            call.reoffer_tx = tx
            self._link(tx, call)
            self._events.append(Reoffer(call.call_id, request.body))
            return
        extra = call.timer.headers() if call.timer is not None else []
        self._reply(tx, request, 200, extra=extra, now=now)

    def _ack(self, request: Request, now: float) -> None:
        call = self._call_for(request)
        if call is None or not call.awaiting_ack:
            return  # a retransmitted ACK, or one for a call already over
        call.awaiting_ack = False
        if call.state == "answered":
            call.state = "confirmed"
            self._events.append(CallConfirmed(call.call_id))
            if call.timer is not None and call.timer.we_refresh:
                self._schedule_refresh(call, now)
        if call.bye_pending:
            self._send_bye(call, now)

    def _bye(self, tx: Transaction, request: Request, now: float) -> None:
        call = self._call_for(request)
        if call is None:
            self._reply(tx, request, 481, now=now)
            return
        self._reply(tx, request, 200, now=now)
        if call.direction == "inbound" and call.state in ("offered", "early"):
            # §15.1.2: a BYE on an early dialog; the INVITE gets 487.
            self._reply(call.tx, call.invite, 487, now=now)
        self._end(call, "hung_up", "BYE", by_remote=True)

    def _cancel(self, tx: Transaction, request: Request, now: float) -> None:
        invite_tx = self._txs.get(("s", _server_branch(request), "INVITE"))
        if invite_tx is None:
            self._reply(tx, request, 481, now=now)
            return
        self._reply(tx, request, 200, now=now)
        call = self.calls.get(request.call_id)
        if call is not None and call.tx is invite_tx and call.state in ("offered", "early"):
            # §9.2: the INVITE gets 487; the call is over before it started.
            self._reply(invite_tx, call.invite, 487, now=now)
            self._end(call, "hung_up", "487", by_remote=True)

    def _options(self, tx: Transaction, request: Request, now: float) -> None:
        if not self.accepting:
            self._reply(tx, request, 503, "Service Unavailable (shutting down)", now=now)
            return
        extra = [
            ("Allow", ALLOW),
            ("Accept", "application/sdp"),
            ("Supported", ", ".join(sorted(SUPPORTED))),
        ]
        self._reply(tx, request, 200, extra=extra, now=now)

    def _info(self, tx: Transaction, request: Request, now: float) -> None:
        call = self._call_for(request)
        if call is None:
            self._reply(tx, request, 481, now=now)
            return
        self._reply(tx, request, 200, now=now)
        content_type = request.headers.get("Content-Type") or ""
        self._events.append(InfoReceived(call.call_id, content_type, request.body))

    def _call_for(self, request: Request) -> _Call | None:
        """The call an in-dialog request belongs to: same Call-ID and the dialog's two tags."""
        call = self.calls.get(request.call_id)
        if call is None or call.dialog is None:
            return None
        if {request.from_tag, request.to_tag} != {call.dialog.local_tag, call.dialog.remote_tag}:
            return None
        return call

    def _contact(
        self,
        request: Request | None = None,
        user: str = "callhook",
        *,
        transport: Transport = "udp",
    ) -> str:
        if request is not None:
            with contextlib.suppress(ValueError):
                user = parse_uri(request.uri).user or user
        return self.local.contact(user, transport)

    def _via(self, transport: Transport = "udp") -> str:
        return self.local.via(transport)

    # --- responses in (client transactions) ---------------------------------------------

    def _on_response(self, response: Response, now: float) -> None:
        problem = check_response(response)
        if problem is not None:
            logger.warning("SIP response dropped: %s", problem)  # §8.1.3.3
            return
        tx = self._txs.get(("c", response.branch or "", response.cseq[1]))
        if tx is not None:
            self._tx_outputs(tx, tx.receive(response, now), now)
            return
        call = self.calls.get(response.call_id)
        if (
            call is not None
            and call.direction == "outbound"
            and call.dialog is not None
            and call.ack
            and 200 <= response.status < 300
            and response.cseq == (call.invite.cseq[0], "INVITE")
            and response.from_tag == call.local_tag
            and response.to_tag == call.dialog.remote_tag
        ):
            # A 2xx retransmission after the INVITE transaction ended: ACK it again
            # (RFC 6026 §8.10: the UAC core answers 2xx that match its dialog).
            self._out.append((call.ack, self._hop(call)))
            return
        # A stray or forged response: it matches none of our transactions (§17.1.3).
        logger.debug("SIP response for no transaction of ours dropped")

    def _client_response(self, tx: Transaction, response: Response, now: float) -> None:
        call = self.calls.get(self._tx_call.get(id(tx), ""))
        if call is None:
            return
        method = tx.request.method
        if method == "INVITE" and tx is call.tx:
            self._invite_response(call, response, now)
        elif method in ("INVITE", "UPDATE"):
            self._refresh_response(call, tx, response, now)
        elif method == "BYE" and response.status >= 200:
            self._end(call, call_state="ended")

    def _invite_response(self, call: _Call, response: Response, now: float) -> None:
        status = response.status
        if status < 200:
            call.provisional = True
            if status > 100:
                if call.state == "offered":
                    call.state = "early"
                self._events.append(CallProgress(call.call_id, status))
            if call.cancel_wanted and not call.cancel_sent:
                self._send_cancel(call, now)
            return
        if status < 300:
            self._outbound_answered(call, response, now)
            return
        challenged = status in (401, 407) and call.credentials is not None
        if challenged and not call.cancel_wanted and self._authenticate(call, response, now):
            return
        self._end(call, cause_of(status), str(status), by_remote=True)

    def _outbound_answered(self, call: _Call, response: Response, now: float) -> None:
        if call.ack:
            self._out.append((call.ack, self._hop(call)))  # the 2xx again: ACK again
            return
        try:
            call.dialog = Dialog.as_uac(call.invite, response)
        except ValueError as exc:
            logger.warning("call %s: unusable 2xx: %s", call.call_id, exc)
            self._end(call, "failed", "502", by_remote=True)
            return
        # §13.2.2.4: the ACK carries the INVITE's credentials.
        extra = [
            (name, value)
            for name in ("Authorization", "Proxy-Authorization")
            if (value := call.invite.headers.get(name)) is not None
        ]
        ack, hop = self._in_dialog(call, "ACK", cseq=call.invite.cseq[0], extra=extra)
        call.ack = serialize(ack)
        self._out.append((call.ack, hop))
        if call.cancel_wanted:
            # The 2xx crossed our CANCEL: the call is up, so end it (§15).
            call.state = "confirmed"
            self._send_bye(call, now)
            return
        call.state = "confirmed"
        self._events.append(CallAnswered(call.call_id, response.body))

    def _authenticate(self, call: _Call, response: Response, now: float) -> bool:
        """Send the INVITE again with credentials; False when we must not (§22.1)."""
        assert call.credentials is not None
        header = "WWW-Authenticate" if response.status == 401 else "Proxy-Authenticate"
        answer = "Authorization" if response.status == 401 else "Proxy-Authorization"
        try:
            challenge = digest.best_challenge(response.headers.get_all(header))
        except digest.DigestError as exc:
            logger.warning("call %s: %s", call.call_id, exc)
            return False
        if call.auth_tries >= 1 and not challenge.stale:
            # The credentials we sent were refused: sending them again is pointless.
            logger.warning(
                "call %s: the credentials were refused (%d)", call.call_id, response.status
            )
            return False
        if call.auth_tries >= 2:
            return False
        call.auth_tries += 1
        invite = call.invite
        headers = invite.headers.copy()
        headers.remove("Via")
        headers.add("Via", self._via(call.peer.transport))
        headers.set("CSeq", f"{invite.cseq[0] + 1} INVITE")
        headers.remove(answer)
        headers.add(
            answer,
            digest.authorization(
                challenge,
                "INVITE",
                invite.uri,
                call.credentials.username,
                call.credentials.password,
            ),
        )
        call.invite = Request("INVITE", invite.uri, headers, invite.body)
        call.tx = self._start_client(call.invite, call.peer, now, call)
        return True

    def _tx_timeout(self, tx: Transaction, timer: str, now: float) -> None:
        call = self.calls.get(self._tx_call.get(id(tx), ""))
        if call is None:
            return
        if tx is call.tx and tx.kind is Kind.ICT:
            # Timer B (nobody answers at all) or Z (no final response after our CANCEL).
            self._end(call, "failed", "408", by_remote=True)
        elif tx.request.method == "BYE":
            self._end(call, call_state="ended")  # the peer is gone; nothing more to do
        elif tx.request.method in ("INVITE", "UPDATE"):
            logger.warning("call %s: session refresh got no answer; ending it", call.call_id)
            self._end(call, "dropped", "408", by_remote=True)

    # --- our 2xx, until the ACK ----------------------------------------------------------

    def _send_ok(self, call: _Call, tx: Transaction, response: Response, now: float) -> None:
        """Send a 2xx to an INVITE and keep sending it until the ACK (§13.3.1.4)."""
        self._respond(tx, response, now)
        call.ok = serialize(response)
        call.ok_to = tx.address
        call.awaiting_ack = True
        call.ok_interval = T1
        call.ok_give_up = now + 64 * T1
        call.ok_next = now + T1
        self._schedule(call.ok_next, "ok", call)

    def _retransmit_ok(self, call: _Call, now: float) -> None:
        if now >= call.ok_give_up:
            logger.warning("call %s: no ACK for our 2xx; hanging up", call.call_id)
            call.awaiting_ack = False
            self._send_bye(call, now)
            self._report(call, "dropped", "408", by_remote=False)
            return
        self._out.append((call.ok, call.ok_to))
        call.ok_interval = min(call.ok_interval * 2, T2)
        call.ok_next = min(now + call.ok_interval, call.ok_give_up)
        self._schedule(call.ok_next, "ok", call)

    # --- session refresh (RFC 4028, when we are the refresher) --------------------------------

    def _schedule_refresh(self, call: _Call, now: float) -> None:
        assert call.timer is not None
        call.refresh_at = now + call.timer.interval / 2  # §10
        self._schedule(call.refresh_at, "refresh", call)

    def _refresh(self, call: _Call, now: float) -> None:
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
        self, call: _Call, tx: Transaction, response: Response, now: float
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

    # --- call control from the application -------------------------------------------------

    def ring(self, call_id: str, now: float) -> None:
        """Send 180 Ringing for an inbound call (it makes an early dialog: §12.1.1)."""
        call = self.calls.get(call_id)
        if call is None or call.state not in ("offered", "early"):
            return
        call.state = "early"
        call.dialog = Dialog.as_uas(call.invite, call.local_tag)
        self._reply(call.tx, call.invite, 180, now=now)

    def answer(self, call_id: str, sdp: bytes, now: float) -> None:
        """Answer an inbound call with ``sdp``; the 2xx is retransmitted until the ACK."""
        call = self.calls.get(call_id)
        if call is None or call.state not in ("offered", "early"):
            return
        call.dialog = Dialog.as_uas(call.invite, call.local_tag)
        call.state = "answered"
        call.local_sdp = sdp
        response = make_response(
            call.invite,
            200,
            server=self.user_agent,
            to_tag=call.local_tag,
            contact=self._contact(call.invite, transport=call.peer.transport),
            extra=call.timer.headers() if call.timer is not None else [],
            body=sdp,
        )
        self._send_ok(call, call.tx, response, now)

    def reject(self, call_id: str, status: int, now: float, reason: str | None = None) -> None:
        """Refuse an inbound call that was not answered (486 busy, 603 decline, 488 ...)."""
        call = self.calls.get(call_id)
        if call is None or call.state not in ("offered", "early"):
            return
        self._reply(call.tx, call.invite, status, reason, now=now)
        self._end(call, "completed", str(status), by_remote=False)

    def answer_reoffer(self, call_id: str, sdp: bytes, now: float) -> None:
        """Answer the pending re-INVITE / UPDATE of a call with ``sdp``."""
        call = self.calls.get(call_id)
        if call is None or call.reoffer_tx is None:
            return
        tx, call.reoffer_tx = call.reoffer_tx, None
        call.local_sdp = sdp
        response = make_response(
            tx.request,
            200,
            server=self.user_agent,
            contact=self._contact(call.invite, transport=tx.address.transport),
            extra=call.timer.headers() if call.timer is not None else [],
            body=sdp,
        )
        if tx.request.method == "INVITE":
            response.headers.add(
                "Contact", self._contact(call.invite, transport=tx.address.transport)
            )
            self._send_ok(call, tx, response, now)
        else:
            self._respond(tx, response, now)

    def reject_reoffer(self, call_id: str, status: int, now: float) -> None:
        """Refuse the pending re-offer (488: nothing acceptable); the call goes on as it was."""
        call = self.calls.get(call_id)
        if call is None or call.reoffer_tx is None:
            return
        tx, call.reoffer_tx = call.reoffer_tx, None
        self._reply(tx, tx.request, status, now=now)

    def hang_up(self, call_id: str, now: float, cause: str = "completed") -> None:
        """End a call from our side, whatever state it is in."""
        call = self.calls.get(call_id)
        if call is None or call.state in ("ending", "ended") or call.reported:
            return
        if call.direction == "inbound" and call.state in ("offered", "early"):
            self.reject(call_id, 603, now)
            return
        if call.direction == "outbound" and call.state in ("offered", "early"):
            # §9.1: CANCEL once any provisional response came; until then, remember to.
            call.cancel_wanted = True
            if call.provisional:
                self._send_cancel(call, now)
            self._report(call, cause, "487", by_remote=False)
            return
        if call.awaiting_ack:
            call.bye_pending = True  # §15: not before the ACK (or the 2xx's timeout)
        else:
            self._send_bye(call, now)
        self._report(call, cause, "200", by_remote=False)

    def invite(
        self,
        target: str,
        sdp: bytes,
        now: float,
        *,
        from_user: str = "callhook",
        from_display: str | None = None,
        credentials: Credentials | None = None,
        address: Target | Address | None = None,
        from_host: str | None = None,
        route: str | None = None,
    ) -> str:
        """Place a call to ``target`` (a SIP URI) offering ``sdp``; returns its Call-ID.

        It goes to ``address`` if given (a trunk's proxy), else to the URI's host,
        over the URI's transport (``sips:`` or ``;transport=``) or the address's.
        ``from_host`` is the From URI's host (a trunk's domain; default ours);
        ``route`` a loose-routing proxy URI put in a Route header (§8.1.2).
        """
        uri = parse_uri(target)
        peer = Target(*address) if address is not None else target_of(uri)
        transport = peer.transport
        call_id = f"{_token()}@{self.host}"
        local_tag = _token()
        display = f'"{from_display}" ' if from_display else ""
        if from_host:
            from_uri = f"{'sips' if transport == 'tls' else 'sip'}:{from_user}@{from_host}"
        else:
            from_uri = self.local.uri(from_user, transport)
        headers = Headers()
        headers.add("Via", self._via(transport))
        headers.add("Max-Forwards", "70")
        if route:
            headers.add("Route", f"<{route}>")
        headers.add("From", f"{display}<{from_uri}>;tag={local_tag}")
        headers.add("To", f"<{target}>")
        headers.add("Call-ID", call_id)
        headers.add("CSeq", "1 INVITE")
        headers.add("Contact", self._contact(user=from_user, transport=transport))
        headers.add("Allow", ALLOW)
        headers.add("Supported", ", ".join(sorted(SUPPORTED)))
        headers.add("User-Agent", self.user_agent)
        headers.add("Content-Type", "application/sdp")
        request, peer = self._fit(Request("INVITE", target, headers, sdp), peer)
        tx, outputs = client(request, peer, now)
        call = _Call(call_id, "outbound", request, tx, local_tag, peer, credentials=credentials)
        call.local_sdp = sdp
        self.calls[call_id] = call
        self._txs[self._tx_key(tx)] = tx
        self._link(tx, call)
        self._tx_outputs(tx, outputs, now)
        return call_id

    # --- ending ---------------------------------------------------------------------------

    def _hop(self, call: _Call) -> Target:
        """Where in-dialog requests go; the peer's address when the dialog names no usable one."""
        if call.dialog is not None:
            try:
                return call.dialog.next_hop(call.peer.transport)
            except ValueError as exc:
                logger.warning("call %s: %s; sending to %s", call.call_id, exc, call.peer)
        return call.peer

    def _in_dialog(self, call: _Call, method: str, **kwargs: Any) -> tuple[Request, Target]:
        """A request of ``call``'s dialog, with the Via and Contact of the transport it
        goes over, and where it goes."""
        assert call.dialog is not None
        hop = self._hop(call)
        request = call.dialog.request(
            method,
            self._via(hop.transport),
            contact=self._contact(user="callhook", transport=hop.transport),
            **kwargs,
        )
        return request, hop

    def _send_bye(self, call: _Call, now: float) -> None:
        if call.dialog is None:
            self._end(call, call_state="ended")
            return
        call.bye_pending = False
        call.state = "ending"
        bye, hop = self._in_dialog(call, "BYE")
        self._start_client(bye, hop, now, call)

    def _send_cancel(self, call: _Call, now: float) -> None:
        """CANCEL our INVITE (§9.1): same branch, same request-URI, CSeq number, Route."""
        invite = call.invite
        headers = Headers()
        headers.add("Via", invite.headers.get_all("Via")[0])
        for name in ("Max-Forwards", "From", "To", "Call-ID"):
            value = invite.headers.get(name)
            if value is not None:
                headers.add(name, value)
        headers.add("CSeq", f"{invite.cseq[0]} CANCEL")
        for route in invite.headers.get_all("Route"):
            headers.add("Route", route)
        call.cancel_sent = True
        call.tx.cancelled(now)
        self._schedule(call.tx.deadline, "tx", call.tx)
        self._start_client(Request("CANCEL", invite.uri, headers), call.peer, now, call)

    def _end(
        self,
        call: _Call,
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

    def _report(self, call: _Call, cause: str, raw: str, *, by_remote: bool) -> None:
        """Tell the application the call is over (once); signalling may still finish after."""
        if not call.reported:
            call.reported = True
            self._events.append(CallTerminated(call.call_id, cause, raw, by_remote))


def _server_branch(request: Request) -> str:
    """The key a server transaction is matched by (§17.2.3).

    RFC 3261 peers put a unique branch starting with the magic cookie in their
    Via. For RFC 2543 peers (no cookie) the transaction is identified by the
    Call-ID, the From tag, the CSeq number and the top Via instead; the To tag
    is left out so that the ACK of an error response still matches its INVITE.
    """
    branch = request.branch or ""
    if branch.startswith("z9hG4bK"):
        return branch
    vias = request.headers.get_all("Via")
    parts = (
        "2543",
        request.call_id,
        request.from_tag or "",
        str(request.cseq[0]),
        vias[0] if vias else "",
    )
    return "|".join(parts)


def _uri_text(value: str | None) -> str:
    if not value:
        return ""
    try:
        return str(parse_name_addr(value).uri)
    except ValueError:
        return value
