"""A far leg of a ``connect``: a call the SIP service places for a caller's call and
joins to it (telephony/connecting.py), or one with no SIP (a WebSocket server, another
application, a web client: telephony/attachedlegs.py), and the phones of one
``user:NAME`` destination called at once (:class:`Fork`)."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from callhook.actions.connect import CAUSE_ORDER
from callhook.media.session import MediaSession
from callhook.media.srtp import Crypto
from callhook.store.callrecords import CallRecord
from callhook.telephony.leg import SipLeg
from callhook.telephony.localcall import LocalCall
from callhook.telephony.sipcall import SipCall
from callhook.telephony.trunking import Route
from callhook.telephony.webclientleg import WebClientLeg
from callhook.telephony.websocketleg import WebSocketLeg


@dataclass
class FarLeg:
    """One far leg of a call's ``connect``."""

    primary: SipCall
    attempt: int
    destination: str
    call_id: str
    sock: socket.socket | None  # None: a WebSocket far leg (its port is its stream's key)
    port: int
    keys: tuple[Crypto, ...]
    route: Route
    peer: str
    session: MediaSession | None = None
    answered: bool = False
    ended: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    fork: Fork | None = None  # one of the phones of a user: destination
    from_user: str = "callhook"  # who it was called as
    leg: SipLeg | None = None  # while its secondary_call pages run (telephony/screening.py)
    limit: asyncio.TimerHandle | None = None  # minutes_max_call_duration
    dropped: bool = False  # hung up by callhook: another destination (or phone) won
    websocket: WebSocketLeg | None = None  # a wss:// (ws://) destination's call
    local: LocalCall | None = None  # a loc: destination's call (telephony/localcall.py)
    webclient: WebClientLeg | None = None  # a webrtc: destination's (telephony/webclientleg.py)
    placed: float = field(default_factory=time.time)  # (wall clock: its call record's)
    answered_at: float | None = None

    def mark_answered(self) -> None:
        """It answered (now, for its record: the first time it is told)."""
        self.answered = True
        if self.answered_at is None:
            self.answered_at = time.time()

    def record(self, cause: str, raw_cause: str, address: str, worker: int | None) -> CallRecord:
        """Its call record, as it ends now (``address``: callhook's, its From's host)."""
        ended = time.time()
        answered = self.answered_at
        return CallRecord(
            app=self.primary.app.name,
            call_id=self.call_id,
            instance_id="",
            leg="far",
            parent_call_id=self.primary.call_id,
            direction="out",
            call_from=f"sip:{self.from_user}@{address}",
            call_to=self.route.uri,
            trunk=self.route.trunk or "",
            worker=worker,
            started=self.placed,
            answered=answered,
            ended=ended,
            seconds=max(0.0, ended - answered) if answered is not None else 0.0,
            cause=cause,
            raw_cause=raw_cause,
            recordings=0,
            pages=0,
            pages_failed=0,
        )


@dataclass
class Fork:
    """The far legs of one ``user:NAME`` destination: one per registered phone."""

    devices: list[FarLeg] = field(default_factory=list)
    placing: bool = True  # its phones are being called (it cannot have failed yet)
    rang: bool = False
    winner: FarLeg | None = None
    dropped: bool = False
    causes: list[tuple[str, str]] = field(default_factory=list)

    def most_telling(self) -> tuple[str, str]:
        """Of the phones' causes, the one the action would report (its order)."""
        for wanted in CAUSE_ORDER:
            for cause in self.causes:
                if cause[0] == wanted:
                    return cause
        return self.causes[0] if self.causes else ("failed", "")
