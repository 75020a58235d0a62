"""What ``callhook test --sip`` reads in serve's call log, and what it asks serve before any
call (callhook/devtools/sipflow.py)."""

from __future__ import annotations

import socket

import pytest
from aiohttp import web

from callhook.config.settings import Serve
from callhook.devtools.flow import Expected, Request
from callhook.devtools.flowcaller import matches, with_errors
from callhook.devtools.sipflow import call_cause, check_serve, page_calls, parse_log, prompts

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


# --- before any call: does serve take the secret? -------------------------------------


async def _serve_answering(status: int) -> tuple[web.AppRunner, str]:
    """An HTTP server that answers every request with ``status`` (serve's API, stood in for)."""
    app = web.Application()

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({}, status=status)

    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (404, None),  # the secret is serve's: no such call, as asked
        (
            401,
            "callhook test --sip: serve at {base} refused the installation secret read from"
            " /work/b/data/secret: serve's own is the file secret in serve's data directory"
            " (its --data-dir, or data_dir in its config; by default ./data where it was"
            " started): give callhook test that --data-dir, or set CALLHOOK_SECRET to that"
            " file's content",
        ),
        (403, "callhook test --sip: serve at {base} has banned this address for a while"),
        (500, "callhook test --sip: serve at {base} answered HTTP 500"),
    ],
)
async def test_serve_refusing_the_secret_is_said_in_one_line_naming_the_file(
    status: int, said: str | None
) -> None:
    runner, base = await _serve_answering(status)
    try:
        serve = Serve(("127.0.0.1", 5060), base, "not-serves-secret")
        problem = await check_serve(serve, "/work/b/data/secret")
    finally:
        await runner.cleanup()
    if said is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(said.format(base=base)), problem
        assert "\n" not in problem and "not-serves-secret" not in problem


async def test_a_serve_that_does_not_answer_is_said_before_any_call() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nobody listens there
    serve = Serve(("127.0.0.1", 5060), f"http://127.0.0.1:{port}", "x" * 32)
    problem = await check_serve(serve, "CALLHOOK_SECRET")
    assert problem is not None
    assert problem.startswith(f"callhook test --sip: serve at http://127.0.0.1:{port} does not")
    assert problem.endswith(": --http HOST:PORT is serve's web server")


# --- a failure names the call's errors, from serve's log ------------------------------


def test_a_failure_names_the_errors_in_serves_log() -> None:
    lines = parse_log(
        LOG.splitlines()[0] + "\n"
        "2026-11-27T01:00:00.001Z +0.000 page_request POST http://app/start (first page)\n"
        "2026-11-27T01:00:00.002Z +0.000 invalid_response http://app/start: $.actions[0]:"
        " unknown action 'ply'\n"
        "2026-11-27T01:00:00.002Z +0.000 error invalid: http://app/start: $.actions[0]:"
        " unknown action 'ply'\n"
    )
    errors = [line.text for line in lines if line.kind == "error"]
    assert with_errors("step 1 (hear 'Hello'): the call ended", errors) == (
        "step 1 (hear 'Hello'): the call ended — the call's error: the page"
        " http://app/start answered no valid action list: $.actions[0]: unknown action 'ply'"
    )
