"""One participant's ``connect_to_conference`` machine, event by event on a virtual clock."""

from __future__ import annotations

from typing import Any

from callhook.actions.conference import ConferenceMachine
from callhook.actions.conferenceschema import ConnectToConference
from callhook.actions.connect import RINGBACK
from callhook.actions.machine import ActionContext, Completed, Continue
from callhook.events import (
    DigitReceived,
    JoinRoom,
    LeaveRoom,
    ParticipantOptions,
    PromptFinished,
    RoomDigit,
    RoomHolding,
    RoomJoined,
    RoomLeft,
    RoomPrompt,
    RoomRefused,
    SayText,
    StartPrompt,
    StopPrompt,
)


def say(text: str) -> dict[str, Any]:
    return {"play": {"play_list": [{"text_to_say": text}]}}


def machine(**props: Any) -> ConferenceMachine:
    action = ConnectToConference.model_validate({"name": "weekly", **props})
    return ConferenceMachine(action, ActionContext())


def test_it_joins_with_the_options_and_the_others_hear_its_name_and_messages() -> None:
    m = machine(
        conference_participant={
            "talker": False,
            "exit_digit": "*",
            "name": say("Alice"),
            "has_joined_message": say("has joined"),
            "has_left_message": say("has left"),
        },
        hold_media=say("connecting"),
    )
    join, hold = m.start(0.0)
    assert join == JoinRoom(
        "weekly",
        ParticipantOptions(talker=False, exit_digit="*"),
        joined=(SayText("Alice"), SayText("has joined")),
        left=(SayText("Alice"), SayText("has left")),
    )
    assert hold == StartPrompt(1, (SayText("connecting"),))
    assert m.handle(RoomJoined(), 0.1) == [StopPrompt(1)]


def test_ringback_while_joining_without_hold_media_and_again_when_it_ends() -> None:
    m = machine()
    _, hold = m.start(0.0)
    assert hold == StartPrompt(1, RINGBACK)
    assert m.handle(PromptFinished(1), 6.0) == [StartPrompt(2, RINGBACK)]


def test_a_holding_room_plays_while_stopped_media_over_and_over_until_it_starts() -> None:
    m = machine(conference_participant={"while_stopped_media": say("please wait")})
    m.start(0.0)
    m.handle(RoomJoined(), 0.0)
    assert m.handle(RoomHolding(True), 0.0) == [StartPrompt(2, (SayText("please wait"),))]
    assert m.handle(PromptFinished(2), 2.0) == [StartPrompt(3, (SayText("please wait"),))]
    assert m.handle(RoomHolding(False), 3.0) == [StopPrompt(3)]
    assert m.handle(PromptFinished(3), 3.0) == []  # (stopped: not played again)


def test_without_while_stopped_media_a_holding_room_is_silence() -> None:
    m = machine()
    m.start(0.0)
    m.handle(RoomJoined(), 0.0)
    assert m.handle(RoomHolding(True), 0.0) == []


def test_a_beep_interrupts_the_waiting_music_which_comes_back_after_it() -> None:
    m = machine(conference_participant={"while_stopped_media": say("music")})
    m.start(0.0)
    m.handle(RoomJoined(), 0.0)
    m.handle(RoomHolding(True), 0.0)  # prompt 2: the music
    beep = RoomPrompt((SayText("beep"),))
    assert m.handle(beep, 1.0) == [StopPrompt(2), StartPrompt(3, (SayText("beep"),))]
    announce = RoomPrompt((SayText("Bob"), SayText("has joined")))
    assert m.handle(announce, 1.1) == []  # queued behind the beep
    assert m.handle(PromptFinished(3), 1.2) == [
        StartPrompt(4, (SayText("Bob"), SayText("has joined")))
    ]
    assert m.handle(PromptFinished(4), 2.0) == [StartPrompt(5, (SayText("music"),))]


def test_a_prompt_in_an_active_room_plays_and_then_the_room_is_heard() -> None:
    m = machine(conference_participant={"while_stopped_media": say("music")})
    m.start(0.0)
    m.handle(RoomJoined(), 0.0)
    assert m.handle(RoomPrompt((SayText("beep"),)), 1.0) == [StartPrompt(2, (SayText("beep"),))]
    assert m.handle(PromptFinished(2), 1.2) == []


def test_waiting_media_that_cannot_be_played_is_not_tried_again() -> None:
    m = machine(conference_participant={"while_stopped_media": say("music")})
    m.start(0.0)
    m.handle(RoomJoined(), 0.0)
    m.handle(RoomHolding(True), 0.0)
    assert m.handle(PromptFinished(2, error="no such file"), 0.1) == []


def test_digits_go_to_the_room() -> None:
    m = machine()
    m.start(0.0)
    assert m.handle(DigitReceived("5"), 0.0) == []  # (not in yet)
    m.handle(RoomJoined(), 0.0)
    assert m.handle(DigitReceived("#"), 1.0) == [RoomDigit("#")]


def test_leaving_requests_next_page_with_the_time_connected() -> None:
    m = machine(next_page={"url": "/left"})
    m.start(0.0)
    m.handle(RoomJoined(), 0.0)
    assert m.handle(RoomLeft("exit_digit", 42.3), 42.3) == []
    assert m.outcome == Completed("connect_to_conference", {"seconds_connected_duration": 42.3})


def test_without_next_page_the_next_action_runs() -> None:
    m = machine()
    m.start(0.0)
    m.handle(RoomJoined(), 0.0)
    m.handle(RoomLeft("ejected", 3.0), 3.0)
    assert isinstance(m.outcome, Continue)


def test_a_full_room_runs_the_next_action_even_with_a_next_page() -> None:
    m = machine(next_page={"url": "/left"})
    m.start(0.0)
    assert m.handle(RoomRefused("busy", "full"), 0.0) == [StopPrompt(1)]
    assert isinstance(m.outcome, Continue) and "busy" in m.outcome.reason


def test_not_joined_in_time_is_over_and_leaves() -> None:
    m = machine(seconds_answer_timeout=5, next_page={"url": "/left"})
    m.start(0.0)
    assert m.deadline == 5.0
    assert m.on_deadline(5.0) == [LeaveRoom(), StopPrompt(1)]
    assert isinstance(m.outcome, Continue) and m.deadline is None


def test_a_hang_up_leaves_the_room() -> None:
    m = machine(conference_participant={"while_stopped_media": say("music")})
    m.start(0.0)
    m.handle(RoomJoined(), 0.0)
    m.handle(RoomHolding(True), 0.0)
    assert m.stop(4.0, "hangup") == [LeaveRoom(), StopPrompt(2)]
    assert isinstance(m.outcome, Continue)
    assert m.handle(RoomLeft("hung_up", 4.0), 4.0) == []


# --- secondary_call: the participant's recording and its longest time ---------------------


def test_the_participants_call_is_recorded_while_it_is_in_the_room() -> None:
    from callhook.events import RecordCall, StopRecording

    m = machine(
        secondary_call={"call_recording": True, "call_recording_mode": "separate"},
        next_page={"url": "/left"},
    )
    m.start(0.0)
    assert m.handle(RoomJoined(), 1.0) == [StopPrompt(1), RecordCall("recording.wav", "separate")]
    assert m.handle(RoomLeft("exit_digit", 9.0), 10.0) == [StopRecording("recording.wav")]
    assert m.outcome == Completed(
        "connect_to_conference",
        {"seconds_connected_duration": 9.0, "call_recording_filename": "recording.wav"},
    )


def test_minutes_max_call_duration_takes_the_participant_out_of_the_room() -> None:
    m = machine(secondary_call={"minutes_max_call_duration": 2}, next_page={"url": "/left"})
    m.start(0.0)
    assert m.deadline == 30.0  # (joining: seconds_answer_timeout)
    m.handle(RoomJoined(), 5.0)
    assert m.deadline == 125.0
    assert m.on_deadline(124.9) == []
    assert m.on_deadline(125.0) == [LeaveRoom()]
    assert m.outcome == Completed("connect_to_conference", {"seconds_connected_duration": 120.0})


def test_secondary_call_pages_are_refused_for_a_room() -> None:
    import pytest
    from pydantic import ValidationError

    for page in ("first_page", "final_page", "error_page"):
        with pytest.raises(ValidationError, match=f"secondary_call.{page}: a conference room"):
            machine(secondary_call={page: {"url": "/x"}})
    with pytest.raises(ValidationError, match="needs call_recording_cipher"):
        machine(secondary_call={"call_recording": True, "call_recording_encryption": True})


# --- a connect to con:ROOM --------------------------------------------------------------------


def connect(**props: Any) -> Any:
    from callhook.actions import machine_for
    from callhook.actions.connectschema import Connect

    action = Connect.model_validate({"destinations": ["con:weekly"], **props})
    return machine_for(action, ActionContext())


def test_a_connect_to_a_room_joins_it_with_the_defaults_and_gives_a_connects_result() -> None:
    m = connect(next_page={"url": "/after"}, seconds_answer_timeout=5)
    join, _ = m.start(0.0)
    assert join == JoinRoom("weekly", ParticipantOptions())
    m.handle(RoomJoined(), 1.0)
    m.handle(RoomLeft("destroyed", 41.0), 42.0)
    assert m.outcome == Completed(
        "connect",
        {
            "connected": True,
            "destination": "con:weekly",
            "call_cause": "hung_up",
            "call_raw_cause": "BYE",
            "seconds_connected_duration": 41.0,
        },
    )


def test_a_connect_to_a_full_room_is_busy_and_its_next_page_says_so() -> None:
    m = connect(next_page={"url": "/after"})
    m.start(0.0)
    m.handle(RoomRefused("busy", "the room holds 40 participants"), 0.1)
    assert m.outcome == Completed(
        "connect",
        {
            "connected": False,
            "destination": None,
            "call_cause": "busy",
            "call_raw_cause": "486",
            "seconds_connected_duration": 0,
        },
    )
    late = connect()
    late.start(0.0)
    assert late.on_deadline(30.0) == [LeaveRoom(), StopPrompt(1)]
    assert isinstance(late.outcome, Continue)  # (no next_page: the next action)


def test_a_room_is_the_only_destination_of_a_connect() -> None:
    import pytest
    from pydantic import ValidationError

    from callhook.actions.connectschema import Connect, Transfer

    with pytest.raises(ValidationError, match="cannot be one of several destinations"):
        Connect.model_validate({"destinations": ["sip:a@b", "con:weekly"]})
    with pytest.raises(ValidationError, match="a conference room has no far leg"):
        Connect.model_validate(
            {"destinations": ["con:weekly"], "secondary_call": {"first_page": {"url": "/f"}}}
        )
    with pytest.raises(ValidationError, match="not supported there"):
        Transfer.model_validate(
            {
                "destination": "sip:a@b",
                "fallback_connect": {"connect": {"destinations": ["con:weekly"]}},
            }
        )
