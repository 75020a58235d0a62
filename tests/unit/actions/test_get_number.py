"""``get_number``: every row of the input timing table and every default
(docs/behaviour.md, "get_number and get_input").

Each test runs a whole call on the virtual clock against a real local application
server and checks what the application received and what the caller heard, when.
Prompt durations are exact (``TIMER``), so every time below is exact:

* the prompt "Enter your PIN" starts at 0.0 (the call is answered at 0) and ends at 2.0;
* timers run from the end of the prompt (docs/behaviour.md "Timers");
* "no input" means ``/next`` is not requested and the following ``play "after"`` runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from callhook.devtools.harness import AppServer, Caller, CallRun, run_call
from callhook.events import SayText, StartPrompt, StopPrompt
from callhook.media.simulated import PromptTimer
from callhook.ports import CallInfo

PROMPT = "Enter your PIN"
AFTER = "after"
MENU = "Main menu"
# The default messages, as docs/behaviour.md words them.
T1 = "Sorry, I did not hear that."
T2 = "Please use your telephone keypad to enter a valid number."
I1 = "Sorry, that is not a valid number."
I2 = T2  # "the same second message"

TIMER = PromptTimer(
    texts={
        PROMPT: 2.0,
        AFTER: 1.0,
        MENU: 3.0,
        T1: 1.5,
        T2: 2.5,
        I1: 1.25,
        "Try again": 3.0,
        "Bad key": 1.0,
        "Still bad": 2.0,
        "Again 1": 1.0,
        "Again 2": 1.0,
        "Again 3": 1.0,
    }
)

#: The call always ends by then, so a script never runs out while an action waits.
HANG_UP_AT = 300.0


# --- helpers -----------------------------------------------------------------------------


def prompt(text: str = PROMPT, **props: Any) -> dict[str, Any]:
    return {"play_list": [{"text_to_say": text}], **props}


def get_number(**props: Any) -> dict[str, Any]:
    return {"get_number": {"next_page": {"url": "/next"}, **props}}


def play(text: str, **props: Any) -> dict[str, Any]:
    return {"play": prompt(text, **props)}


PLAY_AFTER = play(AFTER)


async def call(
    app: AppServer, actions: list[dict[str, Any]], caller: Caller | None = None, **kw: Any
) -> CallRun:
    """Run ``actions`` as the first page; ``/next`` answers an empty list (hang up)."""
    app.page("/start", actions)
    app.page("/next", [])
    app.page("/final", None)
    script = (caller or Caller()).hang_up(at=HANG_UP_AT)
    return await run_call(app, script, timer=TIMER, final_page="/final", **kw)


def timeline(run: CallRun) -> list[tuple[float, str]]:
    """(time, text) of every prompt or message started, in order."""
    out = []
    for t, command in run.leg.commands(StartPrompt):
        text = " ".join(i.text for i in command.items if isinstance(i, SayText))
        out.append((round(t, 6), text))
    return out


def stops(run: CallRun) -> list[tuple[float, int]]:
    """(time, prompt id) of every StopPrompt."""
    return [(round(t, 6), c.prompt_id) for t, c in run.leg.commands(StopPrompt)]


def prompt_ids(run: CallRun, text: str) -> list[int]:
    ids = []
    for _, command in run.leg.commands(StartPrompt):
        if any(isinstance(i, SayText) and i.text == text for i in command.items):
            ids.append(command.prompt_id)
    return ids


def numbers(app: AppServer, path: str = "/next") -> list[Any]:
    """entered_number of every request to ``path`` (checking the action name on the way)."""
    out = []
    for body in app.bodies(path):
        assert body["action_result"]["action"] == "get_number"
        out.append(body["action_result"]["result"]["entered_number"])
    return out


def request_times(run: CallRun, path: str) -> list[float]:
    """Media times (from the call log) at which ``path`` was requested."""
    times = []
    for line in run.log.lines:
        _, offset, kind, *rest = line.split(" ", 3)
        if kind == "page_request" and rest and rest[0].split()[1].endswith(path):
            times.append(float(offset.lstrip("+")))
    return times


def no_input_then_after(app: AppServer, run: CallRun, at: float) -> None:
    """The action finished with no input at ``at``: no /next, and the next action ran then."""
    assert app.bodies("/next") == []
    assert timeline(run)[-1] == (at, AFTER)
    assert run.summary.cause == "completed"


# --- completion: digit_count and end_digit (docs/behaviour.md, input between actions) -----


async def test_digit_count_digits_complete_with_exactly_those_digits(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), digit_count=4), PLAY_AFTER],
        Caller().press("12345", at=3.0),
    )
    assert numbers(app) == ["1234"]
    assert request_times(run, "/next") == [3.75]  # at the fourth digit, not later
    assert (3.75, AFTER) not in timeline(run)  # next_page's answer replaced the list


async def test_digit_count_one_completes_on_the_first_digit(app: AppServer) -> None:
    run = await call(app, [get_number(digit_count=1)], Caller().press("7", at=1.5))
    assert numbers(app) == ["7"]
    assert request_times(run, "/next") == [1.5]


async def test_digit_count_32_is_accepted_and_completes(app: AppServer) -> None:
    digits = "0123456789" * 3 + "12"
    await call(app, [get_number(digit_count=32)], Caller().press(digits, at=1.0, gap=0.1))
    assert numbers(app) == [digits]


async def test_end_digit_completes_and_is_not_included(app: AppServer) -> None:
    run = await call(
        app, [get_number(prompt=prompt(), end_digit="#"), PLAY_AFTER], Caller().press("123#", 3.0)
    )
    assert numbers(app) == ["123"]
    assert request_times(run, "/next") == [3.75]


async def test_default_end_digit_is_hash(app: AppServer) -> None:
    # digit_count 0 (default) needs an end digit; "#" is the default one.
    await call(app, [get_number(prompt=prompt())], Caller().press("98#", at=3.0))
    assert numbers(app) == ["98"]


async def test_unlimited_digit_count_takes_many_digits_until_the_end_digit(
    app: AppServer,
) -> None:
    digits = "31415926535897932384"
    await call(app, [get_number()], Caller().press(digits + "#", at=1.0, gap=0.5))
    assert numbers(app) == [digits]


async def test_end_digit_alone_gives_an_empty_number(app: AppServer) -> None:
    run = await call(app, [get_number(prompt=prompt()), PLAY_AFTER], Caller().press("#", at=3.0))
    assert numbers(app) == [""]
    assert request_times(run, "/next") == [3.0]


async def test_end_digit_before_digit_count_completes_early(app: AppServer) -> None:
    run = await call(
        app, [get_number(prompt=prompt(), digit_count=5)], Caller().press("12#", at=3.0)
    )
    assert numbers(app) == ["12"]
    assert request_times(run, "/next") == [3.5]


async def test_custom_end_digit_completes_and_is_not_included(app: AppServer) -> None:
    await call(app, [get_number(end_digit="D")], Caller().press("12D", at=1.0))
    assert numbers(app) == ["12"]


async def test_hash_is_invalid_when_another_end_digit_is_set(app: AppServer) -> None:
    run = await call(
        app, [get_number(prompt=prompt(), end_digit="D"), PLAY_AFTER], Caller().press("1#", 3.0)
    )
    assert app.bodies("/next") == []
    assert timeline(run)[1] == (3.25, I1)


async def test_no_end_digit_hash_is_invalid(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), digit_count=3, end_digit=""), PLAY_AFTER],
        Caller().press("1#", at=3.0),
    )
    assert app.bodies("/next") == []
    assert timeline(run)[1] == (3.25, I1)


async def test_no_end_digit_hash_may_be_a_valid_digit(app: AppServer) -> None:
    # "Any DTMF digit may be in valid_digits."
    await call(
        app,
        [get_number(digit_count=2, end_digit="", valid_digits="#5")],
        Caller().press("#5", at=1.0),
    )
    assert numbers(app) == ["#5"]


@pytest.mark.parametrize(
    "props",
    [
        {"digit_count": 0, "end_digit": ""},  # section 7 item 4
        {"end_digit": ""},  # digit_count defaults to 0
        {"help_digit": "#"},  # docs: help_digit equal to end_digit is rejected
        {"digit_count": 33},  # docs: digit_count is 0-32
        {"end_digit": "E"},  # not a DTMF digit
        {"valid_digits": "12x"},
        {"valid_digits": "abc"},  # the digit characters are 0123456789ABCD#*
        {"end_digit": "##"},  # one digit or empty
        {"help_digit": "**"},
        {"digit_count": -1},
        {"digit_count": "4"},  # an integer, not a string
    ],
)
async def test_invalid_get_number_is_an_application_error(
    app: AppServer, props: dict[str, Any]
) -> None:
    run = await call(app, [get_number(prompt=prompt(), **props)], Caller().press("1#", 1.0))
    assert run.summary.cause == "failed"
    assert timeline(run) == []  # nothing of the list ran
    assert app.bodies("/next") == []
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "failed"
    assert any("$.actions[0].get_number" in e for e in run.summary.errors) or any(
        "$.actions[0].get_number" in line for line in run.log.lines
    )


async def test_next_page_is_required(app: AppServer) -> None:
    run = await call(app, [{"get_number": {"prompt": prompt()}}])
    assert run.summary.cause == "failed"
    assert timeline(run) == []


# --- valid_digits (docs/reference.md) ------------------------------------------------------------


async def test_letters_are_invalid_by_default(app: AppServer) -> None:
    run = await call(app, [get_number(prompt=prompt()), PLAY_AFTER], Caller().press("A", 3.0))
    assert app.bodies("/next") == []
    assert timeline(run)[:2] == [(0.0, PROMPT), (3.0, I1)]


async def test_all_decimal_digits_are_valid_by_default(app: AppServer) -> None:
    run = await call(app, [get_number(), PLAY_AFTER], Caller().press("0123456789#", at=1.0))
    assert numbers(app) == ["0123456789"]
    assert I1 not in [text for _, text in timeline(run)]


async def test_custom_valid_digits_accepts_those_digits(app: AppServer) -> None:
    await call(app, [get_number(digit_count=4, valid_digits="12")], Caller().press("1221", at=1.0))
    assert numbers(app) == ["1221"]


async def test_custom_valid_digits_rejects_other_decimal_digits(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), valid_digits="12"), PLAY_AFTER],
        Caller().press("13", at=3.0),
    )
    assert app.bodies("/next") == []
    assert timeline(run)[1] == (3.25, I1)


async def test_letters_are_valid_when_listed(app: AppServer) -> None:
    await call(app, [get_number(valid_digits="ABCD")], Caller().press("DCBA#", at=1.0))
    assert numbers(app) == ["DCBA"]


async def test_help_and_end_digit_are_accepted_in_addition_to_valid_digits(
    app: AppServer,
) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), valid_digits="12"), PLAY_AFTER],
        Caller().press("1*", at=3.0).press("2#", at=6.0),
    )
    assert numbers(app) == ["2"]
    assert timeline(run) == [(0.0, PROMPT), (3.25, PROMPT)]  # "*" was help, not invalid


# --- invalid digits (docs/behaviour.md, "get_number and get_input") -----------------------


async def test_invalid_digits_play_the_default_messages_then_finish_after_the_last(
    app: AppServer,
) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt()), PLAY_AFTER],
        Caller().press("A", at=3.0).press("B", at=5.0),
    )
    # I1 plays 3.0-4.25, I2 plays 5.0-7.5; the next action runs when I2 has ended.
    assert timeline(run) == [(0.0, PROMPT), (3.0, I1), (5.0, I2), (7.5, AFTER)]
    no_input_then_after(app, run, 7.5)


async def test_digits_during_the_last_invalid_message_do_not_complete(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt()), PLAY_AFTER],
        Caller().press("A", at=3.0).press("B", at=5.0).press("1#", at=6.0),
    )
    no_input_then_after(app, run, 7.5)


async def test_digits_during_an_invalid_message_are_ignored(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt()), PLAY_AFTER],
        Caller().press("A", at=3.0).press("5#", at=3.5).press("7#", at=5.0),
    )
    assert numbers(app) == ["7"]
    assert stops(run) == []  # the message was not stopped by "5"


async def test_digits_before_an_invalid_digit_are_cleared(app: AppServer) -> None:
    await call(
        app,
        [get_number(prompt=prompt())],
        Caller().press("12A", at=3.0).press("3#", at=5.0),
    )
    assert numbers(app) == ["3"]


async def test_custom_invalid_messages_are_played_in_turn(app: AppServer) -> None:
    messages = [prompt("Bad key"), prompt("Still bad")]
    run = await call(
        app,
        [get_number(prompt=prompt(), on_invalid_digit_messages=messages), PLAY_AFTER],
        Caller().press("A", at=3.0).press("A", at=5.0),
    )
    assert timeline(run) == [(0.0, PROMPT), (3.0, "Bad key"), (5.0, "Still bad"), (7.0, AFTER)]
    no_input_then_after(app, run, 7.0)


async def test_a_single_invalid_message_finishes_after_it(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), on_invalid_digit_messages=[prompt("Bad key")]), PLAY_AFTER],
        Caller().press("A", at=3.0),
    )
    assert timeline(run) == [(0.0, PROMPT), (3.0, "Bad key"), (4.0, AFTER)]
    no_input_then_after(app, run, 4.0)


async def test_empty_invalid_message_list_finishes_at_the_first_invalid_digit(
    app: AppServer,
) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), on_invalid_digit_messages=[]), PLAY_AFTER],
        Caller().press("A", at=3.0),
    )
    assert timeline(run) == [(0.0, PROMPT), (3.0, AFTER)]
    no_input_then_after(app, run, 3.0)


async def test_invalid_message_with_barge_in_is_stopped_by_a_digit_that_counts(
    app: AppServer,
) -> None:
    messages = [prompt("Try again", barge_in_on_digit=True)]
    run = await call(
        app,
        [get_number(prompt=prompt(), on_invalid_digit_messages=messages), PLAY_AFTER],
        Caller().press("A", at=3.0).press("4", at=4.0).press("2#", at=5.0),
    )
    assert numbers(app) == ["42"]
    assert stops(run) == [(4.0, prompt_ids(run, "Try again")[0])]


async def test_invalid_and_timeout_messages_are_counted_separately(app: AppServer) -> None:
    run = await call(app, [get_number(prompt=prompt()), PLAY_AFTER], Caller().press("A", 3.0))
    # I1 3.0-4.25; initial timeout 5 s from its end: the FIRST timeout message at 9.25
    # (1.5 s), the second at 15.75 (2.5 s), then the next action at 18.25.
    assert timeline(run) == [(0.0, PROMPT), (3.0, I1), (9.25, T1), (15.75, T2), (18.25, AFTER)]
    no_input_then_after(app, run, 18.25)


# --- help digit (docs/behaviour.md, "get_number and get_input") ---------------------------


async def test_help_digit_repeats_the_prompt_and_clears_the_digits(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt())],
        Caller().press("12", at=2.5).press("*", at=3.0).press("34#", at=5.5),
    )
    assert timeline(run) == [(0.0, PROMPT), (3.0, PROMPT)]
    assert numbers(app) == ["34"]


async def test_help_digit_during_the_prompt_restarts_it(app: AppServer) -> None:
    run = await call(app, [get_number(prompt=prompt())], Caller().press("*", at=1.0))
    first = prompt_ids(run, PROMPT)[0]
    assert stops(run)[0] == (1.0, first)
    assert timeline(run)[:2] == [(0.0, PROMPT), (1.0, PROMPT)]


async def test_custom_help_digit(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), help_digit="A")],
        Caller().press("1A", at=3.0).press("*", at=4.0),
    )
    # "A" (not a valid digit) repeats the prompt; "*" barges in on it as an invalid digit.
    assert timeline(run)[:3] == [(0.0, PROMPT), (3.25, PROMPT), (4.0, I1)]


async def test_empty_help_digit_lets_star_be_a_valid_digit(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), help_digit="", valid_digits="0123456789*")],
        Caller().press("1*2#", at=3.0),
    )
    assert numbers(app) == ["1*2"]
    assert timeline(run) == [(0.0, PROMPT)]


async def test_empty_help_digit_disables_help_star_is_invalid(app: AppServer) -> None:
    run = await call(
        app, [get_number(prompt=prompt(), help_digit=""), PLAY_AFTER], Caller().press("*", 3.0)
    )
    assert timeline(run)[:2] == [(0.0, PROMPT), (3.0, I1)]
    assert app.bodies("/next") == []


@pytest.mark.parametrize(("press_at", "in_time"), [(9.999, True), (10.001, False)])
async def test_timers_after_help_run_from_the_end_of_the_replayed_prompt(
    app: AppServer, press_at: float, in_time: bool
) -> None:
    # "*" at 3.0 replays the prompt 3.0-5.0: the initial timeout (5 s) ends at 10.0,
    # not at 7.0 (from the first prompt's end).
    run = await call(
        app,
        [get_number(prompt=prompt()), PLAY_AFTER],
        Caller().press("*", at=3.0).press("1#", at=press_at),
    )
    if in_time:
        assert numbers(app) == ["1"]
        assert timeline(run) == [(0.0, PROMPT), (3.0, PROMPT)]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[2] == (10.0, T1)


@pytest.mark.parametrize(("press_at", "in_time"), [(7.999, True), (8.001, False)])
async def test_help_without_a_prompt_restarts_the_timers(
    app: AppServer, press_at: float, in_time: bool
) -> None:
    run = await call(
        app, [get_number(), PLAY_AFTER], Caller().press("*", at=3.0).press("1#", at=press_at)
    )
    if in_time:
        assert numbers(app) == ["1"]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[0] == (8.0, T1)


async def test_prompt_with_a_missing_file_ends_at_that_file(app: AppServer) -> None:
    items = [{"text_to_say": PROMPT}, {"file_to_play": "missing.wav"}]
    app.page("/start", [get_number(prompt={"play_list": items}), PLAY_AFTER])
    timer = PromptTimer(texts={PROMPT: 2.0, T1: 1.5}, files={"missing.wav": None})
    run = await run_call(app, Caller().hang_up(at=HANG_UP_AT), timer=timer)
    assert any("missing.wav" in e for e in run.summary.errors)
    # The text plays 0.0-2.0, the prompt ends at the missing file; initial timeout 5 s.
    assert timeline(run)[1] == (7.0, T1)


# --- timeouts (docs/reference.md defaults, docs/behaviour.md) -----------------


@pytest.mark.parametrize(
    ("props", "deadline"),
    [
        ({}, 7.0),  # initial = inter-digit default 5000 ms, from the prompt end (2.0)
        ({"milliseconds_inter_digit_timeout": 3000}, 5.0),  # initial = inter-digit value
        ({"milliseconds_inter_digit_timeout": 3000, "milliseconds_initial_timeout": 8000}, 10.0),
        ({"milliseconds_initial_timeout": 1000}, 3.0),
    ],
)
@pytest.mark.parametrize("early", [True, False])
async def test_initial_timeout(
    app: AppServer, props: dict[str, Any], deadline: float, early: bool
) -> None:
    press_at = deadline - 0.001 if early else deadline + 0.001
    run = await call(
        app,
        [get_number(prompt=prompt(), **props), PLAY_AFTER],
        Caller().press("1#", at=press_at, gap=0.1),
    )
    if early:
        assert numbers(app) == ["1"]
        assert [text for _, text in timeline(run)] == [PROMPT]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[1] == (deadline, T1)


@pytest.mark.parametrize(
    ("props", "deadline"),
    [
        ({}, 8.0),  # default 5000 ms from the digit at 3.0
        ({"milliseconds_inter_digit_timeout": 2000}, 5.0),
        # the initial timeout does not apply once a digit is in
        ({"milliseconds_initial_timeout": 1000}, 8.0),
    ],
)
@pytest.mark.parametrize("early", [True, False])
async def test_inter_digit_timeout(
    app: AppServer, props: dict[str, Any], deadline: float, early: bool
) -> None:
    hash_at = deadline - 0.001 if early else deadline + 0.001
    run = await call(
        app,
        [get_number(prompt=prompt(), **props), PLAY_AFTER],
        Caller().press("1", at=3.0).press("#", at=hash_at),
    )
    if early:
        assert numbers(app) == ["1"]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[1] == (deadline, T1)


async def test_inter_digit_timeout_runs_from_the_last_digit(app: AppServer) -> None:
    await call(
        app,
        [get_number(prompt=prompt())],
        Caller().press("1", at=3.0).press("2", at=7.0).press("3", at=11.0).press("#", 15.999),
    )
    assert numbers(app) == ["123"]


@pytest.mark.parametrize("early", [True, False])
async def test_default_seconds_timeout_is_30_from_the_prompt_end(
    app: AppServer, early: bool
) -> None:
    # A digit every 4 s keeps the inter-digit timer (5 s) from expiring; the overall
    # timeout ends at 2.0 + 30 = 32.0 all the same.
    hash_at = 31.999 if early else 32.001
    run = await call(
        app,
        [get_number(prompt=prompt()), PLAY_AFTER],
        Caller().press("1111111", at=6.0, gap=4.0).press("#", at=hash_at),
    )
    if early:
        assert numbers(app) == ["1111111"]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[1] == (32.0, T1)


@pytest.mark.parametrize("early", [True, False])
async def test_custom_seconds_timeout(app: AppServer, early: bool) -> None:
    props = {"seconds_timeout": 10, "milliseconds_inter_digit_timeout": 0}
    hash_at = 11.999 if early else 12.001
    run = await call(
        app,
        [get_number(prompt=prompt(), **props), PLAY_AFTER],
        Caller().press("1", at=11.0).press("#", at=hash_at),
    )
    if early:
        assert numbers(app) == ["1"]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[1] == (12.0, T1)


@pytest.mark.parametrize("disabled", [0, -1, -5000])
@pytest.mark.parametrize(("hash_at", "in_time"), [(21.999, True), (22.001, False)])
async def test_disabled_timers_leave_only_seconds_timeout(
    app: AppServer, disabled: int, hash_at: float, in_time: bool
) -> None:
    props = {
        "seconds_timeout": 20,
        "milliseconds_initial_timeout": disabled,
        "milliseconds_inter_digit_timeout": disabled,
    }
    # First digit 10 s after the prompt, the end digit 9.999 s later: only the
    # overall timeout (2.0 + 20 = 22.0) can end the entry.
    run = await call(
        app,
        [get_number(prompt=prompt(), **props), PLAY_AFTER],
        Caller().press("1", at=12.0).press("#", at=hash_at),
    )
    if in_time:
        assert numbers(app) == ["1"]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[1] == (22.0, T1)


async def test_disabled_initial_timeout_alone(app: AppServer) -> None:
    # initial off: the first digit may come late; the inter-digit default still applies.
    run = await call(
        app,
        [get_number(prompt=prompt(), milliseconds_initial_timeout=0), PLAY_AFTER],
        Caller().press("1", at=20.0).press("#", at=25.001),
    )
    assert app.bodies("/next") == []
    assert timeline(run)[1] == (25.0, T1)


async def test_negative_inter_digit_timeout_also_disables_the_default_initial_timeout(
    app: AppServer,
) -> None:
    # milliseconds_initial_timeout defaults to the value of milliseconds_inter_digit_timeout.
    await call(
        app,
        [get_number(prompt=prompt(), milliseconds_inter_digit_timeout=-1)],
        Caller().press("1", at=15.0).press("#", at=25.0),
    )
    assert numbers(app) == ["1"]


async def test_partial_digits_at_a_timeout_are_discarded(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), digit_count=4), PLAY_AFTER],
        Caller().press("12", at=3.0).press("3456", at=10.0),
    )
    # "2" at 3.25, inter-digit timeout at 8.25: T1 8.25-9.75, then a fresh entry.
    assert timeline(run)[1] == (8.25, T1)
    assert numbers(app) == ["3456"]


async def test_successive_timeouts_play_the_default_messages_then_finish(
    app: AppServer,
) -> None:
    run = await call(app, [get_number(prompt=prompt()), PLAY_AFTER])
    # T1 at 7.0 (ends 8.5), T2 5 s later at 13.5 (ends 16.0), then the next action.
    # The prompt is not replayed.
    assert timeline(run) == [(0.0, PROMPT), (7.0, T1), (13.5, T2), (16.0, AFTER)]
    no_input_then_after(app, run, 16.0)


async def test_all_custom_timeout_messages_are_played_before_finishing(app: AppServer) -> None:
    messages = [prompt("Again 1"), prompt("Again 2"), prompt("Again 3")]
    run = await call(
        app, [get_number(prompt=prompt(), on_digit_timeout_messages=messages), PLAY_AFTER]
    )
    assert timeline(run) == [
        (0.0, PROMPT),
        (7.0, "Again 1"),
        (13.0, "Again 2"),
        (19.0, "Again 3"),
        (20.0, AFTER),
    ]
    no_input_then_after(app, run, 20.0)


async def test_empty_timeout_message_list_finishes_at_the_first_timeout(app: AppServer) -> None:
    run = await call(app, [get_number(prompt=prompt(), on_digit_timeout_messages=[]), PLAY_AFTER])
    assert timeline(run) == [(0.0, PROMPT), (7.0, AFTER)]
    no_input_then_after(app, run, 7.0)


async def test_without_a_prompt_timers_run_from_the_start_of_the_action(app: AppServer) -> None:
    run = await call(app, [get_number(), PLAY_AFTER])
    assert timeline(run) == [(5.0, T1), (11.5, T2), (14.0, AFTER)]


@pytest.mark.parametrize(("press_at", "in_time"), [(13.499, True), (13.501, False)])
async def test_timers_restart_from_the_end_of_a_timeout_message(
    app: AppServer, press_at: float, in_time: bool
) -> None:
    run = await call(
        app, [get_number(prompt=prompt()), PLAY_AFTER], Caller().press("1#", at=press_at)
    )
    if in_time:
        assert numbers(app) == ["1"]
        assert timeline(run) == [(0.0, PROMPT), (7.0, T1)]  # no prompt replay
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[2] == (13.5, T2)


async def test_seconds_timeout_restarts_from_the_end_of_a_timeout_message(
    app: AppServer,
) -> None:
    props = {"seconds_timeout": 10, "milliseconds_inter_digit_timeout": 0}
    run = await call(app, [get_number(prompt=prompt(), **props), PLAY_AFTER])
    assert timeline(run) == [(0.0, PROMPT), (12.0, T1), (23.5, T2), (26.0, AFTER)]


async def test_timeout_messages_do_not_barge_in_by_default(app: AppServer) -> None:
    run = await call(app, [get_number(prompt=prompt()), PLAY_AFTER], Caller().press("5#", at=7.5))
    # "5#" during T1 is ignored: no completion, T1 not stopped, and T2 still comes 5 s
    # after T1's end (the ignored keys did not count as input).
    assert stops(run) == []
    assert timeline(run) == [(0.0, PROMPT), (7.0, T1), (13.5, T2), (16.0, AFTER)]
    no_input_then_after(app, run, 16.0)


async def test_custom_timeout_messages_do_not_barge_in_by_default(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), on_digit_timeout_messages=[prompt("Try again")]), PLAY_AFTER],
        Caller().press("5#", at=8.0),
    )
    assert stops(run) == []
    no_input_then_after(app, run, 10.0)


async def test_timeout_message_with_barge_in_is_stopped_by_a_digit_that_counts(
    app: AppServer,
) -> None:
    messages = [prompt("Try again", barge_in_on_digit=True)]
    run = await call(
        app,
        [get_number(prompt=prompt(), on_digit_timeout_messages=messages), PLAY_AFTER],
        Caller().press("4", at=8.0).press("2#", at=9.0),
    )
    assert stops(run) == [(8.0, prompt_ids(run, "Try again")[0])]
    assert numbers(app) == ["42"]


async def test_valid_input_does_not_reset_the_timeout_count(app: AppServer) -> None:
    run = await call(app, [get_number(prompt=prompt()), PLAY_AFTER], Caller().press("1", at=9.0))
    # T1 7.0-8.5; "1" at 9.0; inter-digit timeout at 14.0 plays the SECOND message.
    assert timeline(run) == [(0.0, PROMPT), (7.0, T1), (14.0, T2), (16.5, AFTER)]


# --- seconds_timeout 0 (docs/reference.md) ------------------------------------------------


async def test_seconds_timeout_0_with_nothing_finishes_after_the_prompt_without_messages(
    app: AppServer,
) -> None:
    run = await call(app, [get_number(prompt=prompt(), seconds_timeout=0), PLAY_AFTER])
    assert timeline(run) == [(0.0, PROMPT), (2.0, AFTER)]
    no_input_then_after(app, run, 2.0)


async def test_seconds_timeout_0_without_a_prompt_finishes_at_once(app: AppServer) -> None:
    run = await call(app, [get_number(seconds_timeout=0), PLAY_AFTER], Caller().press("1#", 0.5))
    assert timeline(run) == [(0.0, AFTER)]
    no_input_then_after(app, run, 0.0)


async def test_seconds_timeout_0_returns_barged_in_digits_even_fewer_than_digit_count(
    app: AppServer,
) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(), seconds_timeout=0, digit_count=4), PLAY_AFTER],
        Caller().press("12", at=1.0),
    )
    assert numbers(app) == ["1"]
    assert request_times(run, "/next") == [1.0]
    assert stops(run) == [(1.0, prompt_ids(run, PROMPT)[0])]


async def test_seconds_timeout_0_ignores_digits_during_a_prompt_without_barge_in(
    app: AppServer,
) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(barge_in_on_digit=False), seconds_timeout=0), PLAY_AFTER],
        Caller().press("1", at=1.0),
    )
    no_input_then_after(app, run, 2.0)


async def test_seconds_timeout_0_returns_cached_digits_at_once(app: AppServer) -> None:
    run = await call(
        app,
        [play(MENU), get_number(prompt=prompt(), seconds_timeout=0, digit_count=4), PLAY_AFTER],
        Caller().press("5", at=1.0),
    )
    assert numbers(app) == ["5"]
    assert request_times(run, "/next") == [1.0]
    assert timeline(run) == [(0.0, MENU)]  # the barge-in prompt is not played


async def test_seconds_timeout_0_returns_cached_digits_after_a_non_barge_in_prompt(
    app: AppServer,
) -> None:
    get = get_number(prompt=prompt(barge_in_on_digit=False), seconds_timeout=0, digit_count=4)
    run = await call(app, [play(MENU), get, PLAY_AFTER], Caller().press("5", at=1.0))
    assert numbers(app) == ["5"]
    assert timeline(run) == [(0.0, MENU), (1.0, PROMPT)]
    assert request_times(run, "/next") == [3.0]


# --- barge-in on the prompt ------------------------------------------------------------------


async def test_digit_barges_in_on_the_prompt_by_default(app: AppServer) -> None:
    run = await call(app, [get_number(prompt=prompt())], Caller().press("1#", at=1.0))
    assert stops(run) == [(1.0, prompt_ids(run, PROMPT)[0])]
    assert numbers(app) == ["1"]


async def test_digits_during_a_prompt_without_barge_in_are_ignored(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(barge_in_on_digit=False))],
        Caller().press("1", at=1.0).press("2#", at=3.0),
    )
    assert stops(run) == []
    assert numbers(app) == ["2"]


async def test_digits_during_a_prompt_without_barge_in_do_not_complete(app: AppServer) -> None:
    run = await call(
        app,
        [get_number(prompt=prompt(barge_in_on_digit=False)), PLAY_AFTER],
        Caller().press("1#", at=1.0),
    )
    assert app.bodies("/next") == []
    assert timeline(run)[1] == (7.0, T1)  # the initial timeout still runs from 2.0


@pytest.mark.parametrize(("hash_at", "in_time"), [(3.999, True), (4.001, False)])
async def test_timers_run_from_the_barge_in(app: AppServer, hash_at: float, in_time: bool) -> None:
    # Barge-in at 1.0 ends the prompt then: seconds_timeout 3 ends at 4.0, not 5.0.
    props = {"seconds_timeout": 3, "milliseconds_inter_digit_timeout": 0}
    run = await call(
        app,
        [get_number(prompt=prompt(), **props), PLAY_AFTER],
        Caller().press("1", at=1.0).press("#", at=hash_at),
    )
    if in_time:
        assert numbers(app) == ["1"]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[1] == (4.0, T1)


# --- cached barge-in digits from a preceding play (docs/behaviour.md, input between actions) ---


async def test_cached_digits_that_reach_digit_count_complete_at_once(app: AppServer) -> None:
    run = await call(
        app,
        [play(MENU), play(MENU), get_number(prompt=prompt(), digit_count=2), PLAY_AFTER],
        Caller().press("4", at=1.0).press("2", at=1.5),
    )
    assert numbers(app) == ["42"]
    assert request_times(run, "/next") == [1.5]
    assert timeline(run) == [(0.0, MENU), (1.0, MENU)]  # no get_number prompt


async def test_cached_digits_with_the_end_digit_complete_at_once(app: AppServer) -> None:
    run = await call(
        app,
        [play(MENU), play(MENU), get_number(prompt=prompt()), PLAY_AFTER],
        Caller().press("3", at=1.0).press("#", at=1.5),
    )
    assert numbers(app) == ["3"]
    assert request_times(run, "/next") == [1.5]
    assert timeline(run) == [(0.0, MENU), (1.0, MENU)]


async def test_cached_end_digit_alone_completes_with_an_empty_number(app: AppServer) -> None:
    run = await call(
        app, [play(MENU), get_number(prompt=prompt()), PLAY_AFTER], Caller().press("#", at=1.0)
    )
    assert numbers(app) == [""]
    assert request_times(run, "/next") == [1.0]


async def test_cached_digits_complete_at_once_even_with_a_non_barge_in_prompt(
    app: AppServer,
) -> None:
    run = await call(
        app,
        [play(MENU), get_number(prompt=prompt(barge_in_on_digit=False), digit_count=1)],
        Caller().press("7", at=1.0),
    )
    assert numbers(app) == ["7"]
    assert request_times(run, "/next") == [1.0]
    assert timeline(run) == [(0.0, MENU)]


async def test_cached_digits_prefix_later_digits_and_skip_a_barge_in_prompt(
    app: AppServer,
) -> None:
    run = await call(
        app,
        [play(MENU), get_number(prompt=prompt(), digit_count=3)],
        Caller().press("4", at=1.0).press("56", at=2.0),
    )
    assert numbers(app) == ["456"]
    assert timeline(run) == [(0.0, MENU)]


async def test_cached_digits_prefix_later_digits_after_a_non_barge_in_prompt(
    app: AppServer,
) -> None:
    run = await call(
        app,
        [play(MENU), get_number(prompt=prompt(barge_in_on_digit=False), digit_count=3)],
        Caller().press("4", at=1.0).press("9", at=2.0).press("56", at=3.5),
    )
    # The prompt plays 1.0-3.0; "9" during it is ignored.
    assert timeline(run) == [(0.0, MENU), (1.0, PROMPT)]
    assert numbers(app) == ["456"]


@pytest.mark.parametrize(("hash_at", "in_time"), [(5.999, True), (6.001, False)])
async def test_cached_digits_count_as_pressed_at_the_start_of_the_action(
    app: AppServer, hash_at: float, in_time: bool
) -> None:
    run = await call(
        app,
        [play(MENU), get_number(prompt=prompt()), PLAY_AFTER],
        Caller().press("4", at=1.0).press("#", at=hash_at),
    )
    # get_number starts at 1.0 with "4" in; the inter-digit timeout ends at 6.0.
    if in_time:
        assert numbers(app) == ["4"]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[1] == (6.0, T1)


@pytest.mark.parametrize(("hash_at", "in_time"), [(7.999, True), (8.001, False)])
async def test_cached_prefix_timers_run_from_the_end_of_a_non_barge_in_prompt(
    app: AppServer, hash_at: float, in_time: bool
) -> None:
    # "4" cached at 1.0; the prompt plays 1.0-3.0; the inter-digit timeout ends at 8.0.
    run = await call(
        app,
        [play(MENU), get_number(prompt=prompt(barge_in_on_digit=False)), PLAY_AFTER],
        Caller().press("4", at=1.0).press("#", at=hash_at),
    )
    if in_time:
        assert numbers(app) == ["4"]
    else:
        assert app.bodies("/next") == []
        assert timeline(run)[2] == (8.0, T1)


async def test_cached_speech_does_not_complete_get_number(app: AppServer) -> None:
    # A phrase that barged in on the play is no input for get_number (digits only).
    run = await call(
        app,
        [play(MENU, barge_in_on_speech=True), get_number(prompt=prompt())],
        Caller().say("sales", at=0.5).press("1#", at=3.5),
    )
    assert timeline(run) == [(0.0, MENU), (0.9, PROMPT)]
    assert numbers(app) == ["1"]


async def test_cached_invalid_digit_plays_the_invalid_message(app: AppServer) -> None:
    run = await call(
        app, [play(MENU), get_number(prompt=prompt()), PLAY_AFTER], Caller().press("A", at=1.0)
    )
    assert timeline(run)[:2] == [(0.0, MENU), (1.0, I1)]
    assert app.bodies("/next") == []


async def test_cached_help_digit_repeats_the_prompt(app: AppServer) -> None:
    # Cached digits act as they would live: the help digit plays the prompt, even one
    # with barge-in (docs/behaviour.md "Cached digits").
    run = await call(
        app, [play(MENU), get_number(prompt=prompt())], Caller().press("*", 1.0).press("5#", 4.0)
    )
    assert timeline(run) == [(0.0, MENU), (1.0, PROMPT)]
    assert numbers(app) == ["5"]


@pytest.mark.parametrize(
    "between",
    [{"sleep": {"seconds": 3}}, play(MENU, barge_in_on_digit=False)],
    ids=["sleep", "play-without-barge-in"],
)
async def test_digits_discarded_between_leave_the_cached_digits_as_they_were(
    app: AppServer, between: dict[str, Any]
) -> None:
    # "4" is cached at 1.0; "9" at 2.0 falls into the sleep / non-barge-in play (1.0-4.0).
    run = await call(
        app,
        [play(MENU), between, get_number(prompt=prompt(), digit_count=2)],
        Caller().press("4", at=1.0).press("9", at=2.0).press("5", at=5.0),
    )
    assert numbers(app) == ["45"]
    assert PROMPT not in [text for _, text in timeline(run)]


async def test_clear_input_after_the_play_discards_cached_digits(app: AppServer) -> None:
    run = await call(
        app,
        [play(MENU), {"clear_input": {}}, get_number(prompt=prompt(), digit_count=1)],
        Caller().press("7", at=1.0).press("8", at=4.0),
    )
    assert timeline(run) == [(0.0, MENU), (1.0, PROMPT)]
    assert numbers(app) == ["8"]


async def test_clear_input_after_the_play_avoids_the_prefix(app: AppServer) -> None:
    await call(
        app,
        [play(MENU), {"clear_input": {}}, get_number(prompt=prompt(), digit_count=2)],
        Caller().press("7", at=1.0).press("89", at=4.0),
    )
    assert numbers(app) == ["89"]


async def test_digits_during_a_play_without_barge_in_are_not_cached(app: AppServer) -> None:
    run = await call(
        app,
        [play(MENU, barge_in_on_digit=False), get_number(prompt=prompt(), digit_count=1)],
        Caller().press("7", at=1.0).press("8", at=5.5),
    )
    assert timeline(run) == [(0.0, MENU), (3.0, PROMPT)]
    assert numbers(app) == ["8"]


# --- type-ahead (docs/behaviour.md "Type-ahead") ---------------------------------------------


async def test_digits_typed_ahead_while_next_page_is_fetched_are_cached(app: AppServer) -> None:
    # "1" completes the first get_number at 2.5 and /next is requested at that moment;
    # "2" is pressed at the same instant, while the page is fetched (media time stands
    # still during a fetch), so it waits in the input buffer for the next get_number.
    app.page("/start", [get_number(digit_count=1)])
    app.page(
        "/next",
        [
            {"get_number": {"next_page": {"url": "/next2"}, "digit_count": 1, "prompt": prompt()}},
            PLAY_AFTER,
        ],
    )
    app.page("/next2", [])
    run = await run_call(
        app, Caller().press("12", at=2.5, gap=0.0).hang_up(at=HANG_UP_AT), timer=TIMER
    )
    assert numbers(app, "/next") == ["1"]
    assert numbers(app, "/next2") == ["2"]
    assert request_times(run, "/next2") == [2.5]
    assert timeline(run) == []  # the barge-in prompt is not played: the caller typed ahead
    assert any("typed ahead" in line for line in run.log.lines)


# --- hang-up ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "hang_up_at"),
    [
        ("", 1.0),  # during the prompt
        ("12", 4.0),  # waiting, digits entered
        ("", 7.5),  # during a timeout message
        ("A", 3.5),  # during an invalid message
    ],
    ids=["prompt", "waiting", "timeout-message", "invalid-message"],
)
async def test_hang_up_during_get_number(app: AppServer, keys: str, hang_up_at: float) -> None:
    caller = Caller().press(keys, at=3.0).hang_up(at=hang_up_at)
    run = await call(app, [get_number(prompt=prompt(), digit_count=4), PLAY_AFTER], caller)
    assert app.bodies("/next") == []
    assert AFTER not in [text for _, text in timeline(run)]
    assert run.summary.cause == "hung_up"
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"
    assert final["this_call"]["call_raw_cause"] == "BYE"
    assert final["this_call"]["call_state"] == "idle"


# --- the request to next_page (docs/reference.md "Page requests", docs/behaviour.md "Pages") ---


async def test_next_page_request_body_and_signature(app: AppServer) -> None:
    app.page("/start", {"token": "tok-1", "actions": [get_number(prompt=prompt())]})
    app.page("/next", [])
    info = CallInfo("call-77", "in", "sip:bob@127.0.0.1", "sip:pin@127.0.0.1", "pin")
    run = await run_call(
        app,
        Caller().press("12#", at=3.0).hang_up(at=HANG_UP_AT),
        timer=TIMER,
        application_parameters="p=1",
        info=info,
    )
    start = app.bodies("/start")[0]
    instance = start["application_instance_id"]
    assert instance and instance == run.summary.instance_id
    assert app.bodies("/next") == [
        {
            "application_instance_id": instance,
            "token": "tok-1",
            "log_filename": start["log_filename"],
            "is_notification": False,
            "this_call": {
                "call_id": "call-77",
                "call_direction": "in",
                "call_from": "sip:bob@127.0.0.1",
                "call_to": "sip:pin@127.0.0.1",
                "call_target": "pin",
                "call_divert": "",
                "call_attestation": "",
                "call_state": "answered",
                "seconds_call_duration": 3.5,
                "application_parameters": "p=1",
            },
            "action_result": {"action": "get_number", "result": {"entered_number": "12"}},
        }
    ]
    assert start["log_filename"].endswith(f"{instance}.log")
    assert start["token"] is None
    (request,) = [r for r in app.requests if r.path == "/next"]
    assert request.method == "POST"
    assert request.headers["Content-Type"].startswith("application/json")
    assert request.signature_ok(app.secret)
    assert not request.signature_ok("another-secret")
