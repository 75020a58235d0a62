"""The far ends of a flow's connects, in process (callhook/devtools/callees.py), on a virtual clock,
and how a flow file describes them (callhook/devtools/flow.py)."""

from __future__ import annotations

import pytest

from callhook.devtools.callees import SimulatedCallees
from callhook.devtools.flow import Callee, FlowError, parse_flow
from callhook.events import (
    CallCallee,
    CalleeAnswered,
    CalleeEnded,
    CalleeRinging,
    DropCallee,
    MediaEvent,
    Refer,
    ReferAnswered,
)


def run(callees: SimulatedCallees, until: float) -> list[tuple[float, MediaEvent]]:
    """Every event with the time it fell due, stepping from one due time to the next."""
    got: list[tuple[float, MediaEvent]] = []
    while (due := callees.next_time()) is not None and due <= until:
        got.extend((due, e) for e in callees.pop_due(due))
    return got


def test_an_answering_callee_rings_answers_and_hangs_up_when_told() -> None:
    callees = SimulatedCallees({"sip:sales@*": Callee(rings=2, talks=5)})
    callees.command(CallCallee(0, "sip:Sales@pbx.example"), 10.0)  # case aside
    got = run(callees, 100.0)
    assert [(t, type(e)) for t, e in got] == [
        (10.0, CalleeRinging),
        (12.0, CalleeAnswered),
        (17.0, CalleeEnded),
    ]
    assert got[1][1] == CalleeAnswered(
        0,
        {
            "call_id": "callee-0",
            "call_direction": "out",
            "call_to": "sip:Sales@pbx.example",
            "call_state": "answered",
        },
    )
    assert got[2][1] == CalleeEnded(0, "hung_up", "BYE")
    assert callees.placed == [(0, "sip:Sales@pbx.example", "sip:sales@*")]


@pytest.mark.parametrize(
    ("outcome", "raw"),
    [("busy", "486"), ("no_answer", "480"), ("unobtainable", "404"), ("failed", "500")],
)
def test_a_callee_that_does_not_answer_ends_with_its_cause(outcome: str, raw: str) -> None:
    callees = SimulatedCallees({"+44*": Callee(rings=3, outcome=outcome)})
    callees.command(CallCallee(1, "+441234567890"), 0.0)
    assert run(callees, 100.0) == [(0.0, CalleeRinging(1)), (3.0, CalleeEnded(1, outcome, raw))]


def test_the_first_matching_glob_decides_and_an_unknown_destination_is_unobtainable() -> None:
    callees = SimulatedCallees(
        {"sip:a@*": Callee(outcome="busy", rings=0), "sip:*": Callee(rings=1)}
    )
    callees.command(CallCallee(0, "sip:a@x"), 0.0)
    callees.command(CallCallee(1, "sip:b@x"), 0.0)
    callees.command(CallCallee(2, "+15550100"), 0.0)
    got = [e for _, e in run(callees, 100.0)]
    assert CalleeEnded(0, "busy", "486") in got
    assert CalleeAnswered in {type(e) for e in got if getattr(e, "attempt", None) == 1}
    assert CalleeEnded(2, "unobtainable", "404") in got
    assert [g for _, _, g in callees.placed] == ["sip:a@*", "sip:*", None]


def test_a_dropped_callee_says_nothing_more() -> None:
    callees = SimulatedCallees({"sip:*": Callee(rings=5, talks=5)})
    callees.command(CallCallee(0, "sip:x@y"), 0.0)
    callees.command(CallCallee(1, "sip:z@y"), 0.0)
    assert [e for e in callees.pop_due(0.0)] == [CalleeRinging(0), CalleeRinging(1)]
    callees.command(DropCallee(0), 1.0)  # CANCEL while it rings
    got = [e for _, e in run(callees, 100.0)]
    assert {getattr(e, "attempt", None) for e in got} == {1}
    assert callees.next_time() is None


def test_a_refer_is_refused_as_callhooks_own_user_agent_refuses_it() -> None:
    callees = SimulatedCallees({})
    callees.command(Refer("sip:bob@example.com"), 4.0)
    assert run(callees, 10.0) == [(4.0, ReferAnswered(405))]


def test_a_flow_file_describes_its_callees() -> None:
    flow = parse_flow(
        "app: demo\ncallees:\n  'sip:sales@*': {rings: 2, talks: 5}\n"
        "  '+44*': {outcome: busy}\nsteps: []\n"
    )
    assert flow.callees == {
        "sip:sales@*": Callee(rings=2, talks=5),
        "+44*": Callee(outcome="busy"),
    }
    with pytest.raises(FlowError, match=r"callees\.x\.outcome"):
        parse_flow("app: demo\ncallees:\n  x: {outcome: maybe}\n")
    with pytest.raises(FlowError, match=r"callees\.x\.ring"):
        parse_flow("app: demo\ncallees:\n  x: {ring: 2}\n")
