"""A ``transfer`` on a SIP call: the REFER sent, its answer and NOTIFYs to the action.

The SIP service (telephony/service.py) owns one :class:`Transfers`; each call's leg
gets a :class:`CallReferrer` (the leg's :class:`~callhook.telephony.leg.Referrer`).
The action (``actions/transfer.py``) says where to; this puts the destination to
``[outbound]`` as if callhook called it (a refusal is answered as a refused REFER,
403, and no REFER goes out), turns it into a ``Refer-To`` URI, sends the REFER
through the agent (``sip/referral.py``) and tells the action what comes back:
:class:`~callhook.events.ReferAnswered` for the REFER's final response,
:class:`~callhook.events.ReferNotified` for each NOTIFY (with the cause its status
maps to, as a far leg's refusal does). When a NOTIFY says the destination answered
(a 2xx), the caller is the destination's: callhook ends its own call (BYE, RFC 5589
§6.1) and the runner is told it ended (``completed``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from callhook.dialplan.outbound import OutboundPolicy
from callhook.dialplan.trunks import TrunkError
from callhook.events import CallEnded, ReferAnswered, ReferNotified
from callhook.sip.agent import Agent
from callhook.sip.notices import ReferProgress, ReferResponse
from callhook.sip.responses import cause_of
from callhook.telephony.sipcall import SipCall
from callhook.telephony.trunking import Trunks

logger = logging.getLogger("callhook.sip")


class Transfers:
    """Sending a call's REFER and reporting what comes of it (see the module docstring).

    ``agent`` gives the service's user agent (None before it starts), ``flush`` sends
    what the agent has to send; ``trunks`` and ``outbound`` judge and address the
    destination as a call callhook placed.
    """

    def __init__(
        self,
        agent: Callable[[], Agent | None],
        trunks: Trunks,
        outbound: OutboundPolicy,
        now: Callable[[], float],
        flush: Callable[[], None],
    ) -> None:
        self._agent = agent
        self.trunks = trunks
        self.outbound = outbound
        self._now = now
        self._flush = flush

    # --- what a call's leg asks -------------------------------------------------------------

    def refer(self, call: SipCall, destination: str, referred_by: str | None) -> None:
        """Send ``call``'s REFER to ``destination`` (a SIP URI or a number)."""
        agent = self._agent()
        assert agent is not None
        # The caller's side calls the destination, through its provider when it is one:
        # a call the operator pays for, so [outbound] judges it as one of callhook's own,
        # and as one through a trunk when the call came in by one (its provider places
        # the new call, whatever host a sip: URI names) or the destination is a number.
        text = destination.strip()
        uri_form = text.lower().startswith(("sip:", "sips:"))
        trunk = call.leg.info.trunk or None
        if trunk is None and not uri_form:
            trunk = next(iter(self.trunks.config), None)
        why = self.outbound.refusal(text if uri_form else text.replace("-", ""), trunk)
        if why is not None:
            logger.warning("call %s: transfer to %s: %s", call.call_id, text, why)
            call.leg.inject(ReferAnswered(403))  # as a REFER refused (no REFER is sent)
            return
        refer_to = self.refer_to(destination, call)
        by = referred_by or call.leg.info.call_to
        try:
            agent.refer(call.call_id, refer_to, by, self._now())
        except (KeyError, ValueError) as exc:  # the call ended meanwhile, or is not up
            logger.warning("call %s: cannot transfer to %s: %s", call.call_id, refer_to, exc)
            call.leg.inject(ReferAnswered(481))  # §12.2.2: no such dialog (any more)
            return
        logger.info("call %s: REFER to %s", call.call_id, refer_to)
        self._flush()

    def refer_to(self, destination: str, call: SipCall) -> str:
        """The ``Refer-To`` of ``destination``: a URI as it is; a number at the first
        trunk's domain, or, with no trunk, at the host the caller called from."""
        text = destination.strip()
        if text.lower().startswith(("sip:", "sips:")):
            return text
        number = text.replace("-", "")
        for trunk in self.trunks.config.values():
            try:
                return trunk.target_uri(number)
            except TrunkError as exc:
                logger.warning("call %s: %s; referring to the caller's host", call.call_id, exc)
            break  # the first trunk only, as connect's numbers
        agent = self._agent()
        assert agent is not None
        known = agent.calls.get(call.call_id)
        host = known.peer.host if known is not None else "invalid"
        return f"sip:{number}@{host}"

    def news(self, call: SipCall, event: ReferResponse | ReferProgress) -> None:
        """The agent's news of ``call``'s REFER, for its transfer action."""
        if isinstance(event, ReferResponse):
            call.leg.inject(ReferAnswered(event.status))
            return
        status = event.status
        cause = cause_of(status) if status >= 300 else ""
        call.leg.inject(ReferNotified(status, cause, event.final))
        agent = self._agent()
        if 200 <= status < 300 and agent is not None:
            # The caller is with the destination now: our part of the call is over.
            logger.info("call %s: transferred (NOTIFY %d): hanging up", call.call_id, status)
            agent.hang_up(call.call_id, self._now())
            self._flush()
            call.leg.far_end_ended(CallEnded("completed", str(status)))


class CallReferrer:
    """One call's :class:`~callhook.telephony.leg.Referrer`: its leg's way to the service."""

    def __init__(self, transfers: Transfers, call: SipCall) -> None:
        self.transfers = transfers
        self.call = call

    def refer(self, destination: str, referred_by: str | None) -> None:
        self.transfers.refer(self.call, destination, referred_by)
