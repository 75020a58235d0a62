"""What ``callhook test --sip`` reads in serve's call log (callhook/devtools/sipflow.py)."""

from __future__ import annotations

from callhook.devtools.flow import Expected, Request
from callhook.devtools.flowcaller import matches
from callhook.devtools.sipflow import call_cause, page_calls, parse_log, prompts

LOG = """\
2026-11-27T01:00:00.000Z +0.000 call_start inbound call abc from 'sip:flow@h' to 'sip:x@h'
2026-11-27T01:00:00.001Z +0.000 page_request POST http://app/start (first page)
2026-11-27T01:00:00.010Z +0.010 prompt_start #2 say 'Please enter a number, then press hash.'
2026-11-27T01:00:04.000Z +4.000 prompt_end #2
2026-11-27T01:00:05.000Z +5.000 action_end [1] get_number: {"entered_number": "42"}
2026-11-27T01:00:05.000Z +5.000 page_request POST http://app/number (get_number)
2026-11-27T01:00:05.010Z +5.010 prompt_start #3 say 'You entered 4 2.'
2026-11-27T01:00:06.000Z +6.000 action_end [0] play: played
2026-11-27T01:00:06.000Z +6.000 action_end [3] redirect
2026-11-27T01:00:06.000Z +6.000 page_request POST http://app/choice (redirect)
"""


def test_page_requests_carry_the_result_of_the_action_that_brought_them() -> None:
    calls = page_calls(parse_log(LOG))
    assert [c.url for c in calls] == ["http://app/start", "http://app/number", "http://app/choice"]
    assert calls[0].body == {} and calls[2].body == {}  # a first page, a redirect: no result
    assert calls[1].body == {
        "action_result": {"action": "get_number", "result": {"entered_number": "42"}}
    }
    expected = Expected(page="number", action="get_number", result={"entered_number": 42})
    want = Request(request=expected)
    assert matches(calls[1], want)
    wrong = Request(request=Expected(page="number", result={"entered_number": "24"}))
    assert not any(matches(c, wrong) for c in calls)


def test_a_prompt_is_over_when_it_ended_or_the_call_did() -> None:
    lines = parse_log(LOG)
    found = prompts(lines)
    assert [(p.prompt_id, p.over) for p in found] == [("#2", True), ("#3", False)]
    assert "you entered 4 2" in found[1].text.lower()
    assert call_cause(lines) is None
    ended = parse_log(LOG + "2026-11-27T01:00:07.000Z +7.000 call_end call_cause=hung_up x\n")
    assert call_cause(ended) == "hung_up"
    assert all(p.over for p in prompts(ended))
