"""The SIP user agent core: calls in and out over UDP, sans-IO.

Theory of operation
-------------------
:class:`Agent` is callhook's SIP endpoint (RFC 3261 §8 UA behaviour, §9
CANCEL, §11 OPTIONS, §12 dialogs, §13-14 INVITE and re-INVITE, §15 BYE;
RFC 3581 rport; RFC 4028 session timers tolerated). It does no IO, like
aioquic's connection: the adapter feeds it

* ``receive(data, source, now)`` for each datagram,
* ``handle_timer(now)`` when ``deadline`` has come,
* call-control commands from the application side (``answer``, ``ring``,
  ``reject``, ``hang_up``, ``invite``, ``answer_reoffer``),

and after each, takes the datagrams to send (``take_datagrams``) and the call
events that happened (``take_events``: an incoming call, an answer, a
re-offer, DTMF in an INFO, the end of a call). Transactions (``transaction.py``)
make each request/response exchange reliable; the agent owns the dialogs and
the calls.

What the agent answers on its own: ``100 Trying`` at once to an INVITE;
``200`` to OPTIONS (``503`` while shutting down), BYE, CANCEL, INFO and
UPDATE; ``487`` to a cancelled INVITE; ``481`` to requests for unknown
dialogs; ``405`` with ``Allow`` to methods it does not implement; ``420`` for
unsupported ``Require`` extensions (``100rel`` included); ``422`` for a
``Session-Expires`` below 90 s; ``500`` for an out-of-order CSeq; ``503`` to
new INVITEs while shutting down; ``400`` (with the reason) to requests that
are not well-formed. It retransmits its ``2xx`` to an INVITE until the ACK
comes (§13.3.1.4) and, if none comes within 64*T1, sends BYE.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import secrets
from collections import deque
from dataclasses import dataclass
from typing import Literal

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

logger = logging.getLogger("callhook.sip")

METHODS = ("INVITE", "ACK", "CANCEL", "BYE", "OPTIONS", "INFO", "UPDATE")
ALLOW = ", ".join(METHODS)
CONTENT_TYPES = ("application/sdp", "application/dtmf-relay", "application/dtmf")
SUPPORTED = {"timer"}
MIN_SE = 90

# --- events for the application side -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IncomingCall:
    """A new INVITE: answer, ring or reject it."""

    call_id: str
    user: str  # the request-URI's user part: which application to run
    from_uri: str
    to_uri: str
    request_uri: str
    offer: bytes
    source: Address


@dataclass(frozen=True, slots=True)
class CallProgress:
    """An outbound call got a provisional response (180 ringing, 183 progress)."""

    call_id: str
    status: int


@dataclass(frozen=True, slots=True)
class CallAnswered:
    """An outbound call was answered (the ACK is sent): ``answer`` is the callee's SDP."""

    call_id: str
    answer: bytes


@dataclass(frozen=True, slots=True)
class CallConfirmed:
    """The ACK for our 2xx arrived: the inbound call is fully set up."""

    call_id: str


@dataclass(frozen=True, slots=True)
class Reoffer:
    """A re-INVITE or UPDATE with a new offer (hold, unhold, new media address)."""

    call_id: str
    offer: bytes


@dataclass(frozen=True, slots=True)
class InfoReceived:
    """An INFO in the call's dialog (DTMF relay): already answered 200."""

    call_id: str
    content_type: str
    body: bytes


@dataclass(frozen=True, slots=True)
class CallTerminated:
    """The call is over. ``cause`` is a final page ``call_cause``, ``raw_cause`` the SIP status."""

    call_id: str
    cause: str
    raw_cause: str
    by_remote: bool


CallEvent = (
    IncomingCall
    | CallProgress
    | CallAnswered
    | CallConfirmed
    | Reoffer
    | InfoReceived
    | CallTerminated
)


@dataclass(frozen=True)
class Credentials:
    """What a trunk that challenges (401/407) wants to hear."""

    username: str
    password: str


# --- calls --------------------------------------------------------------------------------


@dataclass
class _Call:
    call_id: str
    direction: Literal["inbound", "outbound"]
    invite: Request
    tx: Transaction
    local_tag: str
    peer: Address  # inbound: where the INVITE came from; outbound: where it went
    state: Literal["offered", "early", "answered", "confirmed", "ending", "ended"] = "offered"
    dialog: Dialog | None = None
    ok: bytes = b""  # our 2xx to the INVITE, retransmitted until the ACK
    ok_next: float = 0.0
    ok_interval: float = T1
    ok_give_up: float = 0.0
    bye_pending: bool = False
    reoffer_tx: Transaction | None = None
    credentials: Credentials | None = None
    auth_tries: int = 0
    cancelled: bool = False
    session_expires: str | None = None
    peer_response: Address = ("", 0)  # where our responses to the INVITE go
    reported: bool = False  # CallTerminated was emitted


def _token() -> str:
    return secrets.token_hex(8)


def _branch() -> str:
    return "z9hG4bK" + secrets.token_hex(10)


class Agent:
    """callhook's SIP user agent (see the module docstring)."""

    def __init__(self, host: str, port: int, *, user_agent: str = "callhook") -> None:
        self.host = host
        self.port = port
        self.user_agent = user_agent
        self.accepting = True
        self.calls: dict[str, _Call] = {}
        self._txs: dict[tuple[str, str, str], Transaction] = {}  # (side, branch, method)
        self._tx_call: dict[int, str] = {}  # id(transaction) -> call_id
        self._timers: list[tuple[float, int, str, object]] = []
        self._seq = itertools.count()
        self._out: list[tuple[bytes, Address]] = []
        self._events: deque[CallEvent] = deque()

    # --- the adapter's side ---------------------------------------------------------------

    def take_datagrams(self) -> list[tuple[bytes, Address]]:
        out, self._out = self._out, []
        return out

    def take_events(self) -> list[CallEvent]:
        events = list(self._events)
        self._events.clear()
        return events

    @property
    def deadline(self) -> float | None:
        while self._timers:
            when, _, kind, obj = self._timers[0]
            if self._timer_valid(when, kind, obj):
                return when
            heapq.heappop(self._timers)
        return None

    def _timer_valid(self, when: float, kind: str, obj: object) -> bool:
        if kind == "tx":
            assert isinstance(obj, Transaction)
            return not obj.terminated and obj.deadline == when
        assert isinstance(obj, _Call)
        return obj.state == "answered" and obj.ok_next == when and obj.call_id in self.calls

    def _schedule(self, when: float | None, kind: str, obj: object) -> None:
        if when is not None:
            heapq.heappush(self._timers, (when, next(self._seq), kind, obj))

    def handle_timer(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            when, _, kind, obj = heapq.heappop(self._timers)
            if not self._timer_valid(when, kind, obj):
                continue
            if kind == "tx":
                assert isinstance(obj, Transaction)
                self._tx_outputs(obj, obj.on_timer(now), now)
            else:
                assert isinstance(obj, _Call)
                self._retransmit_ok(obj, now)

    def receive(self, data: bytes, source: Address, now: float) -> None:
        """A datagram from ``source``."""
        if not data.strip(b"\r\n"):
            return  # keep-alive (RFC 5626 §4.4.1 CRLF ping)
        try:
            message = parse(data)
        except SipMessageError as exc:
            logger.warning("SIP from %s:%s not well-formed: %s", *source, exc.reason)
            self._reply_to_garbage(source, exc)
            return
        if isinstance(message, Response):
            self._on_response(message, now)
        else:
            self._request(message, source, now)

    # --- transactions -----------------------------------------------------------------

    def _tx_outputs(self, tx: Transaction, outputs: list[Output], now: float) -> None:
        for out in outputs:
            if isinstance(out, Transmit):
                self._out.append((out.data, out.address))
            elif isinstance(out, Deliver) and isinstance(out.message, Response):
                self._client_response(tx, out.message, now)
            elif isinstance(out, Timeout):
                self._tx_timeout(tx, out.timer, now)
        if tx.terminated:
            self._txs.pop(self._tx_key(tx), None)
            self._tx_call.pop(id(tx), None)
        else:
            self._schedule(tx.deadline, "tx", tx)

    @staticmethod
    def _tx_key(tx: Transaction) -> tuple[str, str, str]:
        side = "c" if tx.kind in (Kind.ICT, Kind.NICT) else "s"
        branch, method = tx.key
        return (side, branch, method)

    def _start_client(self, request: Request, address: Address, now: float, call_id: str) -> None:
        tx, outputs = client(request, address, now)
        self._txs[self._tx_key(tx)] = tx
        self._tx_call[id(tx)] = call_id
        self._tx_outputs(tx, outputs, now)

    def _respond(self, tx: Transaction, response: Response, now: float) -> None:
        self._tx_outputs(tx, tx.respond(response, now), now)

    # --- requests in ------------------------------------------------------------------

    def _request(self, request: Request, source: Address, now: float) -> None:
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
        tx = server(request, self._response_address(request, source))
        tx.match = key[1]
        self._txs[self._tx_key(tx)] = tx
        problem = check_request(request, SUPPORTED, methods=METHODS, content_types=CONTENT_TYPES)
        if problem is not None:
            status, reason = problem
            extra = []
            if status == 420:
                extra = [("Unsupported", ", ".join(unsupported_options(request, SUPPORTED)))]
            elif status == 405:
                extra = [("Allow", ALLOW)]
            elif status == 415:
                extra = [("Accept", ", ".join(CONTENT_TYPES))]
            self._respond(tx, self._make_response(request, status, reason, extra=extra), now)
            return
        handler = {
            "INVITE": self._invite,
            "BYE": self._bye,
            "CANCEL": self._cancel,
            "OPTIONS": self._options,
            "INFO": self._info,
            "UPDATE": self._update,
        }.get(method)
        if handler is None:
            self._respond(tx, self._make_response(request, 405, extra=[("Allow", ALLOW)]), now)
            return
        handler(tx, request, source, now)

    def _mark_received(self, request: Request, source: Address) -> None:
        """Record where the request really came from in its top Via (§18.2.1, RFC 3581 §4)."""
        vias = request.headers.get_all("Via")
        if not vias:
            return
        try:
            via = parse_via(vias[0])
        except ValueError:
            return
        changed = False
        if via.host != source[0]:
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
    def _response_address(request: Request, source: Address) -> Address:
        """Where responses go: §18.2.2 with RFC 3581 (the source port when rport was asked)."""
        try:
            via = request.top_via
        except (ValueError, IndexError):
            return source
        if via.params.get("rport"):
            return source
        return (via.params.get("received") or source[0], via.port or 5060)

    def _invite(self, tx: Transaction, request: Request, source: Address, now: float) -> None:
        if request.to_tag:
            self._reinvite(tx, request, now)
            return
        if not self.accepting:
            self._respond(
                tx, self._make_response(request, 503, "Service Unavailable (shutting down)"), now
            )
            return
        expires = request.headers.get("Session-Expires")
        if expires is not None:
            try:
                seconds = int(expires.split(";", 1)[0].strip())
            except ValueError:
                seconds = MIN_SE
            if seconds < MIN_SE:
                extra = [("Min-SE", str(MIN_SE))]
                self._respond(tx, self._make_response(request, 422, extra=extra), now)
                return
        call = _Call(request.call_id, "inbound", request, tx, _token(), source)
        call.session_expires = expires
        self.calls[call.call_id] = call
        self._tx_call[id(tx)] = call.call_id
        self._respond(tx, self._make_response(request, 100), now)
        try:
            ruri = parse_uri(request.uri)
            user = ruri.user or ""
        except ValueError:
            user = ""
        self._events.append(
            IncomingCall(
                call.call_id,
                user,
                _uri_text(request.headers.get("From")),
                _uri_text(request.headers.get("To")),
                request.uri,
                request.body,
                source,
            )
        )

    def _reinvite(self, tx: Transaction, request: Request, now: float) -> None:
        call = self._call_for(request)
        if call is None or call.dialog is None:
            self._respond(tx, self._make_response(request, 481), now)
            return
        if not call.dialog.accept_remote_cseq(request):
            self._respond(tx, self._make_response(request, 500, "CSeq out of order"), now)
            return
        if call.reoffer_tx is not None:
            # §14.2: a re-INVITE while another is pending gets 500 with Retry-After.
            self._respond(tx, self._make_response(request, 500, extra=[("Retry-After", "1")]), now)
            return
        call.dialog.update_target(request)
        call.reoffer_tx = tx
        self._tx_call[id(tx)] = call.call_id
        self._respond(tx, self._make_response(request, 100), now)
        self._events.append(Reoffer(call.call_id, request.body))

    def _update(self, tx: Transaction, request: Request, source: Address, now: float) -> None:
        call = self._call_for(request)
        if call is None or call.dialog is None:
            self._respond(tx, self._make_response(request, 481), now)
            return
        if request.body:
            # An UPDATE with an offer: answered like a re-INVITE, without an ACK.
            call.dialog.update_target(request)
            call.reoffer_tx = tx
            self._tx_call[id(tx)] = call.call_id
            self._events.append(Reoffer(call.call_id, request.body))
            return
        self._respond(tx, self._make_response(request, 200, extra=self._timer_headers(call)), now)

    def _ack(self, request: Request, now: float) -> None:
        call = self._call_for(request)
        if call is None or call.state != "answered":
            return  # a retransmitted ACK, or one for a call already over
        call.state = "confirmed"
        self._events.append(CallConfirmed(call.call_id))
        if call.bye_pending:
            self._send_bye(call, now)

    def _bye(self, tx: Transaction, request: Request, source: Address, now: float) -> None:
        call = self._call_for(request)
        if call is None:
            self._respond(tx, self._make_response(request, 481), now)
            return
        self._respond(tx, self._make_response(request, 200), now)
        call.state = "ended"
        self._report(call, "hung_up", "BYE", by_remote=True)

    def _cancel(self, tx: Transaction, request: Request, source: Address, now: float) -> None:
        invite_tx = self._txs.get(("s", _server_branch(request), "INVITE"))
        if invite_tx is None:
            self._respond(tx, self._make_response(request, 481), now)
            return
        self._respond(tx, self._make_response(request, 200), now)
        call = self.calls.get(request.call_id)
        if call is not None and call.state in ("offered", "early"):
            # §9.2: the INVITE gets 487, the call is over before it started.
            call.cancelled = True
            response = self._make_response(call.invite, 487, to_tag=call.local_tag)
            self._respond(invite_tx, response, now)
            call.state = "ended"
            self._report(call, "hung_up", "487", by_remote=True)

    def _options(self, tx: Transaction, request: Request, source: Address, now: float) -> None:
        if not self.accepting:
            self._respond(
                tx, self._make_response(request, 503, "Service Unavailable (shutting down)"), now
            )
            return
        extra = [("Accept", "application/sdp"), ("Supported", ", ".join(sorted(SUPPORTED)))]
        self._respond(tx, self._make_response(request, 200, extra=[("Allow", ALLOW), *extra]), now)

    def _info(self, tx: Transaction, request: Request, source: Address, now: float) -> None:
        call = self._call_for(request)
        if call is None:
            self._respond(tx, self._make_response(request, 481), now)
            return
        self._respond(tx, self._make_response(request, 200), now)
        content_type = request.headers.get("Content-Type") or ""
        self._events.append(InfoReceived(call.call_id, content_type, request.body))

    def _call_for(self, request: Request) -> _Call | None:
        call = self.calls.get(request.call_id)
        if call is None or (call.dialog is None and request.method != "ACK"):
            return call if call is not None and request.method == "ACK" else None
        tags = {request.from_tag, request.to_tag}
        if call.dialog is not None and tags != {call.dialog.local_tag, call.dialog.remote_tag}:
            return None
        return call

    # --- building responses -------------------------------------------------------------

    def _make_response(
        self,
        request: Request,
        status: int,
        reason: str | None = None,
        *,
        extra: list[tuple[str, str]] | None = None,
        to_tag: str | None = None,
        body: bytes = b"",
    ) -> Response:
        """A response to ``request`` (§8.2.6): Via, From, To, Call-ID, CSeq copied."""
        headers = Headers()
        for via in request.headers.get_all("Via"):
            headers.add("Via", via)
        for name in ("From", "To", "Call-ID", "CSeq"):
            value = request.headers.get(name)
            if value is not None:
                headers.add(name, value)
        if status > 100 and not request.to_tag:
            call = self.calls.get(request.call_id)
            tag = to_tag or (call.local_tag if call is not None else _token())
            headers.set("To", f"{request.headers.get('To')};tag={tag}")
        if request.method == "INVITE" and 100 < status < 300:
            # §12.1.1: the UAS copies Record-Route into responses that create a dialog.
            for route in request.headers.get_all("Record-Route"):
                headers.add("Record-Route", route)
            headers.add("Contact", self._contact(request))
        headers.add("Server", self.user_agent)
        for name, value in extra or []:
            headers.add(name, value)
        if body:
            headers.add("Content-Type", "application/sdp")
        return Response(status, reason or REASONS.get(status, ""), headers, body)

    def _contact(self, request: Request | None = None, user: str = "callhook") -> str:
        if request is not None:
            with contextlib.suppress(ValueError):
                user = parse_uri(request.uri).user or user
        return f"<sip:{user}@{self.host}:{self.port}>"

    def _via(self) -> str:
        return f"SIP/2.0/UDP {self.host}:{self.port};branch={_branch()};rport"

    def _timer_headers(self, call: _Call) -> list[tuple[str, str]]:
        """RFC 4028: echo the session interval; the caller refreshes (we never need to)."""
        if call.session_expires is None:
            return []
        seconds = call.session_expires.split(";", 1)[0].strip()
        extra = [("Session-Expires", f"{seconds};refresher=uac")]
        supported = {
            s.strip() for v in call.invite.headers.get_all("Supported") for s in v.split(",")
        }
        if "timer" in supported:
            extra.append(("Require", "timer"))
        return extra

    def _reply_to_garbage(self, source: Address, exc: SipMessageError) -> None:
        """Answer a request that is not well-formed with its status and the reason (§8.2).

        Only when it was a request and the parser could read what a response
        copies (Via, From, To, Call-ID, CSeq); a mangled response or noise is
        dropped. Either way it has been logged.
        """
        salvaged = exc.headers
        if not exc.is_request or salvaged is None:
            return
        headers = Headers()
        for name in ("Via", "From", "To", "Call-ID", "CSeq"):
            values = salvaged.get_all(name) if name == "Via" else [salvaged.get(name)]
            for value in values:
                if value:
                    headers.add(name, value)
        if not all(headers.get(n) for n in ("Via", "From", "To", "Call-ID", "CSeq")):
            return
        status = exc.status if 400 <= exc.status < 700 else 400
        headers.add("Server", self.user_agent)
        reason = f"{REASONS.get(status, 'Bad Request')} ({exc.reason})"[:200]
        self._out.append((serialize(Response(status, reason, headers)), source))

    # --- responses in (client transactions) ---------------------------------------------

    def _on_response(self, response: Response, now: float) -> None:
        problem = check_response(response)
        if problem is not None:
            logger.warning("SIP response dropped: %s", problem)  # §8.1.3.3
            return
        method = response.cseq[1]
        tx = self._txs.get(("c", response.branch or "", method))
        if tx is not None:
            self._tx_outputs(tx, tx.receive(response, now), now)
            return
        call = self.calls.get(response.call_id)
        if call is not None and method == "INVITE" and 200 <= response.status < 300:
            self._outbound_answered(call, response, now)  # a 2xx retransmission: ACK again

    def _client_response(self, tx: Transaction, response: Response, now: float) -> None:
        call = self.calls.get(self._tx_call.get(id(tx), ""))
        if call is None:
            return
        method = tx.request.method
        if method == "INVITE":
            self._invite_response(call, tx, response, now)
        elif method == "BYE" and response.status >= 200:
            call.state = "ended"

    def _invite_response(
        self, call: _Call, tx: Transaction, response: Response, now: float
    ) -> None:
        status = response.status
        if status < 200:
            if status > 100:
                if call.state == "offered":
                    call.state = "early"
                self._events.append(CallProgress(call.call_id, status))
            if call.cancelled and call.state == "early":
                self._send_cancel(call, now)
            return
        if status < 300:
            self._outbound_answered(call, response, now)
            return
        if status in (401, 407) and call.credentials is not None and call.auth_tries < 2:
            self._authenticate(call, response, now)
            return
        call.state = "ended"
        self._report(call, _cause_of(status), str(status), by_remote=True)

    def _outbound_answered(self, call: _Call, response: Response, now: float) -> None:
        if call.dialog is None:
            call.dialog = Dialog.as_uac(call.invite, response)
        ack = call.dialog.request(
            "ACK", self._via(), contact=self._contact(user="callhook"), cseq=call.invite.cseq[0]
        )
        self._out.append((serialize(ack), call.dialog.next_hop()))
        if call.state in ("offered", "early"):
            if call.cancelled:
                call.state = "confirmed"
                self._send_bye(call, now)
                return
            call.state = "confirmed"
            self._events.append(CallAnswered(call.call_id, response.body))

    def _authenticate(self, call: _Call, response: Response, now: float) -> None:
        assert call.credentials is not None
        header = "WWW-Authenticate" if response.status == 401 else "Proxy-Authenticate"
        answer = "Authorization" if response.status == 401 else "Proxy-Authorization"
        try:
            challenge = digest.best_challenge(response.headers.get_all(header))
        except digest.DigestError as exc:
            logger.warning("call %s: %s", call.call_id, exc)
            call.state = "ended"
            self._report(call, "failed", str(response.status), by_remote=True)
            return
        call.auth_tries += 1
        invite = call.invite
        headers = invite.headers.copy()
        headers.remove("Via")
        headers.add("Via", self._via())
        headers.set("CSeq", f"{invite.cseq[0] + 1} INVITE")
        headers.remove(answer)
        value = digest.authorization(
            challenge, "INVITE", invite.uri, call.credentials.username, call.credentials.password
        )
        headers.add(answer, value)
        call.invite = Request("INVITE", invite.uri, headers, invite.body)
        self._start_client(call.invite, call.peer, now, call.call_id)
        call.tx = self._txs[("c", call.invite.branch or "", "INVITE")]

    def _tx_timeout(self, tx: Transaction, timer: str, now: float) -> None:
        call = self.calls.get(self._tx_call.get(id(tx), ""))
        if call is None:
            return
        if tx.kind is Kind.ICT and call.state in ("offered", "early"):
            call.state = "ended"
            self._report(call, "failed", "408", by_remote=True)  # Timer B: no answer at all
        elif tx.request.method == "BYE":
            call.state = "ended"  # the peer is gone; nothing more to do

    # --- our 2xx, until the ACK ----------------------------------------------------------

    def _retransmit_ok(self, call: _Call, now: float) -> None:
        if now >= call.ok_give_up:
            # §13.3.1.4: no ACK within 64*T1: confirm and end the dialog with BYE.
            logger.warning("call %s: no ACK for our 2xx; hanging up", call.call_id)
            self._send_bye(call, now)
            self._report(call, "dropped", "408", by_remote=False)
            return
        self._out.append((call.ok, call.peer_response))
        call.ok_interval = min(call.ok_interval * 2, T2)
        call.ok_next = now + call.ok_interval
        self._schedule(call.ok_next, "ok", call)

    # --- call control from the application -------------------------------------------------

    def ring(self, call_id: str, now: float) -> None:
        """Send 180 Ringing for an inbound call."""
        call = self.calls.get(call_id)
        if call is None or call.state not in ("offered", "early"):
            return
        call.state = "early"
        self._respond(call.tx, self._make_response(call.invite, 180), now)

    def answer(self, call_id: str, sdp: bytes, now: float) -> None:
        """Answer an inbound call with ``sdp``; the 2xx is retransmitted until the ACK."""
        call = self.calls.get(call_id)
        if call is None or call.state not in ("offered", "early"):
            return
        response = self._make_response(call.invite, 200, extra=self._timer_headers(call), body=sdp)
        call.dialog = Dialog.as_uas(call.invite, call.local_tag)
        call.state = "answered"
        self._respond(call.tx, response, now)
        call.ok = serialize(response)
        call.peer_response = call.tx.address
        call.ok_interval = T1
        call.ok_next = now + T1
        call.ok_give_up = now + 64 * T1
        self._schedule(call.ok_next, "ok", call)

    def reject(self, call_id: str, status: int, now: float, reason: str | None = None) -> None:
        """Refuse an inbound call that was not answered (486 busy, 603 decline, 488 ...)."""
        call = self.calls.get(call_id)
        if call is None or call.state not in ("offered", "early"):
            return
        self._respond(call.tx, self._make_response(call.invite, status, reason), now)
        call.state = "ended"
        self._report(call, "completed", str(status), by_remote=False)

    def answer_reoffer(self, call_id: str, sdp: bytes, now: float) -> None:
        """Answer the pending re-INVITE / UPDATE of a call with ``sdp``."""
        call = self.calls.get(call_id)
        if call is None or call.reoffer_tx is None:
            return
        tx, call.reoffer_tx = call.reoffer_tx, None
        response = self._make_response(tx.request, 200, extra=self._timer_headers(call), body=sdp)
        if tx.request.method == "INVITE":
            response.headers.add("Contact", self._contact(call.invite))
        self._respond(tx, response, now)

    def reject_reoffer(self, call_id: str, status: int, now: float) -> None:
        """Refuse the pending re-offer (488: nothing acceptable); the call goes on as it was."""
        call = self.calls.get(call_id)
        if call is None or call.reoffer_tx is None:
            return
        tx, call.reoffer_tx = call.reoffer_tx, None
        self._respond(tx, self._make_response(tx.request, status), now)

    def hang_up(self, call_id: str, now: float, cause: str = "completed") -> None:
        """End a call from our side, whatever state it is in."""
        call = self.calls.get(call_id)
        if call is None or call.state in ("ending", "ended") or call.reported:
            return
        if call.direction == "inbound" and call.state in ("offered", "early"):
            self.reject(call_id, 603, now)
            return
        if call.state == "answered":
            call.bye_pending = True  # §15: not before the ACK (or the 2xx's timeout)
        elif call.direction == "outbound" and call.state in ("offered", "early"):
            # §9.1: CANCEL once a provisional response came; until then, remember to.
            call.cancelled = True
            if call.state == "early":
                self._send_cancel(call, now)
            self._report(call, cause, "487", by_remote=False)
            return
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
        address: Address | None = None,
    ) -> str:
        """Place a call to ``target`` (a SIP URI) offering ``sdp``; returns its Call-ID."""
        uri = parse_uri(target)
        call_id = f"{_token()}@{self.host}"
        local_tag = _token()
        display = f'"{from_display}" ' if from_display else ""
        headers = Headers()
        headers.add("Via", self._via())
        headers.add("Max-Forwards", "70")
        headers.add("From", f"{display}<sip:{from_user}@{self.host}:{self.port}>;tag={local_tag}")
        headers.add("To", f"<{target}>")
        headers.add("Call-ID", call_id)
        headers.add("CSeq", "1 INVITE")
        headers.add("Contact", self._contact(user=from_user))
        headers.add("Allow", ALLOW)
        headers.add("Supported", ", ".join(sorted(SUPPORTED)))
        headers.add("User-Agent", self.user_agent)
        headers.add("Content-Type", "application/sdp")
        request = Request("INVITE", target, headers, sdp)
        peer = address or (uri.host, uri.port or 5060)
        tx_key = ("c", request.branch or "", "INVITE")
        self._start_client(request, peer, now, call_id)
        tx = self._txs[tx_key]
        call = _Call(call_id, "outbound", request, tx, local_tag, peer, credentials=credentials)
        self.calls[call_id] = call
        self._tx_call[id(tx)] = call_id
        return call_id

    # --- ending ---------------------------------------------------------------------------

    def _send_bye(self, call: _Call, now: float) -> None:
        if call.dialog is None:
            return
        call.bye_pending = False
        call.state = "ending"
        bye = call.dialog.request("BYE", self._via(), contact=self._contact(user="callhook"))
        self._start_client(bye, call.dialog.next_hop(), now, call.call_id)

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
        self._start_client(Request("CANCEL", invite.uri, headers), call.peer, now, call.call_id)
        call.cancelled = False  # sent

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
    return "|".join(
        (
            "2543",
            request.call_id,
            request.from_tag or "",
            str(request.cseq[0]),
            vias[0] if vias else "",
        )
    )


def _uri_text(value: str | None) -> str:
    if not value:
        return ""
    try:
        return str(parse_name_addr(value).uri)
    except ValueError:
        return value


def _cause_of(status: int) -> str:
    """The final page's call_cause for an outbound call's final failure response."""
    if status in (486, 600):
        return "busy"
    if status in (408, 480, 487):
        return "no_answer"
    if status in (404, 410, 484, 485, 604):
        return "unobtainable"
    return "failed"


REASONS = {
    100: "Trying",
    180: "Ringing",
    183: "Session Progress",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    415: "Unsupported Media Type",
    416: "Unsupported URI Scheme",
    420: "Bad Extension",
    422: "Session Interval Too Small",
    480: "Temporarily Unavailable",
    481: "Call/Transaction Does Not Exist",
    483: "Too Many Hops",
    486: "Busy Here",
    487: "Request Terminated",
    488: "Not Acceptable Here",
    491: "Request Pending",
    500: "Server Internal Error",
    503: "Service Unavailable",
    505: "Version Not Supported",
    603: "Decline",
}
