"""The confidence floor (``[speech] min_confidence``): an answer to word hints less sure
than the floor is not understood, and the caller is asked again with the action's own
messages (``get_input``: the next timeout message; ``run_speech_menu``: the next invalid
input message). On the virtual clock, against a real local application server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from callhook.actions.machine import ActionContext
from callhook.actions.menu import SPEECH_MENU_INVALID_MESSAGES
from callhook.config.settings import load
from callhook.config.values import ConfigError
from callhook.devtools.harness import AppServer, Caller, CallRun, run_call
from callhook.events import SayText, StartPrompt, StartRecognition
from callhook.media.simulated import PromptTimer
from tests.unit.actions.test_get_input import TIMEOUT_1, speech

PROMPT = "Say sales or support"
HINTS = {"word_hints": [{"words": ["sales", "support"]}]}
SI1 = SPEECH_MENU_INVALID_MESSAGES[0]
TIMER = PromptTimer(texts={PROMPT: 2.0, TIMEOUT_1: 1.0, SI1: 1.25, "after": 1.0})


def prompt() -> dict[str, Any]:
    return {"play_list": [{"text_to_say": PROMPT}]}


async def call(
    app: AppServer, action: dict[str, Any], caller: Caller, floor: float = 0.5
) -> CallRun:
    app.page("/start", [action, {"play": {"play_list": [{"text_to_say": "after"}]}}])
    for page in ("/next", "/sales", "/support"):
        app.page(page, [])
    app.page("/final", None)
    ctx = ActionContext(min_confidence=floor)
    script = caller.hang_up(at=60.0)
    return await run_call(app, script, timer=TIMER, final_page="/final", ctx=ctx)


def said(run: CallRun) -> list[tuple[float, str]]:
    return [
        (round(t, 3), " ".join(i.text for i in c.items if isinstance(i, SayText)))
        for t, c in run.leg.commands(StartPrompt)
    ]


def get_input(**options: Any) -> dict[str, Any]:
    return {
        "get_input": {
            "prompt": prompt(),
            "next_page": {"url": "/next"},
            "speech_input_mode": "auto",
            "speech_recognition_options": options,
        }
    }


async def test_get_input_asks_again_when_the_answer_is_under_the_floor(app: AppServer) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5, confidence=0.3)
    caller = caller.say("support", at=6.0, seconds=0.5, confidence=0.8)
    run = await call(app, get_input(**HINTS), caller)
    # Not understood: the first timeout message at once (not after the initial timeout),
    # then the answer the floor lets through.
    assert said(run)[:2] == [(0.0, PROMPT), (3.5, TIMEOUT_1)]
    (body,) = app.bodies("/next")
    assert body["action_result"] == speech([("support", 0.8)])
    assert "speech_unsure 'sales' (confidence 0.30)" in "\n".join(run.log.lines)
    # The floor goes with the recognition stream (the call's leg applies it).
    starts = [c.options for _, c in run.leg.commands(StartRecognition)]
    assert starts and all(o.min_confidence == 0.5 for o in starts)


async def test_an_answer_at_the_floor_or_free_speech_is_taken(app: AppServer) -> None:
    await call(app, get_input(**HINTS), Caller().say("sales", at=3.0, seconds=0.5, confidence=0.5))
    assert app.bodies("/next")[0]["action_result"] == speech([("sales", 0.5)])
    app.requests.clear()
    # Without hints (free transcription) nothing is held back: the application judges.
    await call(app, get_input(), Caller().say("hello there", at=3.0, seconds=0.5, confidence=0.1))
    assert app.bodies("/next")[0]["action_result"] == speech([("hello there", 0.1)])


async def test_with_no_floor_every_answer_is_taken(app: AppServer) -> None:
    caller = Caller().say("sales", at=3.0, seconds=0.5, confidence=0.05)
    await call(app, get_input(**HINTS), caller, floor=0.0)
    assert app.bodies("/next")[0]["action_result"] == speech([("sales", 0.05)])


async def test_unsure_answers_use_up_the_timeout_messages(app: AppServer) -> None:
    caller = Caller()
    for at in (3.0, 6.0, 11.0):
        caller = caller.say("sales", at=at, seconds=0.5, confidence=0.2)
    run = await call(app, get_input(**HINTS), caller)
    assert not app.bodies("/next")  # no input: the list goes on
    assert said(run)[-1][1] == "after"


async def test_a_speech_menu_takes_an_unsure_answer_as_invalid_input(app: AppServer) -> None:
    menu = {
        "run_speech_menu": {
            "prompt": prompt(),
            "menu_options": [
                {"words": ["sales"], "next_page": {"url": "/sales"}},
                {"words": ["support"], "next_page": {"url": "/support"}},
            ],
        }
    }
    caller = Caller().say("support", at=3.0, seconds=0.5, confidence=0.3)
    caller = caller.say("sales", at=9.0, seconds=0.5, confidence=0.9)
    run = await call(app, menu, caller)
    # "Sorry, I did not recognise that.", the prompt again, then the sure answer.
    assert said(run)[:3] == [(0.0, PROMPT), (3.5, SI1), (4.75, PROMPT)]
    assert not app.bodies("/support")
    (body,) = app.bodies("/sales")
    assert body["action_result"]["result"]["selected_input"] == "sales"


def test_the_floor_is_read_from_the_config(tmp_path: Path) -> None:
    path = tmp_path / "callhook.toml"
    path.write_text(
        "[speech]\nmin_confidence = 0.4\n"
        '[apps.menus]\nfirst_page = "http://127.0.0.1:1/start"\nmin_confidence = 0.65\n'
        '[apps.free]\nfirst_page = "http://127.0.0.1:1/start"\n'
    )
    settings = load(path)
    assert settings.speech.min_confidence == 0.4
    assert settings.apps["menus"].min_confidence == 0.65
    assert settings.apps["free"].min_confidence is None  # [speech]'s
    for bad in ("[speech]\nmin_confidence = 1.5\n", "[speech]\nmin_confidence = 'high'\n"):
        path.write_text(bad)
        with pytest.raises(ConfigError, match="min_confidence"):
            load(path)
