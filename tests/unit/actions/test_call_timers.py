"""The call log's ``timers`` lines: which of an action's timers ran, from when to when.

They are what a call's picture (the web phone, docs/webphone.md) draws to show why an
action ended when it did, so they must say exactly what the machine did.
"""

from __future__ import annotations

from typing import Any

from callhook.devtools.harness import AppServer, Caller, CallRun, run_call
from callhook.media.simulated import PromptTimer

TIMER = PromptTimer(texts={"PIN": 2.0, "Speak": 1.0})


async def _call(app: AppServer, actions: list[dict[str, Any]], caller: Caller) -> CallRun:
    app.page("/start", actions)
    app.page("/next", [])
    return await run_call(app, caller.hang_up(at=120.0), timer=TIMER)


def timer_lines(run: CallRun) -> list[tuple[float, str]]:
    out = []
    for line in run.log.lines:
        _, offset, kind, *rest = line.split(" ", 3)
        if kind == "timers":
            out.append((round(float(offset.lstrip("+")), 3), rest[0] if rest else ""))
    return out


async def test_get_number_logs_initial_then_inter_digit_then_none(app: AppServer) -> None:
    action = {
        "get_number": {
            "prompt": {"play": {"play_list": [{"text_to_say": "PIN"}]}},
            "digit_count": 3,
            "seconds_timeout": 30,
            "milliseconds_initial_timeout": 5000,
            "milliseconds_inter_digit_timeout": 3000,
            "next_page": {"url": "/next"},
        }
    }
    caller = Caller().press("1", at=4.0).press("2", at=5.5).press("#", at=6.0)
    run = await _call(app, [action], caller)
    lines = timer_lines(run)
    # Nothing runs while the prompt plays; from its end (2.0 s) the overall and initial
    # timers; from the first digit the inter-digit timer instead of the initial one;
    # after the end digit the action is over and nothing runs.
    assert lines[0][1] == "overall 2.000..32.000; initial 2.000..7.000", lines
    assert lines[1][1].startswith("overall 2.000..32.000; inter-digit 4.0"), lines
    assert lines[2][1].startswith("overall 2.000..32.000; inter-digit 5.5"), lines
    assert lines[3][1] == "none", lines
    assert len(lines) == 4, lines
    assert app.bodies("/next")[0]["action_result"]["result"]["entered_number"] == "12"


async def test_an_expired_timer_is_the_last_one_logged_before_none(app: AppServer) -> None:
    speak = {"play": {"play_list": [{"text_to_say": "Speak"}]}}
    action = {
        "get_number": {
            "prompt": {"play": {"play_list": [{"text_to_say": "PIN"}]}},
            "milliseconds_initial_timeout": 4000,
            "seconds_timeout": 30,
            "on_digit_timeout_messages": [speak, speak],
            "next_page": {"url": "/next"},
        }
    }
    run = await _call(app, [action], Caller())
    lines = timer_lines(run)
    # initial expires at 6.0; the timeout message plays (no timer) for 1 s; then both
    # timers start again from its end, and expire at 11.0: the second message plays.
    assert lines[0] == (2.0, "overall 2.000..32.000; initial 2.000..6.000"), lines
    assert lines[1] == (6.0, "none"), lines
    assert lines[2] == (7.0, "overall 7.000..37.000; initial 7.000..11.000"), lines
    assert lines[-1] == (11.0, "none"), lines


async def test_sleep_and_record_name_their_timers(app: AppServer) -> None:
    actions: list[dict[str, Any]] = [
        {"sleep": {"seconds": 3}},
        {
            "record": {
                "milliseconds_max_silence": 2000,
                "seconds_max_duration": 60,
                "beep_on_start": False,
                "next_page": {"url": "/next"},
            }
        },
    ]
    run = await _call(app, actions, Caller().noise(at=4.0, seconds=1.0))
    kinds = [text for _, text in timer_lines(run)]
    assert kinds[0] == "sleep 0.000..3.000", kinds
    assert kinds[1] == "none", kinds
    assert kinds[2].startswith("initial silence 3.000..5.000"), kinds
    assert any(k.startswith("max duration") and "; silence " in k for k in kinds), kinds
    assert kinds[-1] == "none", kinds
