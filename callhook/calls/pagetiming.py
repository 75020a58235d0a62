"""Each page request an application's call waits for, timed for ``GET /metrics``."""

from __future__ import annotations

import asyncio
import time

from callhook.monitoring import prometheus
from callhook.ports import Pages


class TimedPages:
    """``pages`` for the calls of ``application``: each request's duration and outcome
    (ok, failed, abandoned: the call ended first) into the page request histogram."""

    def __init__(self, pages: Pages, application: str) -> None:
        self.pages = pages
        self._ok = prometheus.PAGE_REQUESTS.labels(application, "ok")
        self._failed = prometheus.PAGE_REQUESTS.labels(application, "failed")
        self._abandoned = prometheus.PAGE_REQUESTS.labels(application, "abandoned")

    async def fetch(self, url: str, method: str, body: bytes, secret: str) -> bytes:
        started = time.perf_counter()
        try:
            answer = await self.pages.fetch(url, method, body, secret)
        except asyncio.CancelledError:
            self._abandoned.observe(time.perf_counter() - started)
            raise
        except Exception:  # (PageError, or a bug the runner reports)
            self._failed.observe(time.perf_counter() - started)
            raise
        self._ok.observe(time.perf_counter() - started)
        return answer
