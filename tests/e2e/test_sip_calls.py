"""Real calls: SIPp calling ``callhook serve`` over UDP on 127.0.0.1, with a real application.

Each test starts ``callhook serve`` as a user would (a separate process, the
application's first page given with ``--app-url``), runs an application
server in the test, and places a call with SIPp whose RTP stream (a pcap)
carries the test's digits or speech. Assertions are on what the application
received, and on the files callhook wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from callhook.media import tones, wav
from callhook.testing import AppServer, Reply
from tests.e2e import sipp
from tests.e2e.harness import Server, free_even_udp_port, free_udp_port
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

PROMPT = "prompts/hello.wav"


def write_prompt(data_dir: Path, seconds: float = 1.0) -> None:
    """A real WAV prompt in the application's namespace of the media file store."""
    path = data_dir / "media" / "default" / PROMPT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav.g711_file("ulaw", __import__("callhook.media.g711", fromlist=["x"]).encode("ulaw", tones.tone(440.0, seconds))))


def get_number(**props: Any) -> dict[str, Any]:
    return {
        "get_number": {
            "prompt": {"play_list": [{"file_to_play": PROMPT}]},
            "next_page": {"url": "/number"},
            **props,
        }
    }


async def call(
    tmp_path: Path,
    app: AppServer,
    stream: Stream,
    *middle: str,
    codec: str = "PCMU",
    telephone_event: bool = True,
    ending: str | None = None,
) -> tuple[sipp.SippRun, Server]:
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr", codec, telephone_event), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts += list(middle)
    parts.append(ending if ending is not None else sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
    async with Server(
        tmp_path / "data", app_url=app.url("/start"), secret=app.secret, final_page=app.url("/final")
    ) as server:
        run = await sipp.run_sipp(
            sipp.scenario(*parts),
            server.sip,
            tmp_path,
            local_port=free_udp_port(),
            media_port=free_even_udp_port(),
        )
    return run, server


async def test_get_number_with_rfc4733_digits(tmp_path: Path, app: AppServer) -> None:
    write_prompt(tmp_path / "data")
    app.page("/start", [get_number(digit_count=4)])
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)
    run, server = await call(tmp_path, app, Stream(8.0).rfc4733("1234", at=2.0))
    assert run.returncode == 0, run.output + run.errors + server.output
    (number,) = app.bodies("/number")
    assert number["action_result"] == {"action": "get_number", "result": {"entered_number": "1234"}}
    assert number["this_call"]["call_state"] == "answered"
    assert app.requests[0].signature_ok(app.secret)
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"
