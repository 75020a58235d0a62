"""The SIP user agent: calls in and out, and registrations, over UDP, TCP and TLS; sans-IO.

Theory of operation
-------------------
:class:`Agent` is callhook's SIP endpoint (RFC 3261 §8 UA behaviour, §9
CANCEL, §10 registration, §11 OPTIONS, §12 dialogs, §13-14 INVITE and
re-INVITE, §15 BYE, §18 transports; RFC 3581 rport; RFC 4028 session timers;
RFC 6026). It does no IO, like aioquic's connection: the adapter feeds it

* ``receive(data, source, now)`` for each message (a datagram, or one framed
  off a TCP or TLS connection), ``source`` naming its transport,
* ``handle_timer(now)`` when ``deadline`` has come,
* call-control commands from the application side (``ring``, ``answer``,
  ``reject``, ``hang_up``, ``invite``, ``answer_reoffer``, ``reject_reoffer``,
  ``refer``)
  and ``register`` / ``unregister_all`` for trunks,

and after each, takes the messages to send, each with the
:class:`~callhook.sip.transport.Target` to send it to (``take_datagrams``),
and what happened to calls (``take_events``, see ``notices.py``). Transactions
(``transaction.py``) make each request/response exchange reliable; the agent
owns the dialogs and the calls, and forgets a call once it has ended and its
last transaction has finished.

It is built in four parts: ``core.py`` (calls, transactions, timers,
in-dialog requests, registrations; a call's record is ``callstate.py``'s),
``referral.py`` (a transfer's REFER and its NOTIFYs), ``uas.py`` (requests in
and the answers to inbound calls) and ``uac.py`` (outbound INVITEs and the
responses to our requests); this class joins the two halves and ends calls in
any state. The parts are one state machine split by RFC role, not collaborators: every
one of them reads and writes the same dialogs, transactions and timers (a BYE that
ends an early dialog touches the INVITE's server transaction and its client one), so
they share one object as h11's ``Connection`` does. The services around the agent are
built by composition (``telephony/service.py``).

What the agent answers on its own: ``100 Trying`` at once to an INVITE;
``200`` to OPTIONS (``503`` while shutting down), BYE, CANCEL, INFO,
UPDATE and the NOTIFYs of a REFER it sent (``referral.py``; ``489`` for
other event packages); ``487`` to a cancelled INVITE (and to the INVITE of an early dialog a
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

from callhook.sip.core import ALLOW
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
from callhook.sip.uac import Uac
from callhook.sip.uas import Uas

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


class Agent(Uas, Uac):
    """callhook's SIP user agent (see the module docstring): the server half (``uas.py``)
    and the client half (``uac.py``) on one core (``core.py``)."""

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
