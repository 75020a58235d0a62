"""A connect's secondary_call pages on real calls: a SIPp caller calls serve, whose
application connects it to a SIPp callee; the callee's first page's actions (a whisper)
run on the callee's leg before it is joined, and its final page is requested when the
bridge ends (one process, and workers behind Kamailio); a first page that hangs up
leaves the caller unconnected."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import (
    WORKERS,
    Server,
    free_even_udp_port,
    free_udp_port,
    served,
    wait_for_request,
)
from tests.e2e.rtpsink import RtpSink
from tests.e2e.test_connect import ALLOW, UAS_RINGS_UNTIL_CANCEL, callee_scenario

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


def connect_app(app: AppServer, callee_port: int, first_page: list[Any], *others: int) -> None:
    app.page(
        "/start",
        [
            {
                "connect": {
                    "destinations": [f"sip:callee@127.0.0.1:{callee_port}"]
                    + [f"sip:other@127.0.0.1:{port}" for port in others],
                    "secondary_call": {
                        "first_page": {"url": "/whisper"},
                        "final_page": {"url": "/far-final", "method": "GET"},
                    },
                    "next_page": {"url": "/connected"},
                }
            }
        ],
    )
    app.page("/whisper", first_page)
    app.page("/far-final", None)
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)


async def call_through(
    tmp_path: Path, app: AppServer, callee_port: int, callee: str, ear: RtpSink, workers: int = 1
) -> Server:
    """The caller calls serve (one process, or ``workers`` behind Kamailio), whose
    application connects it to ``callee`` (a SIPp scenario) on ``callee_port``."""
    process = await sipp.start_sipp(
        callee, tmp_path, local_port=callee_port, media_port=free_even_udp_port()
    )
    async with served(tmp_path, app, workers, ALLOW) as server:
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
        )
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, out.decode(errors="replace") + server.output
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/far-final")
        assert await wait_for_request(app, "/final")
    return server


@pytest.mark.parametrize("workers", WORKERS)
async def test_the_callee_hears_its_whisper_then_is_joined_and_its_final_page_comes(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    callee_port, other_port = free_udp_port(), free_udp_port()
    whisper = [{"play": {"play_list": [{"text_to_say": "A call for you."}]}}]
    connect_app(app, callee_port, whisper, other_port)
    other = await sipp.start_sipp(
        sipp.scenario(UAS_RINGS_UNTIL_CANCEL),
        tmp_path,
        local_port=other_port,
        media_port=free_even_udp_port(),
    )
    async with RtpSink() as callee_ear:
        await call_through(
            # The callee stays 10 s: the whisper (synthesised, then played) must end and the
            # join come before its BYE, however loaded the machine (4 s was once too short).
            tmp_path,
            app,
            callee_port,
            callee_scenario(None, callee_ear.port, 10000),
            callee_ear,
            workers,
        )
    out, _ = await asyncio.wait_for(other.communicate(), 30)
    assert other.returncode == 0, out.decode(errors="replace")  # it rang, then got CANCEL
    # The callee heard the whisper (speech, not silence): the caller sends no audio, so
    # anything loud is the whisper, however long the loaded machine took to start it.
    heard = callee_ear.audio()
    assert len(heard) > 8000 and float(np.abs(heard.astype(np.int32)).max()) > 2000
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    assert result["connected"] is True and result["call_cause"] == "hung_up"
    primary = connected["this_call"]["call_id"]
    far = result["secondary_call"]["call_id"]
    (whisper,) = app.bodies("/whisper")
    assert whisper["this_call"]["call_id"] == far
    assert whisper["this_call"]["primary_call_id"] == primary  # both legs, and how joined
    assert whisper["this_call"]["call_direction"] == "out"
    assert whisper["application_instance_id"] != connected["application_instance_id"]
    (far_final,) = app.bodies("/far-final")
    assert [r.method for r in app.requests if r.path == "/far-final"] == ["GET"]  # as asked
    assert far_final["this_call"]["call_cause"] == "hung_up"
    assert far_final["this_call"]["primary_call_id"] == primary
    # The other destination, dropped when the callee answered (Aculab's dropped_calls).
    ((dropped),) = far_final["dropped_calls"]
    assert dropped["call_to"] == f"sip:other@127.0.0.1:{other_port}"
    assert (dropped["call_state"], dropped["call_cause"]) == ("idle", "dropped")
    # The join came after the whisper: the bridge lasted less than the far leg.
    assert result["seconds_connected_duration"] < far_final["this_call"]["seconds_call_duration"]


async def test_a_first_page_that_hangs_up_leaves_the_caller_unconnected(
    tmp_path: Path, app: AppServer
) -> None:
    callee_port = free_udp_port()
    connect_app(app, callee_port, [{"hang_up": {}}])
    callee = sipp.scenario(
        sipp.UAS_ANSWER.format(receive='  <recv request="INVITE"/>'),
        sipp.UAS_BYE.format(timeout_ms=20000),
    )
    async with RtpSink() as ear:
        await call_through(tmp_path, app, callee_port, callee, ear)
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    assert (result["connected"], result["destination"]) == (False, None)
    assert result["call_cause"] == "completed"
    (far_final,) = app.bodies("/far-final")
    assert far_final["this_call"]["call_cause"] == "completed"
