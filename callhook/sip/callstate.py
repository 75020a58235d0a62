"""One call as the SIP agent knows it (``core.py``): its INVITE, dialog, state and timers.

The agent's calls are plain records; ``core.py``, ``uas.py``, ``uac.py`` and
``referral.py`` move them through their states (``State``: offered, early,
answered, confirmed, ending, ended).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal

from callhook.sip.dialog import Dialog
from callhook.sip.message import Request
from callhook.sip.notices import Credentials
from callhook.sip.sessiontimer import SessionTimer
from callhook.sip.transaction import T1, Transaction
from callhook.sip.transport import Target

State = Literal["offered", "early", "answered", "confirmed", "ending", "ended"]
_NOWHERE = Target("", 0)


@dataclass
class Call:
    """What the agent knows of one call: its INVITE, dialog, state and timers."""

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
    flow_open: bool = True  # the TCP/TLS connection the call was set up on is still open
    fixed_transport: bool = False  # a trunk's call: never moved to TCP for its size
    pinned: bool = False  # every request goes to ``peer`` (a registered phone's flow)
    #: Behind the proxy of serve --workers, where a pinned call's requests go (named to
    #: the proxy in each: front.py); ``peer`` is the proxy then.
    destination: Target | None = None
    #: Behind that proxy, a call whose requests do not cross it: a trunk's over TLS, on the
    #: worker's own connection (whose certificate callhook checked: front.py).
    direct: bool = False
    refer_cseq: int | None = None  # our REFER's CSeq: its NOTIFYs are welcome (referral.py)
    #: A REFER asked for before the ACK came (Refer-To, Referred-By): sent once it does.
    refer_pending: tuple[str, str] | None = None


def new_tag() -> str:
    """A random tag (§19.3), also used for Call-IDs."""
    return secrets.token_hex(8)
