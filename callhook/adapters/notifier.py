"""Delivering the outbox's notifications (the asyncio side of :mod:`callhook.store.outbox`).

One task looks for due notifications whenever it is woken (a notification
was queued, a delivery ended) or the next retry is due, and sends each on
its own task with the page client, signed with the application's secret.
Each application has at most :attr:`Notifier.per_app` deliveries in flight
and the process :attr:`Notifier.total`, so a slow or dead endpoint of one
application only delays that application's notifications.

Stopping (:meth:`Notifier.close`) cancels the deliveries in flight: they stay
in the outbox and are sent after the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable

from callhook.adapters.pages import HttpPages
from callhook.call import PageError
from callhook.store.outbox import Notification, Outbox

logger = logging.getLogger("callhook.notify")


class Notifier:
    """Sends due notifications until closed."""

    def __init__(
        self,
        outbox: Outbox,
        pages: HttpPages,
        secret_for: Callable[[str], str | None],
        *,
        clock: Callable[[], float] = time.time,
        per_app: int = 4,
        total: int = 64,
    ) -> None:
        self.outbox = outbox
        self.pages = pages
        self.secret_for = secret_for
        self.clock = clock
        self.per_app = per_app
        self.total = total
        self.delivered = 0
        self.failed_attempts = 0
        #: Seconds from being queued (the file available) to a 2xx answer, latest first.
        self.latencies: deque[float] = deque(maxlen=10000)
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._busy: Counter[str] = Counter()
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
            try:
                timeout = await self._dispatch()
            except Exception:
                logger.exception("notifications: the outbox could not be read; retrying in 5 s")
                timeout = 5.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _dispatch(self) -> float | None:
        """Start the due deliveries; returns how long to wait before looking again."""
        now = self.clock()
        due = await self.outbox.due(
            now, dict(self._busy), self.per_app, self.total, set(self._in_flight)
        )
        for notification in due:
            self._busy[notification.app] += 1
            task = self._loop.create_task(self._deliver(notification))
            self._in_flight[notification.id] = task
        upcoming = await self.outbox.next_due(set(self._in_flight))
        if upcoming is None:
            return None
        # Something due now but held back by a limit: a delivery ending wakes us.
        return max(0.05, upcoming - self.clock())

    async def _deliver(self, n: Notification) -> None:
        try:
            secret = self.secret_for(n.app)
            try:
                if secret is None:
                    raise PageError(
                        "unreachable", n.url, f"application {n.app!r} is not configured"
                    )
                await self.pages.fetch(n.url, n.method, n.body, secret)
            except PageError as exc:
                self.failed_attempts += 1
                retry = await self.outbox.failed(n, str(exc), self.clock())
                if retry is None:
                    logger.error(
                        "notification %d of %s to %s abandoned after %d attempts: %s",
                        n.id, n.app, n.url, n.attempts + 1, exc,
                    )  # fmt: skip
                else:
                    logger.warning(
                        "notification %d of %s to %s failed (attempt %d): %s; next try in %.0f s",
                        n.id, n.app, n.url, n.attempts + 1, exc, retry - self.clock(),
                    )  # fmt: skip
                return
            await self.outbox.delivered(n)
            self.delivered += 1
            self.latencies.append(self.clock() - n.created)
            logger.info("notification %d of %s delivered to %s", n.id, n.app, n.url)
        finally:
            self._in_flight.pop(n.id, None)
            self._busy[n.app] -= 1
            if self._busy[n.app] <= 0:
                del self._busy[n.app]
            self._wake.set()

    async def flush(self, timeout: float) -> bool:
        """Wait until nothing is due or in flight (True), or ``timeout`` seconds (False)."""
        deadline = self.clock() + timeout
        self.wake()
        while self.clock() < deadline:
            upcoming = await self.outbox.next_due(set())
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
        tasks = list(self._in_flight.values())
        if self._task is not None:
            tasks.append(self._task)
            self._task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
