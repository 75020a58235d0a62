"""A room's messages between processes, and the worker that holds a room."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from callhook.conference.wire import (
    WireError,
    command_message,
    event_message,
    owner,
    read_command,
    read_event,
)
from callhook.events import (
    JoinRoom,
    LeaveRoom,
    ParticipantOptions,
    PlayDigits,
    PlayFile,
    PlayTone,
    PlayUrl,
    RoomDigit,
    RoomHolding,
    RoomJoined,
    RoomLeft,
    RoomPrompt,
    RoomRefused,
    SayText,
)

ITEMS = (
    SayText("Alice", "en-GB-x", private=True, language="en-GB"),
    SayText("has joined"),
    PlayFile("names/alice.wav", ("aescbc", "00" * 32, "11" * 16)),
    PlayFile("beep.wav"),
    PlayTone(440.0, 2.0, and_hz=480.0),
    PlayTone(1000.0, 0.2),
    PlayDigits("12#"),
    PlayUrl("https://example.com/name.wav"),
)


def through_json(message: dict[str, Any]) -> Any:
    return json.loads(json.dumps(message))


@pytest.mark.parametrize(
    "command",
    [
        JoinRoom("weekly"),
        JoinRoom(
            "Sales-1",
            ParticipantOptions(
                talker=False,
                start_on_entry=False,
                destroy_on_exit=True,
                beep_on_entry=False,
                exit_digit="*",
                mute_digit="1",
                unmute_digit="2",
            ),
            joined=ITEMS[:2],
            left=ITEMS,
        ),
        RoomDigit("#"),
        LeaveRoom(),
    ],
)
def test_every_command_goes_and_comes_back_the_same(command: Any) -> None:
    assert read_command(through_json(command_message(command))) == command


@pytest.mark.parametrize(
    "event",
    [
        RoomJoined(),
        RoomRefused("busy", "room 'weekly' holds 40 participants already"),
        RoomHolding(True),
        RoomHolding(False),
        RoomPrompt(ITEMS),
        RoomLeft("exit_digit", 42.3),
        RoomLeft("destroyed", 0.0),
    ],
)
def test_every_event_goes_and_comes_back_the_same(event: Any) -> None:
    assert read_event(through_json(event_message(event))) == event


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ([], "JSON object, not list"),
        ({}, "string 'type'"),
        ({"type": "dance"}, "not a room command"),
        ({"type": "digit"}, "'digit': expected str"),
        ({"type": "join", "room": "x"}, "'options': expected dict"),
        (
            {**command_message(JoinRoom("x")), "options": {"talker": 1}},
            "'talker': expected bool",
        ),
        (
            {
                **command_message(JoinRoom("x")),
                "options": {**command_message(JoinRoom("x"))["options"], "exit_digit": "EE"},
            },
            "exit_digit",
        ),
        ({**command_message(JoinRoom("x")), "joined": [{"sing": "la"}]}, "not a prompt item"),
        ({**command_message(JoinRoom("x")), "left": ["text"]}, "JSON object"),
        (
            {**command_message(JoinRoom("x")), "left": [{"file": "a.wav", "cipher": ["k"]}]},
            "'cipher'",
        ),
    ],
)
def test_a_bad_command_says_what_is_wrong(message: object, says: str) -> None:
    with pytest.raises(WireError, match=says):
        read_command(message)


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"type": "join"}, "not a room event"),
        ({"type": "holding", "on": 1}, "'on': expected bool"),
        ({"type": "left", "reason": "ejected", "seconds": True}, "expected a number"),
        ({"type": "left", "reason": "ejected", "seconds": "3"}, "expected a number"),
        ({"type": "prompt", "items": [{"tone": "loud", "seconds": 1}]}, "'tone'"),
    ],
)
def test_a_bad_event_says_what_is_wrong(message: object, says: str) -> None:
    with pytest.raises(WireError, match=says):
        read_event(message)


def test_the_owner_is_the_same_in_every_process() -> None:
    here = [owner("app", f"room{i}", range(4)) for i in range(20)]
    there = subprocess.run(
        [
            sys.executable,
            "-c",
            "from callhook.conference.wire import owner\n"
            "print([owner('app', f'room{i}', range(4)) for i in range(20)])",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345"},
    )
    assert json.loads(there.stdout) == here
    assert set(here) == {0, 1, 2, 3}  # (twenty rooms spread over every worker)


def test_the_owner_depends_on_the_application_too() -> None:
    rooms = [(owner("one", f"r{i}", range(8)), owner("two", f"r{i}", range(8))) for i in range(50)]
    assert any(a != b for a, b in rooms)
    assert all(owner("one", f"r{i}", [0]) == 0 for i in range(50))
    with pytest.raises(ValueError, match="no process"):
        owner("one", "r", [])


def test_a_process_coming_or_going_moves_only_the_rooms_it_holds() -> None:
    """Nodes: the members are read from the database and change; the other rooms stay."""
    nodes = ["10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"]
    before = {r: owner("app", r, nodes) for r in (f"room{i}" for i in range(60))}
    assert set(before.values()) == set(nodes)
    after = {r: owner("app", r, nodes[:2]) for r in before}  # the third went
    assert all(after[r] == o for r, o in before.items() if o != nodes[2])
    grown = {r: owner("app", r, [*nodes, "10.0.0.4:7070"]) for r in before}
    assert all(grown[r] in (before[r], "10.0.0.4:7070") for r in before)
    assert owner("app", "room1", reversed(nodes)) == before["room1"]  # (order is no matter)
