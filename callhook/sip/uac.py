"""The client half of callhook's SIP user agent (UAC: RFC 3261 §8.1, §9.1, §13.2, §22). Sans-IO.

Outbound calls: the INVITE (through a trunk's proxy, over its transport),
the responses to our requests, digest authentication for 401/407, CANCEL
while it rings, and the ACK of the 2xx (again for each retransmission,
RFC 6026 §8.10). Builds on :class:`~callhook.sip.core.Core` (through ``referral.py``).
"""

from __future__ import annotations

import logging

from callhook.sip import digest
from callhook.sip.callstate import Call, new_tag
from callhook.sip.checks import check_response
from callhook.sip.core import ALLOW, SUPPORTED
from callhook.sip.dialog import Dialog
from callhook.sip.front import DESTINATION, destination_uri
from callhook.sip.message import (
    Headers,
    Request,
    Response,
    parse_uri,
    serialize,
)
from callhook.sip.notices import (
    CallAnswered,
    CallProgress,
    Credentials,
)
from callhook.sip.referral import Referral
from callhook.sip.responses import cause_of
from callhook.sip.transaction import (
    Address,
    Transaction,
    client,
)
from callhook.sip.transport import (
    Target,
    target_of,
)

logger = logging.getLogger("callhook.sip")


class Uac(Referral):
    """Our requests out, and their responses in."""

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
        fixed_transport: bool = False,
        to: str | None = None,
        pinned: bool = False,
    ) -> str:
        """Place a call to ``target`` (a SIP URI) offering ``sdp``; returns its Call-ID.

        ``fixed_transport``: the transport was chosen by configuration (a trunk's): the
        call's requests keep it whatever their size (no move to TCP, §18.1.1).

        It goes to ``address`` if given (a trunk's proxy), else to the URI's host,
        over the URI's transport (``sips:`` or ``;transport=``) or the address's.
        ``from_host`` is the From URI's host (a trunk's domain; default ours);
        ``route`` a loose-routing proxy URI put in a Route header (§8.1.2); ``to`` the
        To URI when it is not ``target`` (a registered phone's address of record, its
        Contact being the request-URI: §8.1.1.1, §10.2.1.1). ``pinned``: every request
        of the call goes to ``address``, whatever the dialog's remote target (a phone
        reached where its REGISTER came from: behind a NAT its Contact is a private
        address; the flow of RFC 5626 §5.3).
        """
        uri = parse_uri(target)
        peer = Target(*address) if address is not None else target_of(uri)
        destination = None
        # Past the proxy over TLS (front.py), but never to a registered phone: its flow is
        # the connection it opened to the proxy, whose TLS ends there.
        direct = self.front is not None and not pinned and not self.front.carries(peer.transport)
        if self.front is not None and not direct:
            # serve --workers: out through the proxy, which goes on to where we would have.
            destination, peer, fixed_transport = peer, self.front.target, True
        transport = peer.transport
        call_id = f"{new_tag()}@{self.host}"
        local_tag = new_tag()
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
        if destination is not None:
            headers.add(DESTINATION, destination_uri(destination))
        headers.add("From", f"{display}<{from_uri}>;tag={local_tag}")
        headers.add("To", f"<{to or target}>")
        headers.add("Call-ID", call_id)
        headers.add("CSeq", "1 INVITE")
        sips = uri.scheme == "sips"
        headers.add("Contact", self._contact(user=from_user, peer=peer, sips=sips))
        headers.add("Allow", ALLOW)
        headers.add("Supported", ", ".join(sorted(SUPPORTED)))
        headers.add("User-Agent", self.user_agent)
        headers.add("Content-Type", "application/sdp")
        request = Request("INVITE", target, headers, sdp)
        if not fixed_transport:
            request, peer = self._fit(request, peer)
        tx, outputs = client(request, peer, now)
        call = Call(call_id, "outbound", request, tx, local_tag, peer, credentials=credentials)
        call.fixed_transport = fixed_transport
        call.direct = direct
        call.pinned = pinned and address is not None
        if call.pinned and destination is not None:
            call.destination = destination  # through the proxy, in the dialog too
        call.local_sdp = sdp
        self.calls[call_id] = call
        self._txs[self._tx_key(tx)] = tx
        self._link(tx, call)
        self._tx_outputs(tx, outputs, now)
        return call_id

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
        elif method == "REFER":
            self._refer_response(call, response)

    def _invite_response(self, call: Call, response: Response, now: float) -> None:
        status = response.status
        if status < 200:
            call.provisional = True
            if status > 100:
                if call.state == "offered":
                    call.state = "early"
                content_type = (response.headers.get("Content-Type") or "").lower()
                early = response.body if content_type.startswith("application/sdp") else b""
                self._events.append(CallProgress(call.call_id, status, early))
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

    def _outbound_answered(self, call: Call, response: Response, now: float) -> None:
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

    def _authenticate(self, call: Call, response: Response, now: float) -> bool:
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
        call.tx = self._start_client(
            Request("INVITE", invite.uri, headers, invite.body), call.peer, now, call
        )
        # What went out (moved to TCP if it grew too big): the CANCEL must follow it.
        call.invite, call.peer = call.tx.request, call.tx.address
        return True

    def _send_cancel(self, call: Call, now: float) -> None:
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
