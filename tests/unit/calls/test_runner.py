"""The call runner against a real local application: the wire contract of docs/behaviour.md.

Request bodies (§1.1), responses (§1.2), errors (§1.3), the final page, the
token, relative URLs, GET pages, signatures and the per-call log, with the
decisions of docs/behaviour.md ("Pages", "Errors", "The final page").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from callhook.actions.machine import ActionContext
from callhook.devtools.harness import AppServer, Caller, CallRun, Received, Reply, run_call
from callhook.edge.pages import MAX_RESPONSE_BYTES
from callhook.events import (
    ClassifyFarEnd,
    ClassifyOptions,
    SayText,
    SpeechRejected,
    SpeechStarted,
    StartPrompt,
)
from callhook.ports import CallInfo
from callhook.signature import HEADER, verify

SAY = {"play": {"play_list": [{"text_to_say": "hello"}]}}


def say(text: str) -> dict[str, Any]:
    return {"play": {"play_list": [{"text_to_say": text}]}}


def get_number(url: str = "/n", **props: Any) -> dict[str, Any]:
    return {"get_number": {"next_page": {"url": url}, "digit_count": 1, **props}}


def redirect(url: str, method: str = "POST") -> dict[str, Any]:
    return {"redirect": {"next_page": {"url": url, "method": method}}}


def paths(app: AppServer) -> list[str]:
    return [r.path for r in app.requests]


def spoken(r: CallRun) -> list[str]:
    texts = []
    for _, command in r.leg.commands(StartPrompt):
        texts += [i.text for i in command.items if isinstance(i, SayText)]
    return texts


def final(app: AppServer) -> dict[str, Any]:
    (body,) = app.bodies("/final")
    this_call: dict[str, Any] = body["this_call"]
    return this_call


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --- the request body (docs/behaviour.md, "Pages") ----------------------------------------


THIS_CALL_KEYS = {
    "call_id",
    "call_direction",
    "call_from",
    "call_to",
    "call_target",
    "call_divert",
    "call_attestation",
    "call_state",
    "seconds_call_duration",
    "application_parameters",
}


async def test_request_body_on_first_next_and_final_pages(app: AppServer) -> None:
    info = CallInfo("abc-123", "in", "sip:bob@example.org", "sip:ivr@example.net", "ivr")
    app.page("/start", [get_number("/n")])
    app.page("/n", [])
    app.page("/final", [])
    r = await run_call(
        app,
        Caller().press("7", at=2.37),
        final_page="/final",
        application_parameters="lang=fr;queue=2",
        info=info,
    )
    first, nxt, fin = app.requests
    assert paths(app) == ["/start", "/n", "/final"]
    for req in app.requests:
        assert req.method == "POST"
        assert req.headers["Content-Type"].startswith("application/json")
        assert json.loads(req.raw) == req.json

    assert set(first.json) == {
        "application_instance_id",
        "token",
        "log_filename",
        "is_notification",
        "this_call",
    }
    instance = first.json["application_instance_id"]
    assert isinstance(instance, str) and instance
    assert instance == r.summary.instance_id
    assert first.json["token"] is None
    assert isinstance(first.json["log_filename"], str) and first.json["log_filename"]
    assert first.json["is_notification"] is False
    assert first.json["this_call"] == {
        "call_id": "abc-123",
        "call_direction": "in",
        "call_from": "sip:bob@example.org",
        "call_to": "sip:ivr@example.net",
        "call_target": "ivr",
        "call_divert": "",
        "call_attestation": "",
        "call_state": "inbound",  # requested while the call rings
        "seconds_call_duration": 0.0,
        "application_parameters": "lang=fr;queue=2",
    }
    assert isinstance(first.json["this_call"]["seconds_call_duration"], float)

    assert set(nxt.json) == set(first.json) | {"action_result"}
    for key in ("application_instance_id", "log_filename", "is_notification"):
        assert nxt.json[key] == first.json[key]
    assert nxt.json["action_result"] == {
        "action": "get_number",
        "result": {"entered_number": "7"},
    }
    assert set(nxt.json["this_call"]) == THIS_CALL_KEYS
    assert nxt.json["this_call"]["call_state"] == "answered"
    # answered at 0.0 (before get_number), 2.37 s later: one decimal
    assert r.leg.answered_at == 0.0
    assert nxt.json["this_call"]["seconds_call_duration"] == 2.4
    assert b'"seconds_call_duration":2.4' in nxt.raw
    assert nxt.json["this_call"]["application_parameters"] == "lang=fr;queue=2"

    assert set(fin.json) == set(first.json)
    assert fin.json["application_instance_id"] == instance
    assert set(fin.json["this_call"]) == THIS_CALL_KEYS | {"call_cause", "call_raw_cause"}
    assert fin.json["this_call"]["call_state"] == "idle"
    assert fin.json["this_call"]["seconds_call_duration"] == 2.4


async def test_call_state_stays_inbound_until_an_audio_action(app: AppServer) -> None:
    app.page("/start", [redirect("/p2")])
    app.page("/p2", [{"clear_input": {}}, get_number("/n")])
    app.page("/n", [])
    await run_call(app, Caller().press("1", at=1.0))
    states = [b["this_call"]["call_state"] for b in app.bodies()]
    assert states == ["inbound", "inbound", "answered"]


async def test_outbound_call_is_answered_from_the_start(app: AppServer) -> None:
    app.page("/start", [])
    await run_call(app, Caller(), info=CallInfo("out-1", "out", "sip:ivr@x", "sip:c@y"))
    this_call = app.bodies("/start")[0]["this_call"]
    assert this_call["call_direction"] == "out"
    assert this_call["call_state"] == "answered"
    # Aculab's availability: call_divert always (empty out), call_attestation inbound only,
    # outbound_parameters only for a call started with parameters.
    assert this_call["call_divert"] == ""
    assert "call_attestation" not in this_call
    assert "outbound_parameters" not in this_call


async def test_outbound_parameters_reach_this_call(app: AppServer) -> None:
    app.page("/start", [])
    info = CallInfo("out-2", "out", "sip:ivr@x", "sip:c@y", outbound_parameters='{"order": 7}')
    await run_call(app, Caller(), info=info)
    assert app.bodies("/start")[0]["this_call"]["outbound_parameters"] == '{"order": 7}'


async def test_a_diverted_attested_inbound_call(app: AppServer) -> None:
    app.page("/start", [])
    info = CallInfo(
        "in-3", "in", "sip:+1555@x", "sip:ivr@y", "ivr", divert="sip:+1666@x", attestation="B"
    )
    await run_call(app, Caller(), info=info)
    this_call = app.bodies("/start")[0]["this_call"]
    assert this_call["call_divert"] == "sip:+1666@x"
    assert this_call["call_attestation"] == "B"
    assert "outbound_parameters" not in this_call


async def test_duration_on_final_page_is_from_answer_to_end(app: AppServer) -> None:
    app.page("/start", [say("x" * 200)])  # 13 s of speech
    app.page("/final", [])
    r = await run_call(app, Caller().hang_up(at=5.57), final_page="/final")
    assert final(app)["seconds_call_duration"] == 5.6
    assert r.leg.answered_at == 0.0


# --- token ---------------------------------------------------------------------------------


async def test_token_is_what_the_last_response_said_null_by_default(app: AppServer) -> None:
    # Aculab's HTTP response page: token "defaults to null". A response without one
    # leaves the next request's token null; it does not keep the previous one.
    app.page("/start", {"actions": [redirect("/p2")], "token": "t1"})
    app.page("/p2", {"actions": [redirect("/p3")]})  # no token: null from now on
    app.page("/p3", {"actions": [redirect("/p4")], "token": "t2"})  # set again
    app.page("/p4", {"actions": [redirect("/p5")], "token": None})  # null
    app.page("/p5", {"actions": [], "token": "t3"})
    app.page("/final", [])
    await run_call(app, Caller(), final_page="/final")
    tokens = [(r.path, r.json["token"]) for r in app.requests]
    assert tokens == [
        ("/start", None),
        ("/p2", "t1"),
        ("/p3", None),
        ("/p4", "t2"),
        ("/p5", None),
        ("/final", "t3"),
    ]


# --- URLs, redirect, list end --------------------------------------------------------------


async def test_relative_urls_resolve_against_the_returning_page(app: AppServer) -> None:
    app.page("/app/start", [redirect("menu")])  # -> /app/menu
    app.page("/app/menu", [get_number("choice/got")])  # -> /app/choice/got
    app.page("/app/choice/got", [redirect("../done?x=1")])  # -> /app/done
    app.page("/app/done", [redirect("/top")])  # absolute path
    app.page("/top", [])
    await run_call(app, Caller().press("5", at=1.0), first_page="/app/start")
    assert paths(app) == ["/app/start", "/app/menu", "/app/choice/got", "/app/done", "/top"]


async def test_redirect_replaces_the_rest_of_the_list(app: AppServer) -> None:
    app.page("/start", [say("one"), redirect("/r"), say("never")])
    app.page("/r", [say("two")])
    r = await run_call(app, Caller())
    assert spoken(r) == ["one", "two"]
    assert "action_result" not in app.bodies("/r")[0]
    assert r.summary.cause == "completed"


async def test_next_page_answer_replaces_the_rest_of_the_list(app: AppServer) -> None:
    app.page("/start", [get_number("/n"), say("never")])
    app.page("/n", [say("instead")])
    r = await run_call(app, Caller().press("1", at=0.5))
    assert spoken(r) == ["instead"]


async def test_empty_action_list_hangs_up(app: AppServer) -> None:
    app.page("/start", [say("hi"), redirect("/empty")])
    app.page("/empty", [])
    app.page("/final", [])
    r = await run_call(app, Caller(), final_page="/final")
    assert r.leg.hung_up_at is not None
    assert (r.summary.cause, r.summary.raw_cause) == ("completed", "200")
    assert (final(app)["call_cause"], final(app)["call_raw_cause"]) == ("completed", "200")


async def test_list_running_out_hangs_up(app: AppServer) -> None:
    app.page("/start", [say("one"), say("two")])
    app.page("/final", [])
    r = await run_call(app, Caller(), final_page="/final")
    assert spoken(r) == ["one", "two"]
    assert r.leg.hung_up_at == pytest.approx(r.leg.commands(StartPrompt)[1][0] + 0.3)
    assert final(app)["call_cause"] == "completed"
    assert final(app)["call_raw_cause"] == "200"


async def test_hang_up_first_refuses_the_call(app: AppServer) -> None:
    app.page("/start", [{"hang_up": {}}, say("never")])
    app.page("/final", [])
    r = await run_call(app, Caller(), final_page="/final")
    assert r.leg.answered_at is None
    assert r.leg.sent == []
    assert (r.summary.cause, r.summary.raw_cause) == ("completed", "603")
    this_call = final(app)
    assert this_call["call_cause"] == "completed"
    assert this_call["call_raw_cause"] == "603"
    assert this_call["call_state"] == "idle"
    assert this_call["seconds_call_duration"] == 0.0


async def test_hang_up_after_answer(app: AppServer) -> None:
    app.page("/start", [say("bye"), {"hang_up": {}}, say("never")])
    app.page("/final", [])
    r = await run_call(app, Caller(), final_page="/final")
    assert spoken(r) == ["bye"]
    assert final(app)["call_raw_cause"] == "200"


# --- the final page --------------------------------------------------------------------------


async def test_final_page_once_last_and_its_response_ignored(app: AppServer) -> None:
    app.page("/start", [say("hi")])
    app.page("/final", [say("never"), redirect("/start")])
    r = await run_call(app, Caller(), final_page="/final")
    assert paths(app) == ["/start", "/final"]
    assert spoken(r) == ["hi"]
    this_call = final(app)
    assert this_call["call_state"] == "idle"
    assert (this_call["call_cause"], this_call["call_raw_cause"]) == ("completed", "200")


async def test_failing_final_page_is_logged_only(app: AppServer) -> None:
    app.page("/start", [])
    app.page("/final", Reply("down", status=503))
    app.page("/error", [say("never")])
    r = await run_call(app, Caller(), final_page="/final", error_page="/error")
    assert paths(app) == ["/start", "/final"]
    assert r.summary.cause == "completed"
    assert len(r.summary.errors) == 1
    assert "/final" in r.summary.errors[0]


async def test_caller_hang_up_during_an_action(app: AppServer) -> None:
    app.page("/start", [say("x" * 200), say("never")])
    app.page("/final", [])
    r = await run_call(app, Caller().hang_up(at=1.0), final_page="/final")
    assert spoken(r) == ["x" * 200]
    assert r.leg.hung_up_at is None  # the caller ended it, not us
    this_call = final(app)
    assert (this_call["call_cause"], this_call["call_raw_cause"]) == ("hung_up", "BYE")
    assert this_call["call_state"] == "idle"
    assert this_call["seconds_call_duration"] == 1.0
    assert paths(app) == ["/start", "/final"]


# --- errors (docs/behaviour.md, "Errors") -----------------------------------------------------


def bad_page(app: AppServer, kind: str) -> tuple[str, str, int | None]:
    """Make /start lead to a failing page; (its URL, the expected cause, status)."""
    if kind == "unreachable":
        url = f"http://127.0.0.1:{closed_port()}/gone"
        app.page("/start", [redirect(url)])
        return url, "unreachable", None
    app.page("/start", [redirect("/bad")])
    url = app.url("/bad")
    if kind == "status500":
        app.page("/bad", Reply("boom", status=500))
        return url, "status", 500
    if kind == "status404":
        return url, "status", 404  # no such page: the app server answers 404
    if kind == "not_json":
        app.page("/bad", Reply("{not json"))
        return url, "invalid", None
    if kind == "invalid_actions":
        app.page("/bad", [{"get_number": {"next_page": {"url": "/n"}, "digit_count": 40}}])
        return url, "invalid", None
    if kind == "not_an_object":
        app.page("/bad", Reply("[1, 2]"))
        return url, "invalid", None
    if kind == "oversized":
        app.page("/bad", Reply(oversized_but_valid()))
        return url, "invalid", None
    raise AssertionError(kind)


def oversized_but_valid() -> bytes:
    # a syntactically valid action list padded past the default limit ([egress]
    # max_response_mb, 5 MiB): rejected for its size alone
    actions = b'{"actions": [{"play": {"play_list": [{"text_to_say": "big"}]}}]}'
    return actions + b" " * (MAX_RESPONSE_BYTES + 10)


OVERSIZED = "oversized"


ERROR_KINDS: list[Any] = ["unreachable", "status500", "status404", "not_json"]
ERROR_KINDS += ["invalid_actions", "not_an_object", OVERSIZED]


@pytest.mark.parametrize("kind", ERROR_KINDS)
async def test_error_page_gets_error_result_and_its_actions_run(app: AppServer, kind: str) -> None:
    url, cause, status = bad_page(app, kind)
    app.page("/error", [say("sorry")])
    app.page("/final", [])
    r = await run_call(app, Caller(), error_page="/error", final_page="/final")
    (body,) = app.bodies("/error")
    error_result = body["error_result"]
    expected_keys = {"cause", "url", "description"} | ({"status"} if status else set())
    assert set(error_result) == expected_keys
    assert error_result["cause"] == cause
    assert error_result["url"] == url
    assert isinstance(error_result["description"], str) and error_result["description"]
    if status:
        assert error_result["status"] == status
        assert str(status) in error_result["description"]
    assert "action_result" not in body
    assert spoken(r) == ["sorry"]
    assert paths(app)[-2:] == ["/error", "/final"]
    assert paths(app).count("/bad") <= 1  # not retried (page requests are not idempotent)
    # the error page recovered the call: its list ran out
    assert final(app)["call_cause"] == "completed"
    assert any(url in e for e in r.summary.errors)


@pytest.mark.parametrize("kind", ERROR_KINDS)
async def test_without_error_page_the_call_fails(app: AppServer, kind: str) -> None:
    url, cause, status = bad_page(app, kind)
    app.page("/final", [])
    r = await run_call(app, Caller(), final_page="/final")
    assert r.leg.hung_up_at is not None
    assert r.summary.cause == "failed"
    this_call = final(app)
    assert this_call["call_cause"] == "failed"
    # The final page learns why, as the error page would have.
    error_result = app.bodies("/final")[0]["error_result"]
    assert (error_result["cause"], error_result["url"]) == (cause, url)
    assert error_result.get("status") == status
    assert this_call["call_raw_cause"] == "603"  # never answered
    assert paths(app)[-1] == "/final"
    errors = [line for line in r.log.lines if " error " in line]
    assert any(url in line for line in errors)


async def test_error_on_the_first_page(app: AppServer) -> None:
    app.page("/start", Reply("nope", status=500))
    app.page("/error", [say("sorry")])
    r = await run_call(app, Caller(), error_page="/error")
    error_result = app.bodies("/error")[0]["error_result"]
    assert error_result["cause"] == "status"
    assert error_result["url"] == app.url("/start")
    assert error_result["status"] == 500
    assert spoken(r) == ["sorry"]


async def test_error_after_answer_raw_cause_200(app: AppServer) -> None:
    app.page("/start", [get_number("/bad")])
    app.page("/bad", Reply("nope", status=500))
    app.page("/final", [])
    await run_call(app, Caller().press("1", at=1.0), final_page="/final")
    assert (final(app)["call_cause"], final(app)["call_raw_cause"]) == ("failed", "200")
    assert final(app)["seconds_call_duration"] == 1.0


async def test_invalid_actions_log_lines_name_the_json_path(
    app: AppServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    actions = [
        {"get_number": {"next_page": {"url": "/n"}, "digit_count": 40}},
        {"play": {"play_list": []}},
        {"dance": {}},
    ]
    app.page("/start", actions)
    r = await run_call(app, Caller())
    invalid = [line for line in r.log.lines if " invalid_response " in line]
    assert len(invalid) == 3
    url = app.url("/start")
    assert all(url in line for line in invalid)
    assert invalid[0].endswith(
        "$.actions[0].get_number.digit_count: input should be less than or equal to 32, got 40"
    )
    assert "$.actions[1].play.play_list:" in invalid[1]
    assert "$.actions[2]:" in invalid[2] and "dance" in invalid[2]
    # the server log gets the same
    assert "$.actions[0].get_number.digit_count" in caplog.text
    assert r.summary.cause == "failed"


async def test_not_json_is_logged(app: AppServer) -> None:
    app.page("/start", Reply("<html>oops</html>"))
    r = await run_call(app, Caller())
    invalid = [line for line in r.log.lines if " invalid_response " in line]
    assert len(invalid) == 1
    assert "$: not valid JSON" in invalid[0]


async def test_timeout(app: AppServer) -> None:
    released = asyncio.Event()

    async def slow(_: Received) -> Reply:
        # answers long after page_timeout (released when the test is done, so the
        # server's shutdown does not wait for it)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(released.wait(), timeout=1.0)
        return Reply([say("too late")])

    app.page("/start", [redirect("/slow")])
    app.page("/slow", slow)
    app.page("/error", [say("sorry")])
    app.page("/final", [])
    began = time.monotonic()
    r = await run_call(app, Caller(), error_page="/error", final_page="/final", page_timeout=0.3)
    elapsed = time.monotonic() - began
    released.set()
    assert 0.25 <= elapsed < 0.9
    error_result = app.bodies("/error")[0]["error_result"]
    assert error_result["cause"] == "timeout"
    assert error_result["url"] == app.url("/slow")
    assert "status" not in error_result
    assert spoken(r) == ["sorry"]
    assert paths(app).count("/slow") == 1  # a timed-out request is not retried


async def test_large_valid_body_under_the_limit_is_accepted(app: AppServer) -> None:
    items = [{"text_to_say": f"item {i} " + "x" * 1000} for i in range(300)]  # ~300 kB
    app.page("/start", [{"play": {"play_list": items}}])
    app.page("/final", [])
    r = await run_call(app, Caller(), final_page="/final")
    assert r.summary.errors == []
    assert r.summary.cause == "completed"
    ((_, prompt),) = r.leg.commands(StartPrompt)
    assert len(prompt.items) == 300


async def test_failing_error_page_hangs_up(app: AppServer) -> None:
    app.page("/start", Reply("bad", status=500))
    app.page("/error", Reply("also bad", status=503))
    app.page("/final", [])
    r = await run_call(app, Caller(), error_page="/error", final_page="/final")
    assert paths(app) == ["/start", "/error", "/final"]
    assert final(app)["call_cause"] == "failed"
    assert r.leg.hung_up_at is not None
    assert len(r.summary.errors) == 2
    # The final page's error_result is the error that ended the call: the error page's.
    error_result = app.bodies("/final")[0]["error_result"]
    assert (error_result["url"], error_result["status"]) == (app.url("/error"), 503)


async def test_no_error_result_on_the_final_page_of_a_call_that_did_not_fail(
    app: AppServer,
) -> None:
    # The error page recovered the call: the call completed, and its final page has no
    # error_result (the error page had it).
    app.page("/start", Reply("bad", status=500))
    app.page("/error", [say("sorry")])
    app.page("/final", [])
    await run_call(app, Caller(), error_page="/error", final_page="/final")
    assert final(app)["call_cause"] == "completed"
    assert "error_result" not in app.bodies("/final")[0]
    assert "error_result" in app.bodies("/error")[0]


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(None, id="204"),
        pytest.param(Reply(b""), id="200-no-body"),
        pytest.param(Reply(" \r\n", content_type="text/plain"), id="200-whitespace"),
    ],
)
async def test_an_empty_body_is_an_empty_action_list(app: AppServer, reply: Any) -> None:
    """A 2xx with nothing in it is no actions, not an error: on the first page the call is
    refused (nothing was answered), after a redirect it is hung up; the token is null."""
    app.page("/start", reply)
    app.page("/final", [])
    r = await run_call(app, Caller(), final_page="/final")
    assert (r.summary.cause, r.summary.errors) == ("completed", [])
    assert final(app)["call_raw_cause"] == "603"  # refused before an answer
    app.requests.clear()
    app.page("/start", {"actions": [say("hi"), redirect("/empty")], "token": "t"})
    app.page("/empty", reply)
    r = await run_call(app, Caller(), final_page="/final")
    assert (r.summary.cause, r.summary.errors) == ("completed", [])
    assert (final(app)["call_cause"], final(app)["call_raw_cause"]) == ("completed", "200")
    assert app.bodies("/final")[0]["token"] is None
    assert any("(empty body: no actions)" in line for line in r.log.lines)


async def test_an_error_page_answering_204_is_said_in_words(app: AppServer) -> None:
    """An error page that answers 204 (as a notification would be answered) gives no
    actions: the call's log says so in words, not only that the body was empty."""
    app.page("/start", Reply("bad", status=500))
    app.page("/error", None)  # 204 No Content
    app.page("/final", [])
    r = await run_call(app, Caller(), error_page="/error", final_page="/final")
    assert paths(app) == ["/start", "/error", "/final"]
    (line,) = [line for line in r.log.lines if f" page_response {app.url('/error')}" in line]
    assert line.endswith(
        f" page_response {app.url('/error')}: (empty body: no actions): the error page"
        " answered with no action list (204 No Content, or a 2xx with nothing in it),"
        " so no actions run after the error"
    ), line
    # Any other page's empty answer keeps the short line.
    app.requests.clear()
    app.page("/start", None)
    r = await run_call(app, Caller(), error_page="/error", final_page="/final")
    (line,) = [line for line in r.log.lines if f" page_response {app.url('/start')}" in line]
    assert line.endswith(f" page_response {app.url('/start')}: (empty body: no actions)"), line


async def test_invalid_error_page_answer_hangs_up(app: AppServer) -> None:
    app.page("/start", Reply("bad", status=500))
    app.page("/error", {"actions": [{"play": {}}]})
    app.page("/final", [])
    r = await run_call(app, Caller(), error_page="/error", final_page="/final")
    assert paths(app) == ["/start", "/error", "/final"]
    assert r.summary.cause == "failed"


async def test_error_page_used_at_most_three_times(app: AppServer) -> None:
    app.page("/start", [redirect("/bad")])
    app.page("/bad", Reply("bad", status=500))
    app.page("/error", [say("sorry"), redirect("/bad")])  # fails again, and again
    app.page("/final", [])
    r = await run_call(app, Caller(), error_page="/error", final_page="/final")
    assert paths(app).count("/error") == 3
    assert paths(app).count("/bad") == 4
    assert paths(app)[-1] == "/final"
    assert spoken(r) == ["sorry"] * 3
    assert final(app)["call_cause"] == "failed"
    assert any("3 times" in e for e in r.summary.errors)


async def test_a_crash_inside_callhook_fails_the_call_cleanly(app: AppServer) -> None:
    def broken_name() -> str:
        raise RuntimeError("store is on fire")

    app.page("/start", [{"record": {"next_page": {"url": "/rec"}}}])
    app.page("/final", [])
    r = await run_call(
        app, Caller(), final_page="/final", ctx=ActionContext(new_recording_name=broken_name)
    )
    assert r.summary.cause == "failed"
    assert final(app)["call_cause"] == "failed"
    assert any("store is on fire" in e for e in r.summary.errors)
    assert r.leg.hung_up_at is not None


# --- GET pages and signatures ----------------------------------------------------------------


async def test_get_page_sends_instance_info_query_parameter(app: AppServer) -> None:
    app.page("/start", [{"get_number": {"next_page": {"url": "/g", "method": "GET"}}}])
    app.page("/g", [])
    await run_call(app, Caller().press("3", at=0.5).press("#", at=0.7))
    (req,) = [r for r in app.requests if r.path == "/g"]
    assert req.method == "GET"
    assert req.raw  # the query parameter instance_info carried the body
    assert req.json["action_result"] == {
        "action": "get_number",
        "result": {"entered_number": "3"},
    }
    assert req.json["this_call"]["call_state"] == "answered"
    assert req.signature_ok(app.secret)
    assert not verify(app.secret, req.raw + b" ", req.headers[HEADER])


async def test_every_request_is_signed(app: AppServer) -> None:
    app.page("/start", [redirect("/p2")])
    app.page("/p2", Reply("bad", status=500))
    app.page("/error", [])
    app.page("/final", [])
    await run_call(app, Caller(), error_page="/error", final_page="/final")
    assert paths(app) == ["/start", "/p2", "/error", "/final"]
    for req in app.requests:
        header = req.headers[HEADER]
        assert header.startswith("t=")
        assert req.signature_ok(app.secret)
        assert not verify("another-secret", req.raw, header)
        tampered = req.raw.replace(b'"call_id":"call-1"', b'"call_id":"call-2"')
        assert tampered != req.raw
        assert not verify(app.secret, tampered, header)


# --- the per-call log ------------------------------------------------------------------------


def kinds(lines: list[str]) -> list[str]:
    return [line.split(" ")[2] for line in lines]


async def test_per_call_log_file(app: AppServer, tmp_path: Path) -> None:
    app.page("/start", [say("hi"), get_number("/n")])
    app.page("/n", [say("bye")])
    app.page("/final", [])
    r = await run_call(app, Caller().press("4", at=2.0), final_page="/final", log_dir=tmp_path)
    assert r.log.path is not None
    assert r.log.path.parent == tmp_path
    text = r.log.path.read_text()
    assert text.splitlines() == r.log.lines
    k = kinds(r.log.lines)
    assert k.count("page_request") == len(app.requests) == 3
    assert k.count("page_response") == 3
    assert k.count("action_start") == 3  # play, get_number, play
    assert k.count("action_end") == 3
    # each action's start comes before its end, one at a time
    starts_ends = [x for x in k if x in ("action_start", "action_end")]
    assert starts_ends == ["action_start", "action_end"] * 3
    # the URL of each page is in its request line
    requests = [line for line in r.log.lines if " page_request " in line]
    for line, req in zip(requests, app.requests, strict=True):
        assert app.url(req.path) in line
    # lines carry the media time: get_number ended when "4" was pressed
    (got,) = [line for line in r.log.lines if " action_end " in line and "get_number" in line]
    assert " +2.000 " in got
    assert k[-1] == "page_response"  # the final page, last


async def test_a_recogniser_failure_is_logged_as_a_warning_and_the_call_goes_on(
    app: AppServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A media event whose log line has a level of its own (calllog.event_line)."""
    caplog.set_level(logging.INFO)
    app.page(
        "/start",
        [
            {
                "get_input": {
                    "next_page": {"url": "/heard"},
                    "speech_input_mode": "auto",
                    "milliseconds_initial_timeout": 3000,
                    "on_input_timeout_messages": [],
                }
            },
            say("still here"),
        ],
    )
    app.page("/final", None)
    caller = Caller()
    caller.steps.append(lambda media: media.inject(SpeechRejected("recogniser crashed"), 1.0))
    r = await run_call(app, caller, final_page="/final")
    failed = [line for line in r.log.lines if " speech_failed " in line]
    assert failed and failed[0].endswith("speech_failed recogniser crashed"), r.log.lines
    assert any(
        rec.levelno == logging.WARNING and "recogniser crashed" in rec.getMessage()
        for rec in caplog.records
    )
    assert "still here" in spoken(r) and r.summary.cause == "completed"


async def test_the_log_tells_speech_not_recognised_from_nothing_detected(app: AppServer) -> None:
    """Issue 16: "did not hear anything" twice could be a caller never heard or one not
    understood; the recognition_stop line says which, and each utterance has a line."""
    spec = {
        "next_page": {"url": "/heard"},
        "milliseconds_initial_timeout": 2000,
        "on_input_timeout_messages": [say("Sorry, I did not hear anything.")] * 2,
    }
    app.page("/start", [{"get_input": spec}, say("goodbye")])
    app.page("/final", None)
    caller = Caller()
    # First wait: speech detected at 1.0 s and rejected at 1.5 s, nothing more. Second wait
    # (after the message): silence.
    caller.steps.append(lambda media: media.inject(SpeechStarted(), 1.0))
    caller.steps.append(lambda media: media.inject(SpeechRejected(), 1.5))
    r = await run_call(app, caller, final_page="/final")
    lines = [line.split(" ", 2)[-1] for line in r.log.lines]
    speech = [x for x in lines if x.startswith(("speech_", "recognition_stop"))]
    assert speech == [
        "speech_detected",
        "speech_unrecognised speech detected, nothing recognised",
        "recognition_stop 1 utterance detected",
        "recognition_stop nothing detected (no voice activity while listening)",
    ], "\n".join(r.log.lines)


async def test_an_outbound_call_is_classified_before_its_first_page(app: AppServer) -> None:
    """classify_callee: the first page waits for who answered (here no audio decides it:
    the action's own limit gives unknown), and keys pressed meanwhile are type-ahead."""
    app.page("/start", [get_number("/n")])
    app.page("/n", [])
    info = CallInfo("out-3", "out", "sip:ivr@x", "sip:c@y")
    options = ClassifyOptions(milliseconds_timeout=2000)
    r = await run_call(app, Caller().press("7", at=0.5), info=info, classify_callee=options)
    (start,) = app.bodies("/start")
    this_call = start["this_call"]
    assert this_call["far_end_type"] == "unknown"
    classification = this_call["far_end_classification"]
    assert (classification["reason"], classification["seconds_to_classify"]) == ("timeout", 3.0)
    assert r.leg.commands(ClassifyFarEnd)[0][1] == ClassifyFarEnd(options)
    (n,) = app.bodies("/n")
    assert n["action_result"]["result"]["entered_number"] == "7"  # typed ahead, kept
    assert "far_end_type" in n["this_call"]  # (the call's, on every page)


# --- the summary a call record is made of ------------------------------------------------------


async def test_the_summary_has_the_calls_times_pages_and_recordings(app: AppServer) -> None:
    """On the call's virtual clock: the application began at 0, answered with the record
    action's start, ended with the caller's hang-up (mid-recording); the record's
    next_page failing is counted (the call is gone: no error page)."""
    app.page(
        "/start",
        [{"record": {"next_page": {"url": "/rec"}, "milliseconds_max_silence": 8000}}],
    )
    app.page("/rec", Reply("bad", status=500))
    app.page("/final", [])
    r = await run_call(app, Caller().hang_up(at=4.25), final_page="/final")
    summary = r.summary
    assert paths(app) == ["/start", "/rec", "/final"]
    assert (len(summary.pages), summary.pages_failed) == (3, 1)
    assert summary.recordings == 1
    assert summary.started_at == 0.0
    assert summary.answered_at == r.leg.answered_at
    assert summary.ended_at == pytest.approx(4.25)


async def test_an_invalid_action_list_is_a_failed_page(app: AppServer) -> None:
    app.page("/start", [{"no_such_action": {}}])
    app.page("/final", [])
    r = await run_call(app, Caller(), final_page="/final")
    assert (len(r.summary.pages), r.summary.pages_failed, r.summary.recordings) == (2, 1, 0)
    assert r.summary.answered_at is None  # declined before it was answered
