"""Call flows (``callhook test``): reading flow files, and running them on the virtual clock
against a real local application over HTTP (no speech engines: typed speech)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from callhook.config.settings import AppConfig
from callhook.devtools.flow import Flow, FlowError, Request, parse_flow
from callhook.devtools.flowcaller import (
    FlowResult,
    PageCall,
    in_words,
    matches,
    run_flow,
    with_errors,
)
from callhook.devtools.harness import AppServer, Received, Reply
from callhook.devtools.tester import Outcome, junit
from callhook.edge.pages import HttpPages
from callhook.edge.speechworkers import SpeechService, build_recogniser, build_synthesiser
from callhook.events import SayText
from callhook.media.simulated import PromptTimer


def _say(text: str) -> dict[str, Any]:
    return {"play": {"play_list": [{"text_to_say": text}]}}


PIN = [{"get_number": {"prompt": _say("Enter your PIN."), "digit_count": 4,
                       "next_page": {"url": "/pin"}}}]  # fmt: skip
THANKS = [_say("Thank you."), {"hang_up": {}}]


async def _run(
    app: AppServer, text: str, tmp_path: Path, speech: SpeechService | None = None
) -> FlowResult:
    flow = parse_flow(text, name="t", folder=tmp_path)
    config = AppConfig(name="t", first_page=app.url("/start"), secret=app.secret)
    pages = HttpPages(timeout=5)
    names = iter(range(1000))
    try:
        return await run_flow(
            flow,
            config,
            pages,
            timer=PromptTimer(),
            speech=speech,
            log_dir=tmp_path,
            new_recording_name=lambda: f"recordings/r{next(names)}.wav",
        )
    finally:
        await pages.close()


# --- flow files -------------------------------------------------------------------------


def test_a_flow_file_is_read_with_its_steps_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APP_PORT", "5123")
    flow = parse_flow(
        "app: http://127.0.0.1:${APP_PORT}/start\nsecret: ${SECRET:-s3cret}\n"
        "steps:\n - hear: PIN\n - press: '12#'\n - say: sales\n - wait: 2\n - hang_up\n"
        " - request: {page: /pin, result: {entered_number: '12'}}\n - ended\n"
    )
    assert flow.app == "http://127.0.0.1:5123/start" and flow.secret == "s3cret"
    assert [type(s).__name__ for s in flow.steps] == [
        "Hear", "Press", "Say", "Wait", "HangUp", "Request", "Ended",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("app: demo\nsteps:\n - press: '12x'\n", "steps[0] (press)"),
        ("app: demo\nsteps:\n - jump: 1\n", "expected exactly one of hear"),
        ("app: demo\nsteps:\n - press: '1'\n   say: x\n", "got press, say"),
        ("app: demo\nsteps:\n - wait: -1\n", "steps[0] (wait)"),
        ("app: ftp://x\n", "app"),
        ("app: demo\ncolour: red\n", "colour"),
        ("app: ${NOT_SET_ANYWHERE}\n", "NOT_SET_ANYWHERE"),
        ("[1, 2", "not YAML"),
        ("- 1\n", "mapping"),
    ],
)
def test_a_bad_flow_file_says_what_is_wrong_where(text: str, words: str) -> None:
    with pytest.raises(FlowError, match=None) as caught:
        parse_flow(text)
    assert words in str(caught.value)


def test_a_request_step_matches_the_page_the_action_and_the_result() -> None:
    call = PageCall(
        1.0,
        "http://127.0.0.1:5000/app/pin",
        {"action_result": {"action": "get_number", "result": {"entered_number": "0042"}}},
    )

    def step(**want: Any) -> Request:
        return Request.model_validate({"request": want})

    assert matches(call, step(page="/app/pin", action="get_number"))
    assert matches(call, step(page="pin", result={"entered_number": "0042"}))
    assert not matches(call, step(page="/other"))
    assert not matches(call, step(action="record"))
    assert not matches(call, step(result={"entered_number": "42"}))
    assert not matches(call, step(result={"missing": None}))


# --- running a flow -----------------------------------------------------------------------


async def test_a_flow_that_does_what_the_app_expects_passes(tmp_path: Path) -> None:
    async with AppServer() as app:
        app.page("/start", PIN)
        app.page("/pin", THANKS)
        result = await _run(
            app,
            "app: demo\nsteps:\n - hear: enter your pin\n - press: '1234'\n"
            " - request: {page: /pin, action: get_number, result: {entered_number: '1234'}}\n"
            " - hear: Thank you\n - ended: completed\n",
            tmp_path,
        )
    assert result.passed, result.failure
    assert result.cause == "completed"
    # hear waits for the prompt's end: the first key comes when "Enter your PIN." has
    # played, not while it plays.
    digit = next(line for line in result.timeline if " digit 1" in line)
    prompt = PromptTimer().seconds(SayText("Enter your PIN."))
    assert float(digit.split("]")[0].strip("[ ")) == pytest.approx(prompt, abs=0.006)


async def test_a_wrong_expectation_fails_naming_the_step_and_what_happened(
    tmp_path: Path,
) -> None:
    async with AppServer() as app:
        app.page("/start", PIN)
        app.page("/pin", THANKS)
        result = await _run(
            app,
            "app: demo\nsteps:\n - press: '1234'\n"
            " - request: {page: /pin, result: {entered_number: '9999'}}\n",
            tmp_path,
        )
    assert not result.passed
    assert result.failure is not None
    assert result.failure.startswith("step 2 (request {page: '/pin'")
    assert "'entered_number': '1234'" in result.failure  # what the app got instead


async def test_a_prompt_never_played_fails_the_hear_step(tmp_path: Path) -> None:
    async with AppServer() as app:
        app.page("/start", THANKS)
        result = await _run(app, "app: demo\nsteps:\n - hear: Goodbye\n", tmp_path)
    assert result.failure is not None and "step 1 (hear 'Goodbye')" in result.failure
    assert "Thank you." in result.failure


@pytest.mark.parametrize(
    ("page", "error"),
    [
        (
            Reply("database down", status=500, content_type="text/plain"),
            "the page {url} answered HTTP 500 Internal Server Error: database down",
        ),
        (
            {"actions": [{"play": {}}]},
            "the page {url} answered no valid action list:"
            " $.actions[0].play.play_list: required property is missing",
        ),
    ],
    ids=["500", "invalid"],
)
async def test_a_failure_names_the_application_error_that_caused_it(
    tmp_path: Path, page: Any, error: str
) -> None:
    """The expectation that failed, then the call's error: which page, and what was wrong
    with its answer."""
    async with AppServer() as app:
        app.page("/start", PIN)
        app.page("/pin", page)
        result = await _run(
            app, "app: demo\nsteps:\n - press: '1234'\n - hear: Thank you\n", tmp_path
        )
    assert result.failure == (
        "step 2 (hear 'Thank you'): the call ended (failed) and no prompt said it;"
        " prompts: ['Enter your PIN.'] — the call's error: " + error.format(url=app.url("/pin"))
    )


def test_the_call_s_errors_are_named_in_words_on_one_line() -> None:
    assert with_errors("step 1 (hear 'Hi'): no", []) == "step 1 (hear 'Hi'): no"
    errors = [
        "timeout: http://app/start: no answer within 10 s",
        "unreachable: http://app/error: cannot connect: [Errno 111] refused",
        "prompt 3 could not be played: file not found: x.wav",
        "status: http://app/final: HTTP 502 Bad Gateway: <html>\n<b>Bad</b>\n</html>",
    ]
    assert with_errors("step 1 (hear 'Hi'): no", errors) == (
        "step 1 (hear 'Hi'): no — the call's errors:"
        " the page http://app/start did not answer in time: no answer within 10 s;"
        " the page http://app/error could not be reached: cannot connect: [Errno 111] refused;"
        " prompt 3 could not be played: file not found: x.wav;"
        " and 1 more (in the call's log below)"
    )
    assert in_words(errors[3]) == (
        "the page http://app/final answered HTTP 502 Bad Gateway: <html> <b>Bad</b> </html>"
    )
    assert len(in_words("invalid: http://app/x: " + "$.actions: bad; " * 100)) == 300


async def test_a_call_that_never_ends_fails_at_the_flow_timeout(tmp_path: Path) -> None:
    looping = [_say("Still here."), {"redirect": {"next_page": {"url": "/start"}}}]
    async with AppServer() as app:
        app.page("/start", looping)
        result = await _run(app, "app: demo\ntimeout: 20\nsteps:\n - hear: Goodbye\n", tmp_path)
    assert result.failure is not None and "timeout (20 s of call time)" in result.failure
    assert result.call_seconds == pytest.approx(20, abs=1.0)


async def test_typed_speech_without_engines_reaches_get_input(tmp_path: Path) -> None:
    ask = [{"get_input": {"prompt": _say("Sales or support?"), "next_page": {"url": "/said"}}}]
    seen: list[Any] = []

    def said(request: Received) -> list[Any]:
        seen.append(request.json["action_result"]["result"])
        return THANKS

    async with AppServer() as app:
        app.page("/start", ask)
        app.page("/said", said)
        result = await _run(
            app, "app: demo\nsteps:\n - hear: Sales\n - say: support\n - ended\n", tmp_path
        )
    assert result.passed, result.failure
    assert seen[0]["speech_input"][0]["alternatives"][0]["text"] == "support"


async def test_the_caller_hangs_up_mid_call(tmp_path: Path) -> None:
    async with AppServer() as app:
        app.page("/start", PIN)
        app.page("/pin", THANKS)
        result = await _run(
            app, "app: demo\nsteps:\n - press: '12'\n - hang_up\n - ended: hung_up\n", tmp_path
        )
    assert result.passed, result.failure
    assert result.cause == "hung_up"
    assert [c for c in app.bodies("/pin")] == []  # get_number never completed


def test_junit_xml_has_a_case_per_flow_with_failures_and_errors() -> None:
    flow = Flow(name="pin")
    ok = FlowResult(flow, None, "completed", 3.0, 0.5, ["[ 0.00] call_start"])
    bad = FlowResult(Flow(name="bad"), "step 2 (press '1'): nope", "hung_up", 1.0, 0.25)
    xml = junit(
        [
            Outcome(Path("pin.yaml"), ok),
            Outcome(Path("bad.yaml"), bad),
            Outcome(Path("broken.yaml"), error="not YAML"),
        ]
    )
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["pin", "bad", "broken"]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None and failure.get("message") == "step 2 (press '1'): nope"
    error = cases[2].find("error")
    assert error is not None and error.get("message") == "not YAML"


async def test_a_play_step_speaks_a_recording_to_the_recogniser(tmp_path: Path) -> None:
    # A real recording of "seven" (tests/data/speech), heard through the call's VAD and
    # Whisper with the action's digit hints; espeak stands in as the (unused) voice.
    wav = Path(__file__).resolve().parents[2] / "data" / "speech" / "7_jackson_7.wav"
    assert wav.exists()
    (tmp_path / "seven.wav").write_bytes(wav.read_bytes())
    digits = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    ask = [{"get_input": {"prompt": _say("Say a digit."), "next_page": {"url": "/said"},
            "speech_recognition_options": {"word_hints": [{"words": digits}]}}}]  # fmt: skip
    speech = SpeechService(build_synthesiser("espeak:en-us"), build_recogniser("whisper"))
    flow = (
        "app: demo\nsteps:\n - hear: Say a digit\n - play: seven.wav\n"
        " - request: {page: /said, action: get_input, result: {input_type: speech}}\n"
    )
    async with AppServer() as app:
        app.page("/start", ask)
        app.page("/said", THANKS)
        try:
            result = await _run(app, flow, tmp_path, speech)
        finally:
            speech.close()
    assert result.passed, result.failure
    said = app.bodies("/said")[0]["action_result"]["result"]["speech_input"][0]
    assert said["alternatives"][0]["text"] == "seven"


async def test_a_play_step_with_a_missing_file_fails_it(tmp_path: Path) -> None:
    speech = SpeechService(build_synthesiser("espeak:en-us"), build_recogniser("whisper"))
    async with AppServer() as app:
        app.page("/start", PIN)
        try:
            result = await _run(app, "app: demo\nsteps:\n - play: nowhere.wav\n", tmp_path, speech)
        finally:
            speech.close()
    assert result.failure is not None
    assert result.failure.startswith("step 1 (play 'nowhere.wav'): play ")
    assert "nowhere.wav" in result.failure


@pytest.mark.parametrize(
    ("mode", "directions"),
    [("separate", ["outbound", "inbound", "outbound"]), ("mixed", [None, None, None]),
     ("inbound", ["inbound"]), ("outbound", ["outbound", "outbound"])],
)  # fmt: skip
async def test_a_transcription_in_process_posts_what_is_said_and_prompted(
    tmp_path: Path, mode: str, directions: list[str | None]
) -> None:
    """start_transcription on the simulated call: the caller's words and the prompts'
    text as final phrases to the results page (signed), then completed; a request step
    can expect them."""
    start = [
        {"start_transcription": {"results_page": {"url": "/words"}, "id": "t1",
                                 "transcription_mode": mode}},
        {"get_input": {"prompt": _say("Sales or support?"), "next_page": {"url": "/said"}}},
    ]  # fmt: skip
    async with AppServer() as app:
        app.page("/start", start)
        app.page("/said", [_say("Putting you through."), {"stop_transcription": {}},
                           _say("Not written down."), {"hang_up": {}}])  # fmt: skip
        app.page("/words", None)
        flow = (
            "app: demo\nsteps:\n - hear: Sales\n - say: support please\n"
            " - request: {page: /words, action: start_transcription, result: {id: t1}}\n"
            " - ended\n"
        )
        result = await _run(app, flow, tmp_path)
        posts = [r for r in app.requests if r.path == "/words"]
    assert result.passed, result.failure
    assert posts and all(r.signature_ok(app.secret) for r in posts)
    results = [r.json["action_result"]["result"] for r in posts]
    phrases = [p for r in results for p in r["transcription"]]
    assert [p.get("direction") for p in phrases] == directions
    assert all(p["final"] for p in phrases)
    texts = [p["alternatives"][0]["text"] for p in phrases]
    if mode in ("separate", "mixed"):
        assert texts == ["Sales or support?", "support please", "Putting you through."]
    assert "Not written down." not in texts  # after stop_transcription
    assert [r["completed"] for r in results].count(True) == 1 and results[-1]["completed"]
    assert all(r["id"] == "t1" for r in results)
