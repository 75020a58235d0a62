"""A recording keeps the call's time when the caller's phone sends nothing for a while and
when its stream comes back from another source, through a real call.

SIPp calls ``callhook serve`` (one process, and workers behind Kamailio) and sends a
stream that stops while its user is quiet (silence suppression: the timestamps run on),
then comes back from another SSRC whose timestamps are far behind the first's (a
transfer or a media relay gives that). The ``record`` action's file must hold every
sample the caller sent, in its place on the call's time: the silence before the first
word (its pre-roll, though no packet came then), the quiet spell, and the second source's
words after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from callhook.media import wav
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.e2e.rtpstream import Stream
from tests.e2e.test_recordings import RATE, assert_holds_what_was_sent, clip

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


def frames(seconds: float) -> float:
    """``seconds`` on the 20 ms grid."""
    return round(seconds / 0.02) * 0.02


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_recording_keeps_time_across_silence_suppression_and_a_new_source(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page(
        "/start",
        [
            {
                "record": {
                    "next_page": {"url": "/recorded"},
                    "milliseconds_max_initial_silence": 5000,
                    "milliseconds_max_silence": 2000,
                }
            }
        ],
    )
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/final", None)
    first, second = clip("1_jackson_1.wav"), clip("2_jackson_2.wav")
    # Quiet audio at first (SIPp's replay starts with it, and the record action listens),
    # then nothing until the first word; nothing again after it; then the second word
    # from another source whose timestamps are 3,000,000 (over six minutes) behind.
    spoken = 1.4
    quiet_from = frames(spoken + len(first) / RATE + 0.2)
    back = frames(quiet_from + 1.0)
    stream = (
        Stream(9.0)
        .suppress(0.4, spoken - 0.4)
        .speech(first, at=spoken)
        .suppress(quiet_from, back - quiet_from)
        .new_source(back, -3_000_000)
        .speech(second, at=back + 0.2)
    )
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr", "PCMU", True), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
        assert await wait_for_request(app, "/final", timeout=10.0), server.output
    assert run.returncode == 0, run.output + run.errors + server.output
    (recorded,) = app.bodies("/recorded")
    result = recorded["action_result"]["result"]
    assert result["reason"] == "silence" and result["contains_sound"] is True, result
    data = (tmp_path / "data" / "media" / "default" / result["filename"]).read_bytes()
    # Every sample the caller sent, each in its place on the call's time (a sample of
    # the second word in the wrong place, or missing, differs from what was sent there).
    span = assert_holds_what_was_sent(data, stream.sent(), law="ulaw", sent_law="ulaw")
    # The file begins with silence before the first word (its pre-roll), though the
    # phone sent nothing then; it holds the second word, and the silence that ended it.
    assert spoken - 0.32 <= span.start <= spoken - 0.15, span
    assert span.end >= back + 0.2 + len(second) / RATE + 1.9, span
    assert len(wav.decode_to_8k(data)) == round((span.end - span.start) * RATE)
