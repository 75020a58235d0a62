"""Kamailio, in front of ``serve --workers``, killed during a call: the supervisor starts
another at once (it answers SIP again within 2 s); the call's audio never stopped (RTP
goes straight between the caller and its worker) and the caller's re-INVITE and BYE
after the restart reach the worker through the new Kamailio (answered; the BYE ends the
call as a hang-up)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from callhook.devtools.harness import AppServer
from callhook.media import g711, tones, wav
from callhook.serving.sipprobe import answers_options
from callhook.serving.supervisor import run_dir
from callhook.sip.transport import Target
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.e2e.rtpsink import RtpSink
from tests.e2e.test_connect import energy_at

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

TONE_HZ = 600.0


@pytest.mark.parametrize("workers", WORKERS[1:])  # (the front exists with workers only)
async def test_kamailio_killed_mid_call_is_back_within_2_s_and_the_call_goes_on(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    data = tmp_path / "data"
    tone = data / "media" / "default" / "prompts" / "tone.wav"
    tone.parent.mkdir(parents=True)
    tone.write_bytes(wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(TONE_HZ, 12.0))))
    app.page("/start", [{"play": {"play_list": [{"file_to_play": "prompts/tone.wav"}]}}])
    app.page("/final", None)
    async with served(tmp_path, app, workers) as server, RtpSink() as ear:
        invite = sipp.invite("ivr").replace("m=audio [media_port]", f"m=audio {ear.port}")
        call = asyncio.create_task(
            sipp.call(
                server.sip,
                tmp_path,
                invite,
                sipp.ANSWERED,
                sipp.PAUSE.format(ms=4500),
                # After the restart: a re-INVITE (answered 200, ACKed), then the BYE.
                sipp.REINVITE.format(
                    cseq=2, version=2, direction="sendrecv", expect="sendrecv"
                ).replace("m=audio [media_port]", f"m=audio {ear.port}"),  # (the same ear)
                sipp.PAUSE.format(ms=1500),
                sipp.BYE_FROM_CALLER.format(cseq=3),
            )
        )
        await asyncio.sleep(2.0)  # the call is up, the tone playing
        pid = int((run_dir(data) / "kamailio.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        # (Its children may answer a moment longer, until the supervisor kills its
        # group: it is back once a new Kamailio has written its pid and answers.)
        pid_file = run_dir(data) / "kamailio.pid"
        for _ in range(100):
            with contextlib.suppress(OSError, ValueError):
                if int(pid_file.read_text()) != pid:
                    break
            await asyncio.sleep(0.02)
        front = Target("127.0.0.1", server.sip_port)
        back = await asyncio.to_thread(answers_options, front, 5.0)
        took = time.monotonic() - killed
        assert back and took < 2.0, f"Kamailio answered again after {took:.2f} s\n{server.output}"
        assert int(pid_file.read_text()) != pid
        run = await call
        # Its re-INVITE and its BYE were answered 200 (SIPp fails the call otherwise).
        assert run.returncode == 0, run.output + server.output
        assert await wait_for_request(app, "/final", timeout=10), server.output
        heard = ear.audio()
    (final,) = app.bodies("/final")
    assert (final["this_call"]["call_cause"], final["this_call"]["call_raw_cause"]) == (
        "hung_up",
        "BYE",
    )
    # The tone went on across the restart: every 100 ms of the call's 6 s is the tone.
    chunks = [heard[i : i + 800] for i in range(800, min(len(heard), 6 * 8000) - 800, 800)]
    assert len(chunks) >= 50, len(heard)
    quiet = [n for n, c in enumerate(chunks) if energy_at(c.astype(np.int16), TONE_HZ) < 0.5]
    assert not quiet, f"the audio stopped at 100 ms chunks {quiet}"
    assert re.search(r"kamailio \(pid \d+\) ended .*: calls in progress go on", server.output)
