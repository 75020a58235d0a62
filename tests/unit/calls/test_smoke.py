"""The smallest end-to-end check of the core: one page, one action, one result."""

from callhook.devtools.harness import AppServer, Caller, run_call


async def test_get_number_result_reaches_next_page(app: AppServer) -> None:
    app.page("/start", [{"get_number": {"next_page": {"url": "/n"}, "digit_count": 2}}])
    app.page("/n", [])
    run = await run_call(app, Caller().press("42", at=1.0))
    assert app.bodies("/n")[0]["action_result"] == {
        "action": "get_number",
        "result": {"entered_number": "42"},
    }
    assert run.summary.cause == "completed"
