"""The toll-fraud limits (callhook/outbound.py): which destinations outbound calls may
reach and how many at once per application (``[outbound]``)."""

from __future__ import annotations

import pytest

from callhook.outbound import OutboundPolicy, PatternError, check_pattern


def test_empty_allow_refuses_everything_but_our_own_numbers() -> None:
    policy = OutboundPolicy((), own_numbers=["+441234567890"])
    assert policy.refusal("+441234567890") is None
    assert policy.refusal("01234 567890") is None  # the same number, national form
    assert policy.refusal("00441234567890") is None
    for destination in ("+441234567891", "+882", "sip:alice@127.0.0.1", "0900123456"):
        why = policy.refusal(destination)
        assert why is not None and why.startswith("refused by [outbound] allow:")
        assert destination in why and "allow is empty" in why


def test_sip_patterns_are_globs_over_the_whole_uri_without_case() -> None:
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
    assert check_pattern("sip:*@Example.COM") == "sip:*@example.com"
    for bad in ("", "+", "premium", "sip:a b@c", "tel:+44"):
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
