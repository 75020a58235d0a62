"""Call records (``GET /api/v1/calls/records``) equal the calls SIPp made to ``callhook
serve``, one process and two workers behind Kamailio: their count, causes and durations
(within 0.1 s of how long SIPp held each call up, by SIPp's own clock), paged as JSON and
exported as CSV, an application's key seeing its own only."""

from __future__ import annotations

import asyncio
import csv
import io
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import (
    WORKERS,
    free_even_udp_port,
    free_udp_port,
    served,
    wait_for_request,
)
from tests.e2e.test_connect import ALLOW, callee_scenario, connect_app

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

#: How long each answered caller holds the call before its BYE.
HOLDS = (1.0, 1.5, 2.0)
REFUSED = 2  # calls whose first page fails: declined (603) before they are answered
BROKEN_KEY = "broken-app-key-0123456789abcdef"


async def get(url: str, key: str, **params: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, params=params, headers={"Authorization": f"Bearer {key}"}) as response,
    ):
        if response.content_type == "text/csv":
            return response.status, await response.text()
        return response.status, await response.json()


@pytest.mark.parametrize("workers", WORKERS)
async def test_the_records_are_the_calls_sipp_made(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page("/start", [{"sleep": {"seconds": 30}}])
    app.page("/final", None)
    app.page("/error", [{"hang_up": {}}])
    config = (
        ALLOW
        + f"""
[apps.broken]
first_page = "{app.url("/broken")}"
error_page = "{app.url("/error")}"
final_page = "{app.url("/final")}"
secret = "{app.secret}"
api_key = "{BROKEN_KEY}"
"""
    )
    bad = [
        sipp.invite("broken"),
        '  <recv response="180" optional="true"/>',
        sipp.REFUSED.format(status=603, user="broken"),
    ]
    since = time.time()
    async with served(tmp_path, app, workers, config) as server:
        runs = await asyncio.gather(
            *(
                sipp.call(
                    server.sip,
                    tmp_path,
                    sipp.invite("ivr"),
                    sipp.ANSWERED,
                    sipp.PAUSE.format(ms=round(hold * 1000)),
                    sipp.BYE_FROM_CALLER.format(cseq=2),
                    trace_messages=True,
                )
                for hold in HOLDS
            ),
            *(sipp.call(server.sip, tmp_path, *bad) for _ in range(REFUSED)),
        )
        for run in runs:
            assert run.returncode == 0, run.output + run.errors + server.output
        await wait_for_request(app, "/final", count=len(HOLDS) + REFUSED, timeout=20)
        secret = (server.data_dir / "secret").read_text().strip()
        url = f"http://127.0.0.1:{server.http_port}/api/v1/calls/records"

        # The operator's key: every application's records (each written as its call
        # ended, on the database thread: the last may be a moment behind its final page).
        total = len(HOLDS) + REFUSED
        deadline = time.monotonic() + 10
        while True:
            status, body = await get(url, secret, limit="1000")
            assert status == 200, body
            if len(body["records"]) == total or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        everything = body["records"]
        assert len(everything) == total, everything
        # The same, two to a page.
        records: list[dict[str, Any]] = []
        pages = 0
        params = {"limit": "2"}
        while True:
            status, body = await get(url, secret, **params)
            records += body["records"]
            pages += 1
            if body["next"] is None:
                break
            params["after"] = body["next"]
        assert records == everything and pages == 3

        answered = sorted(
            (r for r in records if r["application"] == "default"),
            key=lambda r: r["seconds_call_duration"],
        )
        # (The callers hung up: Aculab's cause for the far end ending the call.)
        assert [r["call_cause"] for r in answered] == ["hung_up"] * len(HOLDS)
        # Each is as long as SIPp held its call up, by SIPp's own clock: from the 200 OK it
        # received to the BYE it sent. The record runs from callhook's 200 to its receipt
        # of the BYE, so it may be longer by the two messages' trips (through Kamailio in
        # workers mode), never shorter. Under load SIPp's pause itself runs late, so the
        # scenario's HOLDS are only the order.
        held = sorted(run.seconds_answered() for run in runs[: len(HOLDS)])
        for record, seconds, hold in zip(answered, held, HOLDS, strict=True):
            assert seconds >= hold - 0.005, (seconds, hold)  # a pause is never early
            recorded = record["seconds_call_duration"]
            assert seconds - 0.02 <= recorded <= seconds + 0.1, (record, seconds)
            assert record["call_direction"] == "in" and record["leg"] == "call"
            assert record["answered"] is not None and record["pages_failed"] == 0
            assert record["pages_requested"] == 2  # the first page and the final page
            assert record["worker"] == (None if workers == 1 else record["worker"])
        if workers > 1:
            assert {r["worker"] for r in records} <= {0, 1}
        declined = [r for r in records if r["application"] == "broken"]
        assert [(r["call_cause"], r["call_raw_cause"]) for r in declined] == [
            ("completed", "603")
        ] * REFUSED
        for record in declined:
            assert record["answered"] is None and record["seconds_call_duration"] == 0
            # The first page failed; the error page and the final page were answered.
            assert (record["pages_requested"], record["pages_failed"]) == (3, 1)
        assert all(since <= _epoch(r["started"]) <= _epoch(r["ended"]) for r in records)

        # An application's key: its own records only; another's is refused.
        status, body = await get(url, BROKEN_KEY)
        assert status == 200 and len(body["records"]) == REFUSED
        status, body = await get(url, BROKEN_KEY, application="default")
        assert status == 403 and body["error"]["code"] == "forbidden"
        status, body = await get(url, "not-a-key")
        assert status == 401
        # Filters: by cause, and by time (nothing started before this test).
        status, body = await get(url, secret, cause="hung_up", application="default")
        assert len(body["records"]) == len(HOLDS)
        status, body = await get(url, secret, until=str(since))
        assert status == 200 and body["records"] == []
        status, body = await get(url, secret, since="yesterday")
        assert status == 400 and body["error"]["code"] == "bad_request"

        # CSV: every record, one row each, the JSON's fields as columns.
        status, text = await get(url, secret, format="csv")
        assert status == 200
        rows = list(csv.DictReader(io.StringIO(text)))
        assert sorted(row["call_id"] for row in rows) == sorted(r["call_id"] for r in records)
        by_id = {r["call_id"]: r for r in records}
        for row in rows:
            want = by_id[row["call_id"]]
            assert float(row["seconds_call_duration"]) == want["seconds_call_duration"]
            assert row["answered"] == (want["answered"] or "")


def _epoch(iso: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_connects_far_leg_has_its_own_record(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """A caller connected to a SIPp callee that hangs up after 2 s: the far leg's record
    (leg far, its call the caller's) beside the caller's."""
    callee_port = free_udp_port()
    connect_app(app, callee_port)
    callee = await sipp.start_sipp(
        callee_scenario(None, hold_ms=2000),
        tmp_path,
        local_port=callee_port,
        media_port=free_even_udp_port(),
    )
    async with served(tmp_path, app, workers, ALLOW) as server:
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
        )
        callee_out, _ = await asyncio.wait_for(callee.communicate(), 30)
        assert callee.returncode == 0, callee_out.decode(errors="replace") + server.output
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        await wait_for_request(app, "/final", timeout=20)
        secret = (server.data_dir / "secret").read_text().strip()
        url = f"http://127.0.0.1:{server.http_port}/api/v1/calls/records"
        deadline = time.monotonic() + 10
        while True:
            status, body = await get(url, secret)
            assert status == 200, body
            if len(body["records"]) == 2 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    by_leg = {r["leg"]: r for r in body["records"]}
    assert set(by_leg) == {"call", "far"}, body
    call, far = by_leg["call"], by_leg["far"]
    assert far["parent_call_id"] == call["call_id"] and far["application"] == "default"
    assert far["call_direction"] == "out"
    assert far["call_to"] == f"sip:callee@127.0.0.1:{callee_port}"
    # (The callee hung up: Aculab's cause for the far end ending the call.)
    assert far["call_cause"] == "hung_up" and far["answered"] is not None, body
    assert abs(far["seconds_call_duration"] - 2.0) <= 0.1, far
    # The caller was answered before the far leg and hung up just after it.
    assert call["seconds_call_duration"] >= far["seconds_call_duration"]
    assert _epoch(call["started"]) <= _epoch(far["started"])
