"""Plug-in speech engines on real calls: the worked example in ``examples/speech_plugin``,
installed as a package (``scripts/setup --test`` installs it; its entry points are how
callhook finds it), named in ``[speech.engines]``; SIPp calls ``callhook serve``, one
process and workers behind Kamailio.

One call hears a prompt in the example's voice of recorded words (the recordings
themselves, through G.711), and a sentence that voice has no recording for in the
embedded voice, with the reason in the call's log; another call's word is recognised by
the example's faster-whisper recogniser."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from callhook.devtools.harness import AppServer
from callhook.media import g711
from callhook.speech.models import model_path
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.e2e.rtpsink import RtpSink
from tests.e2e.rtpstream import Stream
from tests.e2e.test_aculab_apps import invite_to
from tests.e2e.test_remote_speech import ask
from tests.e2e.test_speech import spoken
from tests.e2e.test_ssml import FRAME, prompts
from tests.unit.speech.test_plugins import digit_voice

pytestmark = [
    pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed"),
    pytest.mark.skipif(
        not importlib.metadata.entry_points(group="callhook.voices", name="recorded-words"),
        reason="the example plug-in is not installed (scripts/setup --test installs it)",
    ),
]


def config(voices: Path) -> str:
    return f"""
[speech]
recogniser = "gpu"

[speech.engines.gpu]
protocol = "plugin"
plugin = "faster-whisper"

[speech.engines.gpu.options]
model = "{model_path("tiny.en")}"
beam_size = 1

[speech.engines.studio]
protocol = "plugin"
plugin = "recorded-words"

[speech.engines.studio.options]
directory = "{voices}"
gap_ms = 100
"""


def say(text: str, voice: str) -> dict[str, Any]:
    return {"play": {"play_list": [{"text_to_say": text, "tts_voice": voice}]}}


def expected(voices: Path) -> npt.NDArray[np.int16]:
    """What the voice says for "4 2", as the caller hears it (through G.711 µ-law)."""
    from callhook_example_speech.recorded import RecordedWords

    audio = RecordedWords("studio", {"directory": str(voices), "gap_ms": 100}).synthesize(
        "4 2", "jackson"
    )
    return g711.decode("ulaw", g711.encode("ulaw", audio))


def likeness(heard: npt.NDArray[np.int16], wanted: npt.NDArray[np.int16]) -> float:
    """The best correlation of ``wanted`` with a stretch of ``heard``."""
    a, b = heard.astype(np.float64), wanted.astype(np.float64)
    best = 0.0
    for lag in range(0, len(a) - len(b) + 1, 1):
        piece = a[lag : lag + len(b)]
        if piece.any():
            best = max(best, float(np.corrcoef(piece, b)[0, 1]))
    return best


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_call_speaks_and_listens_through_plugin_engines(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    voices = digit_voice(tmp_path / "voices")
    app.page("/final", None)
    async with served(tmp_path, app, workers, config(voices)) as server:
        # The voice: "4 2" from the recordings; "Zebra." it has none for.
        app.page(
            "/start",
            [
                say("4 2", "studio:jackson"),
                {"sleep": {"seconds": 1.5}},
                say("Zebra.", "studio:jackson"),
                {"hang_up": {}},
            ],
        )
        async with RtpSink() as sink:
            parts = [invite_to(sink), sipp.ANSWERED]
            parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
            run = await sipp.call(server.sip, tmp_path, *parts)
        assert run.returncode == 0, run.output + run.errors + server.output
        await wait_for_request(app, "/final", timeout=20)
        # The recogniser: the caller's words through the plug-in.
        app.page("/start", [ask("/heard", "Say sales, support or billing.")])
        app.page("/heard", [{"hang_up": {}}])
        pcap = Stream(8.0).speech(spoken("Sales, please."), at=4.0).write_pcap(tmp_path / "c.pcap")
        parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
        parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=60000))
        run = await sipp.call(server.sip, tmp_path, *parts)
        assert run.returncode == 0, run.output + run.errors + server.output
        await wait_for_request(app, "/final", count=2, timeout=20)
    audio = sink.audio()
    heard = prompts(audio)
    assert len(heard) == 2, heard
    start, end = heard[0]
    wanted = expected(voices)
    # The recordings themselves, not another voice saying "four two".
    assert abs((end - start) * FRAME - len(wanted)) <= 2 * FRAME, (heard, len(wanted))
    span = audio[max(start - 2, 0) * FRAME : (end + 2) * FRAME]
    assert likeness(span, wanted) > 0.95
    voice_log, listen_log = (
        (tmp_path / "data" / "media" / "default" / str(body["log_filename"])).read_text()
        for body in app.bodies("/final")
    )
    assert "studio: jackson has no recording of 'zebra': said by piper:joe instead" in voice_log
    assert heard[1][1] - heard[1][0] > 10  # ("Zebra." said, 0.2 s or more, by the embedded voice)
    (body,) = app.bodies("/heard")
    result = body["action_result"]["result"]
    assert result["input_type"] == "speech", listen_log + server.output
    (best,) = result["speech_input"][0]["alternatives"]
    assert best["text"] == "sales" and 0 < best["confidence"] <= 1, best
    assert "the speech recognition model is ready (gpu," in server.output, server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_streaming_plugin_recogniser_hears_the_caller_as_they_speak(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """The example's pocketsphinx-live: each utterance fed in pieces while the caller says
    it (counted in ``/api/stats``), the answer at its end, as any recogniser's."""
    config = '[speech]\nrecogniser = "live"\n\n[speech.engines.live]\nprotocol = "plugin"\n'
    config += 'plugin = "pocketsphinx-live"\n'
    app.page("/start", [ask("/heard", "Say sales, support or billing.")])
    app.page("/heard", [{"hang_up": {}}])
    app.page("/final", None)
    # "Support": pocketsphinx's choice among the three words stands when the caller's
    # audio has a gap (as when SIPp's sender is held up on a loaded machine: 0.1 s or more is
    # silence to callhook, as a real network's); its choice for "Sales" flips to
    # "billing" for a third of the places such a gap can fall.
    said = spoken("Support, please.")
    pcap = Stream(8.0).speech(said, at=4.0).write_pcap(tmp_path / "c.pcap")
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=60000))
    async with served(tmp_path, app, workers, config) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
        assert run.returncode == 0, run.output + run.errors + server.output
        await wait_for_request(app, "/final", timeout=20)
        status, stats = await server.api("GET", "/api/stats")
    assert status == 200, stats
    (body,) = app.bodies("/heard")
    result = body["action_result"]["result"]
    assert result["input_type"] == "speech", server.output
    (best,) = result["speech_input"][0]["alternatives"]
    assert best["text"] == "support" and 0 < best["confidence"] <= 1, best
    speech = [w["speech"] for w in stats.get("workers", [stats])]
    # "Support, please." is over a second: fed in several pieces while it was said.
    assert sum(s["utterances_streamed"] for s in speech) >= 1, speech
    assert sum(s["stream_pieces"] for s in speech) >= 3, speech
    assert all(s["recogniser"] == "live" for s in speech), speech
