"""``run_menu`` and ``run_speech_menu``: every rule of actions/menu.py on the virtual clock.

Each test runs a whole call against a real local application server, with
exact prompt durations (``TIMER``), and checks which page the application got,
with what result, and what the caller heard, when:

* the prompt "Main menu" starts at 0.0 and ends at 2.0;
* timeouts run from the end of the prompt or message;
* "no input" means no option's page is requested and ``play "after"`` runs.
"""

from __future__ import annotations

from typing import Any

from callhook.actions.menu import (
    RUN_MENU_INVALID_MESSAGES,
    RUN_MENU_TIMEOUT_MESSAGES,
    SPEECH_MENU_INVALID_MESSAGES,
    SPEECH_MENU_TIMEOUT_MESSAGES,
)
from callhook.devtools.harness import AppServer, Caller, CallRun, run_call
from callhook.events import SayText, StartPrompt, StartRecognition, StopPrompt
from callhook.media.simulated import PromptTimer

MENU = "Main menu"
AFTER = "after"
T1, T2 = RUN_MENU_TIMEOUT_MESSAGES
I1, I2 = RUN_MENU_INVALID_MESSAGES
ST1, ST2 = SPEECH_MENU_TIMEOUT_MESSAGES
SI1, SI2 = SPEECH_MENU_INVALID_MESSAGES

TIMER = PromptTimer(
    texts={
        MENU: 2.0,
        AFTER: 1.0,
        "before": 1.0,
        T1: 1.5,
        T2: 2.5,
        I1: 1.25,
        I2: 2.0,
        ST1: 1.5,
        ST2: 2.5,
        SI1: 1.25,
        SI2: 2.0,
        "Nope": 1.0,
    }
)
HANG_UP_AT = 300.0


def play(text: str, **props: Any) -> dict[str, Any]:
    return {"play": {"play_list": [{"text_to_say": text}], **props}}


PLAY_AFTER = play(AFTER)
OPTIONS = [
    {"digit": "1", "next_page": {"url": "/sales"}},
    {"digit": "2", "next_page": {"url": "/support"}},
]
SPEECH_OPTIONS = [
    {"words": ["sales"], "digit": "1", "next_page": {"url": "/sales"}},
    {"words": ["support", "technical support"], "digit": "2", "next_page": {"url": "/support"}},
    {"words": ["opening hours"], "next_page": {"url": "/hours"}},
]


def run_menu(**props: Any) -> dict[str, Any]:
    return {"run_menu": {"prompt": play(MENU), "menu_options": OPTIONS, **props}}


def speech_menu(**props: Any) -> dict[str, Any]:
    return {"run_speech_menu": {"prompt": play(MENU), "menu_options": SPEECH_OPTIONS, **props}}


async def call(
    app: AppServer, actions: list[dict[str, Any]], caller: Caller | None = None
) -> CallRun:
    app.page("/start", actions)
    for page in ("/sales", "/support", "/hours"):
        app.page(page, [])
    app.page("/final", None)
    script = (caller or Caller()).hang_up(at=HANG_UP_AT)
    return await run_call(app, script, timer=TIMER, final_page="/final")


def timeline(run: CallRun) -> list[tuple[float, str]]:
    out = []
    for t, command in run.leg.commands(StartPrompt):
        text = " ".join(i.text for i in command.items if isinstance(i, SayText))
        out.append((round(t, 6), text))
    return out


def stops(run: CallRun) -> list[float]:
    return [round(t, 6) for t, _ in run.leg.commands(StopPrompt)]


def request_times(run: CallRun, path: str) -> list[float]:
    times = []
    for line in run.log.lines:
        _, offset, kind, *rest = line.split(" ", 3)
        if kind == "page_request" and rest and rest[0].split()[1].endswith(path):
            times.append(float(offset.lstrip("+")))
    return times


def result(app: AppServer, path: str) -> dict[str, Any]:
    (body,) = app.bodies(path)
    action_result: dict[str, Any] = body["action_result"]
    return action_result


def no_option_chosen(app: AppServer) -> None:
    for page in ("/sales", "/support", "/hours"):
        assert app.bodies(page) == [], page


# --- run_menu ----------------------------------------------------------------------------


async def test_an_options_digit_requests_that_options_page_with_the_digit(app: AppServer) -> None:
    run = await call(app, [run_menu(), PLAY_AFTER], Caller().press("2", at=3.0))
    assert result(app, "/support") == {"action": "run_menu", "result": {"selected_digit": "2"}}
    assert app.bodies("/sales") == []
    assert request_times(run, "/support") == [3.0]
    assert (3.0, AFTER) not in timeline(run)  # the option's page answer replaced the list


async def test_a_digit_barges_in_on_the_prompt_by_default(app: AppServer) -> None:
    run = await call(app, [run_menu()], Caller().press("1", at=0.5))
    assert result(app, "/sales")["result"] == {"selected_digit": "1"}
    assert stops(run) == [0.5]


async def test_without_barge_in_a_digit_during_the_prompt_is_ignored(app: AppServer) -> None:
    actions = [run_menu(prompt=play(MENU, barge_in_on_digit=False)), PLAY_AFTER]
    run = await call(app, actions, Caller().press("1", at=0.5).press("2", at=2.5))
    assert result(app, "/support")["result"] == {"selected_digit": "2"}
    assert app.bodies("/sales") == []
    assert request_times(run, "/support") == [2.5]


async def test_timeouts_play_each_message_then_the_prompt_again_then_finish(
    app: AppServer,
) -> None:
    # seconds_digit_timeout defaults to 5, from the end of the prompt or message.
    run = await call(app, [run_menu(), PLAY_AFTER])
    assert timeline(run) == [
        (0.0, MENU),
        (7.0, T1),  # 2.0 + 5
        (8.5, MENU),  # the instructions again
        (15.5, T2),  # 10.5 + 5
        (18.0, AFTER),  # the last message ends the action: no input
    ]
    no_option_chosen(app)


async def test_seconds_digit_timeout_sets_the_wait(app: AppServer) -> None:
    run = await call(app, [run_menu(seconds_digit_timeout=2), PLAY_AFTER])
    assert timeline(run)[:2] == [(0.0, MENU), (4.0, T1)]


async def test_an_invalid_digit_plays_the_invalid_messages_in_turn(app: AppServer) -> None:
    caller = Caller().press("7", at=3.0).press("9", at=7.0)
    run = await call(app, [run_menu(), PLAY_AFTER], caller)
    assert timeline(run) == [
        (0.0, MENU),
        (3.0, I1),
        (4.25, MENU),
        (7.0, I2),  # the prompt ended at 6.25; the second invalid digit at 7.0
        (9.0, AFTER),
    ]
    no_option_chosen(app)


async def test_a_valid_digit_after_a_message_still_selects(app: AppServer) -> None:
    run = await call(app, [run_menu()], Caller().press("5", at=3.0).press("1", at=5.0))
    assert timeline(run)[:3] == [(0.0, MENU), (3.0, I1), (4.25, MENU)]
    assert request_times(run, "/sales") == [5.0]  # barged in on the repeated prompt


async def test_messages_do_not_take_barge_in_by_default(app: AppServer) -> None:
    # The 1 during the invalid message (3.0-4.25) is ignored; the one after it counts.
    run = await call(
        app,
        [run_menu(prompt=play(MENU, barge_in_on_digit=False))],
        Caller().press("5", at=3.0).press("1", at=3.5).press("2", at=7.0),
    )
    assert app.bodies("/sales") == []
    assert request_times(run, "/support") == [7.0]


async def test_the_help_digit_repeats_the_prompt_and_restarts_the_timeout(
    app: AppServer,
) -> None:
    run = await call(app, [run_menu(), PLAY_AFTER], Caller().press("*", at=3.0))
    assert timeline(run)[:3] == [(0.0, MENU), (3.0, MENU), (10.0, T1)]


async def test_an_empty_help_digit_makes_star_invalid(app: AppServer) -> None:
    run = await call(app, [run_menu(help_digit=""), PLAY_AFTER], Caller().press("*", at=3.0))
    assert timeline(run)[:2] == [(0.0, MENU), (3.0, I1)]


async def test_custom_keyed_messages_and_an_empty_list(app: AppServer) -> None:
    actions = [
        run_menu(on_invalid_digit_messages=[play("Nope")], on_digit_timeout_messages=[]),
        PLAY_AFTER,
    ]
    run = await call(app, actions, Caller().press("9", at=3.0))
    # "Nope" is the only invalid message: the action ends after it. Then, with no
    # timeout messages, the first timeout would have ended it.
    assert timeline(run) == [(0.0, MENU), (3.0, "Nope"), (4.0, AFTER)]


async def test_no_timeout_messages_the_first_timeout_finishes(app: AppServer) -> None:
    run = await call(app, [run_menu(on_digit_timeout_messages=[]), PLAY_AFTER])
    assert timeline(run) == [(0.0, MENU), (7.0, AFTER)]


async def test_without_a_prompt_the_timeout_runs_from_the_start(app: AppServer) -> None:
    run = await call(app, [{"run_menu": {"menu_options": OPTIONS}}, PLAY_AFTER])
    assert timeline(run)[:2] == [(5.0, T1), (11.5, T2)]  # no prompt to repeat between


async def test_type_ahead_picks_the_option_and_leaves_the_rest_cached(app: AppServer) -> None:
    # "21" pressed during a barge-in play: 2 picks support at once (no prompt), and
    # the 1 is still cached for the get_number of support's page.
    app.page("/start", [play("before"), run_menu()])
    app.page(
        "/support",
        [{"get_number": {"digit_count": 1, "next_page": {"url": "/number"}}}],
    )
    app.page("/number", [])
    app.page("/final", None)
    caller = Caller().press("21", at=0.2, gap=0.1).hang_up(at=HANG_UP_AT)
    run = await run_call(app, caller, timer=TIMER, final_page="/final")
    assert result(app, "/support")["result"] == {"selected_digit": "2"}
    assert result(app, "/number")["result"] == {"entered_number": "1"}
    assert [text for _, text in timeline(run)] == ["before"]


async def test_a_cached_invalid_digit_plays_the_invalid_message(app: AppServer) -> None:
    app.page("/start", [play("before"), run_menu()])
    app.page("/final", None)
    run = await run_call(
        app, Caller().press("9", at=0.5).hang_up(at=20.0), timer=TIMER, final_page="/final"
    )
    assert timeline(run)[:3] == [(0.0, "before"), (0.5, I1), (1.75, MENU)]


async def test_a_hang_up_during_the_menu_requests_no_option(app: AppServer) -> None:
    app.page("/start", [run_menu()])
    app.page("/final", None)
    run = await run_call(app, Caller().hang_up(at=1.0), timer=TIMER, final_page="/final")
    no_option_chosen(app)
    assert run.summary.cause == "hung_up"


# --- run_speech_menu ---------------------------------------------------------------------


async def test_a_spoken_option_requests_its_page_with_the_speech(app: AppServer) -> None:
    run = await call(app, [speech_menu()], Caller().say("sales", at=3.0, seconds=0.5))
    action_result = result(app, "/sales")
    assert action_result["action"] == "run_speech_menu"
    assert action_result["result"] == {
        "input_type": "speech",
        "selected_input": "sales",
        "speech_input": [
            {
                "alternatives": [{"text": "sales", "confidence": 0.9}],
                "direction": "inbound",
                "final": True,
            }
        ],
    }
    assert request_times(run, "/sales") == [3.5]


async def test_an_options_digit_works_in_a_speech_menu(app: AppServer) -> None:
    await call(app, [speech_menu()], Caller().press("2", at=3.0))
    assert result(app, "/support")["result"] == {"input_type": "digits", "selected_input": "2"}


async def test_words_are_found_inside_a_sentence_and_the_longest_wins(app: AppServer) -> None:
    caller = Caller().say("I need technical support please", at=3.0, seconds=1.0)
    await call(app, [speech_menu()], caller)
    assert result(app, "/support")["result"]["selected_input"] == "technical support"


async def test_a_phrase_option_without_a_digit(app: AppServer) -> None:
    await call(app, [speech_menu()], Caller().say("Opening hours?", at=3.0, seconds=0.8))
    assert result(app, "/hours")["result"]["selected_input"] == "opening hours"


async def test_a_lower_alternative_can_pick_the_option(app: AppServer) -> None:
    caller = Caller().say("sails", at=3.0, seconds=0.5, alternatives=[("sales", 0.4)])
    await call(app, [speech_menu()], caller)
    assert result(app, "/sales")["result"]["selected_input"] == "sales"


async def test_speech_matching_no_option_plays_the_invalid_messages(app: AppServer) -> None:
    caller = Caller().say("billing", at=3.0, seconds=0.5)
    run = await call(app, [speech_menu(), PLAY_AFTER], caller)
    assert timeline(run)[:3] == [(0.0, MENU), (3.5, SI1), (4.75, MENU)]
    no_option_chosen(app)


async def test_the_help_word_and_the_help_digit_repeat_the_prompt(app: AppServer) -> None:
    caller = Caller().say("help", at=3.0, seconds=0.5).press("*", at=7.0)
    run = await call(app, [speech_menu(), PLAY_AFTER], caller)
    assert timeline(run)[:3] == [(0.0, MENU), (3.5, MENU), (7.0, MENU)]


async def test_the_options_words_and_help_word_are_the_recognisers_hints(
    app: AppServer,
) -> None:
    run = await call(app, [speech_menu(language="en-GB", help_word="what")])
    (_, start), *_ = run.leg.commands(StartRecognition)
    assert start.options.language == "en-GB"
    assert start.options.mode == "auto"
    assert set(start.options.word_hints) == {
        "sales",
        "support",
        "technical support",
        "opening hours",
        "what",
    }


async def test_speech_timeout_plays_the_messages_then_finishes(app: AppServer) -> None:
    run = await call(app, [speech_menu(), PLAY_AFTER])
    assert timeline(run) == [
        (0.0, MENU),
        (7.0, ST1),
        (8.5, MENU),
        (15.5, ST2),
        (18.0, AFTER),
    ]


async def test_speech_during_the_prompt_counts_only_with_barge_in_on_speech(
    app: AppServer,
) -> None:
    run = await call(app, [speech_menu()], Caller().say("sales", at=0.5, seconds=0.5))
    no_option_chosen(app)  # recognition starts when the prompt ends
    assert timeline(run)[1] == (7.0, ST1)
    app.requests.clear()
    prompt = play(MENU, barge_in_on_speech=True)
    run = await call(app, [speech_menu(prompt=prompt)], Caller().say("sales", at=0.5, seconds=0.5))
    assert request_times(run, "/sales") == [1.0]
    assert stops(run) == [1.0]


async def test_a_caller_still_speaking_is_not_cut_off_by_the_timeout(app: AppServer) -> None:
    # Speech from 6.0 to 8.0 runs past the 5 s timeout (due at 7.0).
    run = await call(app, [speech_menu()], Caller().say("support", at=6.0, seconds=2.0))
    assert request_times(run, "/support") == [8.0]
    assert [text for _, text in timeline(run)] == [MENU]


async def test_seconds_timeout_zero_waits_for_the_caller(app: AppServer) -> None:
    run = await call(app, [speech_menu(seconds_timeout=0)], Caller().press("1", at=60.0))
    assert request_times(run, "/sales") == [60.0]
    assert [text for _, text in timeline(run)] == [MENU]


async def test_cached_speech_from_a_barge_in_play_picks_the_option(app: AppServer) -> None:
    app.page("/start", [play("before", barge_in_on_speech=True), speech_menu()])
    app.page("/hours", [])
    app.page("/final", None)
    caller = Caller().say("opening hours", at=0.2, seconds=0.5).hang_up(at=HANG_UP_AT)
    run = await run_call(app, caller, timer=TIMER, final_page="/final")
    assert result(app, "/hours")["result"]["selected_input"] == "opening hours"
    assert [text for _, text in timeline(run)] == ["before"]


async def test_noise_is_not_an_answer(app: AppServer) -> None:
    run = await call(app, [speech_menu(), PLAY_AFTER], Caller().noise(at=3.0, seconds=0.5))
    # No invalid message for a noise; the timeout runs again from its end (3.5 + 5).
    assert timeline(run)[1] == (8.5, ST1)


async def test_a_noise_across_the_timeout_does_not_end_in_a_message_at_once(
    app: AppServer,
) -> None:
    # The timeout was due at 7.0, during the noise (6.5-7.5): it runs again from 7.5.
    run = await call(app, [speech_menu(), PLAY_AFTER], Caller().noise(at=6.5, seconds=1.0))
    assert timeline(run)[1] == (12.5, ST1)
