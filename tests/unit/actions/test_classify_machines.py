"""Who answered, as the actions handle it, on a virtual clock: an outbound call's
classification before its first page (callhook/actions/classify.py) and a connect's far
leg classified before it is joined or its pages run (callhook/actions/connect.py); the
``classify_callee`` wire object and a placed call's form of it."""

from __future__ import annotations

from typing import Any

import pytest

from callhook.actions.classify import GRACE, ClassifyMachine
from callhook.actions.connect import ConnectMachine
from callhook.actions.connectschema import ClassifyCallee, Connect, classify_options
from callhook.actions.machine import ActionContext, Completed, Continue
from callhook.events import (
    CalleeAnswered,
    CalleeEnded,
    ClassifyFarEnd,
    ClassifyOptions,
    DigitReceived,
    DropCallee,
    FarEndClassified,
    GreetingEnded,
    JoinCallee,
    RunCallee,
    StartPrompt,
    StopPrompt,
)

T0 = 50.0
PAGE = {"url": "/connected"}


# --- the wire ---------------------------------------------------------------------------


def test_classify_callee_defaults_are_the_documented_ones() -> None:
    assert ClassifyCallee().options() == ClassifyOptions()
    assert ClassifyCallee(enable=False).options() is None
    given = ClassifyCallee(milliseconds_greeting=3000, wait_for_beep=False).options()
    assert given == ClassifyOptions(milliseconds_greeting=3000, wait_for_beep=False)


@pytest.mark.parametrize(
    ("given", "wanted"),
    [
        (True, ClassifyOptions()),
        (False, None),
        (None, None),
        ({"enable": False}, None),
        ({"seconds_beep_timeout": 20}, ClassifyOptions(seconds_beep_timeout=20)),
    ],
)
def test_a_placed_calls_classify_callee(given: Any, wanted: ClassifyOptions | None) -> None:
    assert classify_options(given) == wanted


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("yes", "'classify_callee': Input should be a valid dictionary"),
        ({"milliseconds_timeout": 20000}, "'classify_callee.milliseconds_timeout': Input"),
        ({"beep": True}, "'classify_callee.beep': Extra inputs"),
    ],
)
def test_a_bad_classify_callee_names_its_problem(given: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        classify_options(given)


# --- an outbound call's own far end -----------------------------------------------------


def test_a_live_speaker_ends_it_at_once() -> None:
    m = ClassifyMachine(ClassifyOptions())
    assert m.start(T0) == [ClassifyFarEnd(ClassifyOptions())]
    assert m.deadline == T0 + 7.0 + GRACE
    assert m.handle(DigitReceived("1"), T0 + 0.5) == []  # (not its business)
    assert m.handle(FarEndClassified("live", "short_greeting", 1.9, attempt=0), T0 + 1) == []
    assert m.outcome is None  # a far leg's is its connect's
    m.handle(FarEndClassified("live", "short_greeting", 1.9), T0 + 1.9)
    assert m.outcome == Continue("classified: live")
    assert m.far_end is not None and m.far_end["far_end_type"] == "live"
    assert m.far_end["greeting_end"] is None and m.deadline is None


def test_a_machine_waits_for_the_end_of_its_greeting() -> None:
    m = ClassifyMachine(ClassifyOptions(seconds_beep_timeout=12))
    m.start(T0)
    m.handle(FarEndClassified("answering_machine", "long_greeting", 2.9), T0 + 2.9)
    assert m.outcome is None and m.deadline == T0 + 2.9 + 12 + GRACE
    assert [(t.name, t.started) for t in m.timers()] == [("greeting", T0 + 2.9)]
    m.handle(GreetingEnded("beep", 9.0, 7.44, 7.94, (1000.0,)), T0 + 9.0)
    assert m.outcome == Continue("classified: answering_machine")
    assert m.far_end == {
        "far_end_type": "answering_machine",
        "reason": "long_greeting",
        "seconds_to_classify": 2.9,
        "greeting_end": "beep",
        "seconds_to_greeting_end": 9.0,
        "seconds_beep_start": 7.44,
        "seconds_beep_end": 7.94,
        "beep_hz": [1000.0],
    }


def test_without_wait_for_beep_a_machine_ends_it_at_once() -> None:
    m = ClassifyMachine(ClassifyOptions(wait_for_beep=False))
    m.start(T0)
    m.handle(FarEndClassified("answering_machine", "long_greeting", 2.9), T0 + 2.9)
    assert m.outcome is not None


def test_no_word_from_the_media_in_time_is_unknown() -> None:
    """No audio at all (the media's clock stood): the action's own limit decides."""
    m = ClassifyMachine(ClassifyOptions(milliseconds_timeout=3000))
    m.start(T0)
    assert m.on_deadline(T0 + 3.5) == [ClassifyFarEnd(None)]
    assert m.far_end is not None
    assert (m.far_end["far_end_type"], m.far_end["reason"]) == ("unknown", "timeout")
    assert m.far_end["seconds_to_classify"] == 3.5


def test_a_greeting_that_never_ends_in_time_is_a_timeout() -> None:
    m = ClassifyMachine(ClassifyOptions(seconds_beep_timeout=5))
    m.start(T0)
    m.handle(FarEndClassified("answering_machine", "long_greeting", 2.9), T0 + 2.9)
    assert m.on_deadline(T0 + 8.9) == [ClassifyFarEnd(None)]
    assert m.far_end is not None and m.far_end["greeting_end"] == "timeout"
    assert m.far_end["seconds_to_greeting_end"] == 8.9


def test_a_hang_up_stops_it() -> None:
    m = ClassifyMachine(ClassifyOptions())
    m.start(T0)
    assert m.stop(T0 + 1, "hangup") == [ClassifyFarEnd(None)]
    assert m.outcome == Continue("classification stopped: hangup") and m.far_end is None


# --- a connect's far leg ----------------------------------------------------------------


def connect(**props: Any) -> ConnectMachine:
    action = Connect.model_validate(
        {"destinations": ["sip:a@x", "sip:b@y"], "classify_callee": {}, **props}
    )
    return ConnectMachine(action, ActionContext())


def test_the_answered_far_leg_is_classified_then_joined() -> None:
    m = connect(next_page=PAGE)
    prompt = m.start(T0)[2]
    assert isinstance(prompt, StartPrompt)
    commands = m.handle(CalleeAnswered(1, {"call_id": "far-1"}), T0 + 4)
    # The ringback goes on while it is classified; the other far leg is dropped.
    assert commands == [DropCallee(0), ClassifyFarEnd(ClassifyOptions(), 1)]
    assert m.deadline == T0 + 4 + 7.0 + GRACE
    assert m.handle(FarEndClassified("live", "short_greeting", 1.5, attempt=0), T0 + 5) == []
    joined = m.handle(FarEndClassified("live", "short_greeting", 1.5, attempt=1), T0 + 5.5)
    assert joined == [StopPrompt(prompt.prompt_id), JoinCallee(1)]
    m.handle(CalleeEnded(1, "hung_up", "BYE"), T0 + 20)
    assert isinstance(m.outcome, Completed)
    result = m.outcome.result
    assert result["far_end_type"] == "live"
    assert result["far_end_classification"]["seconds_to_classify"] == 1.5
    assert result["secondary_call"]["far_end_type"] == "live"
    assert result["seconds_connected_duration"] == 14.5


def test_a_machine_is_joined_after_its_beep() -> None:
    m = connect(next_page=PAGE)
    prompt = m.start(T0)[2]
    assert isinstance(prompt, StartPrompt)
    m.handle(CalleeAnswered(0, {"call_id": "far-0"}), T0 + 4)
    machine = FarEndClassified("answering_machine", "long_greeting", 2.9, attempt=0)
    assert m.handle(machine, T0 + 6.9) == []
    assert m.deadline == T0 + 6.9 + 10 + GRACE
    ended = GreetingEnded("beep", 9.0, 7.4, 7.9, (1000.0,), attempt=0)
    assert m.handle(ended, T0 + 13) == [StopPrompt(prompt.prompt_id), JoinCallee(0)]
    m.handle(CalleeEnded(0, "hung_up", "BYE"), T0 + 20)
    assert isinstance(m.outcome, Completed)
    assert m.outcome.result["far_end_classification"]["greeting_end"] == "beep"


def test_its_secondary_pages_are_told_who_answered() -> None:
    m = connect(secondary_call={"first_page": {"url": "/far"}})
    m.start(T0)
    m.handle(CalleeAnswered(0, {"call_id": "far-0"}), T0 + 4)
    (run,) = m.handle(FarEndClassified("fax_machine", "fax_tone", 2.3, attempt=0), T0 + 6.3)
    assert isinstance(run, RunCallee)
    assert run.pages.far_end is not None and run.pages.far_end["far_end_type"] == "fax_machine"


def test_no_decision_in_time_joins_it_as_unknown() -> None:
    m = connect(classify_callee={"milliseconds_timeout": 2000}, next_page=PAGE)
    prompt = m.start(T0)[2]
    assert isinstance(prompt, StartPrompt)
    m.handle(CalleeAnswered(0, {}), T0 + 1)
    commands = m.on_deadline(T0 + 3.5)
    assert commands == [ClassifyFarEnd(None, 0), StopPrompt(prompt.prompt_id), JoinCallee(0)]
    m.handle(CalleeEnded(0, "hung_up", "BYE"), T0 + 5)
    assert isinstance(m.outcome, Completed)
    assert m.outcome.result["far_end_type"] == "unknown"


def test_a_far_leg_that_hangs_up_while_classified_is_not_connected() -> None:
    m = connect(next_page=PAGE)
    m.start(T0)
    m.handle(CalleeAnswered(0, {}), T0 + 1)
    m.handle(CalleeEnded(0, "hung_up", "BYE"), T0 + 2)
    assert isinstance(m.outcome, Completed)
    assert m.outcome.result["connected"] is False
    assert m.outcome.result["call_cause"] == "hung_up"


def test_without_classify_callee_the_result_says_nothing_of_it() -> None:
    action = Connect.model_validate({"destinations": ["sip:a@x"], "next_page": PAGE})
    m = ConnectMachine(action, ActionContext())
    m.start(T0)
    assert JoinCallee(0) in m.handle(CalleeAnswered(0, {}), T0 + 1)
    m.handle(CalleeEnded(0, "hung_up", "BYE"), T0 + 2)
    assert isinstance(m.outcome, Completed) and "far_end_type" not in m.outcome.result


def test_early_media_cannot_go_with_classification() -> None:
    """The caller would hear the far end, one way, while it is classified."""
    with pytest.raises(ValueError, match="pass_early_media cannot be used with classify_callee"):
        Connect.model_validate(
            {"destinations": ["sip:a@x"], "pass_early_media": True, "classify_callee": {}}
        )
    off = {"destinations": ["sip:a@x"], "pass_early_media": True}
    assert Connect.model_validate({**off, "classify_callee": {"enable": False}}).pass_early_media
