"""The SIP guard (callhook/sip/guard.py) on a virtual clock: access list, per-source token
buckets, bans from the rate and from failed authentications, a bounded table, notes."""

from __future__ import annotations

from callhook.sip.guard import AUTH_FAILURES, Guard, networks

T0 = 1000.0


def test_private_sources_pass_and_others_get_the_unknown_policy() -> None:
    guard = Guard()
    assert guard.admit("192.168.1.20", T0) == "pass"
    assert guard.admit("127.0.0.1", T0) == "pass"
    assert guard.admit("203.0.113.5", T0) == "drop"
    rejecting = Guard(unknown="reject")
    assert rejecting.admit("203.0.113.5", T0) == "reject"
    # Responses are not requests: access does not apply (the agent matches them)...
    assert rejecting.admit("203.0.113.5", T0, request=False) == "pass"
    # ...but from an unallowed source they spend tokens: a flood of fake ones is banned.
    limited = Guard(rate=5)
    flood = [limited.admit("203.0.113.6", T0, request=False) for _ in range(12)]
    assert flood == ["pass"] * 10 + ["drop"] * 2


def test_trunks_peers_and_named_hosts_are_admitted() -> None:
    guard = Guard(networks(["127.0.0.1/32"]))
    guard.extra = networks(["198.51.100.0/24"])
    assert guard.admit("198.51.100.9", T0) == "pass"
    guard.add_peer("203.0.113.7")
    guard.add_peer("203.0.113.7")
    guard.remove_peer("203.0.113.7")
    assert guard.admit("203.0.113.7", T0) == "pass"  # one call still needs it
    guard.remove_peer("203.0.113.7")
    assert guard.admit("203.0.113.7", T0) == "drop"
    guard.names = frozenset({"sip.provider.example"})
    assert guard.admit("sip.provider.example", T0) == "pass"
    assert guard.admit("other.example", T0) == "drop"


def test_a_source_over_the_rate_is_banned_and_the_ban_ends() -> None:
    guard = Guard(rate=10, ban_seconds=60)
    verdicts = [guard.admit("10.0.0.5", T0 + i * 0.001) for i in range(25)]
    assert verdicts[:20] == ["pass"] * 20  # the burst: twice the rate
    assert verdicts[20:] == ["drop"] * 5
    (ban,) = guard.bans(T0 + 1)
    assert ban.address == "10.0.0.5" and "more than 10 SIP messages a second" in ban.reason
    assert ban.seconds_left == 60
    assert guard.admit("10.0.0.5", T0 + 30) == "drop"  # still banned, whatever its rate
    assert guard.admit("10.0.0.6", T0 + 30) == "pass"  # others unaffected
    assert guard.admit("10.0.0.5", T0 + 61) == "pass"
    assert guard.bans(T0 + 61) == []


def test_a_steady_source_at_the_rate_is_never_banned() -> None:
    guard = Guard(rate=20)
    assert all(guard.admit("10.0.0.5", T0 + i / 20) == "pass" for i in range(2000))


def test_five_failed_authentications_in_a_minute_ban() -> None:
    guard = Guard(ban_seconds=600)
    for i in range(AUTH_FAILURES - 1):
        guard.auth_failed("10.0.0.7", T0 + i * 20.0, "REST API key")  # spread: no ban
    assert guard.admit("10.0.0.7", T0 + 80) == "pass"
    for i in range(AUTH_FAILURES):
        guard.auth_failed("10.0.0.7", T0 + 100 + i, "REST API key")
    (ban,) = guard.bans(T0 + 110)
    assert ban.reason == "5 failed REST API keys in a minute"
    assert guard.admit("10.0.0.7", T0 + 110) == "drop"
    assert guard.banned("10.0.0.7", T0 + 110)
    assert not guard.banned("10.0.0.7", T0 + 100 + 4 + 600)  # the ban runs out
    assert guard.lift("10.0.0.7", T0 + 111)
    assert guard.admit("10.0.0.7", T0 + 111) == "pass"
    assert not guard.lift("10.0.0.7", T0 + 112)


def test_failures_seen_elsewhere_count_but_only_the_process_that_sees_the_last_bans() -> None:
    # Two workers behind one address: each counts the other's failures (ban=False).
    here, there = Guard(ban_seconds=600), Guard(ban_seconds=600)
    for i in range(AUTH_FAILURES - 1):
        guard, other = (here, there) if i % 2 else (there, here)
        assert guard.auth_failed("10.0.0.7", T0 + i, "REST API key") is None
        assert other.auth_failed("10.0.0.7", T0 + i, "REST API key", ban=False) is None
    # Told of the fifth, ``there`` does not ban: only the one that saw it does...
    assert there.auth_failed("10.0.0.7", T0 + 5, "REST API key", ban=False) is None
    assert not there.banned("10.0.0.7", T0 + 5)
    reason = here.auth_failed("10.0.0.7", T0 + 5, "REST API key")
    assert reason == "5 failed REST API keys in a minute"
    assert here.take_notes() == [("10.0.0.7", f"banned for 600 s: {reason}")]
    # ...and tells it, so the ban holds there too, without a second note.
    there.impose("10.0.0.7", T0 + 5.1, reason)
    assert there.banned("10.0.0.7", T0 + 6) and there.admit("10.0.0.7", T0 + 6) == "drop"
    assert [(b.address, b.reason) for b in there.bans(T0 + 6)] == [("10.0.0.7", reason)]
    assert there.take_notes() == []
    assert not there.banned("10.0.0.7", T0 + 5.1 + 600)
    there.impose("127.0.0.1", T0, reason)  # (never the operator's loopback)
    assert not there.banned("127.0.0.1", T0)


def test_the_operators_own_loopback_is_never_banned_for_failed_authentications() -> None:
    # The operator's `callhook bans` on the server must always be able to lift a ban.
    guard = Guard()
    for host in ("127.0.0.1", "::1", "127.0.0.2"):
        for i in range(AUTH_FAILURES * 2):
            guard.auth_failed(host, T0 + i, "REST API key")
    assert [b.address for b in guard.bans(T0 + 20)] == ["127.0.0.2"]
    assert not guard.refuses_api("127.0.0.1", T0 + 20)
    assert guard.refuses_api("127.0.0.2", T0 + 20)
    # Over the SIP rate it is banned like any source, but the REST API still lets it in.
    flooding = Guard(rate=1)
    verdicts = [flooding.admit("127.0.0.1", T0) for _ in range(4)]
    assert verdicts[-1] == "drop" and flooding.bans(T0)[0].address == "127.0.0.1"
    assert flooding.banned("127.0.0.1", T0) and not flooding.refuses_api("127.0.0.1", T0)


def test_the_table_is_bounded_and_keeps_bans() -> None:
    guard = Guard(rate=1, max_sources=100)
    for _ in range(3):
        guard.admit("10.9.9.9", T0)  # banned: over a burst of 2
    for n in range(500):
        guard.admit(f"10.1.{n // 250}.{n % 250}", T0 + 1)
    assert len(guard._sources) <= 100
    assert [b.address for b in guard.bans(T0 + 2)] == ["10.9.9.9"]


def test_a_spray_of_new_sources_cannot_flush_a_ban() -> None:
    """Bans are kept apart from the sources' buckets: however many new (spoofed) sources
    push the least recently seen out of the full table, a ban stays until it ends."""
    guard = Guard(rate=1, max_sources=1000, ban_seconds=600)
    for _ in range(3):
        guard.admit("198.51.100.66", T0)  # banned, then quiet
    for n in range(15):  # others banned too, the way the review's attack went
        for _ in range(3):
            guard.admit(f"10.2.0.{n}", T0 + 1)
    for n in range(5000):  # five tables' worth of one-packet sources
        guard.admit(f"10.3.{n // 250}.{n % 250}", T0 + 2)
    assert len(guard._sources) == 1000
    assert guard.banned("198.51.100.66", T0 + 3)
    assert guard.admit("198.51.100.66", T0 + 3) == "drop"
    assert not guard.banned("198.51.100.66", T0 + 601)  # until it ends
    # The ban table is bounded as well: the oldest ban (the first to end) goes first.
    many = Guard(rate=1, max_sources=100)
    for n in range(150):
        for _ in range(3):
            many.admit(f"10.4.0.{n}", T0 + n)
    bans = many.bans(T0 + 200)
    assert len(bans) == 100 and {b.address for b in bans} == {f"10.4.0.{n}" for n in range(50, 150)}


def test_notes_come_once_a_minute_per_source_and_cause() -> None:
    guard = Guard()
    for i in range(50):
        guard.admit("203.0.113.5", T0 + i * 0.5)
    assert guard.take_notes() == [("203.0.113.5", "not in [security] allow (drop)")]
    guard.admit("203.0.113.5", T0 + 61)
    assert len(guard.take_notes()) == 1


def test_trunks_and_responses_have_no_bucket() -> None:
    guard = Guard(networks(["127.0.0.1/32"]), rate=1)
    guard.extra = networks(["198.51.100.7/32"])
    assert all(guard.admit("198.51.100.7", T0) == "pass" for _ in range(1000))  # a proxy
    assert all(guard.admit("127.0.0.1", T0, request=False) == "pass" for _ in range(1000))
    assert guard.bans(T0) == []
    assert [guard.admit("127.0.0.1", T0) for _ in range(3)] == ["pass", "pass", "drop"]


def test_an_ipv4_peer_seen_by_a_dual_stack_socket_is_judged_as_ipv4() -> None:
    guard = Guard()
    assert guard.admit("::ffff:192.168.1.20", T0) == "pass"
    assert guard.admit("::ffff:203.0.113.5", T0) == "drop"
    assert guard.admit("fd00::5", T0) == "pass"  # unique-local
