"""The server half of callhook's SIP user agent (UAS core, RFC 3261 §8.2, §13.3, §14-15). Sans-IO.

Requests that come in (INVITE, re-INVITE and UPDATE, ACK, BYE, CANCEL, OPTIONS,
INFO, NOTIFY of a transfer's progress, and REGISTER when callhook is its users'
registrar) and what the application answers to an inbound call (``ring``,
``answer``, ``reject``, re-offers), with our 2xx repeated until its ACK (§13.3.1.4).
An INVITE whose From host is callhook's own (its address, or one of ``[sip]
domains``: where its users' addresses are) is challenged (401, §22.2) until it
carries the From user's right digest credentials (``registrar.py``), whatever
that user is: a name that is no user gets the same 401 and, with any digest,
the same 403, so the answers tell no user names (docs/security.md). Callers from
other domains (trunks, other callers) are not challenged. Builds on
:class:`~callhook.sip.core.Core` (through ``referral.py``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re

from callhook.sip import provenance
from callhook.sip.callstate import Call, new_tag
from callhook.sip.checks import check_request, unsupported_options
from callhook.sip.core import (
    CONTENT_TYPES,
    HAIRPIN,
    SUPPORTED,
    uri_text,
)
from callhook.sip.dialog import Dialog
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
    CallConfirmed,
    IncomingCall,
    InfoReceived,
    Reoffer,
)
from callhook.sip.referral import Referral
from callhook.sip.registrar import Answer
from callhook.sip.responses import make_response
from callhook.sip.sessiontimer import MIN_SE, IntervalTooSmall, negotiate
from callhook.sip.transaction import (
    T1,
    T2,
    Address,
    Transaction,
    server,
)
from callhook.sip.transport import (
    Target,
    reliable,
)

logger = logging.getLogger("callhook.sip")


class Uas(Referral):
    """Requests in, and the answers to inbound calls."""

    def refuse(self, data: bytes, source: Target | Address, now: float) -> None:
        """Answer a request from a source outside ``[security] allow`` with 403, the same
        for every user it names (a scanner learns nothing), statelessly (§8.2.6: no
        transaction is kept for it), sent where any response goes (its source port when
        the Via asks rport, RFC 3581). Anything else (an ACK, a response, garbage) is
        dropped. Never raises."""
        source = Target(*source)
        try:
            message = parse(data)
            if not isinstance(message, Request) or message.method == "ACK":
                return
            self._mark_received(message, source)
            # No Server header: a scanner must not learn what answers (svmap fingerprints
            # by it); the answer is the same whatever user the request names.
            response = make_response(message, 403, "Forbidden", server=None, to_tag=new_tag())
            self._out.append((serialize(response), self._response_address(message, source)))
        except (SipMessageError, ValueError):
            return  # not a request we can answer: dropped, as from any unallowed source
        except Exception:
            logger.exception("SIP from %s: the 403 could not be made", source)

    def too_large(self, head: bytes, *, anonymous: bool = False) -> bytes | None:
        """The ``413 Request Entity Too Large`` (§21.4.11) for a request whose header
        ``head`` announced a body over the limit; None for anything else. ``anonymous``:
        with no ``Server`` header (to a source outside ``[security] allow`` that is
        answered, as its 403 is: nothing says what answers)."""
        without_body = re.sub(
            rb"(?im)^(content-length|l)[ \t]*:[^\r\n]*", rb"Content-Length: 0", head
        )
        try:
            message = parse(without_body)
            if not isinstance(message, Request) or message.method == "ACK":
                return None
            server = None if anonymous else self.user_agent
            response = make_response(message, 413, server=server, to_tag=new_tag())
        except (SipMessageError, ValueError):
            return None
        return serialize(response)

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
        problem = check_request(
            request, SUPPORTED, methods=self.methods, content_types=CONTENT_TYPES
        )
        tx = server(request, self._response_address(request, source))
        tx.match = key[1]
        self._txs[self._tx_key(tx)] = tx
        # Behind the proxy of serve --workers: who really sent it (front.py), which the
        # guard may have banned (answered, not dropped: a worker silent to the proxy
        # would be taken for dead).
        origin = source if self.front is None else self.front.origin(request, source)
        if origin != source and self.origin_banned(origin.host, now):
            self._reply(tx, request, 403, "Forbidden", now=now)
            return
        if problem is not None:
            status, reason = problem
            extra = []
            if status == 420:
                extra = [("Unsupported", ", ".join(unsupported_options(request, SUPPORTED)))]
            elif status in (405, 501):
                extra = [("Allow", self.allow)]
            elif status == 415:
                extra = [("Accept", ", ".join(CONTENT_TYPES))]
            self._reply(tx, request, status, reason, extra=extra, now=now)
            return
        if method == "REGISTER":
            self._register(tx, request, origin, now)
            return
        if method == "INVITE" and not request.to_tag:
            caller = self._authenticate_caller(tx, request, origin, now)
            if caller is None:
                return
            self._invite(tx, request, now, caller, origin)
            return
        handlers = {
            "INVITE": self._invite,
            "BYE": self._bye,
            "CANCEL": self._cancel,
            "OPTIONS": self._options,
            "INFO": self._info,
            "UPDATE": self._update,
            "NOTIFY": self._notify,  # a transfer's progress (sip/referral.py)
        }
        handlers[method](tx, request, now)

    def _mark_received(self, request: Request, source: Target) -> None:
        """Record where the request really came from in its top Via (§18.2.1, RFC 3581 §4)."""
        vias = request.headers.get_all("Via")
        if not vias or not _is_ip(source.host):
            return  # a stream we opened by name: the name is no "received" (§20.42: an IP)
        try:
            via = parse_via(vias[0])
        except ValueError:
            return
        changed = False
        # A received= the sender wrote itself is no evidence (RFC 3261 §18.2.1 has the
        # server add it): whenever one is there, or the host differs, it says the source.
        # Left as sent, "Via: SIP/2.0/UDP <own ip>;received=<victim>" made us answer the
        # victim: a reflection without spoofing.
        moved = via.host.strip("[]") != source[0] or "received" in via.params
        if moved and via.params.get("received") != source[0]:
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

    def _register(self, tx: Transaction, request: Request, source: Target, now: float) -> None:
        """A REGISTER for one of our users' phones (RFC 3261 §10.3: ``registrar.py``)."""
        registrar = self.registrar
        assert registrar is not None  # REGISTER is in self.methods only with a registrar
        try:
            answer = registrar.register(request, source, now)
        except Exception:
            # A bug, but the REGISTER is answered all the same: its transaction ends.
            logger.exception("REGISTER %s from %s could not be judged", request.call_id, source)
            answer = Answer(500, "Server Internal Error")
        self._reply(tx, request, answer.status, answer.reason, extra=list(answer.headers), now=now)

    def _authenticate_caller(
        self, tx: Transaction, request: Request, source: Target, now: float
    ) -> str | None:
        """The ``[users]`` user a new INVITE is from ("" for any other caller), or None
        when it was answered instead: challenged (401), or refused (403, 400).

        Which INVITEs are challenged must not depend on whether the From user exists
        (a scanner would learn the names from 401 against 100): every one whose From
        host is callhook's own is, as a proxy challenges requests that claim its domain's
        users (RFC 3261 §22.3); the answers for a name that is no user's are those for a
        wrong password."""
        registrar = self.registrar
        if registrar is None:
            return ""
        try:
            from_uri = parse_name_addr(request.headers.get("From") or "").uri
        except SipMessageError:
            return ""
        if from_uri.scheme not in ("sip", "sips") or not (
            registrar.own_domain(from_uri.host) or _same_host(from_uri.host, self.host)
        ):
            return ""
        from_user = from_uri.user or ""
        try:
            found = registrar.authenticate(request, source, now)
        except Exception:
            logger.exception("INVITE %s from %s could not be judged", request.call_id, source)
            found = Answer(500, "Server Internal Error")
        if isinstance(found, str) and found == from_user:
            return found
        if isinstance(found, str):  # right credentials, for another user than the From's
            self._reply(tx, request, 403, "Forbidden (not your identity)", now=now)
            return None
        self._reply(tx, request, found.status, found.reason, extra=list(found.headers), now=now)
        return None

    def _invite(
        self,
        tx: Transaction,
        request: Request,
        now: float,
        caller: str = "",
        origin: Target | None = None,
    ) -> None:
        """An INVITE: a new call (``caller``: the user it authenticated as, if any; ``origin``:
        where it really came from, when not its transaction's address), or a re-INVITE."""

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
        key = request.call_id
        placed = self.calls.get(key)
        if placed is not None and placed.direction == "outbound":
            if request.from_tag != placed.local_tag:
                # Another party reusing the Call-ID of a call of ours (§8.1.1.4: it must be
                # unique): taking it would lose our call.
                self._reply(tx, request, 482, "Loop Detected (Call-ID in use)", now=now)
                return
            key += HAIRPIN  # our own INVITE, come back to us: the hairpin's inbound half
        call = Call(key, "inbound", request, tx, new_tag(), tx.address, timer=timer)
        # (Behind the proxy, a trunk's call that came on the worker's own TLS connection:
        # the worker has no other, Kamailio passes calls on over UDP.)
        call.direct = self.front is not None and not self.front.carries(tx.address.transport)
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
                uri_text(request.headers.get("From")),
                uri_text(request.headers.get("To")),
                request.uri,
                request.body,
                origin or tx.address,
                caller,
                provenance.divert(request.headers),
                provenance.attestation(request.headers),
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
        elif call.refer_pending is not None:
            self.refer(call.call_id, *call.refer_pending, now)

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
        call = next((c for c in self.calls_of(request.call_id) if c.tx is invite_tx), None)
        if call is not None and call.state in ("offered", "early"):
            # §9.2: the INVITE gets 487; the call is over before it started.
            self._reply(invite_tx, call.invite, 487, now=now)
            self._end(call, "hung_up", "487", by_remote=True)

    def _options(self, tx: Transaction, request: Request, now: float) -> None:
        if not self.accepting:
            self._reply(tx, request, 503, "Service Unavailable (shutting down)", now=now)
            return
        extra = [
            ("Allow", self.allow),
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

    def _send_ok(self, call: Call, tx: Transaction, response: Response, now: float) -> None:
        """Send a 2xx to an INVITE and keep sending it until the ACK (§13.3.1.4)."""
        self._respond(tx, response, now)
        call.ok = serialize(response)
        call.ok_to = tx.address
        call.awaiting_ack = True
        call.ok_interval = T1
        call.ok_give_up = now + 64 * T1
        call.ok_next = now + T1
        self._schedule(call.ok_next, "ok", call)

    def _retransmit_ok(self, call: Call, now: float) -> None:
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
            contact=self._contact(call.invite, peer=call.peer),
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
            contact=self._contact(call.invite, peer=tx.address),
            extra=call.timer.headers() if call.timer is not None else [],
            body=sdp,
        )
        if tx.request.method == "INVITE":
            self._send_ok(call, tx, response, now)  # make_response gave it its Contact
        else:
            # The 2xx to UPDATE, a target refresh request, has a Contact too (RFC 3311 §5.2).
            response.headers.add("Contact", self._contact(call.invite, peer=tx.address))
            self._respond(tx, response, now)

    def reject_reoffer(self, call_id: str, status: int, now: float) -> None:
        """Refuse the pending re-offer (488: nothing acceptable); the call goes on as it was."""
        call = self.calls.get(call_id)
        if call is None or call.reoffer_tx is None:
            return
        tx, call.reoffer_tx = call.reoffer_tx, None
        self._reply(tx, tx.request, status, now=now)


def _server_branch(request: Request) -> str:
    """The key a server transaction is matched by (§17.2.3).

    RFC 3261 peers put a unique branch starting with the magic cookie in their
    Via: the key is that branch and the top Via's sent-by. For RFC 2543 peers (no
    cookie) the transaction is identified by the Call-ID, the From tag, the CSeq
    number and the top Via instead; the To tag is left out so that the ACK of an
    error response still matches its INVITE.
    """
    branch = request.branch or ""
    vias = request.headers.get_all("Via")
    if branch.startswith("z9hG4bK"):
        # With the top Via's sent-by, as §17.2.3 asks: a third party that learnt a branch
        # cannot CANCEL, ACK or retransmit into another client's transaction.
        try:
            top = parse_via(vias[0])
        except (SipMessageError, IndexError):
            return branch
        return f"{branch}|{top.host.lower()}:{top.port or ''}"
    parts = (
        "2543",
        request.call_id,
        request.from_tag or "",
        str(request.cseq[0]),
        vias[0] if vias else "",
    )
    return "|".join(parts)


def _same_host(a: str, b: str) -> bool:
    """Whether two hosts are the same (§19.1.4: without regard to case; addresses parsed)."""
    x, y = a.strip("[]").lower(), b.strip("[]").lower()
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(x) == ipaddress.ip_address(y)
    return x == y


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
