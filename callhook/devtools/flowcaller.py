"""Runs a call flow (:mod:`callhook.devtools.flow`) against an application: ``callhook test``.

The caller is scripted and the call runs on a virtual clock, as in callhook's own tests
(:mod:`callhook.devtools.harness`): a flow with a 30 s timeout takes no 30 s, and every run is the
same. Everything else is real: the application's pages are requested over HTTP by the
same call runner ``serve`` uses, the actions run as on a SIP call, and what the caller
says goes through the text-to-speech voice, the call's voice-activity detector and the
recogniser with the running action's word hints (a ``play`` step's recording, likewise).
Media time stands still while a page is fetched.

Each step waits (``hear``, ``request``) or happens (``press``, ``say``, ...) in order;
the first that cannot be satisfied fails the flow with what the call did instead, and
with the call's errors (:func:`with_errors`: a page that answered 500, an invalid action
list), which are most often why.
"""

from __future__ import annotations

import re
import time
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt

from callhook.actions.machine import ActionContext
from callhook.calls.calllog import CallLog
from callhook.calls.runner import CallRunner
from callhook.config.settings import AppConfig
from callhook.devtools.callees import SimulatedCallees
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
from callhook.devtools.flowtranscript import FlowTranscript
from callhook.devtools.harness import ScriptedLeg, VirtualClock
from callhook.edge.speechworkers import SpeechService
from callhook.events import (
    Alternative,
    MediaCommand,
    MediaEvent,
    PromptFinished,
    RecognitionOptions,
    RecordCall,
    RunCallee,
    SayText,
    StartPrompt,
    StartRecognition,
    StartRecording,
    StopPrompt,
    StopTranscribing,
    Transcribe,
)
from callhook.media.simulated import PromptTimer, SavedRecordings
from callhook.ports import CallInfo, Files, PageErrorKind, Pages, Recordings
from callhook.speech import ssml

#: Seconds a word takes when there is no speech engine (the words are handed over typed).
SECONDS_PER_WORD = 0.4
#: The call's errors a failure names at most (the first ones: the later are most often
#: what the first brought about).
ERRORS_SHOWN = 3
#: The longest an error is shown in a failure (a page's answer is quoted in it).
ERROR_CHARS = 300

#: A page error as the call runner logs it (``callhook.ports.PageError``): kind, URL, detail.
_PAGE_ERROR = re.compile(r"^(" + "|".join(get_args(PageErrorKind)) + r"): (\S+): (.*)$", re.S)


@dataclass(frozen=True)
class PageCall:
    """One page request the application received, and when (call time)."""

    at: float
    url: str
    body: dict[str, Any]


class RecordingPages:
    """The runner's pages, with every request kept for the flow's ``request`` steps."""

    def __init__(self, pages: Pages, clock: VirtualClock) -> None:
        self.pages = pages
        self.clock = clock
        self.calls: list[PageCall] = []

    async def fetch(self, url: str, method: str, body: bytes, secret: str) -> bytes:
        try:
            parsed = _json(body)
        except ValueError:
            parsed = {}
        self.calls.append(PageCall(self.clock.now(), url, parsed))
        return await self.pages.fetch(url, method, body, secret)


def _json(body: bytes) -> dict[str, Any]:
    import json

    value = json.loads(body) if body else {}
    return value if isinstance(value, dict) else {}


def plain_words(text: str) -> str:
    """``text`` as lower-case words, punctuation and spacing aside (what ``hear`` matches)."""
    return " ".join(re.findall(r"[\w']+", text.lower()))


def matches(call: PageCall, expected: Request) -> bool:
    """Whether a page request is the one a ``request`` step waits for."""
    want = expected.request
    if want.page is not None:
        path = urlsplit(call.url).path
        if not (
            call.url == want.page or path == want.page or path.endswith("/" + want.page.lstrip("/"))
        ):
            return False
    result = call.body.get("action_result")
    if want.action is not None and (
        not isinstance(result, dict) or result.get("action") != want.action
    ):
        return False
    if want.result is not None:
        got = result.get("result") if isinstance(result, dict) else None
        if not isinstance(got, dict):
            return False
        return all(k in got and _same(got[k], v) for k, v in want.result.items())
    return True


def _same(got: Any, want: Any) -> bool:
    # A YAML 1234 and a JSON "1234" are the same digits to the person writing the flow.
    if isinstance(got, str) and isinstance(want, int | float) and not isinstance(want, bool):
        return got == str(want)
    if isinstance(want, dict) and isinstance(got, dict):
        return all(k in got and _same(got[k], v) for k, v in want.items())
    return bool(got == want)


class FlowFailed(Exception):
    """A step could not be satisfied."""


class FlowLeg(ScriptedLeg):
    """The scripted caller of a flow, on a virtual clock."""

    def __init__(
        self,
        flow: Flow,
        *,
        info: CallInfo,
        timer: PromptTimer,
        speech: SpeechService | None,
        pages: RecordingPages,
        clock: VirtualClock,
        save_recording: Callable[[StartRecording, float], float] | None = None,
        secret: str = "",
    ) -> None:
        super().__init__(None, clock=clock, timer=timer, info=info)
        self.transcript = FlowTranscript(
            pages.pages,
            secret,
            lambda url, body: pages.calls.append(PageCall(clock.now(), url, body)),
        )
        self._recordings = SavedRecordings(self.media, save_recording)
        self.callees = SimulatedCallees(flow.callees)
        self.flow = flow
        self.speech = speech
        self.pages = pages
        self.steps: list[Step] = list(flow.steps)
        self.step_index = 0
        #: When the next step may happen (the steps before it take their time).
        self.ready_at = 0.0
        self.failure: str | None = None
        self.options = RecognitionOptions()
        #: (time, prompt id, text) of every prompt started.
        self.prompts: list[tuple[float, int, str]] = []
        self._prompt_seen = 0  # prompts before this index were matched or passed by
        self._requests_seen = 0
        self._waiting_prompt: int | None = None  # a heard prompt, until it ends
        self._hung_up = False

    # --- what callhook does -----------------------------------------------------------------

    def send(self, commands: Sequence[MediaCommand]) -> None:
        now = self.clock.now()
        super().send(commands)
        for command in commands:
            # Simulated media has no audio: a recording's file holds silence for its length
            # (as the terminal phone's), so the application can play it, delete it, be told.
            self._recordings.command(command, now)
            self.callees.command(command, now)
            pages = command.pages if isinstance(command, RunCallee) else None
            if pages is not None and (pages.first_page or pages.final_page or pages.error_page):
                self._fail(
                    "a connect's secondary_call pages run only on a real call "
                    "(test this flow through serve: callhook test --sip)"
                )
            elif isinstance(command, RecordCall):
                self._fail(
                    "a connect's call_recording is made only on a real call "
                    "(test this flow through serve: callhook test --sip)"
                )
            elif isinstance(command, StartRecognition):
                self.options = command.options
            elif isinstance(command, StartPrompt):
                text = " ".join(  # (SSML's words, not its markup)
                    _words(i) for i in command.items if isinstance(i, SayText) and not i.private
                )
                self.prompts.append((now, command.prompt_id, text))
                self.transcript.prompt(text)
            elif isinstance(command, Transcribe):
                self.transcript.start(command)
            elif isinstance(command, StopTranscribing):
                self.transcript.stop()
            elif isinstance(command, StopPrompt) and command.prompt_id == self._waiting_prompt:
                self._prompt_over(now)

    def recorded_seconds(self, filename: str) -> float | None:
        return self._recordings.seconds(filename)

    def _deliver(self) -> MediaEvent:
        event = super()._deliver()
        if isinstance(event, PromptFinished) and event.prompt_id == self._waiting_prompt:
            self._prompt_over(self.clock.now())
        return event

    def _prompt_over(self, now: float) -> None:
        self._waiting_prompt = None
        self.ready_at = max(self.ready_at, now)

    # --- the caller -------------------------------------------------------------------------

    async def next_event(self, deadline: float | None) -> tuple[MediaEvent | None, float]:
        while not self._queue:
            await self._run_steps()
            now = self.clock.now()
            limit = None if self._hung_up else self.flow.timeout
            due = [
                t
                for t in (
                    self.media.next_time(),
                    self.callees.next_time(),
                    self._step_time(),
                    deadline,
                    limit,
                )
                if t is not None
            ]
            if not due:
                if self._hung_up:
                    raise FlowFailed("the call did not end when the caller hung up")
                # Nothing will ever happen: the action waits without a deadline and the
                # caller has nothing more to do. The caller hangs up, as a person would.
                if any(not isinstance(s, Ended) for s in self.steps[self.step_index :]):
                    self._fail("the call waits for the caller and no step can happen")
                self._hang_up(now)
                continue
            self.clock.advance_to(max(min(due), now))
            now = self.clock.now()
            self._queue.extend(self.media.pop_due(now))
            self._queue.extend(self.callees.pop_due(now))
            if self._queue:
                break
            if deadline is not None and now >= deadline:
                return None, deadline
            if limit is not None and now >= limit:
                self._fail(f"the flow's timeout ({self.flow.timeout:g} s of call time) came")
        return self._deliver(), self.clock.now()

    def _step_time(self) -> float | None:
        """When the next step may be tried, if that is later than now (a step before it
        takes its time); None when it waits only for what the call does."""
        if self.step_index >= len(self.steps) or self.failure is not None:
            return None
        return self.ready_at if self.ready_at > self.clock.now() else None

    def _fail(self, why: str) -> None:
        if self.failure is None:
            step = self.steps[self.step_index] if self.step_index < len(self.steps) else None
            where = f"step {self.step_index + 1} ({describe(step)})" if step is not None else "end"
            self.failure = f"{where}: {why}"
        self._hang_up(self.clock.now())

    def _hang_up(self, now: float) -> None:
        if not self._hung_up:
            self._hung_up = True
            self.media.hang_up(now)

    async def _run_steps(self) -> None:
        while self.step_index < len(self.steps) and self.failure is None:
            now = self.clock.now()
            if now < self.ready_at or self._waiting_prompt is not None:
                return
            step = self.steps[self.step_index]
            if not await self._step(step, now):
                return
            self.step_index += 1

    async def _step(self, step: Step, now: float) -> bool:
        """Do ``step`` now; False when it must wait."""
        if isinstance(step, Hear):
            return self._hear(step)
        if isinstance(step, Request):
            return self._requested(step)
        if isinstance(step, Ended):
            return False  # judged when the call is over
        if isinstance(step, Press):
            for i, digit in enumerate(step.press):
                self.media.press(digit, now + i * step.gap)
            self.ready_at = now + len(step.press) * step.gap
        elif isinstance(step, Say):
            await self._speak(now, words=step.say)
        elif isinstance(step, PlayWav):
            await self._speak(now, wav=self.flow.folder / step.play)
        elif isinstance(step, Noise):
            self.media.speak((), now, step.noise)
            self.ready_at = now + step.noise
        elif isinstance(step, Wait):
            self.ready_at = now + step.wait
        elif isinstance(step, HangUp):
            self._hang_up(now)
        return True

    def _requested(self, step: Request) -> bool:
        calls = self.pages.calls
        for i in range(self._requests_seen, len(calls)):
            if matches(calls[i], step):
                self._requests_seen = i + 1
                return True
        return False

    def _hear(self, step: Hear) -> bool:
        want = plain_words(step.hear)
        for i in range(self._prompt_seen, len(self.prompts)):
            _, prompt_id, text = self.prompts[i]
            if want in plain_words(text):
                self._prompt_seen = i + 1
                if self.media.playing(prompt_id):  # the next step comes when it ends
                    self._waiting_prompt = prompt_id
                return True
        return False

    async def _speak(self, now: float, *, words: str = "", wav: Path | None = None) -> None:
        options = self.options
        if self.speech is not None and self.speech.can_hear:
            if wav is not None:
                try:
                    samples = read_wav(wav)
                except FlowFailed as exc:
                    self._fail(str(exc))
                    return
                seconds, alternatives = await self.speech.hear_audio(samples, options)
            else:
                seconds, alternatives = await self.speech.hear(words, options)
            typed = False
        elif wav is not None:
            self._fail("no speech recogniser to hear the recording ([speech] recogniser)")
            return
        else:
            seconds = SECONDS_PER_WORD * len(words.split())
            alternatives, typed = (Alternative(words, 1.0),), True
        self.media.speak(alternatives, now, seconds, typed=typed)
        self.transcript.caller(alternatives)
        self.ready_at = now + seconds

    def finish(self, cause: str) -> None:
        """The call is over with ``cause``: judge the steps not reached."""
        if self.failure is not None:
            return
        self._waiting_prompt = None
        while self.step_index < len(self.steps):
            step = self.steps[self.step_index]
            # What the call did before it ended still counts (a request or a prompt the
            # caller had no time left to wait for).
            if (
                (isinstance(step, Ended) and step.ended in ("any", cause))
                or (isinstance(step, Hear) and self._hear(step))
                or (isinstance(step, Request) and self._requested(step))
            ):
                self.step_index += 1
                continue
            if isinstance(step, Ended):
                self._fail(f"the call ended with {cause}, not {step.ended}")
            elif isinstance(step, Hear):
                heard = [t for _, _, t in self.prompts[self._prompt_seen :] if t]
                self._fail(f"the call ended ({cause}) and no prompt said it; prompts: {heard}")
            elif isinstance(step, Request):
                seen = [shown(c) for c in self.pages.calls[self._requests_seen :]]
                self._fail(f"the call ended ({cause}) with no such request; requests: {seen}")
            else:
                self._fail(f"the call ended ({cause}) before this step")
            return


def in_words(error: str) -> str:
    """A call log's ``error`` line as a failure names it, on one line: a page error says
    which page and what was wrong with its answer; any other error is as logged."""
    m = _PAGE_ERROR.match(error)
    if m is None:
        text = error
    else:
        kind, url, detail = m.groups()
        text = {
            "status": f"the page {url} answered {detail}",
            "invalid": f"the page {url} answered no valid action list: {detail}",
            "unreachable": f"the page {url} could not be reached: {detail}",
            "timeout": f"the page {url} did not answer in time: {detail}",
        }[kind]
    text = " ".join(text.split())
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def with_errors(failure: str, errors: Sequence[str]) -> str:
    """A flow's failure, followed by the errors the call had (its log's ``error`` lines),
    if any: what the application did wrong is most often why the step failed."""
    if not errors:
        return failure
    named = [in_words(e) for e in errors[:ERRORS_SHOWN]]
    more = len(errors) - len(named)
    if more:
        named.append(f"and {more} more (in the call's log below)")
    label = "the call's error" if len(errors) == 1 else "the call's errors"
    return f"{failure} — {label}: " + "; ".join(named)


def shown(call: PageCall) -> str:
    """A page request as a failure message lists it: its path and action result."""
    result = call.body.get("action_result")
    path = urlsplit(call.url).path
    return f"{path} {result}" if result else path


def read_wav(path: Path) -> npt.NDArray[np.int16]:
    """A WAV file's samples at 8 kHz, mono (any rate and width callhook can play)."""
    from callhook.media.wav import decode_to_8k

    try:
        return decode_to_8k(path.read_bytes())
    except (OSError, ValueError, wave.Error) as exc:
        raise FlowFailed(f"play {path}: {exc}") from None


@dataclass
class FlowResult:
    """How one flow went."""

    flow: Flow
    failure: str | None
    cause: str
    call_seconds: float
    wall_seconds: float
    timeline: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.failure is None


async def run_flow(
    flow: Flow,
    app: AppConfig,
    pages: Pages,
    *,
    timer: PromptTimer,
    speech: SpeechService | None,
    log_dir: Path,
    new_recording_name: Callable[[], str],
    recordings: Recordings | None = None,
    files: Files | None = None,
    save_recording: Callable[[StartRecording, float], float] | None = None,
) -> FlowResult:
    """Run ``flow`` against ``app`` on one simulated call, to its end."""
    started = time.perf_counter()
    clock = VirtualClock()
    recording = RecordingPages(pages, clock)
    info = CallInfo(
        call_id=f"flow-{id(flow):x}",
        direction="in",
        call_from=flow.call_from,
        call_to=f"sip:{app.name}@127.0.0.1",
        call_target=app.name,
    )
    leg = FlowLeg(
        flow,
        info=info,
        timer=timer,
        speech=speech,
        pages=recording,
        clock=clock,
        save_recording=save_recording,
        secret=app.secret,
    )
    instance = f"flow-{int(time.time() * 1000):x}"
    log = CallLog(instance, clock, log_dir / f"{instance}.log")
    timeline: list[str] = []
    errors: list[str] = []

    def listen(kind: str, text: str) -> None:
        timeline.append(f"[{clock.now():7.2f}] {kind} {text}")
        if kind == "error":
            errors.append(text)

    log.listeners.append(listen)
    runner = CallRunner(
        app,
        leg,
        recording,
        clock,
        log,
        log_filename=f"logs/{instance}.log",
        ctx=ActionContext(new_recording_name=new_recording_name),
        recordings=recordings,
        files=files,
    )
    try:
        summary = await runner.run()
        cause = summary.cause
    except FlowFailed as exc:
        leg.failure = leg.failure or str(exc)
        cause = "failed"
    leg.transcript.stop()  # the call's end ends its transcription
    await leg.transcript.drain()
    leg.finish(cause)
    failure = with_errors(leg.failure, errors) if leg.failure is not None else None
    return FlowResult(flow, failure, cause, clock.now(), time.perf_counter() - started, timeline)


def _words(item: SayText) -> str:
    """What a text says: SSML's words without its markup (as written if it is invalid)."""
    try:
        return ssml.spoken_text(item.text, item.language)
    except ssml.SsmlError:
        return item.text
