"""One call's page requests: each sent, raced against the call's end, its answer read.

:class:`PageExchange` is the part of the call runner (``callhook/calls/runner.py``) that talks
HTTP through :class:`~callhook.ports.Pages`: it writes the ``page_request`` and
``page_response`` log lines, times each answer for the call's summary, and reads an
answer as Aculab's HTTP response page says (docs/behaviour.md, "Pages"): an empty 2xx
body is an empty action list; a response without ``token`` makes the token null; an
answer that is not a valid response is a page error. What the runner does with the
actions, the cipher and the errors stays the runner's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry.trace import SpanKind

from callhook.actions.response import InvalidResponse, Response, parse_response
from callhook.calls.calllog import CallLog
from callhook.events import CallEnded
from callhook.monitoring import tracing
from callhook.ports import PageError, Pages


class PageExchange:
    """The page requests of one call of an application (see the module docstring)."""

    def __init__(
        self,
        pages: Pages,
        secret: str,
        log: CallLog,
        wait_ended: Callable[[], Awaitable[CallEnded]],
        *,
        requested: list[str],
        seconds: list[float],
    ) -> None:
        """``secret`` signs the requests; ``wait_ended`` is the call's end, which a
        request races; each URL requested is appended to ``requested``, each answer's
        wall-clock seconds to ``seconds``."""
        self.pages = pages
        self.secret = secret
        self.log = log
        self.wait_ended = wait_ended
        self.requested = requested
        self.seconds = seconds
        #: The token the next request carries (the last response's, null by default).
        self.token: str | None = None
        #: Requests that failed: no answer (an HTTP error, a timeout, no connection) or
        #: no valid action list.
        self.failed = 0

    async def fetch(
        self, url: str, method: str, body: dict[str, Any], why: str, *, racing: bool = True
    ) -> bytes | CallEnded:
        """The page's answer; or how the call ended, if it ended first (``racing``: the
        call is still up; the request is then abandoned). :class:`PageError` if it fails."""
        data = json.dumps(body, separators=(",", ":")).encode()
        self.requested.append(url)
        self.log.write("page_request", f"{method} {url} ({why})")
        started = time.perf_counter()
        if not racing:
            answer = await self._fetch(url, method, data, why)
            self.seconds.append(time.perf_counter() - started)
            return answer  # nothing to race: the call has ended already
        # The request runs in the runner's own task, and the call's end cancels it there
        # (as asyncio.timeout does): a task of its own and asyncio.wait cost the answer
        # two turns of the event loop more, each as long as the loop's backlog, and so
        # did the caller's wait, when the loop is loaded.
        task = asyncio.current_task()
        assert task is not None
        ended = asyncio.ensure_future(self.wait_ended())
        gone = False

        def end(future: asyncio.Future[CallEnded]) -> None:
            nonlocal gone
            if not future.cancelled():  # (ended, or failed: its result says which)
                gone = True
                task.cancel()

        ended.add_done_callback(end)
        try:
            answer = await self._fetch(url, method, data, why)
        except asyncio.CancelledError:
            if gone and task.uncancel() == 0:
                # (the runner notes the end, then that the page was abandoned)
                return ended.result()
            raise
        finally:
            ended.remove_done_callback(end)
            ended.cancel()
        if gone:
            # The call ended, but the request kept its answer from the cancel (a Pages
            # that swallows it): the cancel is taken back, the answer stands, and the end
            # is the runner's next event.
            task.uncancel()
        self.seconds.append(time.perf_counter() - started)
        return answer

    async def fetch_final(self, url: str, method: str, body: dict[str, Any]) -> bytes:
        """The final page's answer (the call is over: nothing to race; not timed, as the
        pages a call waits for are). :class:`PageError` if it fails."""
        data = json.dumps(body, separators=(",", ":")).encode()
        self.requested.append(url)
        self.log.write("page_request", f"{method} {url} (final page)")
        return await self._fetch(url, method, data, "final page")

    async def _fetch(self, url: str, method: str, data: bytes, why: str) -> bytes:
        # The request's span is current while it is made: the application's server gets
        # its traceparent (edge/pages.py), and its own spans join the call's trace.
        attributes = {"http.request.method": method, "url.full": url, "callhook.why": why}
        with tracing.span("page request", kind=SpanKind.CLIENT, attributes=attributes) as span:
            try:
                return await self.pages.fetch(url, method, data, self.secret)
            except PageError as exc:
                self.failed += 1
                tracing.failed(span, str(exc))
                raise

    def read(self, url: str, raw: bytes, why: str = "") -> Response | None:
        """A page's answer as a response (None: an empty body, no actions); sets the
        token. ``why`` is why the page was requested (``error page``: its log line says
        so). :class:`PageError` ``invalid`` if it is no valid response."""
        if not raw.strip():
            # A 2xx with an empty body (a 204, or a 200 with nothing in it) is an empty
            # action list: nothing more to do on this call (a secondary call's first page:
            # put it through). The token is null, as for any response without one.
            self.token = None
            text = f"{url}: (empty body: no actions)"
            if why == "error page":
                # Said in words: the log's reader sees why nothing runs after the error.
                text += (
                    ": the error page answered with no action list (204 No Content, or a"
                    " 2xx with nothing in it), so no actions run after the error"
                )
            self.log.write("page_response", text)
            return None
        try:
            response = parse_response(raw)
        except InvalidResponse as exc:
            for problem in exc.problems:
                self.log.write("invalid_response", f"{url}: {problem}", level=logging.ERROR)
            self.failed += 1
            raise PageError("invalid", url, str(exc)) from None
        # Aculab's HTTP response: the token "defaults to null", so a response without one
        # clears it (the next request says null).
        self.token = response.token
        names = ", ".join(type(a).name for a in response.actions) or "(no actions)"
        self.log.write("page_response", f"{url}: {names}")
        return response

    def read_final(self, url: str, raw: bytes) -> list[Any]:
        """The final page's answer: its actions. Anything else (empty, not JSON, not an
        action list) is no error: most final pages answer anything at all ({} or "OK")."""
        if not raw.strip():
            self.log.write("page_response", f"{url}: (final page; no actions)")
            return []
        try:
            actions = parse_response(raw).actions
        except InvalidResponse as exc:
            self.log.write("page_response", f"{url}: (final page; answer ignored: {exc})")
            return []
        names = ", ".join(type(a).name for a in actions) or "(no actions)"
        self.log.write("page_response", f"{url}: {names} (final page)")
        return actions
