"""The ``record`` action end to end: a real SIP peer talks, callhook writes the file.

SIPp calls ``callhook serve`` and sends real speech (tests/data/speech) as
G.711 RTP, with RFC 4733 key presses or a BYE where a test needs them; the
application's ``record`` action writes a WAV file. Each test checks the result
the application received (``reason``, ``barge_in_digit``, ``id``,
``contains_sound``, ``seconds_duration``) against the file itself, read at the
moment ``next_page`` was requested (docs/behaviour.md, "record": the file can at once
be played), and the file's samples against what the caller sent: the file is a
span of the caller's stream, found by cross-correlation, and every sample is
the sent one (same law) or within G.711 re-quantisation error of it (the file
in the other law). The start beep is checked with baresip, which writes what
it heard: the beep reaches the caller's ear but not the file.

One ``callhook serve`` runs for the whole module (starting and stopping one
costs ~2 s), in one process and then with workers behind Kamailio; each test calls its
own number on it (see :class:`Rig`).
"""

from __future__ import annotations

import asyncio
import io
import itertools
import shutil
import struct
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import pytest_asyncio

from callhook.devtools.harness import AppServer, Received
from callhook.media import g711, wav
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, free_tcp_port, free_udp_port, served
from tests.e2e.rtpstream import FRAME, Stream

DATA = Path(__file__).parent.parent / "data"
RATE = 8000
#: The most the file may begin before the caller's sound (callhook: 0.3 s pre-roll), plus a frame.
PREROLL = 0.3 + 0.02
#: How far ``seconds_duration`` may be from the file's length (float-safe: 2.1 vs 2.0 passes).
TENTH = 0.1 + 1e-6
#: How late a limit may stop a recording on a busy machine (a timer on callhook's event loop).
LATE = 0.3
#: The ``id`` every test gives, to be echoed.
ID = "rec-e2e-42"
LAWS: dict[str, g711.Law] = {"PCMU": "ulaw", "PCMA": "alaw"}
TAGS = {"ulaw": wav.FORMAT_ULAW, "alaw": wav.FORMAT_ALAW}

Samples = npt.NDArray[np.int16]

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the loop of the module's server
needs_sipp = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


def clip(name: str) -> Samples:
    """One real spoken digit, 8 kHz (jackson's takes are loud from their first sample)."""
    return wav.decode_to_8k((DATA / "speech" / name).read_bytes())


def talk(*digits: int, gap: float = 0.1) -> Samples:
    """Spoken digits one after the other with short pauses: continuous speech."""
    pause = np.zeros(round(gap * RATE), dtype=np.int16)
    parts: list[Samples] = []
    for d in digits:
        parts += [clip(f"{d}_jackson_{d}.wav"), pause]
    return np.concatenate(parts[:-1])


def caller(codec: str, seconds: float = 6.0) -> Stream:
    """What the caller sends on a ``codec`` call (silence until things are placed on it).

    Longer than any test's recording: callhook hangs up once the app has the result.
    """
    return Stream(seconds, law=LAWS[codec], payload_type=0 if codec == "PCMU" else 8)


# --- comparing a file with what the caller sent ---------------------------------------------


def locate(got: Samples, sent: Samples) -> int:
    """The offset in ``sent`` where ``got`` begins: the peak of their cross-correlation."""
    size = 1 << (len(sent) + len(got)).bit_length()
    a = np.fft.rfft(sent.astype(np.float64), size)
    b = np.fft.rfft(got.astype(np.float64), size)
    corr = np.fft.irfft(a * np.conj(b), size)[: len(sent)]  # corr[k] = sum sent[k + i] got[i]
    return int(np.argmax(corr))


def requantisation_error(law: g711.Law, x: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The largest error a G.711 ``law`` quantiser can make on each of ``x``.

    A quantiser maps x to one of the two reconstruction levels around it, so
    the error is at most the gap between them (beyond the outermost level:
    the distance to it).
    """
    levels = np.unique(g711.decode_array(law, np.arange(256, dtype=np.uint8))).astype(np.int64)
    i = np.searchsorted(levels, x)
    lo = levels[np.clip(i - 1, 0, len(levels) - 1)]
    hi = levels[np.clip(i, 0, len(levels) - 1)]
    error: npt.NDArray[np.int64] = np.maximum(hi - lo, np.maximum(np.abs(x - lo), np.abs(x - hi)))
    return error


@dataclass
class Span:
    """Where the file lies in the caller's stream, in seconds."""

    start: float
    end: float


def assert_valid_wav(data: bytes, law: g711.Law) -> wav.WavInfo:
    """A whole G.711 WAV file (docs/recordings.md, "The file"): every size in the header
    says what is there."""
    info = wav.read_info(data)
    assert (info.format_tag, info.channels, info.sample_rate, info.bits_per_sample) == (
        TAGS[law],
        1,
        RATE,
        8,
    ), info
    assert struct.unpack_from("<I", data, 4)[0] == len(data) - 8, "RIFF size"
    declared = struct.unpack_from("<I", data, info.data_offset - 4)[0]
    assert declared == info.data_length == len(data) - info.data_offset - (declared & 1), (
        "data size",
        declared,
        len(data) - info.data_offset,
    )
    fact = data.find(b"fact", 12, info.data_offset)
    assert fact > 0, "a G.711 WAV has a fact chunk"
    assert struct.unpack_from("<I", data, fact + 8)[0] == declared, "fact sample count"
    return info


def assert_holds_what_was_sent(
    data: bytes, sent: Samples, *, law: g711.Law, sent_law: g711.Law | None
) -> Span:
    """``data`` is a ``law`` WAV file holding a span of ``sent`` (then silence).

    ``sent_law`` is the law ``sent`` was coded in on the wire: the same law as
    the file means bit-exact samples; otherwise (or None: ``sent`` is linear
    PCM) each sample is within the file law's re-quantisation error.
    """
    info = assert_valid_wav(data, law)
    got = wav.decode_to_8k(data)
    assert len(got) == info.data_length
    offset = locate(got, sent)
    x = np.zeros(len(got), dtype=np.int64)
    overlap = sent[offset : offset + len(got)]
    x[: len(overlap)] = overlap
    if sent_law is not None:
        x[len(overlap) :] = int(g711.decode(sent_law, bytes([g711.SILENCE_CODE[sent_law]]))[0])
    tolerance = np.zeros_like(x) if sent_law == law else requantisation_error(law, x)
    error = np.abs(got.astype(np.int64) - x)
    bad = np.nonzero(error > tolerance)[0]
    assert len(bad) == 0, (
        f"{len(bad)} of {len(got)} samples differ from what the caller sent "
        f"(file at {offset / RATE:.3f} s of the stream; first at sample {bad[0]}: "
        f"file {got[bad[0]]}, sent {x[bad[0]]}, tolerance {tolerance[bad[0]]})"
    )
    if sent_law is not None:
        assert offset % FRAME == 0, f"the file does not start on a 20 ms frame: {offset}"
    return Span(offset / RATE, (offset + len(got)) / RATE)


def assert_result_matches_file(result: dict[str, Any], data: bytes) -> None:
    """``seconds_duration`` and ``contains_sound`` describe the file actually written."""
    seconds = wav.read_info(data).data_length / RATE
    assert result["seconds_duration"] == round(result["seconds_duration"], 1)
    assert result["seconds_duration"] == pytest.approx(seconds, abs=TENTH), seconds
    loud = int(np.sum(np.abs(wav.decode_to_8k(data).astype(np.int32)) > 1000))
    assert result["contains_sound"] is (loud > 0.05 * RATE), loud


# --- the rig: one server, one application, a call per test --------------------------------


@dataclass
class Recorded:
    result: dict[str, Any]
    #: The file as it was when next_page was requested.
    data: bytes
    #: What the application's final page was told.
    final: dict[str, Any]


def user_of(body: dict[str, Any]) -> str:
    """The user part of the number called (``sip:rec3@host`` -> ``rec3``)."""
    to = str(body["this_call"]["call_to"])
    return to.removeprefix("sip:").split("@")[0]


class Rig:
    """One ``callhook serve`` and one application for the whole module.

    Each test calls its own user (``sip:<user>@``): the first page answers that
    call with the test's ``record`` action and its own ``next_page``, which
    keeps the file as it was when requested, then hangs up. So a call left
    over from a failed test cannot touch the next test's pages.
    """

    def __init__(self, app: AppServer, data_dir: Path) -> None:
        self.app = app
        self.data_dir = data_dir
        self.output_from = 0
        self._server: Server | None = None
        self._actions: dict[str, list[dict[str, Any]]] = {}
        self._files: dict[str, list[bytes]] = {}
        self._users = itertools.count(1)
        app.page("/start", lambda request: self._actions.get(user_of(request.json), []))
        app.page("/final", None)

    @property
    def server(self) -> Server:
        assert self._server is not None
        return self._server

    def record(self, **props: Any) -> str:
        """A new user whose call runs ``record`` with ``props`` (and the test's ``id``)."""
        user = f"rec{next(self._users)}"
        url = f"/recorded/{user}"
        self._actions[user] = [{"record": {"next_page": {"url": url}, "id": ID, **props}}]
        self._files[user] = []

        def recorded(request: Received) -> list[dict[str, Any]]:
            name = request.json["action_result"]["result"]["filename"]
            try:  # at once: the reference says the file can be played now
                self._files[user].append((self.data_dir / "media" / "default" / name).read_bytes())
            except OSError as exc:
                self._files[user].append(f"unreadable: {exc}".encode())
            return [{"hang_up": {}}]

        self.app.page(url, recorded)
        self.output_from = len(self.server.output)
        return user

    def finals(self, user: str) -> list[dict[str, Any]]:
        return [body for body in self.app.bodies("/final") if user_of(body) == user]

    async def wait_ended(self, user: str, timeout: float = 10.0) -> bool:
        """Wait until the final page of ``user``'s call was requested."""
        for _ in range(round(timeout / 0.05)):
            if self.finals(user):
                return True
            await asyncio.sleep(0.05)
        return False

    def log(self) -> str:
        """What serve said since the test began."""
        return self.server.output[self.output_from :]

    def outcome(self, user: str, context: str) -> Recorded:
        bodies = self.app.bodies(f"/recorded/{user}")
        assert len(bodies) == 1, context
        (body,) = bodies
        assert body["action_result"]["action"] == "record", body
        (data,) = self._files[user]
        assert data.startswith(b"RIFF"), data[:200]
        (final,) = self.finals(user)
        return Recorded(body["action_result"]["result"], data, final)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=WORKERS)
async def rig(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[Rig]:
    """The module's serve: one process, or workers behind Kamailio (each test runs on both)."""
    workers: int = request.param
    where = tmp_path_factory.mktemp("recordings")
    async with AppServer() as app:
        rig = Rig(app, where / "data")
        server = served(where, app, workers) if workers > 1 else Server.for_app(rig.data_dir, app)
        async with server:
            rig._server = server
            yield rig


async def sipp_call(
    rig: Rig,
    tmp_path: Path,
    user: str,
    stream: Stream,
    *middle: str,
    codec: str,
    ending: str | None = None,
) -> Recorded:
    """SIPp calls ``user`` with ``stream`` and does ``middle``."""
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite(user, codec), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap), *middle]
    parts.append(ending if ending is not None else sipp.BYE_FROM_SERVER.format(timeout_ms=20000))
    run = await sipp.call(rig.server.sip, tmp_path, *parts)
    ended = await rig.wait_ended(user)
    context = run.output + run.errors + rig.log()
    assert run.returncode == 0, context
    assert ended, context
    return rig.outcome(user, context)


# --- reasons, formats, the file ---------------------------------------------------------------


@needs_sipp
@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
async def test_silence_ends_the_recording_in_the_calls_law(
    rig: Rig, tmp_path: Path, codec: str
) -> None:
    """No ``format``: the file is in the call's law, bit-exact; it ends after the silence."""
    law = LAWS[codec]
    speech, at = talk(1, 2), 0.6
    user = rig.record(
        milliseconds_max_silence=600,
        milliseconds_max_initial_silence=3000,  # the 0.6 s would expire before the speech
        seconds_max_duration=10,
    )
    stream = caller(codec).speech(speech, at)
    got = await sipp_call(rig, tmp_path, user, stream, codec=codec)
    result = got.result
    assert result["reason"] == "silence"
    assert result["id"] == ID
    assert result["file_available"] is False
    assert result["contains_sound"] is True
    assert "barge_in_digit" not in result
    span = assert_holds_what_was_sent(got.data, stream.sent(), law=law, sent_law=law)
    # The pre-roll keeps the first syllable, and no more than 0.3 s before it.
    assert at - PREROLL <= span.start <= at, span
    # The caller's silence after the speech ends it: at least 0.6 s of it, not much more.
    spoke_until = at + len(speech) / RATE
    # (The voice-activity detector calls it silence 0.3 s after the last loud frame.)
    assert spoke_until + 0.6 - 0.02 <= span.end <= spoke_until + 0.6 + 0.3 + LATE, span
    assert_result_matches_file(result, got.data)
    assert got.final["this_call"]["call_cause"] == "completed"


@needs_sipp
@pytest.mark.parametrize(("codec", "law"), [("PCMU", "alaw"), ("PCMA", "ulaw")])
async def test_duration_ends_the_recording_and_format_transcodes(
    rig: Rig, tmp_path: Path, codec: str, law: g711.Law
) -> None:
    """``format`` other than the call's law: the samples are the caller's, re-quantised."""
    speech, at = talk(3, 4, 5, 6, 7, 8), 0.5  # ~3 s of talk, longer than the limit
    user = rig.record(seconds_max_duration=2, milliseconds_max_silence=3000, format=law)
    call_law = LAWS[codec]
    stream = caller(codec).speech(speech, at)
    got = await sipp_call(rig, tmp_path, user, stream, codec=codec)
    result = got.result
    assert result["reason"] == "duration"
    assert result["id"] == ID
    assert result["contains_sound"] is True
    span = assert_holds_what_was_sent(got.data, stream.sent(), law=law, sent_law=call_law)
    assert at - PREROLL <= span.start <= at, span
    # seconds_max_duration is the file's length, pre-roll included: within a frame of
    # packet jitter, and the limit is a timer on callhook's event loop, which fires late
    # when the machine is busy (seen: 2.12 s with another test suite running on 2 CPUs).
    length = span.end - span.start
    assert 2.0 - 0.05 <= length <= 2.0 + LATE, span
    assert 2.0 - TENTH <= result["seconds_duration"] <= 2.0 + LATE
    assert_result_matches_file(result, got.data)


@needs_sipp
@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
async def test_barge_in_digit_ends_the_recording(rig: Rig, tmp_path: Path, codec: str) -> None:
    """A digit of ``barge_in_digits`` stops it; a digit outside the set (# here) does not."""
    law = LAWS[codec]
    speech, at = talk(9), 0.6
    user = rig.record(barge_in_digits="5*", milliseconds_max_silence=3000, seconds_max_duration=10)
    stream = caller(codec).speech(speech, at)
    stream.rfc4733("#", at=1.6).rfc4733("*", at=2.2)
    got = await sipp_call(rig, tmp_path, user, stream, codec=codec)
    result = got.result
    assert result["reason"] == "bargein"
    assert result["barge_in_digit"] == "*"
    assert result["id"] == ID
    assert result["contains_sound"] is True
    span = assert_holds_what_was_sent(got.data, stream.sent(), law=law, sent_law=law)
    assert at - PREROLL <= span.start <= at, span
    # It ran through the ignored '#' and stopped at the '*'.
    assert 2.2 - 0.02 <= span.end <= 2.2 + LATE, span
    assert_result_matches_file(result, got.data)


@needs_sipp
@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
async def test_caller_hanging_up_ends_the_recording(rig: Rig, tmp_path: Path, codec: str) -> None:
    """BYE mid-recording: next_page still gets the result (reason hangup) and a whole file."""
    law = LAWS[codec]
    speech, at = talk(4, 2), 0.6
    user = rig.record(milliseconds_max_silence=5000, seconds_max_duration=20)
    stream = caller(codec).speech(speech, at)
    bye = [sipp.PAUSE.format(ms=2500), sipp.BYE_FROM_CALLER.format(cseq=2)]
    got = await sipp_call(rig, tmp_path, user, stream, *bye, codec=codec, ending="")
    result = got.result
    assert result["reason"] == "hangup"
    assert result["id"] == ID
    assert result["contains_sound"] is True
    span = assert_holds_what_was_sent(got.data, stream.sent(), law=law, sent_law=law)
    assert at - PREROLL <= span.start <= at, span
    # Everything up to the hang-up is kept: the speech and the silence after it.
    assert 2.5 - 0.1 <= span.end <= 2.5 + LATE, span
    assert_result_matches_file(result, got.data)
    assert got.final["this_call"]["call_cause"] == "hung_up"


@needs_sipp
async def test_a_silent_caller_gives_an_empty_recording(rig: Rig, tmp_path: Path) -> None:
    """Nothing said within the initial silence: reason silence, no sound, a valid file."""
    user = rig.record(milliseconds_max_initial_silence=800, milliseconds_max_silence=3000)
    stream = caller("PCMU")
    got = await sipp_call(rig, tmp_path, user, stream, codec="PCMU")
    result = got.result
    assert result["reason"] == "silence"
    assert result["id"] == ID
    assert result["contains_sound"] is False
    assert_valid_wav(got.data, "ulaw")
    assert np.all(wav.decode_to_8k(got.data) == 0)  # µ-law silence, if anything
    assert_result_matches_file(result, got.data)


# --- the beep: heard by a real softphone, absent from the file --------------------------------

BARESIP = shutil.which("baresip")


def pcm16_wav(samples: Samples) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(samples.astype("<i2").tobytes())
    return buffer.getvalue()


def tone_seconds(audio: Samples, hz: float) -> float:
    """How long ``audio`` holds a loud tone of ``hz`` (20 ms frames where it dominates)."""
    n = len(audio) // FRAME
    frames = audio[: n * FRAME].astype(np.float64).reshape(n, FRAME)
    t = np.arange(FRAME) / RATE
    probe = np.exp(-2j * np.pi * hz * t)
    power = np.abs(frames @ probe) ** 2 / (FRAME / 2)  # ~ the tone's share of the energy
    energy = np.sum(frames**2, axis=1)
    hits = (energy > FRAME * 300.0**2) & (power > 0.8 * energy)
    return float(np.sum(hits)) * FRAME / RATE


@pytest.mark.skipif(BARESIP is None, reason="baresip is not installed")
async def test_beep_is_played_to_the_caller_and_not_recorded(rig: Rig, tmp_path: Path) -> None:
    from tests.e2e.test_baresip import baresip, baresip_config, command

    speech, at = talk(6, 7), 1.5  # after the beep
    microphone = np.zeros(30 * RATE, dtype=np.int16)
    microphone[round(at * RATE) : round(at * RATE) + len(speech)] = speech
    mic = tmp_path / "mic.wav"
    mic.write_bytes(pcm16_wav(microphone))
    phone_dir = tmp_path / "baresip"
    phone_dir.mkdir()
    sip_port, ctrl_port = free_udp_port(), free_tcp_port()
    baresip_config(phone_dir, sip_port, ctrl_port, mic)
    user = rig.record(
        beep_on_start=True, milliseconds_max_silence=600, milliseconds_max_initial_silence=4000
    )
    output: list[str] = []
    async with baresip(phone_dir, ctrl_port, 30, output) as writer:
        await command(writer, "dial", f"sip:{user}@127.0.0.1:{rig.server.sip_port}")
        ended = await rig.wait_ended(user, timeout=15)
    context = output[0] + rig.log()
    assert ended, context
    got = rig.outcome(user, context)
    result = got.result
    assert result["reason"] == "silence"
    assert result["id"] == ID
    assert result["contains_sound"] is True
    # The file is the caller's speech and silence only: no 1 kHz beep in it.
    span = assert_holds_what_was_sent(got.data, microphone, law="ulaw", sent_law=None)
    assert at - PREROLL <= span.start <= at, span
    assert tone_seconds(wav.decode_to_8k(got.data), 1000.0) == 0.0
    assert_result_matches_file(result, got.data)
    # What the caller heard: the 250 ms beep.
    heard = [p for p in (phone_dir / "heard").glob("*.wav") if "dec" in p.name]
    assert heard, f"baresip wrote no recording: {list((phone_dir / 'heard').iterdir())}"
    beep = tone_seconds(wav.decode_to_8k(heard[0].read_bytes()), 1000.0)
    assert beep == pytest.approx(0.25, abs=0.06), beep
