"""Aculab's Application Status read from a call log (callhook/calls/applicationstatus.py): the
instance's record, its call's record and its errors, as the lines callhook writes say."""

from __future__ import annotations

from callhook.calls.applicationstatus import aculab_datetime, read

LOG = (
    (
        "2026-11-29T06:36:38.000Z +0.000 call_start outbound call c-1 from "
        "'sip:callhook@10.0.0.1' to \"sip:o'brien@example.com\", application 'outbound'\n"
    )
    + """\
2026-11-29T06:36:38.100Z +0.100 page_request POST http://app/start (first page)
2026-11-29T06:36:39.000Z +1.000 error status: http://app/next: HTTP 500
2026-11-29T06:36:41.500Z +3.500 call_end call_cause=failed call_raw_cause=200
2026-11-29T06:36:41.600Z +3.600 page_request POST http://app/final (final page)
"""
)


def test_a_finished_instance() -> None:
    status = read("abc", "outbound", LOG)
    assert not status.running
    body = status.as_aculab()
    adr = body["adr"]
    assert (adr["application_instance_id"], adr["application_name"]) == ("abc", "outbound")
    assert adr["start_datetime"] == "2026-11-29_06:36:38"
    assert adr["stop_datetime"] == "2026-11-29_06:36:41"
    assert adr["duration"] == 3.5
    assert adr["total_cost"] == 0.0 and adr["status"] == 1  # failed
    (cdr,) = body["cdrs"]
    assert cdr["call_id"] == "c-1" and cdr["call_direction"] == "out"
    assert cdr["call_from"] == "sip:callhook@10.0.0.1"
    assert cdr["call_to"] == "sip:o'brien@example.com"  # a quote in it, read back whole
    assert (cdr["call_cause"], cdr["call_raw_cause"]) == ("failed", "200")
    (err,) = body["errs"]
    assert err["description"] == "status: http://app/next: HTTP 500"
    assert err["datetime"] == "2026-11-29_06:36:39"


def test_a_running_instance_and_an_unanswered_one() -> None:
    running = read("r", "app", LOG.splitlines()[0] + "\n")
    assert running.running and running.as_aculab()["adr"]["stop_time"] is None
    unanswered = read(
        "u",
        "app",
        "2026-11-29T06:00:00.000Z +0.000 call_start outbound call c-2 to 'sip:x@y'\n"
        "2026-11-29T06:00:00.000Z +0.000 call_end call_cause=busy call_raw_cause=486 "
        "(not answered)\n",
    )
    (cdr,) = unanswered.as_aculab()["cdrs"]
    assert (cdr["call_to"], cdr["call_cause"], cdr["call_raw_cause"]) == ("sip:x@y", "busy", "486")
    assert cdr["call_from"] == ""


def test_an_empty_or_foreign_log_says_nothing_wrong() -> None:
    status = read("e", "app", "not a log line\n\n")
    assert status.running and status.as_aculab()["cdrs"] == []


def test_aculab_datetime() -> None:
    assert aculab_datetime(0) == "1970-01-01_00:00:00"
