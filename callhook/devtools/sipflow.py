"""``callhook test --sip HOST:PORT``: a flow's caller on a real SIP call to a running serve.

The caller is callhook's own SIP user agent (a :class:`~callhook.telephony.service.SipService`
in this process, on a port of its own) calling ``sip:<flow.to>@HOST:PORT``; serve's
routing picks the application, exactly as for any caller. Its side of the call is the
flow's script instead of an application (``Dialler.dial(script=...)``):

* ``press``: RFC 4733 telephone-events (DTMF tones if serve did not negotiate them),
  one digit every ``gap`` seconds;
* ``say``: the words spoken by this process's text-to-speech voice, sent as RTP, so
  serve's voice-activity detector and recogniser hear real audio;
* ``play``: the WAV file sent as RTP; ``noise``: white noise for that long;
* ``wait``: real seconds; ``hang_up``: a BYE.

``hear`` and ``request`` are judged from serve's own call log of the call (fetched over
its HTTP API by the call's Call-ID, ``GET /api/calls/{call_id}/log``, with serve's
installation secret): a ``prompt_start`` line that says the words (then its ``prompt_end`` or
``prompt_stop``), an ``action_end`` line with the action's result followed by the
``page_request`` it brought. ``ended`` is the log's ``call_end`` cause. Everything is in
real time: the flow's ``timeout`` is seconds of wall clock. After the last step the
caller waits :data:`LINGER` seconds for the application to end the call, then hangs up.
A failure names the call's errors (its log's ``error`` lines), as in process.

Before any call :func:`check_serve` asks serve's HTTP API once with the secret: a
serve that refuses it (its own is another data directory's) would refuse every log
read, after a call placed for nothing (and, away from loopback, each refusal counts
towards a ban of this address).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from callhook.calls.runner import CallSummary
from callhook.calls.services import Services
from callhook.config.settings import AppConfig, Serve
from callhook.devtools.flow import (
    Ended,
    Flow,
    HangUp,
    Hear,
    Noise,
    PlayWav,
    Press,
    Request,
    Say,
    Step,
    Wait,
    describe,
)
from callhook.devtools.flowcaller import (
    FlowFailed,
    FlowResult,
    PageCall,
    matches,
    plain_words,
    read_wav,
    shown,
    with_errors,
)
from callhook.events import (
    CallEnded,
    PlayDigits,
    PlayFile,
    PromptFinished,
    PromptItem,
    SayText,
    StartPrompt,
)
from callhook.speech.sentences import sentences
from callhook.telephony.leg import SipLeg

#: Seconds the caller waits after its last step for the application to end the call.
LINGER = 5.0
#: How often serve's call log is read while a step waits on it.
POLL = 0.25
#: The folder of this process's media store the caller's own sounds are written to.
SOUNDS = "flow-sounds"


@dataclass(frozen=True)
class LogLine:
    """A line of serve's call log: seconds since the call started, kind, text."""

    t: float
    kind: str
    text: str


def parse_log(text: str) -> list[LogLine]:
    """serve's call log (``<wall> +<seconds> <kind> <text>`` lines)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\S+ \+([0-9.]+) (\S+) ?(.*)$", line)
        if m:
            out.append(LogLine(float(m.group(1)), m.group(2), m.group(3)))
    return out


def page_calls(lines: list[LogLine]) -> list[PageCall]:
    """The page requests the log records, each with the result of the action that brought
    it (``action_end [i] name: {result}`` then ``page_request METHOD url (name)``)."""
    calls: list[PageCall] = []
    pending: tuple[str, Any] | None = None
    for line in lines:
        if line.kind == "action_end":
            m = re.match(r"^\[\d+\] (\S+): (\{.*\})$", line.text)
            pending = None
            if m:
                try:
                    pending = (m.group(1), json.loads(m.group(2)))
                except ValueError:
                    pending = None
        elif line.kind == "page_request":
            parts = line.text.split(" ", 2)
            url = parts[1] if len(parts) > 1 else ""
            why = parts[2].strip("()") if len(parts) > 2 else ""
            body: dict[str, Any] = {}
            if pending is not None and pending[0] == why:
                body = {"action_result": {"action": pending[0], "result": pending[1]}}
            calls.append(PageCall(line.t, url, body))
            pending = None
    return calls


@dataclass(frozen=True)
class Prompt:
    """A prompt serve started: its id, what it says, and whether it is over."""

    prompt_id: str
    text: str
    over: bool


def prompts(lines: list[LogLine]) -> list[Prompt]:
    over = {line.text.split(" ")[0] for line in lines if line.kind in ("prompt_end", "prompt_stop")}
    ended = any(line.kind == "call_end" for line in lines)
    out = []
    for line in lines:
        if line.kind == "prompt_start":
            pid, _, text = line.text.partition(" ")
            out.append(Prompt(pid, text, ended or pid in over))
    return out


def call_cause(lines: list[LogLine]) -> str | None:
    for line in lines:
        if line.kind == "call_end":
            m = re.search(r"call_cause=(\S+)", line.text)
            return m.group(1) if m else "unknown"
    return None


class ServeLog:
    """One call's log on a running serve, read over its HTTP API by the call's Call-ID
    (``GET /api/calls/{call_id}/log``, with serve's installation secret)."""

    def __init__(self, http: aiohttp.ClientSession, base: str, secret: str) -> None:
        self.http = http
        self.base = base
        self.headers = {"Authorization": f"Bearer {secret}"}
        self.call_id = ""
        self.lines: list[LogLine] = []

    async def refresh(self) -> list[LogLine]:
        """Read the log again (nothing yet until serve has started the call's log)."""
        try:
            async with self.http.get(
                f"{self.base}/api/calls/{self.call_id}/log", headers=self.headers
            ) as r:
                if r.status == 401:
                    raise FlowFailed(
                        "serve refused its installation secret (--data-dir, CALLHOOK_SECRET)"
                    )
                if r.status == 200:
                    self.lines = parse_log(await r.text())
        except aiohttp.ClientError as exc:
            raise FlowFailed(f"cannot read serve's call log at {self.base}: {exc}") from None
        return self.lines


async def check_serve(serve: Serve, secret_from: str) -> str | None:
    """Whether serve's HTTP API takes the installation secret this process read (from
    ``secret_from``: a file's path, or ``CALLHOOK_SECRET``): None if it does; else the one
    line that says why not, to stop on before any call is placed."""
    where = f"callhook test --sip: serve at {serve.http}"
    url = f"{serve.http}/api/calls/callhook-test-check/log"  # a call no serve has: 404
    headers = {"Authorization": f"Bearer {serve.secret}"}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as client,
            client.get(url, headers=headers) as r,
        ):
            status = r.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        why = str(exc) or type(exc).__name__
        return f"{where} does not answer ({why}): --http HOST:PORT is serve's web server"
    if status in (200, 404):
        return None
    if status == 401:
        return (
            f"{where} refused the installation secret read from {secret_from}: serve's own"
            " is the file secret in serve's data directory (its --data-dir, or data_dir in"
            " its config; by default ./data where it was started): give callhook test that"
            " --data-dir, or set CALLHOOK_SECRET to that file's content"
        )
    if status == 403:
        return f"{where} has banned this address for a while (403, after wrong secrets)"
    return f"{where} answered HTTP {status} to GET /api/calls/.../log: is it callhook serve?"


class SipCaller:
    """Runs one flow's steps on the caller's side of a real call (module docstring)."""

    def __init__(self, flow: Flow, services: Services, log: ServeLog) -> None:
        self.flow = flow
        self.services = services
        self.log = log
        self.failure: str | None = None
        self.step_index = 0
        self._prompt = 9000  # the caller's own prompt ids
        self._prompt_seen = 0
        self._requests_seen = 0
        self._ended: CallEnded | None = None
        self.deadline = time.monotonic() + flow.timeout
        self.leg: SipLeg | None = None
        self._written: list[Path] = []  # this call's sounds, deleted when it is over

    async def drive(self, leg: SipLeg) -> CallSummary:
        """The script: every step in order, then the end of the call."""
        self.leg = leg
        try:
            for index, step in enumerate(self.flow.steps):
                self.step_index = index
                await self._step(step)
            self.step_index = len(self.flow.steps)
            if self._ended is None:
                await self._events(time.monotonic() + LINGER)
            if self._ended is None:
                await leg.hang_up()
        except FlowFailed as exc:
            self._fail(str(exc))
            if self._ended is None:
                await leg.hang_up()
        for path in self._written:
            path.unlink(missing_ok=True)
        summary = CallSummary(leg.info.call_id)
        summary.cause = "completed"
        return summary

    def _fail(self, why: str) -> None:
        if self.failure is None:
            steps = self.flow.steps
            if self.step_index < len(steps):
                where = f"step {self.step_index + 1} ({describe(steps[self.step_index])})"
            else:
                where = "end"
            self.failure = f"{where}: {why}"

    async def _events(self, until: float, prompt: int | None = None) -> bool:
        """Take the call's events until ``until`` (wall clock), the caller's prompt
        ``prompt`` finishing (True), or the call ending."""
        assert self.leg is not None
        while self._ended is None:
            left = min(until, self.deadline) - time.monotonic()
            if left <= 0:
                if time.monotonic() >= self.deadline:
                    raise FlowFailed(f"the flow's timeout ({self.flow.timeout:g} s) passed")
                return False
            event, _ = await self.leg.next_event(self.leg.now() + left)
            if isinstance(event, CallEnded):
                self._ended = event
            elif isinstance(event, PromptFinished) and event.prompt_id == prompt:
                if event.error:
                    raise FlowFailed(f"the caller could not play it: {event.error}")
                return True
        return False

    async def _play(self, *items: PromptItem) -> None:
        assert self.leg is not None
        self._prompt += 1
        self.leg.send([StartPrompt(self._prompt, items)])
        await self._events(self.deadline, self._prompt)

    async def _step(self, step: Step) -> None:
        acts = not isinstance(step, Hear | Request | Ended | HangUp)
        if acts and self._ended is not None:
            raise FlowFailed(f"the call ended ({self._ended.cause}) before this step")
        if isinstance(step, Hear):
            await self._until(lambda: self._hear(step), lambda: self._not_heard(step))
        elif isinstance(step, Request):
            await self._until(lambda: self._requested(step), lambda: self._not_requested())
        elif isinstance(step, Ended):
            await self._events(self.deadline)
            await self._until(
                lambda: call_cause(self.log.lines) is not None, lambda: "the call's end"
            )
            cause = call_cause(self.log.lines)
            if step.ended not in ("any", cause):
                raise FlowFailed(f"the call ended with {cause}, not {step.ended}")
        elif isinstance(step, Press):
            for digit in step.press:
                started = time.monotonic()
                await self._play(PlayDigits(digit))
                await self._events(started + step.gap)
        elif isinstance(step, Say):
            await self._play(SayText(step.say))
        elif isinstance(step, PlayWav):
            samples = read_wav(self.flow.folder / step.play)
            await self._play(PlayFile(self._sound(Path(step.play).stem, samples)))
        elif isinstance(step, Noise):
            rng = np.random.default_rng(7)
            noise = (rng.standard_normal(int(step.noise * 8000)) * 3000).astype(np.int16)
            await self._play(PlayFile(self._sound(f"noise-{step.noise:g}", noise)))
        elif isinstance(step, Wait):
            await self._events(time.monotonic() + step.wait)
        elif isinstance(step, HangUp):
            assert self.leg is not None
            if self._ended is None:
                await self.leg.hang_up()
                self._ended = CallEnded("hung_up", "BYE")

    def _sound(self, stem: str, samples: np.ndarray[Any, Any]) -> str:
        """Write ``samples`` (8 kHz) to this process's store, for the caller to play."""
        name = f"{SOUNDS}/{stem}-{id(self):x}.wav"  # this call's own: flows run at once
        path = self.services.store.path(self.flow_app, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._written.append(path)
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(8000)
            out.writeframes(samples.astype("<i2").tobytes())
        return name

    flow_app = "flow"

    async def _until(self, done: Any, missing: Any) -> None:
        """Poll serve's log until ``done()``; after the call's end, one last read."""
        while True:
            await self.log.refresh()
            if done():
                return
            if self._ended is not None:
                await asyncio.sleep(0.3)  # the log's last lines (the final page)
                await self.log.refresh()
                if done():
                    return
                raise FlowFailed(f"the call ended and {missing()}")
            await self._events(time.monotonic() + POLL)

    def _hear(self, step: Hear) -> bool:
        want = plain_words(step.hear)
        found = prompts(self.log.lines)
        for i in range(self._prompt_seen, len(found)):
            if want in plain_words(found[i].text):
                if not found[i].over and self._ended is None:
                    return False  # heard, but the next step comes when it ends
                self._prompt_seen = i + 1
                return True
        return False

    def _not_heard(self, step: Hear) -> str:
        said = [p.text for p in prompts(self.log.lines)[self._prompt_seen :]]
        return f"no prompt said {step.hear!r}; prompts: {said}"

    def _requested(self, step: Request) -> bool:
        calls = page_calls(self.log.lines)
        for i in range(self._requests_seen, len(calls)):
            if matches(calls[i], step):
                self._requests_seen = i + 1
                return True
        return False

    def _not_requested(self) -> str:
        seen = [shown(c) for c in page_calls(self.log.lines)[self._requests_seen :]]
        return f"there was no such request; requests: {seen}"


async def prepare_words(flow: Flow, services: Services) -> None:
    """Synthesise the flow's ``say`` words before the call: a caller answers a prompt
    at once, as a person would, rather than after its own speech engine had its turn on
    a busy machine (an application's silence timeout runs meanwhile)."""
    synthesiser = services.speech.synthesiser
    if synthesiser is None:
        return
    for step in flow.steps:
        if isinstance(step, Say):
            for sentence in sentences(step.say):
                await services.speech.sentence(synthesiser.default, sentence)


async def run_sip_flow(flow: Flow, sip: Any, services: Services, serve: Serve) -> FlowResult:
    """Call ``serve`` and run ``flow`` on the call (``sip``: this process's
    :class:`~callhook.telephony.service.SipService`)."""
    started = time.perf_counter()
    host, port = serve.sip
    where = f"[{host}]" if ":" in host else host
    uri = f"sip:{flow.to}@{where}:{port}"
    app = AppConfig(name=SipCaller.flow_app, first_page="http://127.0.0.1/", secret="-" * 32)
    await prepare_words(flow, services)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as client:
        ids: list[str] = []
        log = ServeLog(client, serve.http, serve.secret)
        caller = SipCaller(flow, services, log)

        def placed(call_id: str) -> None:
            ids.append(call_id)
            log.call_id = call_id

        summary = await sip.dialler.dial(
            uri,
            app,
            from_user="flow",
            placed=placed,
            script=caller.drive,
            ring_timeout=min(60.0, flow.timeout),
        )
        if caller.leg is None:  # never answered
            caller.failure = f"serve did not answer: {summary.cause} ({summary.raw_cause})"
        if log.call_id:  # (answered or not: a call serve refused has its log, and why)
            try:
                for _ in range(20):  # serve's last lines (its final page) after the BYE
                    await log.refresh()
                    if call_cause(log.lines) is not None or not (log.lines or caller.leg):
                        break  # (no log of a call serve never had: nothing to wait for)
                    await asyncio.sleep(0.25)
            except FlowFailed as exc:
                caller.failure = caller.failure or str(exc)
    cause = call_cause(log.lines) or summary.cause
    timeline = [f"[{line.t:7.2f}] {line.kind} {line.text}" for line in log.lines]
    call_seconds = log.lines[-1].t if log.lines else 0.0
    failure = caller.failure
    if failure is not None:
        failure = with_errors(failure, [line.text for line in log.lines if line.kind == "error"])
    return FlowResult(flow, failure, cause, call_seconds, time.perf_counter() - started, timeline)
