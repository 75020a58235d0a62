"""Transferring a call: REFER out, its NOTIFYs in (RFC 3515, RFC 3892, RFC 5589). Sans-IO.

Theory of operation
-------------------
A blind transfer (RFC 5589 §6) asks the peer of a call that is up to call someone
else itself: :meth:`Referral.refer` sends a REFER in the call's dialog with ``Refer-
To`` (the destination) and ``Referred-By`` (RFC 3892). The REFER's final response is
reported as :class:`~callhook.sip.notices.ReferResponse` (a 2xx: accepted; 408 when
none came: Timer F, reported by ``core.py``). An accepted REFER creates an implicit
subscription (RFC 3515 §2.4.4): the peer sends NOTIFYs in the same dialog, ``Event:
refer``, each with a ``message/sipfrag`` body whose status line is how its call to
the destination goes (§2.4.5); each is answered 200 and reported as
:class:`~callhook.sip.notices.ReferProgress`, ``final`` when its ``Subscription-
State`` is ``terminated`` or the status is final (≥ 200).

What it answers: a NOTIFY for an unknown dialog gets 481, and so does one in a
dialog where callhook sent no REFER, or whose ``Event: refer;id=`` names
another REFER than ours (§2.4.6: the id is the REFER's CSeq; the first REFER
of a dialog may be referred to without it); one of another event package (or
none) 489 Bad Event (RFC 6665 §8.2.1), which also tells a peer that keeps a
stale subscription to stop; one whose body is not a sipfrag status
line still gets 200 (the subscription is the peer's) and is reported as
progress 0, which the action ignores. One REFER at a time per call: the action
sends one.
"""

from __future__ import annotations

import logging
import re

from callhook.sip.callstate import Call
from callhook.sip.core import Core
from callhook.sip.message import Request, Response
from callhook.sip.notices import ReferProgress, ReferResponse
from callhook.sip.transaction import Transaction

logger = logging.getLogger("callhook.sip")

#: A sipfrag's first line (RFC 3420): a SIP status line.
_STATUS_LINE = re.compile(rb"\s*SIP/2\.0\s+([1-6][0-9][0-9])\b")


def _event_id(params: str) -> int | None:
    """The ``id`` parameter of an Event header's parameters (None: none; -1: not a number)."""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "id":
            value = value.strip()
            return int(value) if value.isascii() and value.isdigit() else -1
    return None


def sipfrag_status(body: bytes) -> int:
    """The status code of a ``message/sipfrag`` body's status line (0: none)."""
    match = _STATUS_LINE.match(body)
    return int(match.group(1)) if match else 0


class Referral(Core):
    """The REFER half of the agent (see the module docstring)."""

    def refer(self, call_id: str, refer_to: str, referred_by: str, now: float) -> None:
        """Send a REFER in ``call_id``'s dialog: ``refer_to`` and ``referred_by`` are URIs.

        Raises KeyError for an unknown call, ValueError for a call that is not up.
        """
        call = self.calls[call_id]
        if call.dialog is None or call.state not in ("answered", "confirmed"):
            raise ValueError(f"call {call_id} is not up ({call.state}): nothing to transfer")
        if call.awaiting_ack:
            # Sent once the ACK comes (or never, if the 2xx times out), as a BYE is
            # (RFC 3261 §15): a request sent before may overtake the 2xx on its way
            # through a proxy of several processes, and reach a caller with no dialog.
            call.refer_pending = (refer_to, referred_by)
            return
        call.refer_pending = None
        request, hop = self._in_dialog(
            call,
            "REFER",
            extra=[("Refer-To", f"<{refer_to}>"), ("Referred-By", f"<{referred_by}>")],
        )
        call.refer_cseq = request.cseq[0]  # RFC 3515 §2.4.6: its NOTIFYs' Event id
        self._start_client(request, hop, now, call)

    def _refer_response(self, call: Call, response: Response) -> None:
        if response.status >= 200:
            self._events.append(ReferResponse(call.call_id, response.status))

    def _notify(self, tx: Transaction, request: Request, now: float) -> None:
        call = self._call_for(request)
        if call is None:
            self._reply(tx, request, 481, now=now)
            return
        package, _, params = (request.headers.get("Event") or "").partition(";")
        if package.strip().lower() != "refer":
            self._reply(tx, request, 489, now=now)
            return
        if call.refer_cseq is None or _event_id(params) not in (None, call.refer_cseq):
            # No REFER of ours made this subscription (RFC 6665 §4.1.3): it does not exist.
            self._reply(tx, request, 481, now=now)
            return
        self._reply(tx, request, 200, now=now)
        status = sipfrag_status(request.body)
        state = (request.headers.get("Subscription-State") or "").split(";", 1)[0]
        final = status >= 200 or state.strip().lower() == "terminated"
        self._events.append(ReferProgress(call.call_id, status, final))
