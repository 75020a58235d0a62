"""The ``transfer`` action: hand the caller to someone else with a SIP REFER. The machine.

callhook's own action (Aculab's REST API has no transfer; its shape follows
Aculab's conventions and is in docs/behaviour.md). A *blind* transfer (RFC
5589 §6): the caller's side is asked, by a REFER in the call's dialog (RFC
3515, with Referred-By: RFC 3892), to call ``destination`` itself; its NOTIFYs
say how that call goes (a ``message/sipfrag`` status line each, RFC 3515
§2.4.5). When it answers, the caller is the destination's: callhook ends its
own call (BYE). A caller's side that refuses REFER leaves the caller with the
application, which may have asked for a ``connect`` instead
(``fallback_connect``): callhook then puts the caller through itself, media
through callhook.

Theory of operation
-------------------
:class:`TransferMachine` is an :class:`~callhook.actions.machine.ActionMachine`
(sans-IO). It sends :class:`~callhook.events.Refer`; the leg reports the
REFER's final response as :class:`~callhook.events.ReferAnswered` and each
NOTIFY as :class:`~callhook.events.ReferNotified`.

=====================  ==================================================================
state / event          what happens
=====================  ==================================================================
start                  REFER sent: REFERRING; the deadline is ``seconds_timeout`` away
REFERRING: 2xx         accepted (202): ACCEPTED, waiting for the outcome
REFERRING: NOTIFY      accepted too (the NOTIFY overtook the 2xx, RFC 6665 §4.1.2.4):
                       ACCEPTED, and the NOTIFY is taken as below
REFERRING: 3xx-6xx     refused, or not answered (408): with ``fallback_connect``, its
                       connect runs (CONNECTING); without, over: not transferred,
                       ``refer_status`` says why
ACCEPTED: NOTIFY 1xx   progress (``notify_status`` remembered)
ACCEPTED: NOTIFY 2xx   over: transferred (the leg ends the call: RFC 5589 §6.1)
ACCEPTED: NOTIFY       over: not transferred, the destination's cause (busy, no answer,
3xx-6xx / final        ...); the caller is still on the call
deadline               over: not transferred (no answer to the REFER, or no outcome in
                       time)
CONNECTING: anything   the connect machine's; when it is over, so is the transfer, its
                       result inside
the caller hangs up    over, with what is known so far
=====================  ==================================================================

The result goes to ``next_page`` (absent: the next action runs): even after a
successful transfer or a hang-up, as ``record``'s does, so the application
learns how it went.
"""

from __future__ import annotations

import enum
from typing import Any

from callhook.actions.connect import ConnectMachine
from callhook.actions.connectschema import Transfer
from callhook.actions.machine import (
    ActionContext,
    ActionMachine,
    Completed,
    Continue,
    StopReason,
)
from callhook.events import MediaCommand, MediaEvent, Refer, ReferAnswered, ReferNotified


class State(enum.Enum):
    REFERRING = "referring"
    ACCEPTED = "accepted"
    CONNECTING = "connecting"
    DONE = "done"


class TransferMachine(ActionMachine):
    """Runs one ``transfer`` action (see the module docstring)."""

    def __init__(self, action: Transfer, ctx: ActionContext) -> None:
        self.action = action
        self.ctx = ctx
        self.state = State.REFERRING
        self.until = 0.0
        self.refer_status = ""
        self.notify_status = ""
        self.cause = ("", "")
        self.connecting: ConnectMachine | None = None

    # --- the machine --------------------------------------------------------------------

    def start(self, now: float) -> list[MediaCommand]:
        self.until = now + self.action.seconds_timeout
        return [Refer(self.action.destination, self.action.referred_by)]

    @property
    def deadline(self) -> float | None:
        if self.connecting is not None:
            return self.connecting.deadline
        return self.until if self.state in (State.REFERRING, State.ACCEPTED) else None

    def on_deadline(self, now: float) -> list[MediaCommand]:
        if self.connecting is not None:
            return self._connect(self.connecting.on_deadline(now))
        if self.state in (State.REFERRING, State.ACCEPTED):
            self._finish(transferred=False)
        return []

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        if self.connecting is not None:
            return self._connect(self.connecting.handle(event, now))
        if isinstance(event, ReferAnswered) and self.state is State.REFERRING:
            return self._answered(event, now)
        if isinstance(event, ReferNotified) and self.state is State.REFERRING:
            # A NOTIFY may come before the REFER's 2xx (RFC 6665 §4.1.2.4): it accepted.
            self.state = State.ACCEPTED
        if isinstance(event, ReferNotified) and self.state is State.ACCEPTED:
            self._notified(event)
        return []

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        if self.connecting is not None:
            commands = self.connecting.stop(now, why)
            self._finish(transferred=False)
            return commands
        if self.state is not State.DONE:
            self._finish(transferred=False)
        return []

    # --- events -------------------------------------------------------------------------

    def _answered(self, event: ReferAnswered, now: float) -> list[MediaCommand]:
        self.refer_status = str(event.status)
        if 200 <= event.status < 300:
            self.state = State.ACCEPTED  # §2.4.2: the outcome comes in NOTIFYs
            return []
        fallback = self.action.fallback_connect
        if fallback is None:
            self._finish(transferred=False)
            return []
        # Refused (405/501: the caller's side does not do REFER; 403, 603...): put the
        # caller through ourselves, as the application asked.
        self.state = State.CONNECTING
        self.connecting = ConnectMachine(fallback.connect, self.ctx)
        return self._connect(self.connecting.start(now))

    def _notified(self, event: ReferNotified) -> None:
        self.notify_status = str(event.status)
        if 200 <= event.status < 300:
            self.cause = ("", str(event.status))
            self._finish(transferred=True)
        elif event.status >= 300 or event.final:
            self.cause = (event.cause or "failed", str(event.status))
            self._finish(transferred=False)

    # --- inside -------------------------------------------------------------------------

    def _connect(self, commands: list[MediaCommand]) -> list[MediaCommand]:
        """The fallback connect's commands; its end is the transfer's."""
        assert self.connecting is not None
        if self.connecting.outcome is not None and self.state is not State.DONE:
            self._finish(transferred=False)
        return commands

    def _finish(self, *, transferred: bool) -> None:
        self.state = State.DONE
        result: dict[str, Any] = {
            "transferred": transferred,
            "destination": self.action.destination,
            "refer_status": self.refer_status,
            "notify_status": self.notify_status,
            "call_cause": self.cause[0],
            "call_raw_cause": self.cause[1],
            "fell_back": self.connecting is not None,
        }
        if self.connecting is not None and self.connecting.result is not None:
            result["connect_result"] = self.connecting.result
        if self.action.next_page is None:
            self.outcome = Continue("transfer: " + ("done" if transferred else "not transferred"))
        else:
            self.outcome = Completed("transfer", result)
