"""The SIP service as the HTTP API sees it: its calls, counters, bans and trunks.

:class:`Control` is the part of :class:`~callhook.telephony.service.SipService` that
answers ``/api/stats``, ``/api/v1/calls`` (list, look up, hang up),
``/api/bans`` (list, lift; and the REST API's own bans for guessed keys) and
``/api/trunks``: views of the service's state and the few things the API may
ask of it, nothing that places or answers calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from callhook.calls.metrics import Metrics
from callhook.cluster.sharedbans import SharedBans
from callhook.edge.mediaengine import MediaEngine
from callhook.edge.speechworkers import SpeechService
from callhook.sip.agent import Agent
from callhook.sip.guard import OPERATOR, Guard
from callhook.telephony.farleg import FarLeg
from callhook.telephony.sipcall import SipCall
from callhook.telephony.trunking import Trunks

logger = logging.getLogger("callhook.sip")


class Control:
    """The API's view of the SIP service (see the module docstring).

    It shares the service's tables of calls (``calls``, ``far_legs``, ``recent_logs``),
    its guard and its trunks; ``agent``, ``media`` and ``shared_bans`` give what the
    service has at the time (None before it starts, or alone); ``flush`` sends what the
    agent has to send, ``trunks_changed`` is the service's news of a trunk's change.
    """

    def __init__(
        self,
        *,
        loop: asyncio.AbstractEventLoop,
        agent: Callable[[], Agent | None],
        media: Callable[[], MediaEngine | None],
        calls: dict[str, SipCall],
        far_legs: dict[str, FarLeg],
        recent_logs: OrderedDict[str, tuple[str, str]],
        guard: Guard,
        trunks: Trunks,
        shared_bans: Callable[[], SharedBans | None],
        metrics: Metrics,
        speech: SpeechService,
        notifications: Callable[[], dict[str, Any]],
        log_path: Callable[[str, str], Path],
        flush: Callable[[], None],
        trunks_changed: Callable[[], None],
    ) -> None:
        self.loop = loop
        self._agent = agent
        self._media = media
        self.calls = calls
        self.far_legs = far_legs
        #: Recent calls' (application, instance id), by Call-ID: their call logs.
        self.recent_logs = recent_logs
        self.guard = guard
        self.trunks = trunks
        #: The other workers (or nodes) told of this one's failed authentications.
        self._shared_bans = shared_bans
        self.metrics = metrics
        self.speech = speech
        self._notifications = notifications
        self._log_path = log_path
        self._flush = flush
        self._trunks_changed = trunks_changed

    # --- counters ---------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The server's counters, with the SIP and media side's."""
        media = self._media()
        agent = self._agent()
        lateness = sorted(media.lateness) if media else []
        durations = sorted(media.durations) if media else []
        tick = {}
        if len(lateness) > 1:
            tick = {
                "late_p50_ms": lateness[len(lateness) // 2],
                "late_p99_ms": lateness[int(len(lateness) * 0.99)],
                "late_max_ms": lateness[-1],
                "took_p50_ms": durations[len(durations) // 2],
                "took_p99_ms": durations[int(len(durations) * 0.99)],
                "took_max_ms": durations[-1],
            }
        return self.metrics.snapshot(
            sip_calls=len(agent.calls) if agent else 0,
            media_streams=len(media.streams) if media else 0,
            media_late_ticks=media.late_ticks if media else 0,
            media_tick=tick,
            media_thread=media.thread_stats() if media else {},
            # The event loop's thread's CPU (this handler runs on it), and the part of
            # it the media ticks took: the rest is SIP, the calls' runners and pages.
            cpu_loop_s=round(time.thread_time(), 3),
            cpu_media_tick_s=round(media.tick_cpu, 3) if media else 0.0,
            speech=self.speech.snapshot(),
            notifications=self._notifications(),
        )

    # --- the REST API (httpserver/restapi.py) -------------------------------------------------

    def active_calls(self) -> list[dict[str, Any]]:
        """The calls running now: application, ids, direction, parties, state, start time."""
        calls = []
        bridged = {
            id(far.primary): far
            for far in self.far_legs.values()
            if far.session is not None and not far.ended
        }
        for call in self.calls.values():
            info = call.leg.info
            if call.answered is not None and not call.answered.done():
                state = "calling"  # outbound, not answered yet
            else:
                state = "answered" if call.leg.answered else "inbound"
            calls.append(
                {
                    "application": call.app.name,
                    "call_id": call.call_id,
                    "call_direction": info.direction,
                    "call_from": info.call_from,
                    "call_to": info.call_to,
                    "call_target": info.call_target,
                    "call_state": state,
                    "started": call.started,
                    "application_instance_id": call.instance_id,
                }
            )
            far = bridged.get(id(call))
            if far is not None:  # a connect joined it to a far leg: both legs, and how
                calls[-1]["bridged_to"] = {"call_id": far.call_id, "call_to": far.route.uri}
        return calls

    def hang_up_call(self, call_id: str) -> bool:
        """End call ``call_id`` from our side (False: no such call).

        A running application's action stops and the call is hung up (the
        final page says ``dropped``); an outbound call still ringing is
        cancelled (``no_answer``, as when it rings too long).
        """
        call = self.calls.get(call_id)
        agent = self._agent()
        if call is None or agent is None:
            return False
        if call.answered is not None and not call.answered.done():
            agent.hang_up(call_id, self.loop.time(), cause="no_answer")
            self._flush()
        else:
            call.leg.abort("hung up through the REST API")
        return True

    # --- bans and trunks ----------------------------------------------------------------

    def bans(self) -> list[dict[str, Any]]:
        """``GET /api/bans``: the SIP sources banned now, why, and for how long."""
        return [
            {"address": b.address, "reason": b.reason, "seconds_left": b.seconds_left}
            for b in self.guard.bans(self.loop.time())
        ]

    def lift_ban(self, address: str) -> bool:
        """``DELETE /api/bans/{address}``: end a ban (False: not banned)."""
        lifted = self.guard.lift(address, self.loop.time())
        if lifted:
            logger.info("SIP from %s: ban lifted through the API", address)
        return lifted

    def banned(self, address: str) -> bool:
        """Whether ``address`` is banned now (the REST API refuses it too)."""
        return self.guard.refuses_api(address, self.loop.time())

    def auth_failed(self, address: str, what: str) -> Awaitable[None]:
        """A failed authentication from ``address`` (a wrong REST API key): towards a ban.
        Done when the other workers (or nodes) know of it too."""
        banned = self.guard.auth_failed(address, self.loop.time(), what)
        for host, cause in self.guard.take_notes():
            logger.warning("%s: %s", host, cause)
        shared = self._shared_bans()
        if shared is not None and address not in OPERATOR:  # (never counted)
            return shared.counted(address, what, banned)
        done: asyncio.Future[None] = self.loop.create_future()
        done.set_result(None)
        return done

    def trunks_lead(self, leading: bool) -> None:
        """Register the trunks from now on, or leave them to the node that holds the role
        now (nodes sharing PostgreSQL: ``store/postgres.py``)."""
        self.trunks.lead(leading, self._trunks_changed)

    def call_log(self, call_id: str) -> bytes | None:
        """The call log so far of a recent call (None: no such call, or no log yet)."""
        found = self.recent_logs.get(call_id)
        if found is None:
            return None
        app, instance = found
        try:
            return self._log_path(app, f"logs/{instance}.log").read_bytes()
        except OSError:
            return None

    def trunk_status(self) -> list[dict[str, Any]]:
        """``GET /api/trunks``: each trunk's state (registered, failing, ...), why, and when."""
        return self.trunks.status(self.loop.time())
