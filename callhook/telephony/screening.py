"""A connect's far leg running its ``secondary_call`` pages, and its duration limit.

Aculab's ``secondary_call`` object gives a far leg pages of its own: the
``first_page`` is requested when it answers and its actions run on it before
it is joined to the caller (a whisper: "a call from the support line, press 1
to take it"); the ``final_page`` is requested when the bridge ends (either side
hanging up); the ``error_page`` when its pages go wrong. The caller hears the
hold media (or ringback) meanwhile (``actions/connect.py``: SCREENING).

:class:`Screening` does this for the :class:`~callhook.telephony.connecting.Connector`:
for the connect's :class:`~callhook.events.RunCallee` it makes the far leg a
:class:`~callhook.telephony.leg.SipLeg` over its media session and runs a
:class:`~callhook.calls.runner.CallRunner` on it, with the pages as its application
(the caller's application's name, secret and parameters). When the first
page's list runs out the runner tells the caller's action
(:class:`~callhook.events.CalleeReady`: join it now) and waits for the far leg
to end; if its actions hang up, the far leg ends and the connect is over, not
connected. Its pages' ``this_call`` is the far leg's, with ``primary_call_id``
naming the caller's call (callhook's; docs/behaviour.md).

Every answered far leg is hung up after ``secondary_call.minutes_max_call_duration``
(240 minutes, Aculab's default, without ``secondary_call``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from callhook.calls.runner import CallRunner
from callhook.calls.services import Services
from callhook.config.settings import AppConfig
from callhook.events import CalleeReady, SecondaryPages
from callhook.ports import CallInfo
from callhook.telephony.farleg import FarLeg
from callhook.telephony.leg import SipLeg, new_leg
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.sipcall import SipCall

logger = logging.getLogger("callhook.sip")

#: Aculab's default ``minutes_max_call_duration``: the longest a far leg may last.
DEFAULT_MAX_SECONDS = 240 * 60.0


class Screening:
    """Running ``secondary_call`` pages on far legs (see the module docstring)."""

    def __init__(
        self,
        *,
        services: Services,
        loop: asyncio.AbstractEventLoop,
        prompts: PromptAudio,
        address: str,
        far_legs: dict[str, FarLeg],
        hang_up_far: Callable[[FarLeg, str | None], None],
    ) -> None:
        """``far_legs``: the connector's, by SIP call id; ``hang_up_far(far, cause)``: its
        way to end one (CANCEL or BYE)."""
        self.services = services
        self.loop = loop
        self.prompts = prompts
        self.address = address
        self.far_legs = far_legs
        self._hang_up_far = hang_up_far
        self._runs: set[asyncio.Task[None]] = set()  # far legs running their pages

    # --- the limit ---------------------------------------------------------------------------

    def limit_far(self, far: FarLeg, seconds: float = DEFAULT_MAX_SECONDS) -> None:
        """Hang ``far`` up ``seconds`` from now (replacing any earlier limit)."""
        if far.limit is not None:
            far.limit.cancel()
        far.limit = self.loop.call_later(seconds, self._over_time, far)

    def _over_time(self, far: FarLeg) -> None:
        far.limit = None
        if not far.ended:
            logger.info("far leg %s: minutes_max_call_duration reached: hanging up", far.call_id)
            self._hang_up_far(far, None)

    # --- the pages ---------------------------------------------------------------------------

    def run_callee(self, primary: SipCall, attempt: int, pages: SecondaryPages) -> None:
        """Far leg ``attempt`` of ``primary`` answered: run its pages on it."""
        far = next(
            (
                f
                for f in self.far_legs.values()
                if f.primary is primary and f.attempt == attempt and f.answered and not f.ended
            ),
            None,
        )
        if far is None or far.session is None:
            return  # it ended meanwhile: the action hears CalleeEnded
        self.limit_far(far, pages.max_seconds)
        if pages.first_page is None and pages.final_page is None and pages.error_page is None:
            return
        app = primary.app
        page_app = AppConfig(
            name=app.name,
            first_page=pages.first_page[0] if pages.first_page else "",
            secret=app.secret,
            error_page=pages.error_page[0] if pages.error_page else None,
            final_page=pages.final_page[0] if pages.final_page else None,
            application_parameters=app.application_parameters,
            first_page_method=pages.first_page[1] if pages.first_page else "POST",
            error_page_method=pages.error_page[1] if pages.error_page else "POST",
            final_page_method=pages.final_page[1] if pages.final_page else "POST",
        )
        leg = new_leg(
            self.services,
            CallInfo(
                call_id=far.call_id,
                direction="out",
                call_from=f"sip:{far.from_user}@{self.address}",
                call_to=far.route.uri,
                call_target=far.destination,
                far_end=pages.far_end,
            ),
            app.name,
            far.session,
            self.prompts,
            answer=_answered,
            hang_up=lambda: self._far_hung_up(far, runners[0].ending_cause if runners else None),
        )
        leg.answered = True  # an outbound call: answered already
        far.leg = leg
        runners: list[CallRunner] = []  # (for the hang-up: why its pages end the call)
        runner = self.services.runner(
            page_app,
            leg,
            primary_call_id=primary.call_id,
            on_ready=lambda cipher: primary.leg.inject(CalleeReady(attempt, cipher)),
            dropped_calls=lambda: list(primary.dropped_calls),
            needs_cipher=pages.needs_cipher,
        )
        runners.append(runner)
        logger.info("far leg %s: running its secondary_call pages", far.call_id)
        task = self.loop.create_task(self._run_pages(leg, runner))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    async def _run_pages(self, leg: SipLeg, runner: CallRunner) -> None:
        try:
            await runner.run()
        finally:
            leg.finish()

    def _far_hung_up(self, far: FarLeg, cause: str | None) -> str:
        """The far leg's pages hang it up: ``hang_up``, their list ran out unjoined
        (``completed``), or they failed with no working error page (``failed``: the
        connect's result says so, not a clean hang-up)."""
        if not far.ended:
            self._hang_up_far(far, "failed" if cause == "failed" else "completed")
        return "200"


async def _answered() -> None:
    """A far leg is answered before its pages run: nothing to do."""
