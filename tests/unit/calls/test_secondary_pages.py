"""A connect's far leg running its secondary_call pages (the runner's secondary mode,
callhook/calls/runner.py) against a real local application: its first page's actions, then the
join instead of a hang-up, its final page when the bridge ends, primary_call_id."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from callhook.calls.calllog import CallLog
from callhook.calls.runner import CallRunner, CallSummary
from callhook.config.settings import AppConfig
from callhook.devtools.harness import AppServer, Reply, ScriptedLeg, scratch_directory
from callhook.edge.pages import HttpPages
from callhook.events import CallEnded, SayText, StartPrompt
from callhook.ports import CallInfo


class FarLeg(ScriptedLeg):
    """A far leg that the far end hangs up once it has been joined."""

    def __init__(self) -> None:
        super().__init__(info=CallInfo("far-1", "out", "sip:ivr@cb", "sip:bob@x", "bob"))
        self.joined_at: float | None = None
        self.joined = asyncio.Event()
        self.cipher: tuple[str, str, str] | None = None  # what it was joined with

    async def wait_ended(self) -> CallEnded:
        await self.joined.wait()  # (the runner also waits on this while it fetches pages)
        assert self.joined_at is not None
        self.clock.advance_to(self.joined_at + 12.0)
        return CallEnded("hung_up", "BYE")


DROPPED = [{"call_id": "far-0", "call_state": "idle", "call_cause": "dropped"}]


async def run_far(
    app: AppServer,
    first_page: str | None,
    *,
    needs_cipher: bool = False,
    error_page: str | None = None,
) -> tuple[CallSummary, FarLeg, int]:
    leg = FarLeg()
    joins = 0

    def ready(cipher: tuple[str, str, str] | None) -> None:
        nonlocal joins
        joins += 1
        leg.cipher = cipher
        leg.joined_at = leg.clock.now()
        leg.joined.set()

    config = AppConfig(
        name="test",
        first_page=app.url(first_page) if first_page else "",
        secret=app.secret,
        final_page=app.url("/far-final"),
        error_page=app.url(error_page) if error_page else None,
    )
    log = CallLog("far", leg.clock, scratch_directory() / "far.log")
    pages = HttpPages(timeout=5.0)
    runner = CallRunner(
        config,
        leg,
        pages,
        leg.clock,
        log,
        log_filename="logs/far.log",
        primary_call_id="primary-1",
        on_ready=ready,
        dropped_calls=lambda: DROPPED,
        needs_cipher=needs_cipher,
    )
    try:
        summary = await runner.run()
    finally:
        await pages.close()
    return summary, leg, joins


async def test_the_first_page_runs_then_the_leg_is_joined_and_its_final_page_follows(
    app: AppServer,
) -> None:
    app.page("/whisper", [{"play": {"play_list": [{"text_to_say": "a call for you"}]}}])
    app.page("/far-final", None)
    summary, leg, joins = await run_far(app, "/whisper")
    (_, prompt), *_ = leg.commands(StartPrompt)
    assert [i.text for i in prompt.items if isinstance(i, SayText)] == ["a call for you"]
    assert joins == 1 and leg.hung_up_at is None  # joined, not hung up, when the list ran out
    assert (summary.cause, summary.raw_cause) == ("hung_up", "BYE")
    (first,) = app.bodies("/whisper")
    assert first["this_call"]["primary_call_id"] == "primary-1"
    assert first["this_call"]["call_direction"] == "out"
    (final,) = app.bodies("/far-final")
    this_call = final["this_call"]
    assert (this_call["call_cause"], this_call["call_raw_cause"]) == ("hung_up", "BYE")
    assert this_call["call_state"] == "idle" and this_call["primary_call_id"] == "primary-1"
    assert this_call["seconds_call_duration"] >= 12.0
    assert final["dropped_calls"] == DROPPED  # Aculab: the connect's other attempts
    assert "dropped_calls" not in first


async def test_a_first_page_that_hangs_up_is_never_joined(app: AppServer) -> None:
    app.page("/whisper", [{"hang_up": {}}])
    app.page("/far-final", None)
    summary, leg, joins = await run_far(app, "/whisper")
    assert joins == 0 and leg.hung_up_at is not None
    assert summary.cause == "completed"
    assert app.bodies("/far-final")[0]["this_call"]["call_cause"] == "completed"


async def test_without_a_first_page_it_is_joined_at_once_and_only_its_final_page_comes(
    app: AppServer,
) -> None:
    app.page("/far-final", None)
    summary, leg, joins = await run_far(app, None)
    assert joins == 1 and leg.hung_up_at is None
    assert [r.path for r in app.requests] == ["/far-final"]
    assert summary.cause == "hung_up"


CIPHER = {"type": "aescbc", "key": "44" * 24, "initialisation_vector": "55" * 16}


async def test_the_first_pages_response_gives_the_recordings_cipher(app: AppServer) -> None:
    app.page("/whisper", {"actions": [], "call_recording_cipher": CIPHER, "api_version": "2.0"})
    app.page("/far-final", None)
    summary, leg, joins = await run_far(app, "/whisper", needs_cipher=True)
    assert joins == 1 and leg.cipher == ("aescbc", "44" * 24, "55" * 16)
    assert summary.errors == []


async def test_a_first_page_without_the_cipher_it_must_give_fails(app: AppServer) -> None:
    app.page("/whisper", [])
    app.page("/far-final", None)
    summary, leg, joins = await run_far(app, "/whisper", needs_cipher=True)
    assert joins == 0 and leg.hung_up_at is not None  # never joined: nothing recorded in clear
    assert summary.cause == "failed"
    (final,) = app.bodies("/far-final")
    assert final["error_result"]["cause"] == "invalid"
    assert "call_recording_cipher" in final["error_result"]["description"]


@pytest.mark.parametrize(
    "empty", [pytest.param(Reply(b""), id="empty-body"), pytest.param([], id="no-actions")]
)
async def test_no_cipher_however_the_first_page_ends_is_never_joined(
    app: AppServer, empty: Any
) -> None:
    app.page("/whisper", empty)
    app.page("/far-final", None)
    summary, _, joins = await run_far(app, "/whisper", needs_cipher=True)
    assert joins == 0 and summary.cause == "failed"


async def test_an_error_page_that_recovers_still_gives_no_clear_recording(app: AppServer) -> None:
    app.page("/whisper", [])  # no cipher: an error, and the error page recovers...
    app.page("/far-error", [{"sleep": {"seconds": 1}}])  # ...with no cipher either
    app.page("/far-final", None)
    summary, _, joins = await run_far(app, "/whisper", needs_cipher=True, error_page="/far-error")
    assert joins == 0 and summary.cause == "failed"
    assert "error_result" in app.bodies("/far-final")[0]
    assert len(app.bodies("/far-error")) == 1  # the error page ran, and recovered the leg
