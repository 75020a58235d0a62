"""Test helpers: a virtual clock, a scripted caller, and a real local application server.

A test says what the caller does and when, runs the application on that call,
and the clock jumps from one happening to the next, so a 30-second timeout
takes no real time and every run is the same::

    caller = Caller().press("4", at=1.2).say("sales", at=3.0).hang_up(at=20)
    async with AppServer() as app:
        app.page("/start", [{"get_number": {"next_page": {"url": "/n"}, "digit_count": 1}}])
        app.page("/n", [])
        run = await run_call(app, caller)
    assert app.requests[1].json["action_result"]["result"] == {"entered_number": "4"}

Page requests are real HTTP to a real server on 127.0.0.1; media time stands
still while a page is being fetched (a page takes 0 s of call time).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import shutil
import tempfile
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from callhook.actions.machine import ActionContext
from callhook.calls.calllog import CallLog
from callhook.calls.runner import CallRunner, CallSummary
from callhook.config.settings import AppConfig
from callhook.edge.pages import HttpPages
from callhook.events import Alternative, CallEnded, ClassifyOptions, MediaCommand, MediaEvent
from callhook.media.simulated import PromptTimer, SimulatedMedia
from callhook.ports import CallInfo, Files, Recordings
from callhook.signature import HEADER, verify

# --- time -------------------------------------------------------------------------------


class VirtualClock:
    """A clock that only moves when told to (trio's MockClock, without the autojump)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"time cannot go back from {self._now} to {t}")
        self._now = t


# --- the caller ---------------------------------------------------------------------------


@dataclass
class Caller:
    """What the person on the phone does, at what time (seconds from the start of the call)."""

    steps: list[Callable[[SimulatedMedia], None]] = field(default_factory=list)

    def press(self, digits: str, at: float, gap: float = 0.25) -> Caller:
        """Press ``digits`` one after another, the first at ``at``, then every ``gap`` s."""
        for i, digit in enumerate(digits):
            self.steps.append(_press(digit, at + i * gap))
        return self

    def say(
        self,
        text: str,
        at: float,
        seconds: float | None = None,
        confidence: float = 0.9,
        alternatives: Sequence[tuple[str, float]] = (),
    ) -> Caller:
        """Speak ``text`` from ``at`` for ``seconds`` (default: 0.4 s a word)."""
        length = seconds if seconds is not None else 0.4 * max(1, len(text.split()))
        alts = (Alternative(text, confidence), *(Alternative(t, c) for t, c in alternatives))
        self.steps.append(lambda m: m.speak(alts, at, length))
        return self

    def noise(self, at: float, seconds: float) -> Caller:
        """Make a sound that is not speech the recogniser can match."""
        self.steps.append(lambda m: m.speak((), at, seconds))
        return self

    def hang_up(self, at: float) -> Caller:
        self.steps.append(lambda m: m.hang_up(at))
        return self


def _press(digit: str, at: float) -> Callable[[SimulatedMedia], None]:
    return lambda media: media.press(digit, at)


class ScriptExhausted(AssertionError):
    """The action waits for input that the script never gives and has no timeout."""


class ScriptedLeg:
    """A call whose caller follows a :class:`Caller` script, on a :class:`VirtualClock`."""

    def __init__(
        self,
        caller: Caller | None = None,
        *,
        clock: VirtualClock | None = None,
        timer: PromptTimer | None = None,
        info: CallInfo | None = None,
    ) -> None:
        self.clock = clock or VirtualClock()
        self.info = info or CallInfo("call-1", "in", "sip:alice@127.0.0.1", "sip:ivr@127.0.0.1")
        self.media = SimulatedMedia(timer)
        for step in (caller or Caller()).steps:
            step(self.media)
        self._queue: deque[MediaEvent] = deque()
        #: (time, command) of every media command, in order.
        self.sent: list[tuple[float, MediaCommand]] = []
        #: (time, event) of every event delivered.
        self.delivered: list[tuple[float, MediaEvent]] = []
        self.answered_at: float | None = None
        self.hung_up_at: float | None = None

    def send(self, commands: Sequence[MediaCommand]) -> None:
        now = self.clock.now()
        for command in commands:
            self.sent.append((now, command))
            self.media.command(command, now)

    def _deliver(self) -> MediaEvent:
        event = self._queue.popleft()
        self.delivered.append((self.clock.now(), event))
        return event

    def now(self) -> float:
        return self.clock.now()

    def media_time(self) -> float:
        return self.clock.now()

    async def next_event(self, deadline: float | None) -> tuple[MediaEvent | None, float]:
        while not self._queue:
            due = self.media.next_time()
            if due is not None and (deadline is None or due <= deadline):
                self.clock.advance_to(max(due, self.clock.now()))
                self._queue.extend(self.media.pop_due(self.clock.now()))
                continue
            if deadline is None:
                raise ScriptExhausted("the caller's script is over and the action has no deadline")
            self.clock.advance_to(max(deadline, self.clock.now()))
            return None, deadline
        return self._deliver(), self.clock.now()

    def take_pending(self) -> list[MediaEvent]:
        self._queue.extend(self.media.pop_due(self.clock.now()))
        events = []
        while self._queue:
            events.append(self._deliver())
        return events

    async def answer(self) -> None:
        if self.answered_at is None:
            self.answered_at = self.clock.now()

    async def hang_up(self) -> str:
        self.hung_up_at = self.clock.now()
        return "200" if self.answered_at is not None else "603"

    def recorded_seconds(self, filename: str) -> float | None:
        return None  # simulated media writes no file: the action's own figure stands

    async def wait_ended(self) -> CallEnded:
        # Media time stands still while a page is fetched: the caller cannot hang up then.
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def inject(self, event: MediaEvent, at: float) -> None:
        """Deliver a media event that no caller causes (a recorder failure, ...) at ``at``."""
        self.media.inject(event, at)

    # --- for assertions ---------------------------------------------------------------

    def commands(self, kind: type) -> list[tuple[float, Any]]:
        """(time, command) of the commands of one type."""
        return [(t, c) for t, c in self.sent if isinstance(c, kind)]


# --- the application server -----------------------------------------------------------------


@dataclass
class Reply:
    """A page's answer when it is not a plain action list: status, raw body, delay."""

    body: bytes | str | dict[str, Any] | list[Any] = b""
    status: int = 200
    delay: float = 0.0
    content_type: str = "application/json"


@dataclass
class Received:
    """One request the application server received."""

    path: str
    method: str
    headers: dict[str, str]
    raw: bytes
    json: Any

    def signature_ok(self, secret: str) -> bool:
        return verify(secret, self.raw, self.headers.get(HEADER))


Handler = Callable[[Received], Any | Awaitable[Any]]


class AppServer:
    """A real HTTP application on ``host`` (127.0.0.1) that records every request it gets.

    ``page(path, answer)``: ``answer`` is an action list, a full response
    object, a :class:`Reply`, or a function of the :class:`Received` request
    returning one of those. Unknown paths answer 404.
    """

    def __init__(self, secret: str = "test-secret", host: str = "127.0.0.1") -> None:
        self.secret = secret
        self.host = host
        self.requests: list[Received] = []
        self._pages: dict[str, Any] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    def page(self, path: str, answer: Any) -> None:
        self._pages[path] = answer

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def bodies(self, path: str | None = None) -> list[Any]:
        return [r.json for r in self.requests if path is None or r.path == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if request.method == "GET" and "instance_info" in request.query:
            raw = request.query["instance_info"].encode()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        received = Received(request.path, request.method, dict(request.headers), raw, parsed)
        self.requests.append(received)
        if request.path not in self._pages:
            return web.Response(status=404, text="no such page")
        answer = self._pages[request.path]
        if callable(answer):
            answer = answer(received)
            if asyncio.iscoroutine(answer):
                answer = await answer
        if isinstance(answer, Reply):
            if answer.delay:
                await asyncio.sleep(answer.delay)
            body = answer.body
            if isinstance(body, dict | list):
                body = json.dumps(body)
            data = body.encode() if isinstance(body, str) else body
            return web.Response(status=answer.status, body=data, content_type=answer.content_type)
        if isinstance(answer, list):
            answer = {"actions": answer}
        if answer is None:
            return web.Response(status=204)
        return web.json_response(answer)

    async def start(self) -> AppServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Stopping does not wait for answers still being delayed (a test's 30 s slow
        # page): they are cancelled at once, their connections closed.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> AppServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class StaticPages:
    """Pages answered in memory by a function (httpx's MockTransport idea): no HTTP at all.

    For measuring the core alone; tests of behaviour use :class:`AppServer`.
    ``handler(url, body)`` returns the response object (or an action list).
    """

    def __init__(self, handler: Callable[[str, Any], Any]) -> None:
        self.handler = handler

    async def fetch(self, url: str, method: str, body: bytes, secret: str) -> bytes:
        answer = self.handler(url, json.loads(body))
        if isinstance(answer, list):
            answer = {"actions": answer}
        return json.dumps(answer).encode()


# --- one call, end to end --------------------------------------------------------------------


@dataclass
class CallRun:
    """What :func:`run_call` returns: the outcome and everything to assert on."""

    summary: CallSummary
    leg: ScriptedLeg
    log: CallLog
    runner: CallRunner


def scratch_directory() -> Path:
    """A new temporary directory for a call's log, removed when the process ends (a test
    may read the log after the call; a suite makes thousands of them)."""
    directory = Path(tempfile.mkdtemp(prefix="callhook-test-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


async def run_call(
    app: AppServer,
    caller: Caller | None = None,
    *,
    first_page: str = "/start",
    error_page: str | None = None,
    final_page: str | None = None,
    timer: PromptTimer | None = None,
    page_timeout: float = 5.0,
    application_parameters: str = "",
    log_dir: Path | None = None,
    ctx: ActionContext | None = None,
    info: CallInfo | None = None,
    recordings: Recordings | None = None,
    files: Files | None = None,
    classify_callee: ClassifyOptions | None = None,
) -> CallRun:
    """Run the application served by ``app`` on a scripted call, to its end
    (``classify_callee``: the application's, for an outbound call)."""
    config = AppConfig(
        name="test",
        first_page=app.url(first_page),
        secret=app.secret,
        error_page=app.url(error_page) if error_page else None,
        final_page=app.url(final_page) if final_page else None,
        application_parameters=application_parameters,
        classify_callee=classify_callee,
    )
    leg = ScriptedLeg(caller, timer=timer, info=info)
    instance = "inst-" + str(len(app.requests))
    directory = log_dir or scratch_directory()
    log = CallLog(instance, leg.clock, directory / f"{instance}.log")
    pages = HttpPages(timeout=page_timeout)
    names = iter(range(1, 1000))
    context = ctx or ActionContext(new_recording_name=lambda: f"recordings/rec-{next(names)}.wav")
    runner = CallRunner(
        config,
        leg,
        pages,
        leg.clock,
        log,
        log_filename=f"logs/{instance}.log",
        ctx=context,
        recordings=recordings,
        files=files,
    )
    try:
        summary = await runner.run()
    finally:
        await pages.close()
    return CallRun(summary, leg, log, runner)
