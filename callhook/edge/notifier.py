"""Delivering the outbox's notifications (the asyncio side of :mod:`callhook.store.outbox`).

One task looks for due notifications whenever it is woken (a notification
was queued, a delivery ended) or the next retry is due, and sends each on
its own task with the page client, signed with the application's secret.
Each application has at most :attr:`Notifier.per_app` deliveries in flight
and the process :attr:`Notifier.total`, so a slow or dead endpoint of one
application only delays that application's notifications.

Stopping (:meth:`Notifier.close`) cancels the deliveries in flight: they stay
in the outbox and are sent after the next start.

Processes sharing a data directory (``serve`` and ``callhook call``) share
the outbox; only the one holding the notifier lock delivers
(``may_deliver``), woken by the others' rings when they queue one
(:mod:`callhook.edge.doorbell`) and looking every :data:`POLL_SECONDS` in case a
ring was lost; another takes over when it stops. Nodes sharing a
PostgreSQL database all deliver, each leasing the rows it sends
(:class:`~callhook.store.outbox.Outbox`). A notification that
was answered 2xx is never sent again, even when the database fails to
record it (it is kept aside and its deletion retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable

from opentelemetry.trace import SpanKind

from callhook.edge.pages import HttpPages
from callhook.monitoring import tracing
from callhook.ports import PageError
from callhook.store.outbox import Notification, Outbox

logger = logging.getLogger("callhook.notify")


#: The longest the notifier sleeps: it then looks for notifications queued by another
#: process on the same data directory, or takes over delivering from one that stopped.
POLL_SECONDS = 5.0


class Notifier:
    """Sends due notifications until closed."""

    def __init__(
        self,
        outbox: Outbox,
        pages: HttpPages,
        secret_for: Callable[[str], str],
        *,
        clock: Callable[[], float] = time.time,
        per_app: int = 4,
        total: int = 64,
        may_deliver: Callable[[], bool] = lambda: True,
    ) -> None:
        self.outbox = outbox
        self.pages = pages
        self.secret_for = secret_for
        self.clock = clock
        self.per_app = per_app
        self.total = total
        #: Whether this process is the one delivering (``Ownership.deliver_notifications``).
        self.may_deliver = may_deliver
        self.delivered = 0
        self.failed_attempts = 0
        #: Seconds from being queued (the file available) to a 2xx answer, latest first.
        self.latencies: deque[float] = deque(maxlen=10000)
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        # Answered 2xx and being marked so: close() lets these finish rather than
        # cancel them, or an answered notification would be sent again at the next start.
        self._finishing: set[int] = set()
        self._busy: Counter[str] = Counter()
        # Answered 2xx but not yet deleted (the database failed): never sent again.
        self._answered: set[int] = set()
        # Failed, but the new time could not be stored: not before this time.
        self._not_before: dict[int, float] = {}
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = self._loop.create_task(self._run())

    def wake(self) -> None:
        """Look for due notifications now (safe to call from any thread)."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            timeout = POLL_SECONDS
            if self.may_deliver():
                try:
                    timeout = await self._dispatch()
                except Exception:
                    logger.exception("notifications: the outbox could not be read")
            # asyncio.timeout, not wait_for: in Python 3.11 wait_for swallows a
            # cancellation that comes as the event is set, and close() would wait forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    async def _dispatch(self) -> float:
        """Start the due deliveries; returns how long to wait before looking again."""
        for notification_id in list(self._answered):
            await self.outbox.delivered(notification_id)  # raises again if still failing
            self._answered.discard(notification_id)
        now = self.clock()
        for notification_id, after in list(self._not_before.items()):
            if after <= now:
                del self._not_before[notification_id]
        skip = set(self._in_flight) | self._answered | set(self._not_before)
        due = await self.outbox.due(now, dict(self._busy), self.per_app, self.total, skip)
        for notification in due:
            self._busy[notification.app] += 1
            task = self._loop.create_task(self._deliver(notification))
            self._in_flight[notification.id] = task
        upcoming = await self.outbox.next_due(set(self._in_flight), self.clock())
        if upcoming is None or upcoming <= self.clock():
            # Nothing pending, or due but held back by a limit: a delivery ending wakes us.
            return POLL_SECONDS
        return min(POLL_SECONDS, upcoming - self.clock())

    async def _deliver(self, n: Notification) -> None:
        try:
            # A span of the call's trace (its row keeps the call's traceparent), current
            # while the request is made: the application's server gets it too.
            attributes = {
                "http.request.method": n.method,
                "url.full": n.url,
                "callhook.application": n.app,
                "callhook.attempt": n.attempts + 1,
            }
            with (
                tracing.within(n.traceparent),
                tracing.span("notification", kind=SpanKind.CLIENT, attributes=attributes) as span,
            ):
                try:
                    await self.pages.fetch(
                        n.url, n.method, n.body, self.secret_for(n.app), answer=False
                    )
                except PageError as exc:
                    tracing.failed(span, str(exc))
                    await self._failed(n, str(exc))
                    return
            self._finishing.add(n.id)
            self.latencies.append(self.clock() - n.created)
            logger.info("notification %d of %s delivered to %s", n.id, n.app, n.url)
            try:
                await self.outbox.delivered(n.id)
            except Exception as exc:
                logger.error("notification %d answered, but not marked so: %s", n.id, exc)
                self._answered.add(n.id)
            self.delivered += 1
        except Exception:
            logger.exception("notification %d of %s: delivery failed", n.id, n.app)
            self._not_before[n.id] = self.clock() + POLL_SECONDS
        finally:
            self._finishing.discard(n.id)
            self._in_flight.pop(n.id, None)
            self._busy[n.app] -= 1
            if self._busy[n.app] <= 0:
                del self._busy[n.app]
            self._wake.set()

    async def _failed(self, n: Notification, error: str) -> None:
        self.failed_attempts += 1
        try:
            retry = await self.outbox.failed(n, error, self.clock())
        except Exception as exc:
            logger.error("notification %d failed, and its retry was not stored: %s", n.id, exc)
            self._not_before[n.id] = self.clock() + self.outbox.policy.first_delay
            return
        if retry is None:
            logger.error(
                "notification %d of %s to %s abandoned after %d attempts: %s",
                n.id, n.app, n.url, n.attempts + 1, error,
            )  # fmt: skip
        else:
            logger.warning(
                "notification %d of %s to %s failed (attempt %d): %s; next try in %.0f s",
                n.id, n.app, n.url, n.attempts + 1, error, retry - self.clock(),
            )  # fmt: skip

    async def flush(self, timeout: float) -> bool:
        """Wait until nothing is due or in flight (True), or ``timeout`` seconds (False)."""
        deadline = self.clock() + timeout
        self.wake()
        while self.clock() < deadline:
            upcoming = await self.outbox.next_due(set(), self.clock())
            if not self._in_flight and (upcoming is None or upcoming > self.clock()):
                return True
            await asyncio.sleep(0.02)
        return False

    def snapshot(self) -> dict[str, object]:
        """Counters for ``/api/stats``."""
        return {
            "delivered": self.delivered,
            "failed_attempts": self.failed_attempts,
            "in_flight": len(self._in_flight),
        }

    async def close(self) -> None:
        """Stop delivering: requests in flight are abandoned (they stay in the outbox
        and go again at the next start); answered ones are still marked delivered."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for notification_id, task in list(self._in_flight.items()):
            if notification_id not in self._finishing:
                task.cancel()
        await asyncio.gather(*self._in_flight.values(), return_exceptions=True)
