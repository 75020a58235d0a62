"""Menus, ``delete_file`` and remote prompt files on real calls: SIPp calls ``callhook serve``.

``run_menu`` (one process, and workers behind Kamailio): keys sent as SIP INFO, the
caller's ear a socket of the test (``rtpsink``), so the test hears the prompt, the
invalid-digit message and the prompt again before the chosen option's page is requested.
``run_speech_menu``: the caller speaks (the default TTS voice, as a pcap) and callhook's
real recogniser picks the option. ``delete_file``: a real file of the store goes. These,
remote prompt files and a recording deleted at once run in both modes too; ADPCM
prompts in one process (their decoding is the same code in a worker).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer, Received, Reply
from callhook.edge.speechworkers import build_synthesiser
from callhook.media import g711, tones, wav
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, served
from tests.e2e.rtpsink import RtpSink, dominant_hz
from tests.e2e.rtpstream import Stream
from tests.e2e.test_aculab_apps import call_and_listen, invite_to, play, spans, write_tone

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

PROMPT_HZ, MESSAGE_HZ = 440.0, 1000.0


@pytest.mark.parametrize("workers", WORKERS)
async def test_run_menu_invalid_digit_then_an_option(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    data = tmp_path / "data"
    menu = write_tone(data, "prompts/menu.wav", PROMPT_HZ)
    wrong = write_tone(data, "prompts/wrong.wav", MESSAGE_HZ)
    app.page(
        "/start",
        [
            {
                "run_menu": {
                    "prompt": play(menu),
                    "menu_options": [
                        {"digit": "1", "next_page": {"url": "/sales"}},
                        {"digit": "2", "next_page": {"url": "/support"}},
                    ],
                    "on_invalid_digit_messages": [play(wrong), play(wrong)],
                }
            }
        ],
    )
    app.page("/support", [{"hang_up": {}}])
    app.page("/final", None)
    # Prompt 0-1 s; 9 at ~1.5 s: the message 1.5-2.5 s, the prompt again 2.5-3.5 s;
    # then 2 at ~4.5 s.
    run, server, sink = await call_and_listen(
        tmp_path,
        app,
        sipp.PAUSE.format(ms=1500),
        sipp.INFO.format(cseq=2, digit="9"),
        sipp.PAUSE.format(ms=3000),
        sipp.INFO.format(cseq=3, digit="2"),
        workers=workers,
    )
    assert run.returncode == 0, run.output + run.errors + server.output
    (support,) = app.bodies("/support")
    assert support["action_result"] == {"action": "run_menu", "result": {"selected_digit": "2"}}
    assert app.bodies("/sales") == []
    heard = dominant_hz(sink.audio())
    prompts, messages = spans(heard, PROMPT_HZ), spans(heard, MESSAGE_HZ)
    assert len(prompts) == 2 and len(messages) == 1, heard
    assert prompts[0][1] <= messages[0][0] and messages[0][1] <= prompts[1][0], heard


@pytest.mark.parametrize("workers", WORKERS)
async def test_run_speech_menu_hears_the_spoken_option(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    synthesiser = build_synthesiser("piper:joe")
    assert synthesiser is not None
    app.page(
        "/start",
        [
            {
                "run_speech_menu": {
                    "menu_options": [
                        {"words": ["sales"], "digit": "1", "next_page": {"url": "/sales"}},
                        {"words": ["support"], "digit": "2", "next_page": {"url": "/support"}},
                    ],
                    "seconds_timeout": 8,
                }
            }
        ],
    )
    app.page("/support", [{"hang_up": {}}])
    app.page("/final", None)
    stream = Stream(6.0).speech(synthesiser.speak("Support."), at=1.5)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
    server = served(tmp_path, app, workers)
    # The models load at start, as serve's default has it: a worker that loaded them at
    # the caller's word, on a loaded machine, could still be loading at the timeout.
    server.preload = True
    async with server:
        run = await sipp.call(server.sip, tmp_path, *parts)
    assert run.returncode == 0, run.output + run.errors + server.output
    (support,) = app.bodies("/support")
    result = support["action_result"]
    assert result["action"] == "run_speech_menu"
    assert result["result"]["input_type"] == "speech"
    assert result["result"]["selected_input"] == "support"
    assert app.bodies("/sales") == []


@pytest.mark.parametrize("workers", WORKERS)
async def test_delete_file_on_a_real_call(tmp_path: Path, app: AppServer, workers: int) -> None:
    data = tmp_path / "data"
    keep = write_tone(data, "prompts/keep.wav", PROMPT_HZ, 0.2)
    gone = write_tone(data, "prompts/old.wav", PROMPT_HZ, 0.2)
    app.page(
        "/start", [play(keep), {"delete_file": {"filename": gone}}, play(keep), {"hang_up": {}}]
    )
    app.page("/final", [{"delete_file": {"filename": keep}}])
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=20000)]
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
    assert run.returncode == 0, run.output + run.errors + server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"  # the list went on after it
    assert not (data / "media" / "default" / gone).exists()
    # The final page's own delete_file ran too (Aculab allows it there).
    assert not (data / "media" / "default" / keep).exists()


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_remote_file_is_heard_and_failures_are_logged_and_skipped(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """file_to_play as a web page request: fetched from the app's server (relative URL).

    A 404 and an oversized file each end their own play (logged with the cause);
    the next action still runs and is heard.
    """
    data = tmp_path / "data"
    local = write_tone(data, "prompts/after.wav", MESSAGE_HZ)
    remote = wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(PROMPT_HZ, 1.0)))
    app.page("/media/hello.wav", Reply(remote, content_type="audio/wav"))
    app.page("/media/huge.wav", Reply(remote * 4, content_type="audio/wav"))
    web_file = {"play": {"play_list": [{"file_to_play": {"url": "media/hello.wav"}}]}}
    app.page(
        "/start",
        [
            web_file,
            {"play": {"play_list": [{"file_to_play": {"url": "media/missing.wav"}}]}},
            {"play": {"play_list": [{"file_to_play": {"url": "/media/huge.wav"}}]}},
            play(local),
            {"hang_up": {}},
        ],
    )
    app.page("/final", None)
    config = "[media]\nremote_max_mb = 0.02\nremote_timeout = 5\n"  # 20 KiB
    async with RtpSink() as sink, served(tmp_path, app, workers, config) as server:
        parts = [invite_to(sink), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=20000)]
        run = await sipp.call(server.sip, tmp_path, *parts)
    assert run.returncode == 0, run.output + run.errors + server.output
    fetched = [r.path for r in app.requests if r.path.startswith("/media/")]
    assert fetched == ["/media/hello.wav", "/media/missing.wav", "/media/huge.wav"]
    assert all(r.method == "GET" and r.raw == b"" for r in app.requests if r.path in fetched)
    heard = dominant_hz(sink.audio())
    (remote_span,) = spans(heard, PROMPT_HZ)
    (local_span,) = spans(heard, MESSAGE_HZ)
    assert 4 <= remote_span[1] - remote_span[0] <= 6 and remote_span[1] <= local_span[0], heard
    (final,) = app.bodies("/final")
    log = (data / "media" / "default" / final["log_filename"]).read_text()
    assert f"{app.url('/media/missing.wav')}: HTTP 404" in log, log
    assert f"{app.url('/media/huge.wav')}: larger than 20971 bytes" in log, log


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_recording_deleted_at_once_is_never_announced(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """record, then delete_file of it in next_page's answer: gone, and no notification."""
    data = tmp_path / "data"
    app.page(
        "/start",
        [
            {
                "record": {
                    "next_page": {"url": "/recorded"},
                    "recording_available_page": {"url": "/available"},
                    "milliseconds_max_initial_silence": 500,
                }
            }
        ],
    )

    def recorded(request: Received) -> list[dict[str, Any]]:
        filename = request.json["action_result"]["result"]["filename"]
        return [{"delete_file": {"filename": filename}}, {"hang_up": {}}]

    app.page("/recorded", recorded)
    app.page("/available", None)
    app.page("/final", None)
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=20000)]
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
    # serve has stopped: what was due was delivered on the way out (docs/recordings.md).
    assert run.returncode == 0, run.output + run.errors + server.output
    (body,) = app.bodies("/recorded")
    filename = body["action_result"]["result"]["filename"]
    assert not (data / "media" / "default" / filename).exists()
    assert app.bodies("/available") == []
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"


@pytest.mark.parametrize("fixture", ["tone_ima.wav", "tone_oki.wav"])
async def test_an_adpcm_prompt_is_heard(tmp_path: Path, app: AppServer, fixture: str) -> None:
    """IMA and OKI ADPCM WAVs from the store (SoX-made, tests/data/adpcm) play on a call."""
    data = tmp_path / "data"
    target = data / "media" / "default" / "prompts" / fixture
    target.parent.mkdir(parents=True)
    target.write_bytes((Path(__file__).parent.parent / "data" / "adpcm" / fixture).read_bytes())
    app.page("/start", [play(f"prompts/{fixture}"), {"hang_up": {}}])
    app.page("/final", None)
    async with RtpSink() as sink, Server.for_app(data, app) as server:
        parts = [invite_to(sink), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=15000)]
        run = await sipp.call(server.sip, tmp_path, *parts)
    assert run.returncode == 0, run.output + run.errors + server.output
    (tone,) = spans(dominant_hz(sink.audio()), PROMPT_HZ)  # the 1 s of 440 Hz
    assert 4 <= tone[1] - tone[0] <= 6
