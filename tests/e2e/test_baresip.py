"""A real softphone calls ``callhook serve``: baresip (headless) dials, hears, presses keys.

baresip's microphone is a WAV file (``aufile``), its speaker is nothing
(``aubridge,null``), and ``sndfile`` writes what it heard to a WAV: so the
test checks that the prompt really reached the caller's ear, and that the
keys it sent reached the application. baresip is driven over its TCP
control socket (netstring-framed JSON), as the recipe in the shared data says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from callhook.devtools.harness import AppServer
from callhook.events import RecognitionOptions
from callhook.media import g711, tones, wav
from callhook.media.utterances import cut_utterances
from callhook.speech.sphinx import SphinxRecogniser
from tests.e2e.harness import (
    Server,
    free_even_udp_port,
    free_tcp_port,
    free_udp_port,
    wait_for_request,
)

BARESIP = shutil.which("baresip")
MODULES = Path("/usr/lib/baresip/modules")
pytestmark = pytest.mark.skipif(BARESIP is None, reason="baresip is not installed")

PROMPT = "prompts/tone.wav"
TONE_HZ = 440.0


def baresip_config(directory: Path, sip_port: int, ctrl_port: int, microphone: Path) -> None:
    # Its RTP ports are this test process's own media ports (tests/e2e/harness.py): ports
    # next to the SIP port may belong to another process (exit 98, address in use).
    media = free_even_udp_port()
    records = directory / "heard"
    records.mkdir(parents=True, exist_ok=True)
    (directory / "config").write_text(
        f"""poll_method\t\tepoll
sip_listen\t\t127.0.0.1:{sip_port}
call_local_timeout\t120
call_max_calls\t\t4
audio_player\t\taubridge,null
audio_source\t\taufile,{microphone}
audio_alert\t\taubridge,null
audio_level\t\tno
ausrc_srate\t\t8000
auplay_srate\t\t8000
rtp_ports\t\t{media}-{media + 3}
rtp_timeout\t\t0
module_path\t\t{MODULES}
module\t\t\tg711.so
module\t\t\taufile.so
module\t\t\taubridge.so
module\t\t\tsndfile.so
snd_path\t\t{records}
module_app\t\taccount.so
module_app\t\tmenu.so
module_app\t\tctrl_tcp.so
ctrl_tcp_listen\t\t127.0.0.1:{ctrl_port}
"""
    )
    (directory / "accounts").write_text(
        "<sip:bob@127.0.0.1>;regint=0;answermode=auto;audio_codecs=PCMU,PCMA\n"
    )


async def control(
    phone: asyncio.subprocess.Process, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """baresip's control connection (``ctrl_tcp_listen``) once it listens; None if baresip
    exited first (its ``returncode`` says why: 98, a port it was given is in use). Killed
    if it neither listens nor exits within 10 s."""
    for _ in range(100):
        if phone.returncode is not None:
            return None
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        phone.kill()
    raise AssertionError("baresip's control socket did not open")


def new_listen_ports(phone_dir: Path) -> int:
    """Give the config :func:`baresip_config` wrote in ``phone_dir`` new SIP and control
    ports (after an exit 98: a port picked free was taken since, as the ephemeral range
    is every process's); the control port."""
    config = phone_dir / "config"
    sip_port, ctrl_port = free_udp_port(), free_tcp_port()
    text = re.sub(
        r"(?m)^sip_listen\t+127\.0\.0\.1:\d+$",
        f"sip_listen\t\t127.0.0.1:{sip_port}",
        config.read_text(),
    )
    text = re.sub(
        r"(?m)^ctrl_tcp_listen\t+127\.0\.0\.1:\d+$",
        f"ctrl_tcp_listen\t\t127.0.0.1:{ctrl_port}",
        text,
    )
    config.write_text(text)
    return ctrl_port


Control = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def started(
    phone_dir: Path, ctrl_port: int, *options: str, quiet: bool = False, tries: int = 3
) -> tuple[asyncio.subprocess.Process, Control]:
    """baresip started on the config in ``phone_dir`` (:func:`baresip_config`) with
    ``options``, and its control connection. Started again on new ports
    (:func:`new_listen_ports`) when it exits with 98, up to ``tries`` times in all; any
    other exit, or no control socket in 10 s, is an AssertionError with what it printed
    (``quiet``: its output goes nowhere)."""
    assert BARESIP is not None
    output = asyncio.subprocess.DEVNULL if quiet else asyncio.subprocess.PIPE
    for attempt in range(tries):
        phone = await asyncio.create_subprocess_exec(
            BARESIP,
            "-f",
            str(phone_dir),
            *options,
            stdout=output,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            connection = await control(phone, ctrl_port)
        except AssertionError as exc:  # (neither listening nor gone in 10 s: killed)
            out, _ = await asyncio.wait_for(phone.communicate(), 10)
            raise AssertionError(f"{exc}\n{(out or b'').decode(errors='replace')}") from None
        if connection is not None:
            return phone, connection
        out, _ = await asyncio.wait_for(phone.communicate(), 10)
        if phone.returncode != 98 or attempt == tries - 1:
            raise AssertionError(
                f"baresip exited ({phone.returncode}): no control socket\n"
                + (out or b"").decode(errors="replace")
            )
        ctrl_port = new_listen_ports(phone_dir)  # 98, address in use: new ports
    raise AssertionError("baresip was not started (tries < 1)")


async def command(writer: asyncio.StreamWriter, name: str, params: str = "") -> None:
    body = json.dumps({"command": name, "params": params, "token": name}).encode()
    writer.write(str(len(body)).encode() + b":" + body + b",")
    await writer.drain()


async def test_baresip_hears_the_prompt_and_its_keys_arrive(tmp_path: Path, app: AppServer) -> None:
    data = tmp_path / "data"
    prompt = data / "media" / "default" / PROMPT
    prompt.parent.mkdir(parents=True)
    prompt.write_bytes(wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(TONE_HZ, 2.0))))
    app.page(
        "/start",
        [
            {"play": {"play_list": [{"file_to_play": PROMPT}], "barge_in_on_digit": False}},
            {"get_number": {"digit_count": 3, "next_page": {"url": "/number"}}},
        ],
    )
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)

    async def press_keys(writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3.0)  # the prompt plays for 2 s, then get_number waits
        await command(writer, "sndcode", "531")

    transcript, audio = await call_with_baresip(tmp_path, app, press_keys)
    (number,) = app.bodies("/number")
    assert number["action_result"]["result"] == {"entered_number": "531"}, transcript
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"
    # What baresip heard: the 440 Hz prompt.
    loud = audio[np.abs(audio) > 500]
    assert len(loud) > 8000, "the prompt was not heard (less than 1 s of sound)"
    spectrum = np.abs(np.fft.rfft(audio[: 8000 * 4]))
    peak = float(np.argmax(spectrum)) * 8000 / min(len(audio), 8000 * 4)
    assert abs(peak - TONE_HZ) < 5, peak


async def call_with_baresip(
    tmp_path: Path,
    app: AppServer,
    during: Callable[[asyncio.StreamWriter], Awaitable[None]] | None = None,
) -> tuple[str, np.ndarray]:
    """baresip calls ``serve`` running ``app``; returns its output and what it heard (8 kHz)."""
    data = tmp_path / "data"
    microphone = tmp_path / "mic.wav"  # 30 s of quiet: longer than the call
    microphone.write_bytes(_pcm16_wav(np.zeros(8000 * 30, dtype=np.int16)))
    sip_port, ctrl_port = free_udp_port(), free_tcp_port()
    phone_dir = tmp_path / "baresip"
    phone_dir.mkdir()
    baresip_config(phone_dir, sip_port, ctrl_port, microphone)
    async with Server(
        data, app_url=app.url("/start"), secret=app.secret, final_page=app.url("/final")
    ) as server:
        output: list[str] = []
        async with baresip(phone_dir, ctrl_port, 40, output) as writer:
            await command(writer, "dial", f"sip:ivr@127.0.0.1:{server.sip_port}")
            await wait_for_request(app, "/start", timeout=10)
            if during is not None:
                await during(writer)
            await wait_for_request(app, "/final", timeout=20)
    transcript = output[0]
    heard = [p for p in (phone_dir / "heard").glob("*.wav") if "dec" in p.name]
    assert heard, f"baresip wrote no recording: {list((phone_dir / 'heard').iterdir())}"
    return transcript, wav.decode_to_8k(heard[0].read_bytes()).astype(np.float64)


@contextlib.asynccontextmanager
async def baresip(
    phone_dir: Path, ctrl_port: int, seconds: int, output: list[str]
) -> AsyncIterator[asyncio.StreamWriter]:
    """Run baresip on the config in ``phone_dir``; yields its control connection.

    baresip is stopped at the end (or after ``seconds``); what it printed is
    appended to ``output``.
    """
    phone, (_, writer) = await started(phone_dir, ctrl_port, "-t", str(seconds))
    try:
        yield writer
        writer.close()
    finally:
        with contextlib.suppress(ProcessLookupError):  # (it may have exited by itself)
            phone.terminate()
        out, _ = await asyncio.wait_for(phone.communicate(), 10)
        output.append(out.decode(errors="replace"))


async def test_baresip_hears_a_text_prompt_spoken_by_the_default_voice(
    tmp_path: Path, app: AppServer
) -> None:
    """text_to_say reaches the caller's ear as speech: what baresip heard is recognised back."""
    app.page(
        "/start",
        [
            {"play": {"play_list": [{"text_to_say": "Seven."}]}},
            {"sleep": {"seconds": 1}},
            {"hang_up": {}},
        ],
    )
    app.page("/final", None)
    transcript, audio = await call_with_baresip(tmp_path, app)
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed", transcript
    assert int(np.sum(np.abs(audio) > 1000)) > 800, "no speech was heard"
    samples = np.clip(audio, -32768, 32767).astype(np.int16)
    utterances = cut_utterances(samples)
    assert utterances, "the voice-activity detector found no speech in what baresip heard"
    recogniser = SphinxRecogniser()
    digits = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    best = recogniser.recognise(max(utterances, key=len), RecognitionOptions(word_hints=digits))
    assert best and best[0].text == "seven", best


def _pcm16_wav(samples: np.ndarray) -> bytes:
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(samples.astype("<i2").tobytes())
    return buffer.getvalue()
