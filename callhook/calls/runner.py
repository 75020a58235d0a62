"""The call runner: runs an application on one call.

(Just past 600 lines: one state machine over one call's pages and actions; its page
requests are :mod:`callhook.calls.pageexchange`, its log :mod:`callhook.calls.calllog`.)

Theory of operation
-------------------
:class:`CallRunner` is the only code that talks to the application
(docs/behaviour.md). For one call it

1. requests the first page and validates the answer (``actions.schema``);
2. runs the actions in order: ``clear_input``, ``redirect``, ``hang_up`` and
   ``delete_file`` itself; ``play``, ``get_number``, ``get_input``,
   ``record``, ``run_menu``, ``run_speech_menu``, ``sleep``, ``connect``,
   ``transfer`` through their sans-IO state machines (``callhook.actions``), feeding them the call's
   media events and deadlines and passing their media commands to the
   call's :class:`~callhook.ports.Leg`;
3. when an action completes, requests its ``next_page`` (a menu: the chosen
   option's) with the ``action_result``; the answer replaces the rest of the
   list (a ``redirect`` does the same without a result);
4. on any application error (docs/behaviour.md, "Errors") logs the precise cause and
   requests the error page if there is one (its actions replace the list),
   otherwise hangs up;
5. when the list runs out, the application hangs up, the caller hangs up or
   an error ends the call: requests the final page once, with ``call_cause``
   (and runs the ``delete_file`` actions of its answer, nothing else).

A connect's far leg with ``secondary_call`` pages gets a runner of its own
(``primary_call_id``, ``on_ready``): when its first page's list runs out it is
joined to the caller instead of hung up, and its final page comes when the
bridge ends.

The call is answered just before the first action that needs the media
(so an application can reject a call it does not want with ``hang_up``).

Every page request carries the instance info (docs/behaviour.md, "Pages"), signed with
the application's secret (``callhook.signature``); ``callhook.calls.pageexchange`` sends it
and reads the answer. Each step is written to the call's log (``callhook.calls.calllog``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urljoin

from callhook.actions import MachineAction, machine_for
from callhook.actions.classify import ClassifyMachine
from callhook.actions.conferenceschema import ConnectToConference
from callhook.actions.connectschema import Connect, Transfer
from callhook.actions.machine import ActionContext, ActionMachine, Completed, Outcome, Timer
from callhook.actions.schema import (
    ClearInput,
    DeleteFile,
    GetInput,
    GetNumber,
    HangUp,
    Record,
    Redirect,
    StartTranscription,
    StopTranscription,
    WebPageRequest,
)
from callhook.actions.transcription import transcription_command
from callhook.calls.calllog import CallLog, command_line, event_line
from callhook.calls.instanceinfo import page_body, this_call
from callhook.calls.pageexchange import PageExchange
from callhook.calls.reporting import RecordingReports
from callhook.calls.secondarycall import SecondaryCall
from callhook.clock import Clock
from callhook.config.settings import AppConfig
from callhook.events import (
    Aborted,
    CallEnded,
    ClassifyOptions,
    DigitReceived,
    MediaCommand,
    MediaEvent,
    PromptFinished,
    RecordCall,
    SpeechStarted,
    StartRecognition,
    StartRecording,
    StopRecording,
    VoiceActivity,
)
from callhook.monitoring import tracing
from callhook.ports import Files, Leg, PageError, Pages, Recordings

#: The error page is used at most this often in one call (an error page whose
#: actions fail again must not loop forever).
MAX_ERROR_PAGES = 3

#: The call log says in words what ``this_call.call_direction`` says in Aculab's values.
_DIRECTION = {"in": "inbound", "out": "outbound"}


# --- the runner -------------------------------------------------------------------------


class CallGone(Exception):
    """The far end ended the call."""

    def __init__(self, ended: CallEnded) -> None:
        self.ended = ended
        super().__init__(ended.cause)


class CallAborted(Exception):
    """callhook ended the call itself (shutdown)."""


class ApplicationFailed(Exception):
    """An application error with no (working) error page to fall back on."""


@dataclass(frozen=True)
class _Request:
    url: str
    method: str
    action_result: dict[str, Any] | None = None
    error_result: dict[str, Any] | None = None
    why: str = ""


@dataclass
class CallSummary:
    """How a call went, for the caller of :meth:`CallRunner.run`."""

    instance_id: str
    cause: str = ""
    raw_cause: str = ""
    pages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: How long each page took to answer, in seconds (wall clock).
    page_seconds: list[float] = field(default_factory=list)
    #: Page requests that failed (an HTTP error, a timeout, no connection, no valid list).
    pages_failed: int = 0
    #: Recordings begun on the call (``record`` actions', whole-call recordings).
    recordings: int = 0
    #: When the application began to run on the call, the call was answered (None: never)
    #: and it ended, on the runner's clock (monotonic; None: not run).
    started_at: float | None = None
    answered_at: float | None = None
    ended_at: float | None = None


def new_instance_id() -> str:
    """An application instance id: unique and unguessable."""
    return secrets.token_hex(16)


#: :meth:`CallRunner._run_action`: on to the list's next action.
_NEXT = object()


class CallRunner:
    """Runs application ``app`` on the call ``leg`` (see the module docstring)."""

    def __init__(
        self,
        app: AppConfig,
        leg: Leg,
        pages: Pages,
        clock: Clock,
        log: CallLog,
        *,
        log_filename: str,
        ctx: ActionContext | None = None,
        recordings: Recordings | None = None,
        files: Files | None = None,
        primary_call_id: str | None = None,
        on_ready: Callable[[tuple[str, str, str] | None], object] | None = None,
        dropped_calls: Callable[[], list[dict[str, Any]]] | None = None,
        needs_cipher: bool = False,
    ) -> None:
        self.app = app
        self.primary_call_id = primary_call_id
        # A connect's far leg running its secondary_call pages (callhook/calls/secondarycall.py).
        self.secondary = (
            None
            if on_ready is None
            else SecondaryCall(primary_call_id, on_ready, dropped_calls, needs_cipher)
        )
        self._list_ended = False
        self.files = files
        self.leg = leg
        self.pages = pages
        self.clock = clock
        self.log = log
        self.instance_id = log.instance_id
        self.log_filename = log_filename
        self.ctx = ctx or ActionContext()
        self.recordings = recordings
        # The record action running and the URL its page came from (for its notification).
        self._recording: tuple[Record, str] | None = None
        # Completed recordings, reported to the journal at the right moment.
        self.reports = RecordingReports(app.name, recordings)
        self._cipher_noted = False
        self._detected = 0  # utterances the running recognition stream detected
        self._prompt_errors: set[str] = set()  # why prompts could not be played, logged once
        #: The page error that ended the call (its error_result goes to the final page too).
        self.failure: PageError | None = None
        #: Why callhook is hanging up, once it is (a far leg's pages: its connect's cause).
        self.ending_cause: str | None = None
        self.state: Literal["inbound", "answered", "idle"] = (
            "inbound" if leg.info.direction == "in" else "answered"
        )
        self.answered_at: float | None = None if self.state == "inbound" else clock.now()
        self.ended_at: float | None = None
        self.gone: CallEnded | None = None
        self.aborted: Aborted | None = None
        self.summary = CallSummary(self.instance_id)
        #: An outbound call's ``classify_callee`` (its application's, or what the call was
        #: placed with): who answered is found before its first page (None: not
        #: classified). A connect's far leg is classified by its connect.
        outbound = leg.info.direction == "out" and primary_call_id is None
        self.classify: ClassifyOptions | None = app.classify_callee if outbound else None
        self.exchange = PageExchange(
            pages,
            app.secret,
            log,
            leg.wait_ended,
            requested=self.summary.pages,
            seconds=self.summary.page_seconds,
        )

    # --- the call -------------------------------------------------------------------

    async def run(self) -> CallSummary:
        """Run the application until the call ends; request the final page. Never raises."""
        info = self.leg.info
        self.log.write(
            "call_start",
            f"{_DIRECTION[info.direction]} call {info.call_id} from {info.call_from!r} "
            f"to {info.call_to!r}, "
            f"application {self.app.name!r}",
        )
        cause, raw = "completed", ""
        self.summary.started_at = self.clock.now()
        try:
            if self.classify is not None:
                await self._classify_callee(self.classify)
            if self.app.first_page:
                await self._run_application()
            if self.secondary is not None and (self._list_ended or not self.app.first_page):
                await self._join_primary()
        except CallGone as exc:
            cause, raw = exc.ended.cause, exc.ended.raw_cause
        except CallAborted:
            cause = "dropped"
        except ApplicationFailed:
            cause = "failed"
        except Exception as exc:  # a bug of ours must still end the call cleanly
            logging.getLogger("callhook.call").exception("call runner crashed")
            self._error(f"internal error: {type(exc).__name__}: {exc}")
            cause = "failed"
        if self.gone is None:
            self.ending_cause = cause
            try:
                raw = await self.leg.hang_up()
            except Exception as exc:
                self._error(f"hang-up failed: {type(exc).__name__}: {exc}")
            self.log.write("hang_up", f"callhook hung up ({raw})")
        self.ended_at = self.clock.now()
        self.state = "idle"
        self.summary.cause, self.summary.raw_cause = cause, raw
        self.log.write("call_end", f"call_cause={cause} call_raw_cause={raw}")
        await self._final_page(cause, raw)
        self.reports.call_over()
        self.log.close()
        self._sum_up()
        return self.summary

    def _sum_up(self) -> None:
        summary = self.summary
        summary.answered_at, summary.ended_at = self.answered_at, self.ended_at
        summary.pages_failed = self.exchange.failed
        summary.recordings = self.reports.made

    async def unanswered(self, cause: str, raw: str) -> CallSummary:
        """An outbound call that was never answered: only the final page, with why."""
        self.log.write(
            "call_start", f"outbound call {self.leg.info.call_id} to {self.leg.info.call_to!r}"
        )
        self.state = "idle"
        self.answered_at = None
        self.summary.cause, self.summary.raw_cause = cause, raw
        self.log.write("call_end", f"call_cause={cause} call_raw_cause={raw} (not answered)")
        self.ended_at = self.clock.now()
        await self._final_page(cause, raw)
        self.log.close()
        self._sum_up()
        return self.summary

    async def _run_application(self) -> None:
        first = _Request(self.app.first_page, self.app.first_page_method, why="first page")
        request: _Request | None = first
        base = self.app.first_page
        error_pages = 0
        while request is not None:
            current = request
            try:
                actions = None
                try:
                    actions, base = await self._page(current, base)
                finally:
                    self.reports.next_page_requested(actions)
                if self.gone is not None or self.aborted is not None:
                    if actions:
                        self.log.write("call_gone", f"call ended; {len(actions)} action(s) not run")
                    self._raise_if_over()
                request = await self._run_actions(actions, base)
            except PageError as exc:
                self._error(str(exc))
                if self.gone is not None:
                    raise CallGone(self.gone) from None
                if not self.app.error_page or current.error_result is not None:
                    self.failure = exc
                    raise ApplicationFailed(str(exc)) from None
                error_pages += 1
                if error_pages > MAX_ERROR_PAGES:
                    self._error(f"error page used {MAX_ERROR_PAGES} times already; giving up")
                    self.failure = exc
                    raise ApplicationFailed(str(exc)) from None
                request = _Request(
                    urljoin(self.app.first_page, self.app.error_page),
                    self.app.error_page_method,
                    error_result=exc.as_json(),
                    why="error page",
                )

    async def _run_actions(self, actions: list[Any], base: str) -> _Request | None:
        """Run a list; return the page to request next, or None when the call is to end."""
        for index, action in enumerate(actions):
            name = type(action).name
            # Its span is current while it runs: the recordings and recognitions it makes
            # are its children in the call's trace.
            with tracing.span(f"action {name}", attributes={"callhook.action_index": index}):
                step = await self._run_action(index, name, action, base)
            if step is not _NEXT:
                assert step is None or isinstance(step, _Request)
                return step
        self.log.write("list_end", "no more actions")
        self._list_ended = True
        return None

    async def _run_action(
        self, index: int, name: str, action: Any, base: str
    ) -> _Request | object | None:
        """One action of a list: the page to request next, None (the call is to end), or
        :data:`_NEXT` (on to the list's next action)."""
        self.log.write("action_start", f"[{index}] {name}")
        if isinstance(action, HangUp):
            self.log.write("action_end", f"[{index}] hang_up")
            return None
        if isinstance(action, Redirect):
            self.log.write("action_end", f"[{index}] redirect")
            return self._next(action.next_page, base, None, "redirect")
        if isinstance(action, ClearInput):
            self.ctx.buffer.clear()
            self.log.write("action_end", f"[{index}] clear_input")
            return _NEXT
        if isinstance(action, StartTranscription | StopTranscription):
            await self._answer()  # it hears the call: the call is answered first
            command = transcription_command(action, base, self.instance_id, self.log_filename)
            self.leg.send([command])
            self.log.write("action_end", f"[{index}] {name}")
            return _NEXT
        if isinstance(action, DeleteFile):
            await self._delete_file(action.filename, f"[{index}] delete_file")
            return _NEXT
        self._recording = (action, base) if isinstance(action, Record) else None
        self.ctx.page_url = base  # relative file_to_play URLs resolve against it
        outcome = await self._run_machine(action)
        self._recording = None
        if isinstance(outcome, Completed):
            if isinstance(action, Record):
                self._recorded(outcome.result)
            self.log.write(
                "action_end", f"[{index}] {name}: {json.dumps(outcome.result, sort_keys=True)}"
            )
            if outcome.page is not None:
                page = outcome.page  # a menu option's own page
            else:
                assert isinstance(
                    action,
                    GetNumber | GetInput | Record | Connect | Transfer | ConnectToConference,
                )
                assert action.next_page is not None  # a connect without one continues
                page = action.next_page
            return self._next(page, base, outcome.action_result(), name)
        self.log.write("action_end", f"[{index}] {name}: {outcome.reason}")
        self._raise_if_over()
        return _NEXT

    async def _join_primary(self) -> None:
        """A far leg whose first page's actions have all run: it is joined to the caller,
        and stays so until one of them hangs up (then its final page is requested)."""
        assert self.secondary is not None
        try:
            # However its pages ended (an empty body, an error page that recovered), a
            # recording asked to be encrypted is never made in clear: not joined.
            self.secondary.join(self.app.first_page)
        except PageError as failure:
            self._error(str(failure))
            self.failure = failure
            raise ApplicationFailed(str(failure)) from None
        self.log.write("bridge", f"joined to call {self.primary_call_id}")
        ended = await self.leg.wait_ended()
        self._ended(ended)
        raise CallGone(ended)

    def _next(
        self, page: WebPageRequest, base: str, result: dict[str, Any] | None, why: str
    ) -> _Request:
        return _Request(urljoin(base, page.url), page.method, action_result=result, why=why)

    async def _classify_callee(self, options: ClassifyOptions) -> None:
        """Who answered (an outbound call's ``classify_callee``): before the first page,
        whose ``this_call`` says it (actions/classify.py)."""
        self._raise_if_over()
        machine = ClassifyMachine(options)
        await self._drive(machine, type_ahead=True)
        self._raise_if_over()
        if machine.far_end is not None:
            self.leg.info = replace(self.leg.info, far_end=machine.far_end)

    async def _run_machine(self, action: MachineAction) -> Outcome:
        await self._answer()
        for pending in self.leg.take_pending():
            self._pending(pending)  # type-ahead while pages were fetched
        self._raise_if_over()
        return await self._drive(machine_for(action, self.ctx))

    async def _drive(self, machine: ActionMachine, *, type_ahead: bool = False) -> Outcome:
        """Run ``machine`` to its outcome on the call's events and its timers;
        ``type_ahead``: the digits pressed meanwhile are kept for the actions to come."""
        # The action's clock is the media's (ports.Leg.now): while the loop runs behind
        # the wire, its timers and the events keep the order they had there.
        now = self.leg.now()
        with self.log.acting(now):
            self._send(machine.start(now))
            timers = self._note_timers(machine, ())
        while machine.outcome is None:
            event, now = await self.leg.next_event(machine.deadline)
            with self.log.acting(now):  # (what it does, logged at the event's time)
                if event is None:
                    self._send(machine.on_deadline(now))
                elif isinstance(event, CallEnded):
                    self._ended(event)
                    self._send(machine.stop(now, "hangup"))
                elif isinstance(event, Aborted):
                    self._abort(event)
                    self._send(machine.stop(now, "aborted"))
                elif type_ahead and isinstance(event, DigitReceived):
                    self._pending(event)
                else:
                    self._observe(event, machine)
                    self._send(machine.handle(event, now))
                timers = self._note_timers(machine, timers)
        return machine.outcome

    def _note_timers(self, machine: ActionMachine, before: tuple[Timer, ...]) -> tuple[Timer, ...]:
        """Log the action's running timers when they change (``timers`` lines: name, start
        and expiry in the log's seconds), so the call's picture shows why it ended when it did."""
        now = machine.timers() if machine.outcome is None else ()
        if now != before:
            text = "; ".join(
                f"{t.name} {self.log.since(t.started):.3f}..{self.log.since(t.expires):.3f}"
                for t in now
            )
            self.log.write("timers", text or "none")
        return now

    async def _answer(self) -> None:
        if self.state != "inbound":
            return
        await self.leg.answer()
        self.state = "answered"
        self.answered_at = self.clock.now()
        self.log.write("answered")

    # --- events and commands --------------------------------------------------------

    def _raise_if_over(self) -> None:
        if self.gone is not None:
            raise CallGone(self.gone)
        if self.aborted is not None:
            raise CallAborted(self.aborted.reason)

    def _abort(self, event: Aborted) -> None:
        if self.aborted is None:
            self.aborted = event
            self.log.write("aborted", event.reason, level=logging.WARNING)

    def _pending(self, event: MediaEvent) -> None:
        if isinstance(event, Aborted):
            self._abort(event)
        elif isinstance(event, CallEnded):
            self._ended(event)
        elif isinstance(event, DigitReceived):
            self.ctx.buffer.digits += event.digit
            self.log.write("digit", f"{event.digit} (typed ahead, cached)")
        elif isinstance(event, VoiceActivity):
            self.ctx.voice_active = event.active

    def _ended(self, event: CallEnded) -> None:
        if self.gone is None:
            self.gone = event
            self.ended_at = self.clock.now()
            self.state = "idle"  # what a page requested from now on is told
            self.log.write("caller_hung_up", f"{event.cause} ({event.raw_cause})")

    def _observe(self, event: MediaEvent, machine: ActionMachine) -> None:
        line = event_line(event)
        if line is not None:
            self.log.write(line.kind, line.text, level=line.level)
        if isinstance(event, SpeechStarted):
            self._detected += 1  # for the recognition_stop line
        elif isinstance(event, VoiceActivity):
            self.ctx.voice_active = event.active
        elif (
            isinstance(event, PromptFinished)
            and event.error
            # Once per cause and call: a prompt played again and again (a menu's
            # repeats, a hold loop) must not fill the logs with the same line.
            and event.error not in self._prompt_errors
        ):
            self._prompt_errors.add(event.error)
            self._error(f"prompt {event.prompt_id} could not be played: {event.error}")

    def _send(self, commands: list[MediaCommand]) -> None:
        if not commands:
            return
        for c in commands:
            if isinstance(c, StartRecognition):
                self._detected = 0
            line = command_line(c, self._detected)
            if line is not None:
                self.log.write(line.kind, line.text, level=line.level)
            if isinstance(c, StartRecording) and self._recording is not None:
                action, base = self._recording
                # The notification carries the instance info of the request that follows
                # the action, without this_call (docs/behaviour.md).
                body = {
                    "application_instance_id": self.instance_id,
                    "token": self.exchange.token,
                    "log_filename": self.log_filename,
                    "is_notification": True,
                }
                self.reports.record_started(c, action, base, body)
            elif isinstance(c, RecordCall):
                self.reports.call_recording_started(c)
            elif isinstance(c, StopRecording):
                self.reports.call_recording_stopped(c.filename)
        self.leg.send(commands)

    # --- recordings -----------------------------------------------------------------

    def _recorded(self, result: dict[str, Any]) -> None:
        """The record action completed: its duration is what the file holds."""
        seconds = self.leg.recorded_seconds(str(result["filename"]))
        if seconds is not None:
            result["seconds_duration"] = round(seconds, 1)
        self.reports.completed(result)

    # --- files ----------------------------------------------------------------------

    async def _delete_file(self, name: str, label: str) -> None:
        """``delete_file``: the file goes; one that is not there is logged, not an error.

        Either way the next action runs (Aculab's ``delete_file`` has no result to
        report); the deletion runs on a worker thread (it syncs the directory).
        """
        if self.files is None:
            self._error(f"{label}: {name}: no media file store on this call")
            return
        try:
            await asyncio.to_thread(self.files.delete, self.app.name, name)
        except FileNotFoundError:
            self.log.write("action_end", f"{label}: {name}: no such file", level=logging.WARNING)
            self.reports.delete_ran(name)
            return
        except (OSError, ValueError) as exc:  # ValueError: OutsideNamespace
            self._error(f"{label}: {name}: cannot be deleted: {exc}")
            self.reports.delete_ran(name)
            return
        self.log.write("action_end", f"{label}: {name} deleted")
        self.reports.delete_ran(name, deleted=True)

    # --- pages ----------------------------------------------------------------------

    def _body(self, request: _Request) -> dict[str, Any]:
        seconds = 0.0
        if self.answered_at is not None:
            end = self.ended_at if self.ended_at is not None else self.clock.now()
            seconds = end - self.answered_at
        call = this_call(
            self.leg.info,
            self.state,
            seconds,
            self.app.application_parameters,
            self.primary_call_id,
        )
        return page_body(
            self.instance_id,
            self.exchange.token,
            self.log_filename,
            call,
            request.action_result,
            request.error_result,
        )

    async def _page(self, request: _Request, base: str) -> tuple[list[Any], str]:
        """Request a page and validate its action list; returns (actions, the page's URL)."""
        raw = await self.exchange.fetch(
            request.url,
            request.method,
            self._body(request),
            request.why,
            racing=self.gone is None,
        )
        if isinstance(raw, CallEnded):
            self._ended(raw)
            self.log.write("page_abandoned", f"{request.url}: the call ended while waiting for it")
            raise CallGone(raw)
        response = self.exchange.read(request.url, raw, request.why)
        cipher = response.call_recording_cipher if response is not None else None
        if self.secondary is not None and response is not None:
            self.secondary.answered(request.url, cipher, first=request.why == "first page")
        elif cipher is not None and not self._cipher_noted:
            self._cipher_noted = True
            self.log.write(
                "page_response",
                f"{request.url}: call_recording_cipher ignored: callhook makes no whole-call "
                "recording of this call (record actions take encryption_cipher)",
            )
        return (response.actions if response is not None else []), request.url

    async def _final_page(self, cause: str, raw: str) -> None:
        if not self.app.final_page:
            return
        url = urljoin(self.app.first_page, self.app.final_page)
        method = self.app.final_page_method
        body = self._body(_Request(url, method))
        body["this_call"]["call_cause"] = cause
        body["this_call"]["call_raw_cause"] = raw
        if cause == "failed" and self.failure is not None:
            # The page error that ended the call, as the error page would have had it: an
            # application without an error page (or whose error page failed) learns why
            # on its final page (docs/behaviour.md, "Errors").
            body["error_result"] = self.failure.as_json()
        if self.secondary is not None and self.secondary.dropped_calls is not None:
            body["dropped_calls"] = self.secondary.dropped_calls()
        try:
            answer = await self.exchange.fetch_final(url, method, body)
        except PageError as exc:
            self._error(str(exc))
            return
        # Only delete_file can still run (Aculab allows it); anything else needs the
        # call, which is gone: it is skipped.
        for index, action in enumerate(self.exchange.read_final(url, answer)):
            if isinstance(action, DeleteFile):
                await self._delete_file(action.filename, f"[{index}] delete_file (final page)")
            else:
                self.log.write(
                    "action_skipped", f"[{index}] {type(action).name}: the call has ended"
                )

    def _error(self, text: str) -> None:
        self.summary.errors.append(text)
        self.log.write("error", text, level=logging.ERROR)
