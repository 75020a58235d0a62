"""Whether an outbound call may be placed: ``[outbound]`` put to every call callhook places.

A destination the rules do not allow, or one call too many for its application
(``max_calls_per_app``, the installation's: the other workers' and nodes' calls count
too, :mod:`callhook.cluster.outboundshare`), is refused with the rule that refused it
(:class:`~callhook.dialplan.trunks.RouteError`, 403 or 429). An admitted call counts
until it is over. ``callhook dial``, the REST API, the web services and a ``connect``'s
far legs all go through here (:mod:`callhook.dialplan.outbound` is the rules).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from callhook.cluster.outboundshare import OutboundShare
from callhook.config.settings import AppConfig
from callhook.dialplan.outbound import OutboundCalls, OutboundPolicy
from callhook.dialplan.trunks import RouteError

logger = logging.getLogger("callhook.sip")

#: A refusal for one application and rule is logged at most once this often (seconds).
REFUSAL_LOG_SECONDS = 60.0


class OutboundAdmission:
    """Admits outbound calls, and counts them until they end (see the module docstring).

    ``share`` gives the other workers or nodes told of this one's calls (None: alone);
    ``now`` is the event loop's clock.
    """

    def __init__(
        self,
        policy: OutboundPolicy,
        calls: OutboundCalls,
        share: Callable[[], OutboundShare | None],
        now: Callable[[], float],
    ) -> None:
        self.policy = policy
        self.calls = calls
        self._share = share
        self._now = now
        #: When each (application, status) refusal was last logged.
        self._logged: dict[tuple[str, int], float] = {}

    def admit(self, to: str, app: AppConfig, trunk: str | None = None) -> None:
        """Put a call to ``to`` (through ``trunk``, if named) for ``app`` to ``[outbound]``
        (allow, max_calls_per_app); RouteError (403, 429) naming the rule if refused.
        Admitted, it counts towards the application's calls until :meth:`ended`."""
        why = self.policy.refusal(to, trunk)
        status = 403
        if why is None:
            why = self.policy.over_limit(app.name, self.calls.count(app.name))
            status = 429
        if why is not None:
            now = self._now()
            key = (app.name, status)
            if now - self._logged.get(key, -REFUSAL_LOG_SECONDS) >= REFUSAL_LOG_SECONDS:
                self._logged[key] = now
                logger.warning("outbound call for application %r: %s", app.name, why)
            raise RouteError(why, status)
        self.calls.add(app.name)

    async def told(self) -> None:
        """Done once the other workers or nodes know of the calls admitted here so far
        (the next request, to another of them, counts them)."""
        share = self._share()
        if share is not None:
            await share.told()

    def ended(self, app: AppConfig) -> None:
        """An admitted outbound call of ``app`` is over (or was never placed)."""
        self.calls.remove(app.name)
