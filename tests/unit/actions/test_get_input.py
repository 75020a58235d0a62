"""``get_input``: every rule of docs/behaviour.md for it, every default in docs/reference.md.

Each test runs a real call on the virtual clock: the application is served over
HTTP on 127.0.0.1, the caller follows a script, and the assertions look at
what the application received (``/next``), what the call did (media commands
and their times) and the call log. "No input" means ``/next`` is NOT requested
and the next action of the list (a "Goodbye" prompt here) runs.

Timing used throughout: the prompt "Say a name" plays 2.0 s, so with the
defaults the initial timeout expires at 7.0 and ``seconds_timeout`` at 32.0.
"""

from __future__ import annotations

from typing import Any

import pytest

from callhook.devtools.harness import AppServer, Caller, CallRun, run_call
from callhook.events import (
    SayText,
    StartPrompt,
    StartRecognition,
    StopPrompt,
    StopRecognition,
)
from callhook.media.simulated import PromptTimer

PROMPT = "Say a name"
GOODBYE = "Goodbye"
WELCOME = "Welcome"
LONG_PROMPT = "Please say the name of the department you want"

# The default retry messages, word for word as docs/behaviour.md gives them.
TIMEOUT_1 = "Sorry, I did not hear anything."
TIMEOUT_2 = "Please speak clearly, or use your telephone keypad."
INVALID_1 = "Sorry, that is not valid input."
INVALID_2 = TIMEOUT_2

TIMER = PromptTimer(
    texts={
        PROMPT: 2.0,
        GOODBYE: 1.0,
        WELCOME: 2.0,
        LONG_PROMPT: 4.0,
        TIMEOUT_1: 1.0,
        TIMEOUT_2: 1.5,
        INVALID_1: 1.0,
        "Nothing heard": 0.5,
        "Try again": 0.5,
        "Wrong key": 0.5,
        "Last chance": 0.5,
    }
)


# --- helpers -------------------------------------------------------------------------------


def play(text: str, **options: Any) -> dict[str, Any]:
    """A play action object (for a prompt or a message)."""
    return {"play_list": [{"text_to_say": text}], **options}


def get_input(**props: Any) -> dict[str, Any]:
    return {"get_input": {"next_page": {"url": "/next"}, **props}}


def prompted(**props: Any) -> dict[str, Any]:
    """get_input with the 2-second prompt."""
    return get_input(prompt=play(PROMPT), **props)


GOODBYE_ACTION = {"play": play(GOODBYE)}


async def run(
    app: AppServer,
    actions: list[dict[str, Any]],
    caller: Caller,
    final_page: str | None = None,
) -> CallRun:
    app.page("/start", actions)
    app.page("/next", [])
    app.page("/final", [])
    return await run_call(app, caller, timer=TIMER, final_page=final_page)


def result(app: AppServer) -> Any:
    """The action_result of the one /next request."""
    bodies = app.bodies("/next")
    assert len(bodies) == 1, bodies
    return bodies[0]["action_result"]


def speech(*phrases: list[tuple[str, float]]) -> dict[str, Any]:
    """The expected get_input action_result for speech."""
    return {
        "action": "get_input",
        "result": {
            "input_type": "speech",
            "speech_input": [
                {
                    "alternatives": [{"text": t, "confidence": c} for t, c in alternatives],
                    "direction": "inbound",
                    "final": True,
                }
                for alternatives in phrases
            ],
        },
    }


def digits(entered: str) -> dict[str, Any]:
    """The expected get_input action_result for digits."""
    return {"action": "get_input", "result": {"input_type": "digits", "digits_input": entered}}


def said(run: CallRun) -> list[tuple[float, str]]:
    """(time, text) of every prompt started, in order."""
    out = []
    for t, command in run.leg.commands(StartPrompt):
        text = " ".join(i.text for i in command.items if isinstance(i, SayText))
        out.append((round(t, 3), text))
    return out


def prompt_stops(run: CallRun) -> list[float]:
    return [round(t, 3) for t, _ in run.leg.commands(StopPrompt)]


def action_end(run: CallRun, name: str = "get_input") -> float:
    """Media time at which the first action called ``name`` ended (from the call log)."""
    for line in run.log.lines:
        parts = line.split(" ", 3)
        if parts[2] == "action_end" and len(parts) > 3 and f"] {name}" in parts[3]:
            return float(parts[1])
    raise AssertionError(f"no action_end for {name}: {run.log.lines}")


def no_input(app: AppServer, run: CallRun, goodbye_at: float) -> None:
    """next_page was not requested; the next action (Goodbye) ran at ``goodbye_at``."""
    assert app.bodies("/next") == []
    at, text = said(run)[-1]
    assert text == GOODBYE
    assert at == pytest.approx(goodbye_at)


def recognition(run: CallRun) -> list[tuple[float, str]]:
    """(time, "start"|"stop") of the recognition commands."""
    return [
        (round(t, 3), "start" if isinstance(c, StartRecognition) else "stop")
        for t, c in run.leg.sent
        if isinstance(c, StartRecognition | StopRecognition)
    ]


# --- section 2.3 defaults and result shapes ------------------------------------------------


async def test_speech_result_shape_and_default_timeout_mode(app: AppServer) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5, confidence=0.75).hang_up(at=60)
    r = await run(app, [prompted()], caller)
    assert result(app) == speech([("sales", 0.75)])
    # timeout mode by default: returns 1000 ms (default inter-speech) after the phrase
    assert action_end(r) == pytest.approx(4.5)
    # recognition ran with the default options, in timeout mode
    starts = [c for _, c in r.leg.commands(StartRecognition)]
    assert len(starts) == 1
    assert starts[0].options.mode == "timeout"
    assert starts[0].options.language == "en-US"


async def test_speech_result_carries_all_alternatives_in_order(app: AppServer) -> None:
    caller = Caller().say(
        "sales", at=3.0, seconds=0.5, confidence=0.8, alternatives=[("sails", 0.5), ("tails", 0.25)]
    )
    options = {"max_alternatives": 3, "word_hints": [{"words": ["sales", "support"]}]}
    r = await run(app, [prompted(speech_recognition_options=options)], caller)
    assert result(app) == speech([("sales", 0.8), ("sails", 0.5), ("tails", 0.25)])
    (start,) = [c for _, c in r.leg.commands(StartRecognition)]
    assert start.options.max_alternatives == 3
    assert start.options.word_hints == ("sales", "support")


@pytest.mark.parametrize(("maximum", "kept"), [(None, 1), (2, 2)])
async def test_max_alternatives_caps_what_the_recogniser_offers(
    app: AppServer, maximum: int | None, kept: int
) -> None:
    caller = Caller().say(
        "sales", at=3.0, seconds=0.5, confidence=0.8, alternatives=[("sails", 0.5), ("tails", 0.25)]
    )
    options = {} if maximum is None else {"max_alternatives": maximum}
    await run(app, [prompted(speech_recognition_options=options)], caller)
    offered = [("sales", 0.8), ("sails", 0.5), ("tails", 0.25)]
    assert result(app) == speech(offered[:kept])


async def test_digits_result_shape_excludes_end_digit(app: AppServer) -> None:
    await run(app, [prompted()], Caller().press("12#", at=3.0))
    assert result(app) == digits("12")


async def test_default_digit_count_is_unlimited_until_end_digit(app: AppServer) -> None:
    # digit_count 0 by default: ten digits do not complete; the end digit does
    await run(app, [prompted()], Caller().press("1234567890#", at=3.0))
    assert result(app) == digits("1234567890")


async def test_end_digit_alone_completes_with_empty_digits(app: AppServer) -> None:
    await run(app, [prompted()], Caller().press("#", at=3.0))
    assert result(app) == digits("")


async def test_digit_count_completes_without_end_digit(app: AppServer) -> None:
    r = await run(
        app, [prompted(digit_input_options={"digit_count": 3})], Caller().press("123", at=3.0)
    )
    assert result(app) == digits("123")
    assert action_end(r) == pytest.approx(3.5)


async def test_custom_end_digit_and_valid_digits(app: AppServer) -> None:
    options = {"end_digit": "A", "valid_digits": "12#"}
    await run(app, [prompted(digit_input_options=options)], Caller().press("1#2A", at=3.0))
    assert result(app) == digits("1#2")


@pytest.mark.parametrize("key", ["A", "D"])
async def test_default_valid_digits_exclude_letters(app: AppServer, key: str) -> None:
    r = await run(app, [prompted(), GOODBYE_ACTION], Caller().press(key, at=3.0))
    assert said(r)[:2] == [(0.0, PROMPT), (3.0, INVALID_1)]


async def test_invalid_digit_during_prompt_stops_it_and_plays_message(app: AppServer) -> None:
    r = await run(app, [prompted(), GOODBYE_ACTION], Caller().press("B", at=1.0))
    assert prompt_stops(r) == [1.0]
    assert said(r)[:2] == [(0.0, PROMPT), (1.0, INVALID_1)]


async def test_digit_outside_custom_valid_digits_is_invalid(app: AppServer) -> None:
    options = {"valid_digits": "123"}
    caller = Caller().press("4", at=3.0).press("12#", at=5.0)
    r = await run(app, [prompted(digit_input_options=options)], caller)
    assert said(r) == [(0.0, PROMPT), (3.0, INVALID_1)]
    # entry starts again after the message: "4" is not part of the result
    assert result(app) == digits("12")


# --- speech modes --------------------------------------------------------------------------


@pytest.mark.parametrize(("second_at", "expected"), [(4.499, 2), (4.501, 1)])
async def test_timeout_mode_inter_speech_boundary(
    app: AppServer, second_at: float, expected: int
) -> None:
    # first phrase recognised at 3.5; inter-speech (1000 ms default) expires at 4.5
    caller = (
        Caller()
        .say("sales", at=3.0, seconds=0.5)
        .say("support", at=second_at, seconds=0.5, confidence=0.8)
    )
    r = await run(app, [prompted()], caller)
    phrases = [("sales", 0.9)], [("support", 0.8)]
    assert result(app) == speech(*phrases[:expected])
    assert action_end(r) == pytest.approx(4.5 if expected == 1 else second_at + 1.5)


async def test_timeout_mode_custom_inter_speech_timeout(app: AppServer) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5).say("support", at=5.0, seconds=0.5)
    r = await run(app, [prompted(milliseconds_inter_speech_timeout=2000)], caller)
    assert result(app) == speech([("sales", 0.9)], [("support", 0.9)])
    assert action_end(r) == pytest.approx(7.5)


async def test_timeout_mode_inter_speech_does_not_run_while_caller_speaks(
    app: AppServer,
) -> None:
    # the second utterance starts 0.5 s after the first phrase and lasts 3 s:
    # the inter-speech timer (1 s) must not expire during it
    caller = Caller().say("sales", at=3.0, seconds=0.5).say("and support", at=4.0, seconds=3.0)
    r = await run(app, [prompted()], caller)
    assert result(app) == speech([("sales", 0.9)], [("and support", 0.9)])
    assert action_end(r) == pytest.approx(8.0)


async def test_timeout_mode_seconds_timeout_ends_continuous_speech(app: AppServer) -> None:
    # seconds_timeout 3 from the end of the prompt (2.0): returns at 5.0 with the
    # phrases recognised so far, although the caller is still talking
    caller = (
        Caller()
        .say("one", at=2.5, seconds=0.5)
        .say("two", at=3.3, seconds=0.5)
        .say("three", at=4.1, seconds=0.5)
        .say("four", at=4.9, seconds=1.0)
    )
    r = await run(app, [prompted(seconds_timeout=3)], caller)
    assert result(app) == speech([("one", 0.9)], [("two", 0.9)], [("three", 0.9)])
    assert action_end(r) == pytest.approx(5.0)


@pytest.mark.parametrize("inter_speech", [0, -1])
async def test_inter_speech_timeout_disabled_waits_for_seconds_timeout(
    app: AppServer, inter_speech: int
) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5).say("support", at=9.0, seconds=0.5)
    action = prompted(milliseconds_inter_speech_timeout=inter_speech, seconds_timeout=10)
    r = await run(app, [action], caller)
    assert result(app) == speech([("sales", 0.9)], [("support", 0.9)])
    assert action_end(r) == pytest.approx(12.0)


async def test_auto_mode_returns_right_after_first_phrase(app: AppServer) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5).say("support", at=3.7, seconds=0.5)
    # inter-speech is ignored in auto mode, however long it is
    action = prompted(speech_input_mode="auto", milliseconds_inter_speech_timeout=5000)
    r = await run(app, [action], caller)
    assert result(app) == speech([("sales", 0.9)])
    assert action_end(r) == pytest.approx(3.5)
    (start,) = [c for _, c in r.leg.commands(StartRecognition)]
    assert start.options.mode == "auto"


async def test_auto_mode_initial_timeout(app: AppServer) -> None:
    caller = Caller().say("sales", at=7.5, seconds=0.5)
    r = await run(app, [prompted(speech_input_mode="auto"), GOODBYE_ACTION], caller)
    assert said(r)[:2] == [(0.0, PROMPT), (7.0, TIMEOUT_1)]


async def test_disabled_mode_ignores_speech(app: AppServer) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5).press("5#", at=8.5)
    action = get_input(
        speech_input_mode="disabled",
        prompt=play(PROMPT, barge_in_on_speech=True),
    )
    r = await run(app, [action], caller)
    assert r.leg.commands(StartRecognition) == []
    # the speech did not stop the initial timeout: the timeout message plays at 7.0
    assert said(r) == [(0.0, PROMPT), (7.0, TIMEOUT_1)]
    assert result(app) == digits("5")


async def test_disabled_mode_speech_during_prompt_does_not_barge_in(app: AppServer) -> None:
    caller = Caller().say("sales", at=0.5, seconds=0.5).press("5#", at=3.0)
    r = await run(app, [prompted(speech_input_mode="disabled")], caller)
    assert prompt_stops(r) == []
    assert result(app) == digits("5")


# --- prompt barge-in by speech ---------------------------------------------------------------


@pytest.mark.parametrize(("mode", "ends_at"), [(None, 2.5), ("timeout", 2.5), ("auto", 1.5)])
@pytest.mark.parametrize("barge_in_on_speech", [None, False, True])
async def test_speech_barges_in_on_prompt_regardless_of_its_option(
    app: AppServer, mode: str | None, ends_at: float, barge_in_on_speech: bool | None
) -> None:
    options = {} if barge_in_on_speech is None else {"barge_in_on_speech": barge_in_on_speech}
    props: dict[str, Any] = {"prompt": play(LONG_PROMPT, **options)}
    if mode is not None:
        props["speech_input_mode"] = mode
    caller = Caller().say("sales", at=1.0, seconds=0.5)
    r = await run(app, [get_input(**props)], caller)
    # recognised at 1.5, while the 4-second prompt plays: the prompt stops then
    assert prompt_stops(r) == [1.5]
    assert result(app) == speech([("sales", 0.9)])
    assert action_end(r) == pytest.approx(ends_at)


async def test_prompt_barge_in_on_speech_options_are_ignored(app: AppServer) -> None:
    # the prompt would only let "billing" barge in, in French; get_input ignores that
    prompt = play(
        LONG_PROMPT,
        barge_in_on_speech=True,
        barge_in_on_speech_options={"language": "fr-FR", "barge_in_phrases": ["billing"]},
    )
    action = get_input(prompt=prompt, speech_recognition_options={"language": "en-GB"})
    r = await run(app, [action], Caller().say("sales", at=1.0, seconds=0.5))
    assert prompt_stops(r) == [1.5]
    assert result(app) == speech([("sales", 0.9)])
    assert [c.options.language for _, c in r.leg.commands(StartRecognition)] == ["en-GB"]


async def test_speech_barges_in_on_prompt_without_digit_barge_in(app: AppServer) -> None:
    action = get_input(prompt=play(LONG_PROMPT, barge_in_on_digit=False))
    r = await run(app, [action], Caller().say("sales", at=1.0, seconds=0.5))
    assert prompt_stops(r) == [1.5]
    assert result(app) == speech([("sales", 0.9)])


async def test_speech_started_during_prompt_does_not_stop_it(app: AppServer) -> None:
    # only a recognised phrase barges in; "sales" is recognised after the prompt end
    r = await run(app, [prompted()], Caller().say("sales", at=1.5, seconds=1.0))
    assert prompt_stops(r) == []
    assert result(app) == speech([("sales", 0.9)])
    assert action_end(r) == pytest.approx(3.5)


async def test_digit_during_prompt_without_digit_barge_in_is_ignored(app: AppServer) -> None:
    action = get_input(prompt=play(PROMPT, barge_in_on_digit=False))
    r = await run(app, [action], Caller().press("1", at=1.0).press("2#", at=3.0))
    assert prompt_stops(r) == []
    assert result(app) == digits("2")


async def test_digit_barges_in_on_prompt(app: AppServer) -> None:
    r = await run(app, [prompted()], Caller().press("1", at=1.0).press("2#", at=1.5))
    assert prompt_stops(r) == [1.0]
    assert result(app) == digits("12")


async def test_without_prompt_timers_run_from_action_start(app: AppServer) -> None:
    r = await run(app, [get_input(), GOODBYE_ACTION], Caller())
    assert said(r)[0] == (5.0, TIMEOUT_1)


async def test_timers_run_from_speech_barge_in(app: AppServer) -> None:
    # barge-in at 1.5; seconds_timeout 2 from then (3.5), not from the prompt's end (4.0)
    action = get_input(
        prompt=play(LONG_PROMPT), milliseconds_inter_speech_timeout=0, seconds_timeout=2
    )
    r = await run(app, [action], Caller().say("sales", at=1.0, seconds=0.5))
    assert result(app) == speech([("sales", 0.9)])
    assert action_end(r) == pytest.approx(3.5)


async def test_timeout_mode_after_barge_in_collects_more_phrases(app: AppServer) -> None:
    caller = Caller().say("sales", at=1.0, seconds=0.5).say("support", at=2.0, seconds=0.5)
    r = await run(app, [get_input(prompt=play(LONG_PROMPT))], caller)
    assert result(app) == speech([("sales", 0.9)], [("support", 0.9)])
    assert action_end(r) == pytest.approx(3.5)


# --- timers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("at", "counts"), [(6.999, True), (7.001, False)])
async def test_initial_timeout_default_digit_boundary(
    app: AppServer, at: float, counts: bool
) -> None:
    action = prompted(digit_input_options={"digit_count": 1})
    r = await run(app, [action, GOODBYE_ACTION], Caller().press("4", at=at))
    if counts:
        assert result(app) == digits("4")
        assert said(r) == [(0.0, PROMPT)]
    else:
        assert said(r)[1] == (7.0, TIMEOUT_1)
        no_input(app, r, 14.5)


@pytest.mark.parametrize(("at", "counts"), [(6.999, True), (7.001, False)])
async def test_initial_timeout_default_speech_boundary(
    app: AppServer, at: float, counts: bool
) -> None:
    # the timer stops when speech starts; the phrase is recognised 0.5 s later
    caller = Caller().say("sales", at=at, seconds=0.5)
    r = await run(app, [prompted(), GOODBYE_ACTION], caller)
    if counts:
        assert result(app) == speech([("sales", 0.9)])
        assert said(r) == [(0.0, PROMPT)]
    else:
        assert said(r)[1] == (7.0, TIMEOUT_1)
        no_input(app, r, 14.5)


async def test_initial_timeout_does_not_run_while_caller_speaks(app: AppServer) -> None:
    # speech from 6.0 to 9.0: recognised after the initial timeout (7.0) would have expired
    caller = Caller().say("a rather long name", at=6.0, seconds=3.0)
    r = await run(app, [prompted()], caller)
    assert result(app) == speech([("a rather long name", 0.9)])
    assert action_end(r) == pytest.approx(10.0)


async def test_initial_timeout_does_not_run_while_speech_begun_in_prompt_goes_on(
    app: AppServer,
) -> None:
    # the caller starts at 1.0, over the prompt, and speaks until 8.0: the phrase is
    # recognised at 8.0, after 7.0 (prompt end + 5000 ms), but the caller was speaking
    # the whole time, so the initial timer must not have run (docs/behaviour.md, Timers)
    caller = Caller().say("a very long answer indeed", at=1.0, seconds=7.0)
    r = await run(app, [prompted(), GOODBYE_ACTION], caller)
    assert said(r) == [(0.0, PROMPT)]
    assert result(app) == speech([("a very long answer indeed", 0.9)])
    assert action_end(r) == pytest.approx(9.0)


async def test_custom_initial_timeout(app: AppServer) -> None:
    action = prompted(milliseconds_initial_timeout=1500)
    r = await run(app, [action, GOODBYE_ACTION], Caller())
    assert said(r)[1] == (3.5, TIMEOUT_1)


@pytest.mark.parametrize("initial", [0, -1])
async def test_initial_timeout_disabled(app: AppServer, initial: int) -> None:
    action = prompted(milliseconds_initial_timeout=initial, digit_input_options={"digit_count": 1})
    r = await run(app, [action], Caller().press("4", at=20.0))
    assert result(app) == digits("4")
    assert said(r) == [(0.0, PROMPT)]


@pytest.mark.parametrize(("at", "counts"), [(5.999, True), (6.001, False)])
async def test_inter_digit_timeout_default_boundary(
    app: AppServer, at: float, counts: bool
) -> None:
    # first digit at 3.0, 3000 ms default inter-digit: the second is due by 6.0
    caller = Caller().press("1", at=3.0).press("2", at=at)
    action = prompted(digit_input_options={"digit_count": 2})
    r = await run(app, [action, GOODBYE_ACTION], caller)
    if counts:
        assert result(app) == digits("12")
    else:
        # a timeout with digits entered: the digits are discarded, message plays
        assert said(r)[1] == (6.0, TIMEOUT_1)
        no_input(app, r, 13.5)


async def test_inter_digit_timeout_runs_from_each_digit(app: AppServer) -> None:
    caller = Caller().press("1", at=3.0).press("2", at=5.5).press("3", at=8.0).press("#", at=10.9)
    await run(app, [prompted()], caller)
    assert result(app) == digits("123")


@pytest.mark.parametrize("inter_digit", [0, -5])
async def test_inter_digit_timeout_disabled(app: AppServer, inter_digit: int) -> None:
    caller = Caller().press("1", at=3.0).press("2", at=20.0)
    action = prompted(
        milliseconds_inter_digit_timeout=inter_digit, digit_input_options={"digit_count": 2}
    )
    r = await run(app, [action], caller)
    assert result(app) == digits("12")
    assert said(r) == [(0.0, PROMPT)]


@pytest.mark.parametrize(("at", "counts"), [(5.999, True), (6.001, False)])
async def test_seconds_timeout_from_end_of_prompt(app: AppServer, at: float, counts: bool) -> None:
    # seconds_timeout 4 from the prompt's end (2.0): 6.0; the initial timer is disabled
    action = prompted(
        seconds_timeout=4,
        milliseconds_initial_timeout=0,
        digit_input_options={"digit_count": 1},
    )
    r = await run(app, [action, GOODBYE_ACTION], Caller().press("4", at=at))
    if counts:
        assert result(app) == digits("4")
    else:
        assert said(r)[1] == (6.0, TIMEOUT_1)
        assert app.bodies("/next") == []


@pytest.mark.parametrize(("at", "counts"), [(31.999, True), (32.001, False)])
async def test_seconds_timeout_default_30(app: AppServer, at: float, counts: bool) -> None:
    action = prompted(milliseconds_initial_timeout=0, digit_input_options={"digit_count": 1})
    r = await run(app, [action, GOODBYE_ACTION], Caller().press("4", at=at))
    if counts:
        assert result(app) == digits("4")
    else:
        assert said(r)[1] == (32.0, TIMEOUT_1)
        assert app.bodies("/next") == []


async def test_seconds_timeout_bounds_slow_digit_entry(app: AppServer) -> None:
    # every digit within the inter-digit time, but the whole entry exceeds seconds_timeout
    caller = Caller().press("1", at=3.0).press("2", at=5.0).press("3", at=7.5)
    action = prompted(seconds_timeout=5, digit_input_options={"digit_count": 3})
    r = await run(app, [action, GOODBYE_ACTION], caller)
    assert said(r)[1] == (7.0, TIMEOUT_1)
    assert app.bodies("/next") == []


# --- digits take precedence over speech ------------------------------------------------------


async def test_digit_after_recognised_speech_discards_it(app: AppServer) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5).press("7", at=4.0)
    r = await run(app, [prompted(digit_input_options={"digit_count": 1})], caller)
    assert result(app) == digits("7")
    assert action_end(r) == pytest.approx(4.0)


async def test_speech_after_digit_is_ignored_and_recognition_stops(app: AppServer) -> None:
    caller = Caller().press("1", at=3.0).say("sales", at=3.5, seconds=0.5).press("2#", at=4.5)
    r = await run(app, [prompted()], caller)
    assert result(app) == digits("12")
    # recognition started with the action, stopped by the first valid digit
    assert recognition(r) == [(0.0, "start"), (3.0, "stop")]


async def test_phrase_arriving_just_after_a_digit_is_ignored_in_auto_mode(
    app: AppServer,
) -> None:
    # the digit and the end of the utterance happen at the same instant, the digit
    # first: the phrase (already on its way) must not complete the action as speech
    caller = Caller().press("1", at=3.0).say("sales", at=2.5, seconds=0.5).press("#", at=3.5)
    await run(app, [prompted(speech_input_mode="auto")], caller)
    assert result(app) == digits("1")


async def test_timeout_after_digit_does_not_fall_back_to_speech(app: AppServer) -> None:
    # speech heard before and after the digit; the inter-digit timeout then expires
    caller = (
        Caller()
        .say("sales", at=2.5, seconds=0.3)
        .press("1", at=3.0)
        .say("support", at=3.5, seconds=0.5)
    )
    r = await run(app, [prompted(), GOODBYE_ACTION], caller)
    assert said(r)[1] == (6.0, TIMEOUT_1)
    no_input(app, r, 13.5)


async def test_recognition_restarts_after_retry_message(app: AppServer) -> None:
    # a digit stops recognition; the timeout message ends the attempt; the next attempt
    # listens for speech again
    caller = Caller().press("1", at=3.0).say("sales", at=8.0, seconds=0.5)
    r = await run(app, [prompted()], caller)
    assert said(r) == [(0.0, PROMPT), (6.0, TIMEOUT_1)]
    assert result(app) == speech([("sales", 0.9)])
    assert recognition(r)[:3] == [(0.0, "start"), (3.0, "stop"), (7.0, "start")]


# --- cached input from a preceding play ----------------------------------------------------


async def test_cached_speech_is_returned_at_once(app: AppServer) -> None:
    actions = [{"play": play(WELCOME, barge_in_on_speech=True)}, prompted()]
    r = await run(app, actions, Caller().say("sales", at=0.5, seconds=0.5))
    assert result(app) == speech([("sales", 0.9)])
    # the get_input prompt is not played; the action ends at once
    assert said(r) == [(0.0, WELCOME)]
    assert action_end(r) == pytest.approx(1.0)


async def test_cached_digit_prefixes_and_skips_barge_in_prompt(app: AppServer) -> None:
    actions = [{"play": play(WELCOME)}, prompted(digit_input_options={"digit_count": 2})]
    r = await run(app, actions, Caller().press("1", at=0.5).press("2", at=1.5))
    assert result(app) == digits("12")
    assert said(r) == [(0.0, WELCOME)]


async def test_cached_digit_prompt_without_digit_barge_in_is_played(app: AppServer) -> None:
    action = get_input(
        prompt=play(PROMPT, barge_in_on_digit=False), digit_input_options={"digit_count": 2}
    )
    caller = Caller().press("1", at=0.5).press("2", at=3.0)
    r = await run(app, [{"play": play(WELCOME)}, action], caller)
    assert said(r) == [(0.0, WELCOME), (0.5, PROMPT)]
    assert result(app) == digits("12")


async def test_cached_digit_completes_at_once(app: AppServer) -> None:
    actions = [{"play": play(WELCOME)}, prompted(digit_input_options={"digit_count": 1})]
    r = await run(app, actions, Caller().press("3", at=0.5))
    assert result(app) == digits("3")
    assert said(r) == [(0.0, WELCOME)]
    assert action_end(r) == pytest.approx(0.5)


async def test_cached_help_digit_plays_prompt(app: AppServer) -> None:
    actions = [{"play": play(WELCOME)}, prompted()]
    r = await run(app, actions, Caller().press("*", at=0.5).press("4#", at=3.0))
    # the help digit acts as it would live: the prompt is played (again)
    assert said(r) == [(0.0, WELCOME), (0.5, PROMPT)]
    assert result(app) == digits("4")


async def test_clear_input_discards_cached_digit(app: AppServer) -> None:
    actions: list[dict[str, Any]] = [
        {"play": play(WELCOME)},
        {"clear_input": {}},
        prompted(digit_input_options={"digit_count": 2}),
    ]
    r = await run(app, actions, Caller().press("1", at=0.5).press("23", at=3.0))
    assert said(r) == [(0.0, WELCOME), (0.5, PROMPT)]
    assert result(app) == digits("23")


async def test_clear_input_discards_cached_speech(app: AppServer) -> None:
    actions: list[dict[str, Any]] = [
        {"play": play(WELCOME, barge_in_on_speech=True)},
        {"clear_input": {}},
        prompted(),
    ]
    caller = Caller().say("sales", at=0.5, seconds=0.5).say("support", at=3.5, seconds=0.5)
    r = await run(app, actions, caller)
    assert said(r) == [(0.0, WELCOME), (1.0, PROMPT)]
    assert result(app) == speech([("support", 0.9)])


async def test_cached_digits_win_over_cached_speech(app: AppServer) -> None:
    actions = [
        {"play": play(WELCOME, barge_in_on_speech=True)},
        {"play": play(GOODBYE)},
        prompted(digit_input_options={"digit_count": 1}),
    ]
    # "sales" barges in on the first play, "5" on the second
    caller = Caller().say("sales", at=0.5, seconds=0.5).press("5", at=1.5)
    r = await run(app, actions, caller)
    assert said(r) == [(0.0, WELCOME), (1.0, GOODBYE)]
    assert result(app) == digits("5")


# --- retry messages and no input -----------------------------------------------------------


async def test_default_timeout_messages_then_next_action(app: AppServer) -> None:
    r = await run(app, [prompted(), GOODBYE_ACTION], Caller())
    # timeouts at 7.0 and (message ends 8.0) 13.0; the action finishes at 14.5
    assert said(r) == [(0.0, PROMPT), (7.0, TIMEOUT_1), (13.0, TIMEOUT_2), (14.5, GOODBYE)]
    no_input(app, r, 14.5)
    # retry messages default to no barge-in
    assert prompt_stops(r) == []


async def test_timeout_messages_play_without_barge_in(app: AppServer) -> None:
    # a digit during the (default) timeout message is ignored; the message plays on
    caller = Caller().press("1", at=7.5).press("2", at=9.0)
    action = prompted(digit_input_options={"digit_count": 1})
    r = await run(app, [action], caller)
    assert prompt_stops(r) == []
    assert result(app) == digits("2")


async def test_custom_timeout_messages(app: AppServer) -> None:
    action = prompted(
        on_input_timeout_messages=[play("Nothing heard"), play("Try again"), play("Last chance")]
    )
    r = await run(app, [action, GOODBYE_ACTION], Caller())
    assert said(r) == [
        (0.0, PROMPT),
        (7.0, "Nothing heard"),
        (12.5, "Try again"),
        (18.0, "Last chance"),
        (18.5, GOODBYE),
    ]
    no_input(app, r, 18.5)


async def test_empty_timeout_messages_finish_at_first_timeout(app: AppServer) -> None:
    r = await run(app, [prompted(on_input_timeout_messages=[]), GOODBYE_ACTION], Caller())
    assert said(r) == [(0.0, PROMPT), (7.0, GOODBYE)]
    no_input(app, r, 7.0)


async def test_input_after_timeout_message_completes(app: AppServer) -> None:
    # timers restart at the end of the message (8.0): 12.999 is within 5000 ms of it
    caller = Caller().say("sales", at=12.999, seconds=0.5)
    r = await run(app, [prompted()], caller)
    assert said(r) == [(0.0, PROMPT), (7.0, TIMEOUT_1)]
    assert result(app) == speech([("sales", 0.9)])


async def test_message_with_barge_in_stops_on_digit(app: AppServer) -> None:
    action = prompted(
        on_input_timeout_messages=[play(LONG_PROMPT, barge_in_on_digit=True)],
        digit_input_options={"digit_count": 1},
    )
    r = await run(app, [action], Caller().press("9", at=8.0))
    assert prompt_stops(r) == [8.0]
    assert result(app) == digits("9")


async def test_default_invalid_messages_then_next_action(app: AppServer) -> None:
    caller = Caller().press("A", at=3.0).press("B", at=5.0)
    r = await run(app, [prompted(), GOODBYE_ACTION], caller)
    # invalid message 1 from 3.0 to 4.0, message 2 from 5.0 to 6.5, then the next action
    assert said(r) == [(0.0, PROMPT), (3.0, INVALID_1), (5.0, INVALID_2), (6.5, GOODBYE)]
    no_input(app, r, 6.5)


async def test_custom_invalid_messages(app: AppServer) -> None:
    action = prompted(on_invalid_input_messages=[play("Wrong key")])
    r = await run(app, [action, GOODBYE_ACTION], Caller().press("C", at=3.0))
    assert said(r) == [(0.0, PROMPT), (3.0, "Wrong key"), (3.5, GOODBYE)]
    no_input(app, r, 3.5)


async def test_invalid_digit_discards_digits_entered(app: AppServer) -> None:
    caller = Caller().press("12", at=3.0).press("D", at=4.0).press("3#", at=6.0)
    r = await run(app, [prompted()], caller)
    assert said(r) == [(0.0, PROMPT), (4.0, INVALID_1)]
    assert result(app) == digits("3")


async def test_invalid_digit_after_speech_discards_the_speech(app: AppServer) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5).press("A", at=3.8)
    r = await run(app, [prompted(), GOODBYE_ACTION], caller)
    assert said(r)[1] == (3.8, INVALID_1)
    assert app.bodies("/next") == []


async def test_timeout_and_invalid_counters_are_separate(app: AppServer) -> None:
    action = prompted(
        on_input_timeout_messages=[play("Nothing heard"), play("Last chance")],
        on_invalid_input_messages=[play("Wrong key"), play("Try again")],
    )
    # timeout at 7.0 (message to 7.5); invalid at 8.0 (to 8.5); timeout at 13.5
    r = await run(app, [action, GOODBYE_ACTION], Caller().press("A", at=8.0))
    assert said(r) == [
        (0.0, PROMPT),
        (7.0, "Nothing heard"),
        (8.0, "Wrong key"),
        (13.5, "Last chance"),
        (14.0, GOODBYE),
    ]
    no_input(app, r, 14.0)


async def test_any_speech_is_valid_input(app: AppServer) -> None:
    # digits are restricted, speech is not: no invalid message, the words are returned
    options = {"valid_digits": "12"}
    caller = Caller().say("definitely not a digit", at=3.0, seconds=1.0, confidence=0.3)
    r = await run(app, [prompted(digit_input_options=options)], caller)
    assert said(r) == [(0.0, PROMPT)]
    assert result(app) == speech([("definitely not a digit", 0.3)])


@pytest.mark.parametrize(("at", "counts"), [(10.999, True), (11.001, False)])
async def test_noise_restarts_initial_timeout(app: AppServer, at: float, counts: bool) -> None:
    # noise from 5.0 to 6.0 is rejected; the initial timeout runs again from 6.0 (to 11.0)
    caller = Caller().noise(at=5.0, seconds=1.0).press("4", at=at)
    action = prompted(digit_input_options={"digit_count": 1})
    r = await run(app, [action, GOODBYE_ACTION], caller)
    if counts:
        assert said(r) == [(0.0, PROMPT)]
        assert result(app) == digits("4")
    else:
        assert said(r)[1] == (11.0, TIMEOUT_1)
        assert app.bodies("/next") == []


async def test_noise_is_not_returned_as_speech(app: AppServer) -> None:
    caller = Caller().noise(at=3.0, seconds=0.5).say("sales", at=4.0, seconds=0.5)
    await run(app, [prompted()], caller)
    assert result(app) == speech([("sales", 0.9)])


# --- help digit and digit_input_enabled ----------------------------------------------------


async def test_help_digit_repeats_prompt(app: AppServer) -> None:
    # "1" is cleared by the help digit; the repeated prompt ends at 5.0 and the
    # initial timer runs from then (9.999 is within 5000 ms of it)
    caller = Caller().press("1", at=2.5).press("*", at=3.0).press("2#", at=9.999)
    r = await run(app, [prompted()], caller)
    assert said(r) == [(0.0, PROMPT), (3.0, PROMPT)]
    assert result(app) == digits("2")


async def test_help_digit_during_prompt_restarts_it(app: AppServer) -> None:
    r = await run(app, [prompted()], Caller().press("*", at=1.0).press("3#", at=4.0))
    assert said(r) == [(0.0, PROMPT), (1.0, PROMPT)]
    assert prompt_stops(r) == [1.0]
    assert result(app) == digits("3")


async def test_custom_help_digit(app: AppServer) -> None:
    r = await run(app, [prompted(help_digit="0")], Caller().press("0", at=3.0).press("#", at=6.0))
    assert said(r) == [(0.0, PROMPT), (3.0, PROMPT)]
    assert result(app) == digits("")


async def test_empty_help_digit_makes_star_invalid(app: AppServer) -> None:
    r = await run(app, [prompted(help_digit=""), GOODBYE_ACTION], Caller().press("*", at=3.0))
    assert said(r)[:2] == [(0.0, PROMPT), (3.0, INVALID_1)]


async def test_digit_input_disabled_ignores_digits(app: AppServer) -> None:
    caller = Caller().press("1", at=1.0).press("2#", at=3.0).say("sales", at=4.0, seconds=0.5)
    r = await run(app, [prompted(digit_input_enabled=False)], caller)
    # the digit during the prompt did not barge in; the later ones were not input
    assert prompt_stops(r) == []
    assert said(r) == [(0.0, PROMPT)]
    assert result(app) == speech([("sales", 0.9)])


async def test_digit_input_disabled_leaves_timeout_running(app: AppServer) -> None:
    caller = Caller().press("1#", at=3.0)
    r = await run(app, [prompted(digit_input_enabled=False), GOODBYE_ACTION], caller)
    assert said(r)[1] == (7.0, TIMEOUT_1)
    assert app.bodies("/next") == []


# --- seconds_timeout 0 ---------------------------------------------------------------------


async def test_seconds_timeout_zero_nothing_is_no_input(app: AppServer) -> None:
    r = await run(app, [prompted(seconds_timeout=0), GOODBYE_ACTION], Caller())
    # no retry message: the next action runs straight after the prompt
    assert said(r) == [(0.0, PROMPT), (2.0, GOODBYE)]
    no_input(app, r, 2.0)


async def test_seconds_timeout_zero_returns_barged_in_digits(app: AppServer) -> None:
    action = prompted(seconds_timeout=0, digit_input_options={"digit_count": 4})
    r = await run(app, [action], Caller().press("1", at=1.0).press("2", at=3.0))
    assert result(app) == digits("1")
    assert action_end(r) == pytest.approx(1.0)


async def test_seconds_timeout_zero_returns_barged_in_speech(app: AppServer) -> None:
    action = get_input(prompt=play(LONG_PROMPT), seconds_timeout=0)
    caller = Caller().say("sales", at=1.0, seconds=0.5).say("support", at=1.8, seconds=0.5)
    r = await run(app, [action], caller)
    assert result(app) == speech([("sales", 0.9)])
    assert action_end(r) == pytest.approx(1.5)


async def test_seconds_timeout_zero_returns_cached_digits(app: AppServer) -> None:
    actions = [
        {"play": play(WELCOME)},
        prompted(seconds_timeout=0, digit_input_options={"digit_count": 3}),
    ]
    r = await run(app, actions, Caller().press("7", at=0.5).press("8", at=0.7))
    assert result(app) == digits("7")
    assert action_end(r) == pytest.approx(0.5)


async def test_seconds_timeout_zero_without_prompt_nothing(app: AppServer) -> None:
    r = await run(app, [get_input(seconds_timeout=0), GOODBYE_ACTION], Caller())
    assert said(r) == [(0.0, GOODBYE)]
    no_input(app, r, 0.0)


# --- hang-up ---------------------------------------------------------------------------------


@pytest.mark.parametrize("at", [1.0, 4.0, 7.5])  # prompt, waiting, timeout message
async def test_hang_up_during_get_input(app: AppServer, at: float) -> None:
    caller = Caller().press("1", at=3.0).hang_up(at=at)
    r = await run(app, [prompted(), GOODBYE_ACTION], caller, final_page="/final")
    assert app.bodies("/next") == []
    assert GOODBYE not in [text for _, text in said(r)]
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"
    assert final["this_call"]["call_state"] == "idle"
    assert r.summary.cause == "hung_up"
