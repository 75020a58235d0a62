"""Where an inbound call has been and who vouches for its caller (callhook/sip/provenance.py):
``call_divert`` from Diversion (RFC 5806) or History-Info (RFC 7044), ``call_attestation``
from P-Attestation-Indicator or an RFC 8224 Identity header's PASSporT."""

from __future__ import annotations

import base64
import json

import pytest

from callhook.sip import provenance
from callhook.sip.message import Headers


def headers(*items: tuple[str, str]) -> Headers:
    return Headers(items)


def passport(claims: object) -> str:
    """A compact-form PASSporT (RFC 8225 §7) with ``claims``, signed with nonsense."""

    def part(value: object) -> str:
        raw = json.dumps(value).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    header = {"alg": "ES256", "ppt": "shaken", "typ": "passport", "x5u": "https://cert.example/c"}
    return f"{part(header)}.{part(claims)}.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        pytest.param([], "", id="none"),
        pytest.param(
            [("Diversion", "<sip:+441908273800@pbx.example>;reason=unconditional;counter=1")],
            "sip:+441908273800@pbx.example",
            id="diversion",
        ),
        pytest.param(
            [("Diversion", "<tel:+15550001111>;reason=no-answer")],
            "tel:+15550001111",
            id="diversion-tel",
        ),
        pytest.param(
            # Each diverting hop adds its entry on top: the caller's target is the last.
            [
                ("Diversion", "<sip:second@b.example>;reason=user-busy"),
                ("Diversion", "<sip:first@a.example>;reason=unconditional"),
            ],
            "sip:first@a.example",
            id="diversion-two-fields",
        ),
        pytest.param(
            [("Diversion", "<sip:second@b.example>;reason=busy, <sip:first@a.example>")],
            "sip:first@a.example",
            id="diversion-list",
        ),
        pytest.param(
            [
                (
                    "History-Info",
                    "<sip:bob@example.com>;index=1, "
                    "<sip:carol@example.com?Reason=SIP%3Bcause%3D302>;index=1.1",
                )
            ],
            "sip:bob@example.com",
            id="history-info",
        ),
        pytest.param(
            [
                ("History-Info", "<sip:carol@example.com?Reason=SIP%3Bcause%3D302>;index=1.1"),
                ("History-Info", "<sip:bob@example.com?Reason=SIP%3Bcause%3D302>;index=1"),
            ],
            "sip:bob@example.com",
            id="history-info-index-1-wherever-it-is",
        ),
        pytest.param(
            [("History-Info", "<sip:bob@example.com>;index=1")], "", id="history-one-entry"
        ),
        pytest.param(
            # A proxy routing an address of record to its registered contact (rc): the
            # call went where it was dialled, it was not diverted.
            [("History-Info", "<sip:bob@example.com>;index=1, <sip:bob@10.0.0.7>;index=1.1;rc")],
            "",
            id="history-routing-only",
        ),
        pytest.param(
            [
                (
                    "History-Info",
                    "<sip:bob@example.com>;index=1, <sip:vm@example.com>;index=1.1;mp=1",
                )
            ],
            "sip:bob@example.com",
            id="history-mapped",
        ),
        pytest.param(
            [
                ("Diversion", "<sip:d@x.example>"),
                ("History-Info", "<sip:h@x.example>;index=1, <sip:i@x.example>;index=1.1"),
            ],
            "sip:d@x.example",
            id="diversion-first",
        ),
        pytest.param([("Diversion", "<not a uri")], "", id="malformed"),
    ],
)
def test_divert(items: list[tuple[str, str]], expected: str) -> None:
    assert provenance.divert(headers(*items)) == expected


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        pytest.param([], "", id="none"),
        pytest.param([("P-Attestation-Indicator", "A")], "A", id="indicator-A"),
        pytest.param([("P-Attestation-Indicator", " c ")], "C", id="indicator-lower"),
        pytest.param([("P-Attestation-Indicator", "D")], "", id="indicator-unknown"),
        pytest.param(
            [("Identity", f"{passport({'attest': 'B', 'orig': {'tn': '1555'}})};info=<https://c>")],
            "B",
            id="identity",
        ),
        pytest.param(
            [("Identity", f"{passport({'attest': 'X'})};info=<https://c>;alg=ES256")],
            "",
            id="identity-unknown-level",
        ),
        pytest.param([("Identity", "a.b.c")], "", id="identity-not-base64-json"),
        pytest.param([("Identity", passport(["A"]))], "", id="identity-not-an-object"),
        pytest.param([("Identity", "just-text")], "", id="identity-not-a-jwt"),
        pytest.param(
            [("P-Attestation-Indicator", "C"), ("Identity", passport({"attest": "A"}))],
            "C",
            id="indicator-first",
        ),
    ],
)
def test_attestation(items: list[tuple[str, str]], expected: str) -> None:
    assert provenance.attestation(headers(*items)) == expected


def test_what_a_caller_writes_never_raises() -> None:
    """A PASSporT nested past Python's recursion limit, one too large to be one, and
    History-Info entries that are not addresses: nothing, never an exception."""
    deep = base64.urlsafe_b64encode(b"[" * 1200).rstrip(b"=").decode()
    huge = base64.urlsafe_b64encode(json.dumps({"attest": "A", "x": "y" * 9000}).encode())
    for value in (f"e30.{deep}.c2ln", f"e30.{huge.decode().rstrip('=')}.c2ln"):
        assert provenance.attestation(headers(("Identity", value))) == ""
    broken = headers(("History-Info", "<<<, >>>;index=1, <sip:a@b>;index=1.1;mp=1"))
    assert provenance.divert(broken) in ("", "sip:a@b")
