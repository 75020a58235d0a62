"""A resting call's packets taken by the media thread, through a real call.

SIPp calls ``callhook serve`` (one process, and workers behind Kamailio) and sends its
RTP stream: quiet audio, four digits as RFC 4733 events while ``get_number`` plays its
prompt, then speech that a ``record`` action keeps. While the call's detector rests (the
prompt, the digits) the media thread takes its usual packets itself (edge/_rx.h); each
digit's events give the call back to Python, and the recording takes it back for good.
The application must get its digits and a recording that holds the caller's speech, as
when Python takes every packet; ``/api/stats`` shows that the thread did take packets,
and gave the call back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.report import thread_counters
from callhook.devtools.harness import AppServer
from callhook.media import g711, tones, wav
from callhook.media.vad import new_detector
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.e2e.rtpstream import Stream

pytestmark = [
    pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed"),
    pytest.mark.skipif(
        new_detector().model is None,
        reason="no speech model: a detector of energy alone never rests (scripts/setup)",
    ),
]

PROMPT = "prompts/hello.wav"
SPEECH = Path(__file__).parent.parent / "data" / "speech"


@pytest.mark.parametrize("workers", WORKERS)
async def test_digits_and_a_recording_with_the_thread_taking_the_resting_calls_packets(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    path = tmp_path / "data" / "media" / "default" / PROMPT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(440.0, 1.0))))
    prompt = {"play_list": [{"file_to_play": PROMPT}]}
    app.page(
        "/start",
        [{"get_number": {"prompt": prompt, "digit_count": 4, "next_page": {"url": "/number"}}}],
    )
    app.page(
        "/number",
        [{"record": {"next_page": {"url": "/recorded"}, "milliseconds_max_silence": 1500}}],
    )
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/final", None)
    clip = wav.decode_to_8k(sorted(SPEECH.glob("*jackson_0.wav"))[0].read_bytes())
    stream = Stream(10.0).rfc4733("1234", at=2.0, spacing=0.4).speech(clip, at=4.0)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr", "PCMU", True), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
        assert await wait_for_request(app, "/final"), server.output
        _, stats = await server.api("GET", "/api/stats")
    assert run.returncode == 0, run.output + run.errors + server.output
    (number,) = app.bodies("/number")
    assert number["action_result"]["result"] == {"entered_number": "1234"}
    (recorded,) = app.bodies("/recorded")
    result = recorded["action_result"]["result"]
    assert result["contains_sound"] is True, result
    audio = wav.decode_to_8k(
        (tmp_path / "data" / "media" / "default" / result["filename"]).read_bytes()
    )
    # The caller's speech is in the file, whole: found by cross-correlation.
    sent, got = clip.astype(np.float64), audio.astype(np.float64)
    corr = np.correlate(got, sent, mode="valid")
    window = got[int(np.argmax(corr)) : int(np.argmax(corr)) + len(sent)]
    similarity = float(np.dot(window, sent) / (np.linalg.norm(window) * np.linalg.norm(sent)))
    assert similarity > 0.95, similarity
    thread = thread_counters(stats)
    # The quiet audio around the digits, before the recording: the thread took it.
    assert thread["rx_taken"] > 50, thread
    assert thread["rx_handed"] >= 2 and thread["rx_returned"] >= 1, thread
