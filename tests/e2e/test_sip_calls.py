"""Real calls: SIPp calling ``callhook serve`` on 127.0.0.1, with a real application.

Every scenario runs twice: with SIPp over UDP and over TCP (RFC 3261 §18), the
same messages framed on one connection.

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

from callhook.devtools.harness import AppServer, Reply
from callhook.media import g711, tones, wav
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, served, wait_for_request
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

#: The transport the SIPp caller of the running test uses (set by the ``transport`` fixture).
TRANSPORT = {"now": "udp"}


@pytest.fixture(autouse=True, params=["udp", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    TRANSPORT["now"] = request.param
    return str(request.param)


PROMPT = "prompts/hello.wav"
DATA = Path(__file__).parent.parent / "data"


def write_prompt(data_dir: Path, seconds: float = 1.0) -> None:
    """A real WAV prompt in the application's namespace of the media file store."""
    path = data_dir / "media" / "default" / PROMPT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(440.0, seconds))))


def speech_clip() -> np.ndarray:
    """A real recording of a spoken digit (tests/data/speech, 8 kHz)."""
    (clip,) = (
        sorted((DATA / "speech").glob("*jackson_0.wav"))[:1]
        or sorted((DATA / "speech").glob("*.wav"))[:1]
    )
    return wav.decode_to_8k(clip.read_bytes())


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
    workers: int = 1,
) -> tuple[sipp.SippRun, Server]:
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr", codec, telephone_event), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts += list(middle)
    parts.append(ending if ending is not None else sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, *parts, transport=TRANSPORT["now"])
    return run, server


@pytest.mark.parametrize("workers", WORKERS)
async def test_get_number_with_rfc4733_digits(tmp_path: Path, app: AppServer, workers: int) -> None:
    write_prompt(tmp_path / "data")
    app.page("/start", [get_number(digit_count=4)])
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)
    run, server = await call(tmp_path, app, Stream(8.0).rfc4733("1234", at=2.0), workers=workers)
    assert run.returncode == 0, run.output + run.errors + server.output
    (number,) = app.bodies("/number")
    assert number["action_result"] == {"action": "get_number", "result": {"entered_number": "1234"}}
    assert number["this_call"]["call_state"] == "answered"
    assert app.requests[0].signature_ok(app.secret)
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"


async def test_get_number_with_inband_digits(tmp_path: Path, app: AppServer) -> None:
    """No telephone-event in the offer: the digits are tones in the audio (Goertzel)."""
    write_prompt(tmp_path / "data")
    app.page("/start", [get_number(digit_count=4)])
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)
    stream = Stream(8.0).inband("9075", at=2.0)
    run, server = await call(tmp_path, app, stream, telephone_event=False)
    assert run.returncode == 0, run.output + run.errors + server.output
    (number,) = app.bodies("/number")
    assert number["action_result"]["result"] == {"entered_number": "9075"}


@pytest.mark.parametrize("workers", WORKERS)
async def test_get_number_with_sip_info_digits(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    write_prompt(tmp_path / "data", seconds=0.5)
    app.page("/start", [get_number(digit_count=0, end_digit="#")])
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)
    infos = [sipp.INFO.format(cseq=2 + i, digit=d) for i, d in enumerate("42#")]
    pause = sipp.PAUSE.format(ms=1500)
    run, server = await call(tmp_path, app, Stream(6.0), pause, *infos, workers=workers)
    assert run.returncode == 0, run.output + run.errors + server.output
    (number,) = app.bodies("/number")
    assert number["action_result"]["result"] == {"entered_number": "42"}


async def test_record_holds_the_callers_audio(tmp_path: Path, app: AppServer) -> None:
    clip = speech_clip()
    app.page(
        "/start",
        [{"record": {"next_page": {"url": "/recorded"}, "milliseconds_max_silence": 1500}}],
    )
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/final", None)
    stream = Stream(7.0, law="alaw", payload_type=8).speech(clip, at=1.0)
    run, server = await call(tmp_path, app, stream, codec="PCMA")
    assert run.returncode == 0, run.output + run.errors + server.output
    (recorded,) = app.bodies("/recorded")
    result = recorded["action_result"]["result"]
    assert result["reason"] == "silence"
    assert result["contains_sound"] is True
    path = tmp_path / "data" / "media" / "default" / result["filename"]
    info = wav.read_info(path.read_bytes())
    assert info.format_tag == wav.FORMAT_ALAW  # the call's codec: "determined automatically"
    audio = wav.decode_to_8k(path.read_bytes())
    assert len(audio) / 8000 == pytest.approx(result["seconds_duration"], abs=0.1)
    # The caller's speech is in the file: find the clip in it by cross-correlation.
    sent = clip.astype(np.float64)
    got = audio.astype(np.float64)
    corr = np.correlate(got, sent, mode="valid")
    best = float(corr.max()) / (np.linalg.norm(sent) * np.linalg.norm(got[: len(sent)]) + 1e-9)
    window = got[int(np.argmax(corr)) : int(np.argmax(corr)) + len(sent)]
    similarity = float(np.dot(window, sent) / (np.linalg.norm(window) * np.linalg.norm(sent)))
    assert similarity > 0.95, (best, similarity)


async def test_cancel_before_answer(tmp_path: Path, app: AppServer) -> None:
    """The caller gives up while the first page is still loading: 487, final page hung_up."""
    app.page("/start", Reply({"actions": [{"hang_up": {}}]}, delay=3.0))
    app.page("/final", None)
    parts = [sipp.invite("ivr"), sipp.CANCEL.format(user="ivr")]
    async with Server.for_app(tmp_path / "data", app) as server:
        run = await sipp.call(server.sip, tmp_path, *parts, transport=TRANSPORT["now"])
        await wait_for_request(app, "/final")
    assert run.returncode == 0, run.output + run.errors + server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"
    assert final["this_call"]["call_raw_cause"] == "487"
    assert final["this_call"]["seconds_call_duration"] == 0.0


async def test_caller_hangs_up_during_an_action(tmp_path: Path, app: AppServer) -> None:
    write_prompt(tmp_path / "data")
    app.page("/start", [get_number(digit_count=4, seconds_timeout=20)])
    app.page("/number", [])
    app.page("/final", None)
    bye = sipp.BYE_FROM_CALLER.format(cseq=2)
    run, server = await call(tmp_path, app, Stream(2.0), sipp.PAUSE.format(ms=2000), bye, ending="")
    assert run.returncode == 0, run.output + run.errors + server.output
    assert app.bodies("/number") == []  # no input: next_page is not requested
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"
    assert final["this_call"]["call_raw_cause"] == "BYE"


async def test_application_hangs_up(tmp_path: Path, app: AppServer) -> None:
    write_prompt(tmp_path / "data", seconds=0.5)
    app.page("/start", [{"play": {"play_list": [{"file_to_play": PROMPT}]}}, {"hang_up": {}}])
    app.page("/final", None)
    run, server = await call(tmp_path, app, Stream(3.0))
    assert run.returncode == 0, run.output + run.errors + server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"
    assert final["this_call"]["seconds_call_duration"] >= 0.5


async def test_hold_and_unhold_with_reinvite(tmp_path: Path, app: AppServer) -> None:
    """re-INVITE sendonly: we answer recvonly and stop sending; sendrecv: we go on."""
    app.page("/start", [{"sleep": {"seconds": 30}}])
    app.page("/final", None)
    parts = [
        sipp.PAUSE.format(ms=1000),
        sipp.REINVITE.format(cseq=2, version=2, direction="sendonly", expect="recvonly"),
        sipp.PAUSE.format(ms=1000),
        sipp.REINVITE.format(cseq=3, version=3, direction="sendrecv", expect="sendrecv"),
        sipp.PAUSE.format(ms=500),
        sipp.BYE_FROM_CALLER.format(cseq=4),
    ]
    run, server = await call(tmp_path, app, Stream(1.0), *parts, ending="")
    assert run.returncode == 0, run.output + run.errors + server.output
    assert "re-offer: on hold" in server.output
    assert "re-offer: active" in server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"
    assert final["this_call"]["seconds_call_duration"] >= 2.0
