"""A call whose RTP stops is hung up after ``[sip] rtp_timeout``: SIPp calling ``serve``.

SIPp sends 2 s of RTP, then nothing while the call stays up (it neither sends
BYE nor answers anything but callhook's BYE); the application sleeps for a
minute. callhook must hang up about ``rtp_timeout`` after the last packet and
tell the final page ``dropped``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_call_whose_rtp_stops_is_hung_up_and_dropped(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page("/start", [{"sleep": {"seconds": 60}}])
    app.page("/final", None)
    pcap = Stream(2.0).write_pcap(tmp_path / "caller.pcap")
    parts = [
        sipp.invite("ivr"),
        sipp.ANSWERED,
        sipp.PLAY.format(pcap=pcap),
        sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
    ]
    async with served(tmp_path, app, workers, "[sip]\nrtp_timeout = 2\n") as server:
        started = time.monotonic()
        run = await sipp.call(server.sip, tmp_path, *parts)
        took = time.monotonic() - started
    assert run.returncode == 0, run.output + run.errors + server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "dropped"
    assert final["this_call"]["call_raw_cause"] == "rtp_timeout"
    # 2 s of RTP, then 2 s of nothing: BYE well before the application's minute is up.
    assert took < 15, took
    assert "no RTP for 2 s (rtp_timeout): hanging up" in server.output
