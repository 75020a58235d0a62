"""``play``, ``sleep`` and ``clear_input`` on a call, and the input they leave for later actions.

Cached barge-in input: docs/behaviour.md "Input between actions" and "play, sleep,
clear_input".
The input cache is observed only through what a following ``get_number`` or
``get_input`` sends to its next page.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from callhook.devtools.harness import AppServer, Caller, CallRun, run_call
from callhook.events import (
    PlayFile,
    SayText,
    StartPrompt,
    StartRecognition,
    StopPrompt,
    StopRecognition,
)
from callhook.media.simulated import PromptTimer

LONG = "This is a long menu prompt"
TIMER = PromptTimer(texts={LONG: 10.0, "one": 1.0, "two": 0.5, "after": 1.0})


def play(*texts: str, **props: Any) -> dict[str, Any]:
    return {"play": {"play_list": [{"text_to_say": t} for t in texts], **props}}


def get_number(digit_count: int = 1, **props: Any) -> dict[str, Any]:
    return {"get_number": {"next_page": {"url": "/n"}, "digit_count": digit_count, **props}}


def get_input(**props: Any) -> dict[str, Any]:
    return {"get_input": {"next_page": {"url": "/gi"}, **props}}


async def run(
    app: AppServer, actions: list[Any], caller: Caller, timer: PromptTimer = TIMER
) -> CallRun:
    app.page("/start", actions)
    app.page("/n", [])
    app.page("/gi", [])
    return await run_call(app, caller, timer=timer)


def entered(app: AppServer) -> str:
    (body,) = app.bodies("/n")
    number: str = body["action_result"]["result"]["entered_number"]
    return number


def speech_texts(app: AppServer) -> list[str]:
    (body,) = app.bodies("/gi")
    result = body["action_result"]["result"]
    assert result["input_type"] == "speech"
    return [p["alternatives"][0]["text"] for p in result["speech_input"]]


def prompt_times(r: CallRun) -> list[float]:
    return [t for t, _ in r.leg.commands(StartPrompt)]


# --- items ---------------------------------------------------------------------------------


async def test_items_play_in_order_as_one_prompt(app: AppServer) -> None:
    timer = PromptTimer(texts={"one": 1.0, "two": 0.5, "after": 1.0}, files={"a.wav": 2.0})
    items = [
        {"text_to_say": "one", "tts_voice": "en-GB-female"},
        {"file_to_play": "a.wav"},
        {"text_to_say": "two"},
    ]
    r = await run(app, [{"play": {"play_list": items}}, play("after")], Caller(), timer)
    (t0, first), (t1, second) = r.leg.commands(StartPrompt)
    assert first.items == (SayText("one", "en-GB-female"), PlayFile("a.wav"), SayText("two"))
    assert second.items == (SayText("after"),)
    # the next action starts when all three items have played: 1.0 + 2.0 + 0.5
    assert (t0, t1) == pytest.approx((0.0, 3.5))
    assert r.leg.commands(StopPrompt) == []  # nothing was cut short
    assert r.summary.cause == "completed"


# --- barge-in on digit -----------------------------------------------------------------------


async def test_digit_barges_in_and_is_cached_for_get_number(app: AppServer) -> None:
    r = await run(app, [play(LONG), get_number(1)], Caller().press("4", at=0.5))
    ((stop_at, stop),) = r.leg.commands(StopPrompt)
    assert stop_at == 0.5
    assert stop.prompt_id == r.leg.commands(StartPrompt)[0][1].prompt_id
    # the cached digit completes get_number at once
    assert entered(app) == "4"
    assert app.bodies("/n")[0]["this_call"]["seconds_call_duration"] == 0.5


async def test_cached_digit_prefixes_later_digits(app: AppServer) -> None:
    caller = Caller().press("4", at=0.5).press("2", at=1.5)
    await run(app, [play(LONG), get_number(2)], caller)
    assert entered(app) == "42"


async def test_without_barge_in_digits_are_ignored_and_not_cached(app: AppServer) -> None:
    caller = Caller().press("4", at=0.5).press("7", at=10.5)
    r = await run(app, [play(LONG, barge_in_on_digit=False), get_number(1)], caller)
    assert r.leg.commands(StopPrompt) == []  # played to its end at 10.0
    assert entered(app) == "7"
    assert app.bodies("/n")[0]["this_call"]["seconds_call_duration"] == 10.5


# --- barge-in on speech ----------------------------------------------------------------------


async def test_speech_barges_in_and_is_cached_for_get_input(app: AppServer) -> None:
    caller = Caller().say("sales", at=0.5)  # recognised at 0.9
    r = await run(app, [play(LONG, barge_in_on_speech=True), get_input()], caller)
    (body,) = app.bodies("/gi")
    assert body["action_result"] == {
        "action": "get_input",
        "result": {
            "input_type": "speech",
            "speech_input": [
                {
                    "alternatives": [{"text": "sales", "confidence": 0.9}],
                    "direction": "inbound",
                    "final": True,
                }
            ],
        },
    }
    # returned at once: at the moment of the barge-in
    assert body["this_call"]["seconds_call_duration"] == 0.9
    assert [t for t, _ in r.leg.commands(StopPrompt)] == pytest.approx([0.9])
    # the play ran its own recognition stream and stopped it
    assert r.leg.commands(StartRecognition)[0][0] == 0.0
    assert r.leg.commands(StopRecognition)[0][0] == pytest.approx(0.9)


async def test_speech_without_barge_in_on_speech_is_not_cached(app: AppServer) -> None:
    # get_input without retry messages: with nothing cached it times out and finishes
    caller = Caller().say("sales", at=0.5)
    actions = [
        play(LONG),
        get_input(milliseconds_initial_timeout=1000, on_input_timeout_messages=[]),
        play("after"),
    ]
    r = await run(app, actions, caller)
    assert r.leg.commands(StopPrompt) == []
    assert app.bodies("/gi") == []
    assert prompt_times(r) == pytest.approx([0.0, 11.0])


@pytest.mark.parametrize(
    ("said", "barges_in"),
    [
        ("hello there", False),
        ("operators", False),  # whole words only
        ("Operator please", True),  # case-insensitive, contained
        ("get me an OPERATOR", True),
    ],
)
async def test_barge_in_phrases_filter(app: AppServer, said: str, barges_in: bool) -> None:
    options = {"barge_in_phrases": ["operator"]}
    actions = [
        play(LONG, barge_in_on_speech=True, barge_in_on_speech_options=options),
        get_input(milliseconds_initial_timeout=500, on_input_timeout_messages=[]),
    ]
    r = await run(app, actions, Caller().say(said, at=1.0, seconds=1.0))
    if barges_in:
        assert [t for t, _ in r.leg.commands(StopPrompt)] == [2.0]
        assert speech_texts(app) == [said]
    else:
        assert r.leg.commands(StopPrompt) == []
        assert app.bodies("/gi") == []


async def test_barge_in_phrase_can_match_another_alternative(app: AppServer) -> None:
    options = {"barge_in_phrases": ["operator"]}
    caller = Caller().say("opera", at=1.0, seconds=1.0, alternatives=[("operator", 0.4)])
    actions = [
        play(LONG, barge_in_on_speech=True, barge_in_on_speech_options=options),
        get_input(),
    ]
    r = await run(app, actions, caller)
    assert [t for t, _ in r.leg.commands(StopPrompt)] == [2.0]
    assert speech_texts(app) == ["opera"]


async def test_only_the_matching_phrase_is_cached(app: AppServer) -> None:
    options = {"barge_in_phrases": ["operator"]}
    caller = Caller().say("hello", at=0.5, seconds=0.5).say("operator", at=2.0, seconds=0.5)
    actions = [
        play(LONG, barge_in_on_speech=True, barge_in_on_speech_options=options),
        get_input(),
    ]
    await run(app, actions, caller)
    assert speech_texts(app) == ["operator"]


# --- sleep ---------------------------------------------------------------------------------


async def test_sleep_takes_its_seconds_and_ignores_digits(app: AppServer) -> None:
    caller = Caller().press("3", at=1.0).press("4", at=3.0)
    actions = [{"sleep": {"seconds": 2.5}}, get_number(1, prompt=play("one")["play"])]
    r = await run(app, actions, caller)
    # get_number's prompt starts when the sleep is over
    assert prompt_times(r) == [2.5]
    assert entered(app) == "4"  # "3" was pressed during the sleep: discarded


async def test_sleep_leaves_the_cache_as_it_was(app: AppServer) -> None:
    caller = Caller().press("1", at=0.5).press("9", at=1.0)
    actions = [play(LONG), {"sleep": {"seconds": 2}}, get_number(2, valid_digits="0123456789")]
    caller.press("5", at=3.0)
    await run(app, actions, caller)
    assert entered(app) == "15"


# --- clear_input ---------------------------------------------------------------------------


async def test_clear_input_empties_cached_digits(app: AppServer) -> None:
    caller = Caller().press("1", at=0.5).press("2", at=1.0)
    await run(app, [play(LONG), {"clear_input": {}}, get_number(1)], caller)
    assert entered(app) == "2"


async def test_cached_digits_without_clear_input(app: AppServer) -> None:
    # the control for the test above: the same call without clear_input
    caller = Caller().press("1", at=0.5).press("2", at=1.0)
    await run(app, [play(LONG), get_number(1)], caller)
    assert entered(app) == "1"


async def test_clear_input_empties_cached_speech(app: AppServer) -> None:
    caller = Caller().say("sales", at=0.5).say("billing", at=2.0)
    actions = [play(LONG, barge_in_on_speech=True), {"clear_input": {}}, get_input()]
    await run(app, actions, caller)
    assert speech_texts(app) == ["billing"]


# --- text_is_private -----------------------------------------------------------------------


async def test_private_text_stays_out_of_every_log(
    app: AppServer, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Your PIN is 4321"
    items = [{"text_to_say": secret, "text_is_private": True}, {"text_to_say": "Goodbye"}]
    caplog.set_level(logging.DEBUG)
    r = await run(app, [{"play": {"play_list": items}}], Caller())
    # it is still spoken
    ((_, prompt),) = r.leg.commands(StartPrompt)
    assert prompt.items == (SayText(secret, None, True), SayText("Goodbye"))
    lines = "\n".join(r.log.lines)
    assert "Goodbye" in lines  # the public item is logged
    assert "<private text>" in lines
    assert "4321" not in lines
    assert r.log.path is not None
    text = r.log.path.read_text()
    assert "Goodbye" in text
    assert "4321" not in text
    assert "4321" not in caplog.text
    assert "Goodbye" in caplog.text


# --- a file that cannot be played ------------------------------------------------------------


async def test_missing_file_is_logged_and_the_list_goes_on(app: AppServer) -> None:
    timer = PromptTimer(texts={"after": 1.0}, files={"x.wav": None})
    actions = [{"play": {"play_list": [{"file_to_play": "x.wav"}]}}, play("after"), get_number(1)]
    r = await run(app, actions, Caller().press("6", at=2.0), timer)
    assert len(r.summary.errors) == 1
    assert "x.wav" in r.summary.errors[0]
    errors = [line for line in r.log.lines if " error " in line]
    assert len(errors) == 1
    assert "x.wav" in errors[0]
    # the next actions ran
    assert [c.items for _, c in r.leg.commands(StartPrompt)][1] == (SayText("after"),)
    assert entered(app) == "6"
    assert r.summary.cause == "completed"


async def test_missing_file_ends_the_prompt_where_it_is(app: AppServer) -> None:
    timer = PromptTimer(texts={"one": 1.0, "after": 1.0}, files={"x.wav": None})
    items = [{"text_to_say": "one"}, {"file_to_play": "x.wav"}, {"text_to_say": "two"}]
    r = await run(app, [{"play": {"play_list": items}}, play("after")], Caller(), timer)
    # "one" plays (1 s), then the prompt ends at x.wav ("two" is not played): the next
    # play starts at 1.0, and the missing file is logged
    assert prompt_times(r) == pytest.approx([0.0, 1.0])
    assert len(r.summary.errors) == 1
    assert "x.wav" in r.summary.errors[0]
