"""The conference room's state machine, on a virtual clock (times are plain numbers)."""

from __future__ import annotations

import pytest

from callhook.conference.room import (
    MAX_PARTICIPANTS,
    Announce,
    Beep,
    Destroyed,
    Holding,
    Left,
    Muted,
    NotInRoom,
    Room,
    RoomFull,
    Rooms,
    Started,
    Stopped,
)
from callhook.events import ParticipantOptions

PLAIN = ParticipantOptions()
QUIET = ParticipantOptions(beep_on_entry=False)


def room() -> Room:
    return Room("app", "weekly", created_at=0.0)


def state(r: Room) -> str:
    """(Read afresh: a call may change it.)"""
    return r.state


def test_the_first_participant_holds_and_the_second_starts_the_room() -> None:
    r = room()
    assert r.join("a", PLAIN, 1.0) == [Holding("a", True)]
    assert r.state == "HOLDING" and r.talkers() == [] and not r.hears_room("a")
    effects = r.join("b", PLAIN, 2.0)
    assert effects == [
        Beep(("a",)),
        Announce("b", "joined", ("a",)),
        Started("weekly"),
        Holding("a", False),
        Holding("b", False),
    ]
    assert state(r) == "ACTIVE" and r.started_at == 2.0
    assert r.talkers() == ["a", "b"] and r.hears_room("a") and r.hears_room("b")


def test_no_beep_for_a_participant_without_beep_on_entry() -> None:
    r = room()
    r.join("a", PLAIN, 0.0)
    assert not any(isinstance(e, Beep) for e in r.join("b", QUIET, 1.0))


def test_without_a_start_on_entry_participant_the_room_holds_until_one_comes() -> None:
    follower = ParticipantOptions(start_on_entry=False)
    r = room()
    r.join("a", follower, 0.0)
    effects = r.join("b", follower, 1.0)
    assert r.state == "HOLDING" and Holding("b", True) in effects
    assert not any(isinstance(e, Started) for e in effects)
    effects = r.join("leader", PLAIN, 2.0)
    assert Started("weekly") in effects and state(r) == "ACTIVE"


def test_a_leader_waiting_alone_starts_the_room_when_a_follower_arrives() -> None:
    r = room()
    r.join("leader", PLAIN, 0.0)
    assert Started("weekly") in r.join("f", ParticipantOptions(start_on_entry=False), 1.0)


def test_a_room_of_listeners_holds() -> None:
    listener = ParticipantOptions(talker=False)
    r = room()
    r.join("a", listener, 0.0)
    r.join("b", listener, 1.0)
    assert r.state == "HOLDING"
    assert Started("weekly") in r.join("c", PLAIN, 2.0)
    assert r.talkers() == ["c"]  # listeners hear, and are not mixed


def test_the_last_talker_made_a_listener_stops_the_room() -> None:
    r = room()
    r.join("a", PLAIN, 0.0)
    r.join("b", ParticipantOptions(talker=False), 1.0)
    assert r.state == "ACTIVE"
    assert r.set_options("a", 2.0, talker=False) == [
        Stopped("weekly"),
        Holding("a", True),
        Holding("b", True),
    ]
    assert r.set_options("b", 3.0, talker=True)[0] == Started("weekly")
    assert r.started_at == 3.0


def test_the_room_stops_when_one_is_left_and_starts_again_with_a_second() -> None:
    r = room()
    r.join("a", PLAIN, 0.0)
    r.join("b", PLAIN, 1.0)
    assert r.leave("b", 5.0) == [
        Left("b", "hung_up", 4.0),
        Announce("b", "left", ("a",)),
        Stopped("weekly"),
        Holding("a", True),
    ]
    assert Started("weekly") in r.join("c", PLAIN, 6.0)


def test_the_mute_digit_toggles_without_an_unmute_digit() -> None:
    r = room()
    r.join("a", ParticipantOptions(mute_digit="#"), 0.0)
    r.join("b", PLAIN, 0.0)
    assert r.digit("a", "#", 1.0) == [Muted("a", True)]
    assert r.talkers() == ["b"]
    assert r.digit("a", "#", 2.0) == [Muted("a", False)]
    assert r.talkers() == ["a", "b"]


def test_mute_and_unmute_digits_each_do_one_thing() -> None:
    r = room()
    r.join("a", ParticipantOptions(mute_digit="1", unmute_digit="2"), 0.0)
    assert r.digit("a", "1", 1.0) == [Muted("a", True)]
    assert r.digit("a", "1", 2.0) == []  # muted already
    assert r.digit("a", "2", 3.0) == [Muted("a", False)]
    assert r.digit("a", "2", 4.0) == []


def test_an_unmute_digit_alone_unmutes_what_the_web_services_muted() -> None:
    r = room()
    r.join("a", ParticipantOptions(unmute_digit="0"), 0.0)
    assert r.set_options("a", 1.0, muted=True) == [Muted("a", True)]
    assert r.digit("a", "0", 2.0) == [Muted("a", False)]


def test_a_digit_that_is_no_option_is_left_alone() -> None:
    r = room()
    r.join("a", ParticipantOptions(exit_digit="*", mute_digit="#"), 0.0)
    assert r.digit("a", "5", 1.0) is None


def test_the_exit_digit_leaves_with_the_time_connected() -> None:
    r = room()
    r.join("a", ParticipantOptions(exit_digit="*"), 10.0)
    r.join("b", PLAIN, 11.0)
    assert r.digit("a", "*", 52.34) == [
        Left("a", "exit_digit", 42.3),
        Announce("a", "left", ("b",)),
        Stopped("weekly"),
        Holding("b", True),
    ]
    assert list(r.participants) == ["b"] and r.state == "HOLDING"


def test_a_leader_with_destroy_on_exit_takes_everyone_out() -> None:
    r = room()
    r.join("leader", ParticipantOptions(destroy_on_exit=True), 0.0)
    r.join("b", PLAIN, 1.0)
    r.join("c", PLAIN, 2.0)
    assert r.leave("leader", 10.0) == [
        Left("leader", "hung_up", 10.0),
        Left("b", "destroyed", 9.0),
        Left("c", "destroyed", 8.0),
        Destroyed("weekly"),
    ]
    assert r.destroyed and not r.participants
    with pytest.raises(ValueError, match="gone"):
        r.join("d", PLAIN, 11.0)


def test_the_last_to_leave_destroys_the_room() -> None:
    r = room()
    r.join("a", PLAIN, 0.0)
    assert r.eject("a", 3.0) == [Left("a", "ejected", 3.0), Destroyed("weekly")]


def test_a_full_room_refuses_and_keeps_what_it_had() -> None:
    r = Room("app", "small", 0.0, limit=2)
    r.join("a", PLAIN, 0.0)
    r.join("b", PLAIN, 0.0)
    with pytest.raises(RoomFull):
        r.join("c", PLAIN, 1.0)
    assert list(r.participants) == ["a", "b"] and r.state == "ACTIVE"
    assert MAX_PARTICIPANTS == 40  # Aculab's small conference


def test_one_participant_joins_once_and_the_unknown_are_refused() -> None:
    r = room()
    r.join("a", PLAIN, 0.0)
    with pytest.raises(ValueError, match="already"):
        r.join("a", PLAIN, 1.0)
    with pytest.raises(NotInRoom):
        r.leave("x", 1.0)
    with pytest.raises(NotInRoom):
        r.digit("x", "1", 1.0)
    with pytest.raises(NotInRoom):
        r.set_options("x", 1.0, muted=True)


@pytest.mark.parametrize("digit", ["11", "E", "x", " "])
def test_an_option_digit_is_one_of_aculabs(digit: str) -> None:
    with pytest.raises(ValueError, match="0123456789ABCD#"):
        ParticipantOptions(exit_digit=digit)


def test_rooms_are_per_application_and_made_again_after_they_are_destroyed() -> None:
    rooms = Rooms()
    sales, _ = rooms.join("one", "Sales", "a", PLAIN, 0.0)
    other, _ = rooms.join("two", "Sales", "b", PLAIN, 0.0)
    assert sales is not other and len(rooms) == 2
    again, effects = rooms.join("one", "Sales", "c", PLAIN, 1.0)
    assert again is sales and Started("Sales") in effects
    assert [r.name for r in rooms.of("one")] == ["Sales"]
    sales.leave("a", 2.0)
    sales.leave("c", 2.0)
    assert rooms.get("one", "Sales") is None and len(rooms) == 1
    fresh, effects = rooms.join("one", "Sales", "d", PLAIN, 3.0)
    assert fresh is not sales and effects == [Holding("d", True)]


def test_a_full_room_made_for_nothing_is_not_kept() -> None:
    rooms = Rooms(limit=0)
    with pytest.raises(RoomFull):
        rooms.join("one", "x", "a", PLAIN, 0.0)
    assert len(rooms) == 0 and rooms.get("one", "x") is None
