"""The ``connect_to_conference`` action's wire model: Aculab's names and defaults, its
errors with their JSON paths."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from callhook.actions.conferenceschema import ConferenceParticipant, ConnectToConference
from callhook.events import ParticipantOptions

SAY = {"play": {"play_list": [{"text_to_say": "Alice"}]}}


def test_aculabs_defaults() -> None:
    action = ConnectToConference.model_validate({"name": "Sales"})
    assert action.room == "Sales" and action.name == "connect_to_conference"
    assert action.seconds_answer_timeout == 30
    assert action.hold_media is None and action.next_page is None
    assert action.participant() == ConferenceParticipant()
    # Aculab's participant defaults: a talker that starts the room, beeps, no digits.
    assert action.participant().options() == ParticipantOptions(
        talker=True, start_on_entry=True, destroy_on_exit=False, beep_on_entry=True
    )


def test_every_participant_property_is_read() -> None:
    action = ConnectToConference.model_validate(
        {
            "name": "weekly-1",
            "hold_media": SAY,
            "seconds_answer_timeout": 10,
            "conference_participant": {
                "talker": False,
                "start_on_entry": False,
                "destroy_on_exit": True,
                "beep_on_entry": False,
                "exit_digit": "*",
                "mute_digit": "1",
                "unmute_digit": "2",
                "while_stopped_media": SAY,
                "name": SAY,
                "has_joined_message": SAY,
                "has_left_message": SAY,
            },
            "secondary_call": {"call_recording": True},
            "next_page": {"url": "/left"},
        }
    )
    participant = action.participant()
    assert participant.options() == ParticipantOptions(
        talker=False,
        start_on_entry=False,
        destroy_on_exit=True,
        beep_on_entry=False,
        exit_digit="*",
        mute_digit="1",
        unmute_digit="2",
    )
    assert participant.name is not None and participant.has_left_message is not None
    assert action.secondary_call is not None and action.secondary_call.call_recording


def test_null_is_not_given() -> None:
    action = ConnectToConference.model_validate(
        {"name": "x", "conference_participant": {"exit_digit": None, "name": None}}
    )
    assert action.participant().exit_digit == "" and action.participant().name is None


@pytest.mark.parametrize(
    ("body", "path", "says"),
    [
        ({}, "name", "Field required"),
        ({"name": ""}, "name", "at least 1 character"),
        ({"name": "two words"}, "name", "no space"),
        ({"name": "x" * 129}, "name", "1 to 128"),
        ({"name": "x", "seconds_answer_timeout": 0}, "seconds_answer_timeout", "greater than"),
        ({"name": "x", "classify_callee": {}}, "classify_callee", "Extra inputs"),
        (
            {"name": "x", "conference_participant": {"exit_digit": "11"}},
            "conference_participant.exit_digit",
            "one digit",
        ),
        (
            {"name": "x", "conference_participant": {"mute_digit": "E"}},
            "conference_participant.mute_digit",
            "one digit",
        ),
        (
            {"name": "x", "conference_participant": {"exit_digit": "#", "unmute_digit": "#"}},
            "conference_participant",
            "cannot do both",
        ),
        (
            {"name": "x", "conference_participant": {"name": "Alice"}},
            "conference_participant.name",
            "",
        ),
    ],
)
def test_errors_name_their_path(body: dict[str, Any], path: str, says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ConnectToConference.model_validate(body)
    (error,) = caught.value.errors()
    assert ".".join(str(p) for p in error["loc"]).startswith(path)
    assert says in error["msg"]


def test_a_mute_digit_may_also_unmute() -> None:
    participant = ConferenceParticipant.model_validate({"mute_digit": "#", "unmute_digit": "#"})
    assert participant.options().mute_digit == participant.options().unmute_digit == "#"
