"""Which TCP/TLS connections are taken and how long they are kept (callhook/sip/intake.py),
on a virtual clock: the guard's standing of a source, and a connection's lifetime."""

from __future__ import annotations

from callhook.devtools.harness import VirtualClock
from callhook.sip.guard import Guard, networks
from callhook.sip.intake import FIRST_MESSAGE_TIMEOUT, NOT_ALLOWED, Lifetime, standing

T0 = 1000.0
IDLE = 600.0


def test_standing_follows_the_guards_rules() -> None:
    guard = Guard(networks(["127.0.0.1/32"]))
    assert standing(guard, "127.0.0.1", T0) == "served"  # [security] allow
    assert standing(guard, "203.0.113.5", T0) == "ignored"  # unknown = "drop"
    assert guard.take_notes() == [("203.0.113.5", NOT_ALLOWED)]
    assert standing(guard, "203.0.113.5", T0 + 1) == "ignored"
    assert guard.take_notes() == []  # (once a minute)
    guard.extra = networks(["198.51.100.0/24"])  # a trunk's addresses
    assert standing(guard, "198.51.100.9", T0) == "served"
    guard.add_peer("203.0.113.7")  # the far end of a call of ours
    assert standing(guard, "203.0.113.7", T0) == "served"
    guard.remove_peer("203.0.113.7")
    assert standing(guard, "203.0.113.7", T0) == "ignored"
    rejecting = Guard(networks(["127.0.0.1/32"]), unknown="reject")
    assert standing(rejecting, "203.0.113.5", T0) == "answered"  # its 403 says as much


def test_a_banned_source_is_ignored_even_when_allowed_until_its_ban_ends() -> None:
    guard = Guard(ban_seconds=600.0)
    guard.impose("127.0.0.2", T0, "a test")
    assert standing(guard, "127.0.0.2", T0 + 1) == "ignored"
    assert guard.take_notes() == []  # (the ban was logged when it was decided)
    assert standing(guard, "127.0.0.2", T0 + 601) == "served"


def test_pings_do_not_move_the_first_messages_deadline() -> None:
    """A peer pinging every 29 s (here every second) would otherwise keep its connection
    for ever."""
    clock = VirtualClock(T0)
    life = Lifetime(clock.now(), IDLE, accepted=True)
    assert life.deadline == T0 + FIRST_MESSAGE_TIMEOUT == T0 + 30.0
    for t in range(1, 30):
        clock.advance_to(T0 + t - 0.5)
        life.traffic(clock.now())  # a ping, and our pong
        assert not life.expired(clock.now(), lambda: True)
    clock.advance_to(T0 + 30.0)
    assert life.expired(clock.now(), lambda: True)  # (nothing depends on it: not asked)


def test_a_served_message_gives_the_idle_limit_renewed_by_traffic() -> None:
    clock = VirtualClock(T0)
    life = Lifetime(clock.now(), IDLE, accepted=True)
    clock.advance_to(T0 + 10.0)
    life.message(clock.now(), served=True)
    assert life.proven and life.deadline == T0 + 10.0 + IDLE
    clock.advance_to(T0 + 300.0)
    life.traffic(clock.now())  # pings keep a proven connection
    clock.advance_to(T0 + 899.0)
    assert not life.expired(clock.now(), lambda: False)
    clock.advance_to(T0 + 900.0)
    assert life.expired(clock.now(), lambda: False)


def test_an_idle_connection_a_call_depends_on_is_kept_once_proven_only() -> None:
    life = Lifetime(T0, IDLE, accepted=True)
    asked: list[bool] = []

    def in_use() -> bool:
        asked.append(True)
        return True

    assert life.expired(T0 + 30.0, in_use) and asked == []  # never proven: not even asked
    life = Lifetime(T0, IDLE, accepted=True)
    life.message(T0 + 1.0, served=True)
    assert not life.expired(T0 + 601.0, in_use) and asked == [True]
    assert life.deadline == T0 + 601.0 + IDLE
    assert life.expired(T0 + 1201.0, lambda: False)


def test_messages_from_a_source_answered_403_do_not_keep_the_connection() -> None:
    """unknown = "reject": its requests are answered 403, and it may ping, but it has its
    first 30 s and no more."""
    life = Lifetime(T0, IDLE, accepted=True)
    for t in (1.0, 10.0, 20.0, 29.0):
        life.message(T0 + t, served=False)
        life.traffic(T0 + t)  # (the 403 out)
    assert not life.proven and life.deadline == T0 + 30.0
    assert life.expired(T0 + 30.0, lambda: True)


def test_callhooks_own_connection_has_the_idle_limit_from_the_start() -> None:
    life = Lifetime(T0, IDLE, accepted=False)
    assert life.deadline == T0 + IDLE
    life.traffic(T0 + 100.0)
    assert life.deadline == T0 + 100.0 + IDLE
    life.message(T0 + 200.0, served=True)
    assert life.proven


def test_a_short_idle_limit_bounds_the_first_message_too() -> None:
    assert Lifetime(T0, 5.0, accepted=True).deadline == T0 + 5.0
    assert Lifetime(T0, IDLE, accepted=True, first_message_timeout=2.0).deadline == T0 + 2.0
