"""The ``record`` action: every completion reason, the result fields, the beep and the pre-roll.

Reference section 2.4 and section 3 (last rows); docs/behaviour.md "record".
Most tests run a real call against a real local application server on the
virtual clock; the last ones drive :class:`RecordMachine` alone (sans-IO).
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

from callhook.actions.machine import ActionContext, Completed
from callhook.actions.record import RecordMachine
from callhook.actions.schema import Record
from callhook.calls.calllog import CallLog
from callhook.calls.runner import CallRunner
from callhook.config.settings import AppConfig
from callhook.devtools.harness import AppServer, Caller, CallRun, ScriptedLeg, run_call
from callhook.edge.pages import HttpPages
from callhook.events import (
    DetectVoice,
    DigitReceived,
    PlayTone,
    PromptFinished,
    RecorderFailed,
    StartPrompt,
    StartRecording,
    StopPrompt,
    StopRecording,
    VoiceActivity,
)

FailReason = Literal["error", "filesize"]
RESULT_KEYS = {"filename", "file_available", "id", "contains_sound", "seconds_duration", "reason"}


def record_list(**props: Any) -> list[dict[str, Any]]:
    return [{"record": {"next_page": {"url": "/rec"}, **props}}]


async def record(
    app: AppServer,
    caller: Caller,
    after: Any = None,
    **props: Any,
) -> tuple[dict[str, Any], CallRun]:
    """Run one record action; return the result its next_page received, and the run."""
    app.page("/start", record_list(**props))
    app.page("/rec", after if after is not None else [])
    app.page("/final", [])
    run = await run_call(app, caller, final_page="/final")
    bodies = app.bodies("/rec")
    assert len(bodies) == 1
    action_result = bodies[0]["action_result"]
    assert action_result["action"] == "record"
    result: dict[str, Any] = action_result["result"]
    # filename names the one recording the media session made
    assert list(run.leg.media.recordings) == [result["filename"]]
    return result, run


def span(run: CallRun, result: dict[str, Any]) -> tuple[float, float | None]:
    rec = run.leg.media.recordings[result["filename"]]
    return rec.start, rec.stop


def times(run: CallRun, kind: type) -> list[float]:
    return [t for t, _ in run.leg.commands(kind)]


# --- silence ---------------------------------------------------------------------------


async def test_silence_after_sound_stops_after_max_silence(app: AppServer) -> None:
    result, run = await record(app, Caller().say("hello there", at=1.0, seconds=2.0))
    # default milliseconds_max_silence 3000: sound ends at 3.0, recording stops at 6.0
    assert result == {
        "filename": result["filename"],
        "file_available": False,
        "id": "",
        "contains_sound": True,
        "seconds_duration": 5.3,  # 0.7 (pre-roll) .. 6.0, trailing silence kept
        "reason": "silence",
    }
    assert result["filename"].endswith(".wav")
    assert span(run, result) == pytest.approx((0.7, 6.0))
    assert times(run, StopRecording) == pytest.approx([6.0])


@pytest.mark.parametrize(
    ("gap", "stop_at"),
    [
        (0.999, 2.999 + 0.5 + 1.0),  # 1 ms short of max: sound resumes, timer cancelled
        (1.001, 3.0),  # 1 ms past max: stopped at exactly max_silence after the sound
    ],
)
async def test_silence_boundary(app: AppServer, gap: float, stop_at: float) -> None:
    caller = Caller().noise(at=1.0, seconds=1.0).noise(at=2.0 + gap, seconds=0.5)
    result, run = await record(app, caller, milliseconds_max_silence=1000)
    assert result["reason"] == "silence"
    assert result["contains_sound"] is True
    assert times(run, StopRecording) == pytest.approx([stop_at])
    assert result["seconds_duration"] == round(stop_at - 0.7, 1)


async def test_sound_resuming_cancels_the_silence_timer_each_time(app: AppServer) -> None:
    caller = (
        Caller()
        .noise(at=1.0, seconds=0.5)
        .noise(at=2.2, seconds=0.5)  # 0.7 s of silence < 1 s
        .noise(at=3.4, seconds=0.5)  # again
    )
    result, run = await record(app, caller, milliseconds_max_silence=1000)
    assert result["reason"] == "silence"
    assert times(run, StopRecording) == pytest.approx([4.9])
    assert result["seconds_duration"] == 4.2


# --- initial silence -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "limit"),
    [
        ({}, 3.0),  # both defaults: 0 -> milliseconds_max_silence 3000
        ({"milliseconds_max_initial_silence": 1500, "milliseconds_max_silence": 5000}, 1.5),
        ({"milliseconds_max_initial_silence": 0, "milliseconds_max_silence": 2000}, 2.0),
        ({"milliseconds_max_silence": 2000}, 2.0),
        ({"milliseconds_max_initial_silence": 4000, "milliseconds_max_silence": 1000}, 4.0),
    ],
)
@pytest.mark.parametrize("early", [True, False])
async def test_initial_silence_boundary(
    app: AppServer, props: dict[str, Any], limit: float, early: bool
) -> None:
    sound_at = limit - 0.001 if early else limit + 0.001
    result, run = await record(app, Caller().noise(at=sound_at, seconds=0.2), **props)
    assert result["reason"] == "silence"
    if early:
        # sound 1 ms before the limit: the recording starts then, with 0.3 s pre-roll
        assert times(run, StartRecording) == pytest.approx([sound_at])
        assert result["contains_sound"] is True
        assert result["seconds_duration"] > 0.0
        assert span(run, result)[0] == pytest.approx(sound_at - 0.3)
    else:
        # 1 ms after: the action already completed at the limit, without sound
        assert result["contains_sound"] is False
        assert result["seconds_duration"] == 0.0
        assert times(run, StopRecording) == pytest.approx([limit])


async def test_no_sound_at_all_gives_an_empty_file_and_silence(app: AppServer) -> None:
    result, run = await record(app, Caller(), milliseconds_max_initial_silence=2500)
    assert result == {
        "filename": result["filename"],
        "file_available": False,
        "id": "",
        "contains_sound": False,
        "seconds_duration": 0.0,
        "reason": "silence",
    }
    # an empty but valid file exists under that name: started and stopped at 2.5
    assert span(run, result) == pytest.approx((2.5, 2.5))
    assert b'"seconds_duration":0.0' in app.requests[1].raw


# --- duration --------------------------------------------------------------------------------


async def test_duration_measured_from_the_recordings_start(app: AppServer) -> None:
    result, run = await record(app, Caller().noise(at=1.0, seconds=10.0), seconds_max_duration=5)
    # the file starts at 0.7 (0.3 s pre-roll), so 5 s later is 5.7
    assert result["reason"] == "duration"
    assert result["seconds_duration"] == 5.0
    assert result["contains_sound"] is True
    assert span(run, result) == pytest.approx((0.7, 5.7))
    assert "barge_in_digit" not in result


async def test_duration_wins_over_a_later_silence_timer(app: AppServer) -> None:
    # sound ends at 5.0; the silence timer (3 s) would fire at 8.0, after the 5.7 limit
    result, run = await record(app, Caller().noise(at=1.0, seconds=4.0), seconds_max_duration=5)
    assert result["reason"] == "duration"
    assert times(run, StopRecording) == pytest.approx([5.7])


async def test_silence_wins_over_a_later_duration_limit(app: AppServer) -> None:
    result, run = await record(
        app,
        Caller().noise(at=1.0, seconds=1.0),
        seconds_max_duration=5,
        milliseconds_max_silence=1000,
    )
    assert result["reason"] == "silence"
    assert times(run, StopRecording) == pytest.approx([3.0])


# --- seconds_duration ----------------------------------------------------------------------


async def test_seconds_duration_rounds_to_one_decimal(app: AppServer) -> None:
    # file 0.7 .. 3.17 = 2.47 s: rounded (not truncated) to 2.5
    result, run = await record(
        app, Caller().noise(at=1.0, seconds=1.0), milliseconds_max_silence=1170
    )
    assert result["seconds_duration"] == 2.5
    assert b'"seconds_duration":2.5' in app.requests[1].raw
    start, stop = span(run, result)
    assert stop is not None
    assert result["seconds_duration"] == round(stop - start, 1)


# --- barge-in ------------------------------------------------------------------------------


async def test_bargein_default_hash(app: AppServer) -> None:
    caller = Caller().noise(at=1.0, seconds=2.0).press("#", at=2.0)
    result, run = await record(app, caller)
    assert result == {
        "filename": result["filename"],
        "file_available": False,
        "id": "",
        "contains_sound": True,
        "seconds_duration": 1.3,
        "reason": "bargein",
        "barge_in_digit": "#",
    }
    assert times(run, StopRecording) == pytest.approx([2.0])


async def test_bargein_custom_digits_others_ignored(app: AppServer) -> None:
    caller = (
        Caller()
        .noise(at=1.0, seconds=5.0)
        .press("5", at=1.5)
        .press("#", at=1.7)  # not one of barge_in_digits any more
        .press("9", at=2.0)
    )
    result, run = await record(app, caller, barge_in_digits="*9")
    assert result["reason"] == "bargein"
    assert result["barge_in_digit"] == "9"
    assert times(run, StopRecording) == pytest.approx([2.0])


async def test_empty_barge_in_digits_disables_bargein(app: AppServer) -> None:
    caller = Caller().noise(at=1.0, seconds=1.0).press("#", at=1.5)
    result, _ = await record(app, caller, barge_in_digits="", milliseconds_max_silence=1000)
    assert result["reason"] == "silence"
    assert "barge_in_digit" not in result


async def test_bargein_before_any_sound(app: AppServer) -> None:
    result, run = await record(app, Caller().press("#", at=0.5))
    assert result["reason"] == "bargein"
    assert result["barge_in_digit"] == "#"
    assert result["contains_sound"] is False
    assert result["seconds_duration"] == 0.0
    assert span(run, result) == pytest.approx((0.5, 0.5))


async def test_other_digits_during_record_are_discarded_not_cached(app: AppServer) -> None:
    # "5" during the record is neither a barge-in nor cached for the next get_number
    caller = Caller().noise(at=1.0, seconds=5.0).press("5", at=1.5).press("#", at=2.0)
    caller.press("7", at=3.0)
    after = [{"get_number": {"next_page": {"url": "/n"}, "digit_count": 1}}]
    app.page("/n", [])
    result, _ = await record(app, caller, after=after)
    assert result["barge_in_digit"] == "#"
    assert app.bodies("/n")[0]["action_result"]["result"] == {"entered_number": "7"}


# --- id ------------------------------------------------------------------------------------


async def test_custom_id_is_returned(app: AppServer) -> None:
    result, _ = await record(app, Caller().press("#", at=0.5), id="voicemail-42")
    assert result["id"] == "voicemail-42"
    assert set(result) == RESULT_KEYS | {"barge_in_digit"}


# --- hang-up -------------------------------------------------------------------------------


async def test_hangup_still_requests_next_page_then_final(app: AppServer) -> None:
    caller = Caller().noise(at=1.0, seconds=2.0).hang_up(at=4.0)
    after = [{"play": {"play_list": [{"text_to_say": "never played"}]}}]
    result, run = await record(app, caller, after=after)
    assert result == {
        "filename": result["filename"],
        "file_available": False,
        "id": "",
        "contains_sound": True,
        "seconds_duration": 3.3,
        "reason": "hangup",
    }
    assert span(run, result) == pytest.approx((0.7, 4.0))
    # the actions next_page returned are not run: the call is gone
    assert run.leg.commands(StartPrompt) == []
    assert [r.path for r in app.requests] == ["/start", "/rec", "/final"]
    # next_page is told the call is over, and how long it lasted
    this_call = app.bodies("/rec")[0]["this_call"]
    assert this_call["call_state"] == "idle"
    assert this_call["seconds_call_duration"] == 4.0
    final = app.bodies("/final")[0]["this_call"]
    assert final["call_cause"] == "hung_up"
    assert final["call_raw_cause"] == "BYE"
    assert run.summary.cause == "hung_up"


async def test_hangup_before_any_sound(app: AppServer) -> None:
    result, _ = await record(app, Caller().hang_up(at=1.2))
    assert result["reason"] == "hangup"
    assert result["contains_sound"] is False
    assert result["seconds_duration"] == 0.0


# --- recorder failure (error / filesize) ---------------------------------------------------


class FailingLeg(ScriptedLeg):
    """A scripted call whose recorder fails at ``fail_at`` with ``reason``."""

    def __init__(self, caller: Caller, fail_at: float, reason: FailReason) -> None:
        super().__init__(caller)
        self.inject(RecorderFailed(reason, "simulated failure"), at=fail_at)


async def run_on_leg(app: AppServer, leg: ScriptedLeg) -> CallRunner:
    config = AppConfig(
        name="test",
        first_page=app.url("/start"),
        secret=app.secret,
        final_page=app.url("/final"),
    )
    pages = HttpPages(timeout=5.0)
    runner = CallRunner(
        config,
        leg,
        pages,
        leg.clock,
        CallLog("inst-failing", leg.clock),
        log_filename="logs/inst-failing.log",
        ctx=ActionContext(new_recording_name=lambda: "recordings/failing.wav"),
    )
    try:
        await runner.run()
    finally:
        await pages.close()
    return runner


@pytest.mark.parametrize("reason", ["error", "filesize"])
async def test_recorder_failure_while_capturing(app: AppServer, reason: FailReason) -> None:
    app.page("/start", record_list())
    app.page("/rec", [])
    app.page("/final", [])
    leg = FailingLeg(Caller().noise(at=1.0, seconds=5.0), fail_at=2.5, reason=reason)
    runner = await run_on_leg(app, leg)
    (body,) = app.bodies("/rec")
    assert body["action_result"] == {
        "action": "record",
        "result": {
            "filename": "recordings/failing.wav",
            "file_available": False,
            "id": "",
            "contains_sound": True,
            "seconds_duration": 1.8,
            "reason": reason,
        },
    }
    assert [t for t, _ in leg.commands(StopRecording)] == pytest.approx([2.5])
    assert runner.summary.cause == "completed"


async def test_recorder_failure_before_sound(app: AppServer) -> None:
    app.page("/start", record_list())
    app.page("/rec", [])
    app.page("/final", [])
    leg = FailingLeg(Caller(), fail_at=0.4, reason="error")
    await run_on_leg(app, leg)
    result = app.bodies("/rec")[0]["action_result"]["result"]
    assert result["reason"] == "error"
    assert result["contains_sound"] is False
    assert result["seconds_duration"] == 0.0


# --- beep_on_start -------------------------------------------------------------------------


async def test_beep_plays_first_then_listening_starts(app: AppServer) -> None:
    result, run = await record(
        app, Caller().noise(at=1.0, seconds=1.0), beep_on_start=True, milliseconds_max_silence=1000
    )
    prompts = run.leg.commands(StartPrompt)
    assert len(prompts) == 1
    at, beep = prompts[0]
    assert at == 0.0
    assert beep.items == (PlayTone(frequency_hz=1000.0, seconds=0.25),)
    # the beep comes before the recording
    kinds = [type(c) for _, c in run.leg.sent]
    assert kinds.index(StartPrompt) < kinds.index(StartRecording)
    assert result["reason"] == "silence"
    assert span(run, result) == pytest.approx((0.7, 3.0))


@pytest.mark.parametrize(("sound_at", "captured"), [(1.249, True), (1.251, False)])
async def test_initial_silence_counts_from_the_end_of_the_beep(
    app: AppServer, sound_at: float, captured: bool
) -> None:
    # beep 0 .. 0.25, then 1 s of initial silence: the limit is 1.25, not 1.0
    result, run = await record(
        app,
        Caller().noise(at=sound_at, seconds=0.2),
        beep_on_start=True,
        milliseconds_max_silence=1000,
    )
    assert result["contains_sound"] is captured
    if not captured:
        assert times(run, StopRecording) == pytest.approx([1.25])


async def test_sound_during_the_beep_is_not_the_start_of_listening(app: AppServer) -> None:
    # sound 0.1 .. 0.2 (during the beep) does not start the recording; then nothing
    result, run = await record(
        app,
        Caller().noise(at=0.1, seconds=0.1),
        beep_on_start=True,
        milliseconds_max_silence=1000,
    )
    assert result["contains_sound"] is False
    assert times(run, StopRecording) == pytest.approx([1.25])


async def test_bargein_digit_during_the_beep_stops_it(app: AppServer) -> None:
    caller = Caller().press("5", at=0.05).press("#", at=0.1)
    result, run = await record(app, caller, beep_on_start=True)
    assert result["reason"] == "bargein"
    assert result["barge_in_digit"] == "#"
    assert result["contains_sound"] is False
    assert result["seconds_duration"] == 0.0
    (stop_at, stop), *_ = run.leg.commands(StopPrompt)
    (_, start) = run.leg.commands(StartPrompt)[0]
    assert stop.prompt_id == start.prompt_id
    assert stop_at == pytest.approx(0.1)


# --- pre-roll ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("beep", "sound_at", "file_start"),
    [
        (False, 1.0, 0.7),  # the full 0.3 s before the sound
        (False, 0.1, 0.0),  # capped by the start of listening
        (True, 0.4, 0.25),  # capped by the end of the beep
        (True, 1.0, 0.7),
    ],
)
async def test_preroll(app: AppServer, beep: bool, sound_at: float, file_start: float) -> None:
    result, run = await record(
        app,
        Caller().noise(at=sound_at, seconds=0.5),
        beep_on_start=beep,
        milliseconds_max_silence=1000,
    )
    ((at, command),) = run.leg.commands(StartRecording)
    assert at == pytest.approx(sound_at)
    assert command.preroll == pytest.approx(sound_at - file_start)
    start, stop = span(run, result)
    assert start == pytest.approx(file_start)
    assert stop == pytest.approx(sound_at + 0.5 + 1.0)
    assert result["seconds_duration"] == round(sound_at + 1.5 - file_start, 1)


async def test_format_and_cipher_reach_the_recorder(app: AppServer) -> None:
    key, iv = "ab" * 32, "cd" * 16
    cipher = {"type": "aescbc", "key": key, "initialisation_vector": iv}
    _, run = await record(app, Caller().press("#", at=0.5), format="alaw", encryption_cipher=cipher)
    ((_, command),) = run.leg.commands(StartRecording)
    assert command.format == "alaw"
    assert command.cipher == ("aescbc", key, iv)
    assert key not in "\n".join(run.log.lines)


# --- RecordMachine alone (sans-IO: no HTTP, no runner) -------------------------------------


def machine(**props: Any) -> RecordMachine:
    action = Record.model_validate({"next_page": {"url": "/rec"}, **props})
    return RecordMachine(action, ActionContext(new_recording_name=lambda: "r.wav"))


def outcome_result(m: RecordMachine) -> dict[str, Any]:
    assert isinstance(m.outcome, Completed)
    assert m.outcome.action == "record"
    return m.outcome.result


def test_machine_silence() -> None:
    m = machine(milliseconds_max_silence=2000)
    assert m.start(0.0) == [DetectVoice(True)]  # voice activity wanted from the start
    assert m.deadline == 2.0  # initial silence: max_silence
    assert m.handle(VoiceActivity(True), 1.0) == [
        StartRecording("r.wav", None, None, preroll=0.3, max_seconds=60)
    ]
    assert m.deadline == pytest.approx(60.7)  # only the duration limit now
    assert m.handle(DigitReceived("1"), 1.5) == []  # not a barge-in digit
    assert m.handle(VoiceActivity(False), 2.0) == []
    assert m.deadline == 4.0
    assert m.handle(VoiceActivity(True), 3.9) == []  # resumes: timer cancelled
    assert m.deadline == pytest.approx(60.7)
    assert m.handle(VoiceActivity(False), 4.0) == []
    assert m.outcome is None
    assert m.on_deadline(6.0) == [StopRecording("r.wav"), DetectVoice(False)]
    assert outcome_result(m) == {
        "filename": "r.wav",
        "file_available": False,
        "id": "",
        "contains_sound": True,
        "seconds_duration": 5.3,
        "reason": "silence",
    }
    assert m.deadline is None
    assert m.handle(DigitReceived("#"), 7.0) == []  # done: nothing more happens


def test_machine_aborted() -> None:
    m = machine(id="x")
    m.start(10.0)
    m.handle(VoiceActivity(True), 11.0)
    assert m.stop(12.46, "aborted") == [StopRecording("r.wav"), DetectVoice(False)]
    assert outcome_result(m) == {
        "filename": "r.wav",
        "file_available": False,
        "id": "x",
        "contains_sound": True,
        "seconds_duration": 1.8,  # 10.7 .. 12.46
        "reason": "aborted",
    }
    assert m.stop(13.0, "aborted") == []


def test_machine_aborted_while_listening_leaves_an_empty_file() -> None:
    m = machine()
    m.start(0.0)
    assert m.stop(1.0, "aborted") == [
        StartRecording("r.wav", None, None, preroll=0.0, max_seconds=60),
        StopRecording("r.wav"),
        DetectVoice(False),
    ]
    result = outcome_result(m)
    assert (result["reason"], result["contains_sound"], result["seconds_duration"]) == (
        "aborted",
        False,
        0.0,
    )


@pytest.mark.parametrize("reason", ["error", "filesize"])
def test_machine_recorder_failed(reason: FailReason) -> None:
    m = machine()
    m.start(0.0)
    m.handle(VoiceActivity(True), 1.0)
    assert m.handle(RecorderFailed(reason), 3.0) == [StopRecording("r.wav"), DetectVoice(False)]
    assert outcome_result(m)["reason"] == reason
    assert "barge_in_digit" not in outcome_result(m)


def test_machine_beep_then_listen() -> None:
    m = machine(beep_on_start=True, milliseconds_max_initial_silence=500)
    commands = m.start(0.0)
    assert len(commands) == 2
    assert commands[0] == DetectVoice(True)  # a caller who speaks during the beep is heard
    beep = commands[1]
    assert isinstance(beep, StartPrompt)
    assert beep.items == (PlayTone(1000.0, 0.25),)
    assert m.deadline is None  # no timer while the beep plays
    assert m.handle(PromptFinished(beep.prompt_id + 1), 0.2) == []  # someone else's prompt
    assert m.deadline is None
    assert m.handle(PromptFinished(beep.prompt_id), 0.25) == []
    assert m.deadline == 0.75
    assert m.on_deadline(0.75) == [
        StartRecording("r.wav", None, None, preroll=0.0, max_seconds=60),
        StopRecording("r.wav"),
        DetectVoice(False),
    ]
    assert outcome_result(m)["reason"] == "silence"


def test_machine_bargein_during_beep() -> None:
    m = machine(beep_on_start=True, barge_in_digits="3")
    (_, beep) = m.start(0.0)
    assert isinstance(beep, StartPrompt)
    assert m.handle(DigitReceived("#"), 0.05) == []
    commands = m.handle(DigitReceived("3"), 0.1)
    assert commands[0] == StopPrompt(beep.prompt_id)
    assert commands[-2:] == [StopRecording("r.wav"), DetectVoice(False)]
    assert outcome_result(m)["barge_in_digit"] == "3"


class Journal:
    """Records what the runner reports about recordings, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    def started(self, app: str, filename: str, **details: Any) -> None:
        self.events.append(("started", filename, details))

    def completed(self, app: str, filename: str, result: dict[str, Any]) -> None:
        self.events.append(("completed", filename, dict(result)))


async def test_the_recording_is_reported_after_its_next_page(app: AppServer) -> None:
    """The application hears of its recording from next_page first (file_available false),
    and only then may recording_available_page be notified."""
    journal = Journal()
    seen_at_next_page: list[list[str]] = []
    app.page(
        "/start",
        [
            {
                "record": {
                    "next_page": {"url": "/recorded"},
                    "recording_available_page": {"url": "/available", "method": "GET"},
                    "id": "msg",
                    "milliseconds_max_silence": 500,
                }
            }
        ],
    )

    def recorded(_: Any) -> list[Any]:
        seen_at_next_page.append([kind for kind, _, _ in journal.events])
        return []

    app.page("/recorded", recorded)
    await run_call(app, Caller().say("hello", at=0.5, seconds=1.0), recordings=journal)
    assert seen_at_next_page == [["started"]]
    (started, completed) = journal.events
    assert started[2]["notify"] == (app.url("/available"), "GET")
    assert started[2]["record_id"] == "msg" and started[2]["encrypted"] is False
    assert started[2]["body"]["is_notification"] is True
    assert completed[0] == "completed" and completed[1] == started[1]
    assert completed[2]["reason"] == "silence"


def test_machine_refused_at_its_start_makes_no_file() -> None:
    """Too little free disk when the action begins: it ends at once with reason error, no
    recording command, no voice detection: nothing to fail in the middle of the call."""
    action = Record.model_validate({"next_page": {"url": "/rec"}, "id": "msg"})
    ctx = ActionContext(
        new_recording_name=lambda: "r.wav", recording_refused=lambda: "41 MB free, below 64"
    )
    m = RecordMachine(action, ctx)
    assert m.start(5.0) == []
    assert outcome_result(m) == {
        "filename": "r.wav",
        "file_available": False,
        "id": "msg",
        "contains_sound": False,
        "seconds_duration": 0.0,
        "reason": "error",
    }
