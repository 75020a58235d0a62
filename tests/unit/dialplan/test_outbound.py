"""The toll-fraud limits (callhook/dialplan/outbound.py): which destinations outbound calls may
reach and how many at once per application (``[outbound]``)."""

from __future__ import annotations

import pytest

from callhook.dialplan.outbound import (
    REPORT_HOLDS,
    OutboundCalls,
    OutboundPolicy,
    PatternError,
    UriPattern,
    check_pattern,
)


def test_empty_allow_refuses_everything_but_our_own_numbers_exactly() -> None:
    policy = OutboundPolicy((), own_numbers=["+441234567890"])
    assert policy.refusal("+441234567890") is None
    assert policy.refusal("00441234567890") is None  # 00 is +
    assert policy.refusal("441234567890") is None  # the same digits without +
    # Not the national form: its country code is a guess, and a guess can be another number.
    for destination in ("01234 567890", "+441234567891", "+882", "sip:alice@127.0.0.1"):
        why = policy.refusal(destination)
        assert why is not None and why.startswith("refused by [outbound] allow:")
        assert destination in why and "allow is empty" in why


def test_sip_patterns_match_the_parsed_uri_part_by_part_without_case() -> None:
    policy = OutboundPolicy(["sip:*@192.168.1.*", "SIP:Alice@PBX.example.com"])
    assert policy.allows("sip:100@192.168.1.20")
    assert policy.allows("sip:100@192.168.1.20:5070;transport=tcp")
    assert policy.allows("sip:alice@pbx.example.com")
    assert not policy.allows("sip:bob@pbx.example.com")
    assert not policy.allows("sip:100@192.168.2.20")
    assert not policy.allows("sips:100@192.168.1.20")  # another scheme, another pattern
    assert not policy.allows("+44123")  # a URI pattern allows no number
    why = policy.refusal("sip:x@203.0.113.9")
    assert why == "refused by [outbound] allow: sip:x@203.0.113.9 matches none of its patterns"


@pytest.mark.parametrize(
    "destination",
    [
        "sip:+44@evil.example;x=@provider.example",  # a parameter ending in @allowed
        "sip:+44@evil.example?h=@provider.example",  # a URI header ending in @allowed
        "sip:x@evil.example;maddr=192.168.1.1",  # maddr: sent elsewhere than its host
        "sip:x@192.168.1.1.attacker.example",  # * would have spanned the dots
        "sip:x@192.168.1",  # fewer labels
    ],
)
def test_a_glob_cannot_be_stretched_to_another_host(destination: str) -> None:
    policy = OutboundPolicy(["sip:+44*@provider.example", "sip:*@192.168.1.*"])
    assert not policy.allows(destination)


def test_ports_and_ipv6_references() -> None:
    policy = OutboundPolicy(["sip:*@pbx.example:5070", "sip:*@[fd00::*]"])
    assert policy.allows("sip:a@pbx.example:5070") and not policy.allows("sip:a@pbx.example")
    assert OutboundPolicy(["sip:*@pbx.example:5060"]).allows("sip:a@pbx.example")  # default
    assert policy.allows("sip:a@[fd00::1]") and not policy.allows("sip:a@[fe80::1]")


def test_through_a_trunk_the_user_part_is_the_number_that_counts() -> None:
    # A LAN pattern must not let a premium number out through the provider.
    policy = OutboundPolicy(["sip:*@192.168.1.*", "+44"])
    assert not policy.allows("sip:+1900555@192.168.1.5", trunk="provider")
    assert policy.allows("sip:+1900555@192.168.1.5")  # directly: the LAN host itself
    assert policy.allows("sip:+4420@anything.example", trunk="provider")
    assert policy.allows("sip:reception@192.168.1.5", trunk="provider")  # not a number: URI
    assert policy.allows("+442071234567", trunk="provider")


@pytest.mark.parametrize(
    "user",
    ["%2B19005551234", "+19005551234%23", "*67+19005551234", "++19005551234", "19005551234#",
     "%31%39%30%30", "+1900555;isub=1", "x19005551234", "1900-CALL-NOW",
     "+442071;19005551234"],
)  # fmt: skip
def test_through_a_trunk_a_user_part_dialled_as_a_number_must_be_one(user: str) -> None:
    """A provider may unescape %2B, or drop what is not a digit, and route the rest: a
    user part with digits is a number or is refused, whatever host the URI names."""
    policy = OutboundPolicy(["sip:*@192.168.1.*", "+44"])
    why = policy.refusal(f"sip:{user}@192.168.1.5", trunk="provider")
    assert why is not None and "refused by [outbound] allow" in why
    assert policy.allows(f"sip:{user}@192.168.1.5")  # directly: the LAN host itself
    assert policy.allows("sip:%2B442071234567@192.168.1.5", trunk="provider")  # (decoded)


def test_through_a_trunk_a_pattern_that_names_its_user_part_allows_that_destination() -> None:
    """A PBX's extension with digits, listed by the operator, is not judged as a number:
    the pattern names that one destination (a wildcard in the user part does not)."""
    policy = OutboundPolicy(["sip:ext-101@pbx.example", "sip:100@192.168.1.5", "sip:*@10.0.0.*"])
    assert policy.allows("sip:ext-101@pbx.example", trunk="provider")
    assert policy.allows("sip:100@192.168.1.5", trunk="provider")
    assert policy.allows("SIP:100@192.168.1.5:5060", trunk="provider")
    for other in ("sip:ext-102@pbx.example", "sip:100@192.168.1.6", "sip:101@192.168.1.5",
                  "sip:+19005551234@10.0.0.1", "sip:100;x@192.168.1.5"):  # fmt: skip
        assert not policy.allows(other, trunk="provider"), other


def test_number_prefixes_match_canonical_numbers() -> None:
    policy = OutboundPolicy(["+44", "0800"])
    assert policy.allows("+442071234567")
    assert policy.allows("0044 20 7123 4567")  # 00 is +
    assert not policy.allows("+882123")
    assert not policy.allows("+4")
    assert policy.allows("0800123456")
    assert not policy.allows("sip:+442071234567@provider")  # numbers allow no URI
    plain = OutboundPolicy(["44"])  # no +: also the digits of a + number
    assert plain.allows("+4420") and plain.allows("4420") and not plain.allows("+3344")


def test_star_allows_everything() -> None:
    policy = OutboundPolicy(["*"])
    assert policy.allows("sip:anyone@anywhere.example") and policy.allows("+882")


def test_patterns_are_checked() -> None:
    assert check_pattern(" +44 20 ") == "+4420"
    assert check_pattern("sip:*@Example.COM") == UriPattern("sip", "*", "example.com", None)
    assert check_pattern("sips:pbx.example:50*") == UriPattern("sips", "*", "pbx.example", "50*")
    for bad in ("", "+", "premium", "sip:a b@c", "tel:+44", "sip:a@b;maddr=c", "sip:a@", "sip:"):
        with pytest.raises(PatternError):
            check_pattern(bad)


def test_the_calls_per_application_limit() -> None:
    policy = OutboundPolicy(["*"], max_calls_per_app=2)
    assert policy.over_limit("sales", 0) is None
    assert policy.over_limit("sales", 1) is None
    why = policy.over_limit("sales", 2)
    assert why == (
        "refused by [outbound] max_calls_per_app: application 'sales' has 2 outbound "
        "call(s) already (the limit is 2)"
    )


def test_outbound_calls_count_this_process_and_the_others_last_reports() -> None:
    now = [100.0]
    calls = OutboundCalls(lambda: now[0])
    told: list[dict[str, int]] = []
    calls.on_change = told.append
    calls.add("sales")
    calls.add("sales")
    calls.remove("sales")
    assert told == [{"sales": 1}, {"sales": 2}, {"sales": 1}]  # each change, whole
    calls.heard("worker 1", {"sales": 2, "support": 1}, "r1", 1)
    assert (calls.count("sales"), calls.count("support")) == (3, 1)
    calls.heard("worker 1", {"sales": 1}, "r1", 3)
    calls.heard("worker 1", {"sales": 5}, "r1", 2)  # an older report arriving late: ignored
    assert calls.count("sales") == 2
    calls.heard("worker 1", {}, "r1", 4)  # none left there
    assert calls.count("sales") == 1
    # A process that stops reporting (it died) stops counting.
    calls.heard("worker 2", {"sales": 4}, "r1", 1)
    now[0] += REPORT_HOLDS - 0.1
    assert calls.count("sales") == 5
    now[0] += 0.2
    assert calls.count("sales") == 1
    # Worker 1 started again: its first report counts, though an earlier run went further.
    calls.heard("worker 1", {"sales": 2}, "r2", 1)
    assert calls.count("sales") == 3
    calls.heard("worker 1", {}, "r2", 2)
    calls.remove("sales")
    assert told[-1] == {} and calls.count("sales") == 0
