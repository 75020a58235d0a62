"""Classifying the callee (``classify_callee``: answering-machine detection) on real calls:
``serve`` places a call (``POST /api/v1/calls``, Aculab's ``service_start``) or connects an
inbound caller (``connect``), and the callee, a phone of SIPp and a socket of the test,
plays a clip of the evaluation set (tests/data/classify, labelled in labels.json) from
the moment it answers.

The callee's SDP names the test's socket (tests/e2e/rtpsink.py), which sends the clip to
the media address of callhook's INVITE (SIPp writes it to a file when the ACK comes: the
answer) and keeps what callhook sends back, with arrival times. (SIPp's own pcap replay
sends from another port, where callhook's symmetric RTP would then send.) What callhook
decided is read from the application's pages; when it acted on it is read from the audio:
a voicemail message begins after the beep, a connected caller hears nothing of the
greeting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt
import pytest

from callhook.devtools.harness import AppServer, Received, Reply
from callhook.media import g711, tones, wav
from tests.e2e import sipp
from tests.e2e.aculab_client import AculabWebServices
from tests.e2e.harness import (
    WORKERS,
    Server,
    free_even_udp_port,
    free_udp_port,
    served,
    wait_for_request,
)
from tests.e2e.rtpsink import RtpSink
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

CLIPS = Path(__file__).resolve().parents[1] / "data" / "classify"
KEY = "classify-key-0123456789abcdef"
ACCOUNT = ("1-2-0", "user@example.com")
ALLOW = '[outbound]\nallow = ["sip:*@127.0.0.1:*"]\n'
#: The voicemail message callhook leaves, and the tone a connected callee says after its
#: greeting (away from ringback's 440 and 480 Hz and from the beeps' usual tones).
MESSAGE_HZ = 1700.0
AFTER_HZ = 2300.0
#: A beep's start as callhook measured it, against the label's (seconds).
BEEP_TOLERANCE = 0.15
FRAME_SECONDS = 0.02


# --- the evaluation set -------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    """A clip of tests/data/classify: its label and its audio (8 kHz)."""

    label: dict[str, Any]
    samples: npt.NDArray[np.int16]


def _labels() -> list[dict[str, Any]]:
    labels: list[dict[str, Any]] = json.loads((CLIPS / "labels.json").read_text())
    return labels


def _clip(label: dict[str, Any]) -> Clip:
    samples = wav.decode_to_8k((CLIPS / label["file"]).read_bytes())
    return Clip(label, np.asarray(samples, dtype=np.int16))


def _far_from(hz: list[float], *others: float) -> bool:
    return all(abs(h - o) > 60 for h in hz for o in others)


def machine_clip() -> Clip:
    """The machine whose greeting ends soonest with a beep of one tone (away from ringback
    and the test's own tones, so the caller's ear can tell them apart)."""
    beeps = [
        label
        for label in _labels()
        if label["class"] == "machine"
        and label["beep"] is not None
        and label["beep"]["kind"] == "single"
        and _far_from(label["beep"]["hz"], 440.0, 480.0, MESSAGE_HZ, AFTER_HZ)
    ]
    assert beeps, "no machine clip with a single beep in tests/data/classify"
    return _clip(min(beeps, key=lambda label: label["beep"]["end"]))


def live_clip() -> Clip:
    """The live answer that is over soonest (one answer: no second "Hello?")."""
    lives = [
        label
        for label in _labels()
        if label["class"] == "live" and label.get("second_answer") is None
    ]
    assert lives, "no live clip in tests/data/classify"
    return _clip(min(lives, key=lambda label: label["speech_end"]))


def fax_clip() -> Clip:
    """The fax machine whose tone starts soonest."""
    faxes = [label for label in _labels() if label["class"] == "fax"]
    assert faxes, "no fax clip in tests/data/classify"
    return _clip(min(faxes, key=lambda label: label["fax"]["start"]))


# --- the callee: SIPp answers, the test's socket talks and listens -------------------------

#: The INVITE's From, To and Contact (to hang up itself: sipp.BYE_FROM_UAS) and callhook's
#: media address, from its SDP.
RECEIVE_INVITE = """
  <recv request="INVITE">
    <action>
      <ereg regexp=".*" search_in="hdr" header="From:" check_it="true" assign_to="caller"/>
      <ereg regexp=".*" search_in="hdr" header="To:" check_it="true" assign_to="callee"/>
      <ereg regexp="sips?:[^>;]*" search_in="hdr" header="Contact:" check_it="true"
            assign_to="contact"/>
      <ereg regexp="m=audio ([0-9]+)" search_in="body" check_it="true" assign_to="mline,port"/>
      <ereg regexp="c=IN IP4 ([0-9.]+)" search_in="body" check_it="true" assign_to="cline,ip"/>
    </action>
  </recv>
  <Reference variables="caller,callee,contact,mline,cline"/>
"""

#: The ACK of its 200 OK (the answer): callhook's media address to the file.
ACKED = """  <recv request="ACK">
    <action><exec command="echo '[$port] [$ip]' > ADDRESS_FILE"/></action>
  </recv>
"""


@dataclass
class Packets:
    """What a phone's ear received: the audio of each packet, with its arrival time."""

    arrived: list[float]
    frames: list[npt.NDArray[np.int16]]

    @classmethod
    def of(cls, ear: RtpSink) -> Packets:
        audio = [p for p in ear.packets if p.payload_type == 0]
        if audio:
            first = audio[0].sequence
            audio.sort(key=lambda p: (p.sequence - first) & 0xFFFF)
        return cls([p.arrived for p in audio], [g711.decode("ulaw", p.payload) for p in audio])

    def between(self, start: float, end: float) -> npt.NDArray[np.int16]:
        """The audio of the packets that arrived from ``start`` to ``end`` (loop time)."""
        chosen = [f for t, f in zip(self.arrived, self.frames, strict=True) if start <= t < end]
        return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int16)

    def first_tone(self, hz: float, share: float = 0.6) -> float | None:
        """When the first packet came whose audio is mostly ``hz`` (loop time), or None."""
        for t, frame in zip(self.arrived, self.frames, strict=True):
            if _rms(frame) > 300 and energy_at(frame, hz, width=60) > share:
                return t
        return None


def _rms(samples: npt.NDArray[np.int16]) -> float:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) if len(samples) else 0.0


def energy_at(samples: npt.NDArray[np.int16], hz: float, width: float = 20) -> float:
    """The share of the signal's energy within ``width`` Hz of ``hz``."""
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / 8000)
    total = float(spectrum.sum()) or 1.0
    return float(spectrum[np.abs(freqs - hz) <= width].sum()) / total


@dataclass
class Callee:
    """A phone that answers the call to ``uri``: SIPp for its SIP, an :class:`RtpSink` for its
    media. From the answer (the ACK) it says ``said`` (then silence), from its socket to
    callhook's media address; it hangs up ``hang_up_after`` seconds after the answer, or
    waits for callhook's BYE (None)."""

    workdir: Path
    said: npt.NDArray[np.int16]
    hang_up_after: float | None = None
    user: str = "callee"
    port: int = field(default_factory=free_udp_port)
    ear: RtpSink = field(default_factory=RtpSink)
    #: When the ACK came and the clip's first packet was sent (loop time).
    answered: float | None = None
    _proc: asyncio.subprocess.Process | None = None
    _talking: asyncio.Task[None] | None = None

    @property
    def uri(self) -> str:
        return f"sip:{self.user}@127.0.0.1:{self.port}"

    def sent_at(self, clip_seconds: float) -> float:
        """When the callee said what is ``clip_seconds`` into its clip (loop time)."""
        assert self.answered is not None, "the callee was never answered"
        return self.answered + clip_seconds

    def scenario(self, address_file: Path) -> str:
        answer = sipp.UAS_ANSWER.format(receive=RECEIVE_INVITE)
        answer = answer.replace("m=audio [media_port]", f"m=audio {self.ear.port}")
        answer = answer.replace('  <recv request="ACK"/>\n', ACKED)
        answer = answer.replace("ADDRESS_FILE", str(address_file))
        if self.hang_up_after is None:
            ending = sipp.BYE_FROM_SERVER.format(timeout_ms=30000)
        else:
            ending = sipp.PAUSE.format(ms=round(self.hang_up_after * 1000)) + sipp.BYE_FROM_UAS
        return sipp.scenario(answer, ending)

    async def __aenter__(self) -> Callee:
        await self.ear.__aenter__()
        address_file = self.workdir / f"callee-{self.port}.address"
        self._proc = await sipp.start_sipp(
            self.scenario(address_file),
            self.workdir,
            local_port=self.port,
            media_port=free_even_udp_port(),
        )
        self._talking = asyncio.create_task(self._talk(address_file))
        return self

    async def _talk(self, address_file: Path) -> None:
        loop = asyncio.get_running_loop()
        while not (address_file.exists() and address_file.read_text().strip()):
            await asyncio.sleep(0.005)
        port, ip = address_file.read_text().split()[:2]
        # Silence after the clip until the call is over (a phone sends on).
        stream = Stream(len(self.said) / 8000 + 30.0).speech(self.said, at=0.0)
        start = self.answered = loop.time()
        for t, rtp in stream.packets():
            delay = start + t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.ear.send(rtp, (ip, int(port)))

    async def finished(self, timeout: float = 40.0) -> str:
        """Wait for SIPp to end its call: its output (asserting it went as scripted)."""
        assert self._proc is not None
        out, _ = await asyncio.wait_for(self._proc.communicate(), timeout)
        text = out.decode(errors="replace")
        assert self._proc.returncode == 0, text
        return text

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._talking is not None:
            self._talking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._talking
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()
        await self.ear.__aexit__(kind, exc, tb)


# --- the applications ---------------------------------------------------------------------


def serve(tmp_path: Path, app: AppServer, workers: int = 1, extra: str = "") -> Server:
    """``serve`` (one process, or ``workers`` behind Kamailio) running an application
    ``calls`` with an API key and a web services account, its first page /outbound, as
    well as ``app``'s /start for inbound calls; allowed to call SIPp on loopback. ``extra``:
    more of ``[apps.calls]``."""
    config = f"""{ALLOW}
[apps.calls]
first_page = "{app.url("/outbound")}"
final_page = "{app.url("/outbound-final")}"
secret = "{app.secret}"
api_key = "{KEY}"
webservices_username = "{ACCOUNT[0]}/{ACCOUNT[1]}"
{extra}
"""
    if workers == 1:  # (served says so itself for workers)
        config += "[speech]\npreload = false\n"  # no speech here: no model to wait for
    return served(tmp_path, app, workers, config)


def timed(app: AppServer, path: str, answer: list[dict[str, Any]]) -> list[float]:
    """``path`` answers ``answer``; the returned list gets when each request came (loop
    time)."""
    times: list[float] = []

    def page(_: Received) -> list[dict[str, Any]]:
        times.append(asyncio.get_running_loop().time())
        return answer

    app.page(path, page)
    return times


async def place_call(server: Server, body: dict[str, Any]) -> tuple[int, Any]:
    """``POST /api/v1/calls`` with application ``calls``' key: status and JSON body."""
    url = f"http://127.0.0.1:{server.http_port}/api/v1/calls"
    headers = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


def classified(first: dict[str, Any], far_end_type: str) -> dict[str, Any]:
    """The first page's ``this_call`` says ``far_end_type``: its classification object."""
    this_call = first["this_call"]
    assert this_call["call_direction"] == "out"
    assert this_call.get("far_end_type") == far_end_type, this_call
    classification: dict[str, Any] = this_call["far_end_classification"]
    assert classification["far_end_type"] == far_end_type
    return classification


def assert_the_beep(far_end: dict[str, Any], beep: dict[str, Any]) -> float:
    """``far_end`` found ``beep`` (a label's) where the callee played it: the error of its
    start (seconds). The classifier's clock starts at the first frame it gets, which is
    the clip's first: the callee speaks once answered, when callhook listens already."""
    assert far_end["greeting_end"] == "beep", far_end
    error = float(far_end["seconds_beep_start"] - beep["start"])
    assert abs(error) <= BEEP_TOLERANCE, (far_end, beep)
    assert abs(far_end["seconds_beep_end"] - beep["end"]) <= BEEP_TOLERANCE, (far_end, beep)
    assert far_end["seconds_to_greeting_end"] >= beep["end"], far_end
    found, labelled = sorted(far_end["beep_hz"]), sorted(beep["hz"])
    assert len(found) == len(labelled), (far_end, beep)
    assert all(abs(f - h) <= 20 for f, h in zip(found, labelled, strict=True)), (far_end, beep)
    return error


# --- an outbound call ---------------------------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_call_placed_through_the_api_leaves_its_message_after_the_beep(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """A voicemail answers: the first page comes once its greeting is over, saying so, and
    the message it plays (a tone, a WAV of the application's server) begins after the
    beep as the callee played it."""
    clip = machine_clip()
    beep = clip.label["beep"]
    message = wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(MESSAGE_HZ, 1.0, -12)))
    app.page("/message.wav", Reply(message, content_type="audio/wav"))
    play = {"play": {"play_list": [{"file_to_play": {"url": "/message.wav"}}]}}
    pages = timed(app, "/outbound", [play, {"hang_up": {}}])
    app.page("/outbound-final", None)
    async with (
        Callee(tmp_path, clip.samples) as callee,
        serve(tmp_path, app, workers) as server,
    ):
        status, placed = await place_call(server, {"to": callee.uri, "classify_callee": True})
        assert status == 202, placed
        await callee.finished()  # callhook hung up after its message
        assert await wait_for_request(app, "/outbound-final", timeout=10), server.output
        output = server.output
    (first,) = app.bodies("/outbound")
    assert first["this_call"]["call_id"] == placed["call_id"]
    far_end = classified(first, "answering_machine")
    assert far_end["reason"] == "long_greeting", far_end
    error = assert_the_beep(far_end, beep)
    # The first page came once the greeting was over: how long after the callee sent the
    # frame that ended it (the classifier's time is the end of its last frame): the
    # classifier's and the page's latency, and the frames it missed, if any (none should).
    late = pages[0] - callee.sent_at(far_end["seconds_to_greeting_end"] - FRAME_SECONDS)
    assert 0 < late < 1.0, late
    # The message began after the beep's end as the callee played it, and soon after.
    beep_ended = callee.sent_at(beep["end"])
    heard = Packets.of(callee.ear).first_tone(MESSAGE_HZ)
    assert heard is not None, "the callee never heard the message\n" + output
    assert 0 < heard - beep_ended <= 2.5, heard - beep_ended
    (final,) = app.bodies("/outbound-final")
    assert final["this_call"]["call_cause"] == "completed"
    print(
        f"{clip.label['file']}: beep start error {error * 1000:+.0f} ms; first page "
        f"{late * 1000:.0f} ms after the greeting's end was sent; the message "
        f"{heard - beep_ended:.2f} s after the beep's end"
    )


async def first_page_of_a_call_to(
    tmp_path: Path, app: AppServer, clip: Clip
) -> tuple[dict[str, Any], float]:
    """A call placed through the API to a callee that says ``clip``: its first page (which
    hangs up), and how long after the answer it was requested (seconds)."""
    pages = timed(app, "/outbound", [{"hang_up": {}}])
    app.page("/outbound-final", None)
    async with Callee(tmp_path, clip.samples) as callee, serve(tmp_path, app) as server:
        status, placed = await place_call(server, {"to": callee.uri, "classify_callee": True})
        assert status == 202, placed
        await callee.finished()
        assert await wait_for_request(app, "/outbound-final", timeout=10), server.output
    (first,) = app.bodies("/outbound")
    return first, pages[0] - callee.sent_at(0.0)


async def test_a_live_answer_is_told_within_seconds(tmp_path: Path, app: AppServer) -> None:
    clip = live_clip()
    first, after = await first_page_of_a_call_to(tmp_path, app, clip)
    far_end = classified(first, "live")
    assert far_end["reason"] == "short_greeting", far_end
    assert far_end["seconds_to_classify"] > clip.label["speech_end"], far_end
    assert far_end["greeting_end"] is None, far_end
    assert 0 < after <= 3.0, after
    print(
        f"{clip.label['file']}: live at {far_end['seconds_to_classify']} s; "
        f"first page {after:.2f} s"
    )


async def test_a_fax_machine_is_told(tmp_path: Path, app: AppServer) -> None:
    clip = fax_clip()
    first, after = await first_page_of_a_call_to(tmp_path, app, clip)
    far_end = classified(first, "fax_machine")
    assert far_end["reason"] == "fax_tone", far_end
    assert far_end["seconds_to_classify"] > clip.label["fax"]["start"], far_end
    print(
        f"{clip.label['file']}: fax at {far_end['seconds_to_classify']} s; first page {after:.2f} s"
    )


async def test_an_outbound_service_classifies_when_its_application_says(
    tmp_path: Path, app: AppServer
) -> None:
    """Aculab's service_start, of an application with ``classify_callee = true``."""
    clip = live_clip()
    app.page("/outbound", [{"hang_up": {}}])
    app.page("/outbound-final", None)
    async with (
        Callee(tmp_path, clip.samples) as callee,
        serve(tmp_path, app, extra="classify_callee = true") as server,
    ):
        ws = AculabWebServices(f"http://127.0.0.1:{server.http_port}", *ACCOUNT, KEY)
        started = await ws.service_start("calls", KEY, {"to": callee.uri, "token": "t-1"})
        assert started.status == 200, (started.raw, server.output)
        await callee.finished()
        assert await wait_for_request(app, "/outbound-final", timeout=10), server.output
    (first,) = app.bodies("/outbound")
    assert first["token"] == "t-1"
    assert classified(first, "live")["reason"] == "short_greeting"


# --- connect --------------------------------------------------------------------------------


async def test_a_connect_puts_the_caller_through_after_the_machines_beep(
    tmp_path: Path, app: AppServer
) -> None:
    """An inbound caller's connect with ``classify_callee`` reaches a voicemail: the caller
    hears ringback while the greeting plays, and is put through once it is over (a tone
    the callee says after its beep is heard); the next page says who answered."""
    clip = machine_clip()
    beep = clip.label["beep"]
    after_at = beep["end"] + 1.6  # past the beep and its second of quiet
    said = np.zeros(round((after_at + 1.0) * 8000), dtype=np.int16)
    said[: len(clip.samples)] = clip.samples[: len(said)]
    start = round(after_at * 8000)
    said[start : start + 8000] = tones.tone(AFTER_HZ, 1.0, -12)
    hang_up_after = after_at + 1.2
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)
    async with (
        Callee(tmp_path, said, hang_up_after=hang_up_after) as callee,
        RtpSink() as ear,
        serve(tmp_path, app) as server,
    ):
        connect = {
            "destinations": [callee.uri],
            "classify_callee": {},
            "next_page": {"url": "/connected"},
        }
        app.page("/start", [{"connect": connect}])
        invite = sipp.invite("ivr").replace("m=audio [media_port]", f"m=audio {ear.port}")
        caller = await sipp.call(
            server.sip,
            tmp_path,
            invite,
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
        )
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        await callee.finished()
        assert await wait_for_request(app, "/connected"), server.output
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    assert result["connected"] is True, result
    assert result["far_end_type"] == "answering_machine", result
    far_end = result["far_end_classification"]
    error = assert_the_beep(far_end, beep)
    # Put through once the greeting was over: connected from then to the callee's hang-up.
    bridged_for = hang_up_after - far_end["seconds_to_greeting_end"]
    assert abs(result["seconds_connected_duration"] - bridged_for) <= 0.5, (result, bridged_for)
    # The caller heard ringback, not the greeting nor its beep; then the callee.
    heard = Packets.of(ear)
    greeting = heard.between(callee.sent_at(0.0), callee.sent_at(beep["end"]) + 0.1)
    assert len(greeting) > 8000 * 3, len(greeting)
    ringback = energy_at(greeting, 440.0) + energy_at(greeting, 480.0)
    assert ringback > 0.9, ringback
    assert energy_at(greeting, beep["hz"][0], width=40) < 0.01
    told = heard.first_tone(AFTER_HZ)
    assert told is not None, "the caller never heard the callee"
    assert told > callee.sent_at(after_at), told - callee.sent_at(after_at)
    print(
        f"{clip.label['file']}: beep start error {error * 1000:+.0f} ms; connected "
        f"{result['seconds_connected_duration']} s of {bridged_for:.2f} s"
    )


# --- a bad classify_callee ------------------------------------------------------------------


async def test_a_bad_classify_callee_is_refused(tmp_path: Path, app: AppServer) -> None:
    """By the REST API (and the installation's /api/calls), naming the option, and on a
    connect by the page's validation: the call is refused, its log says why."""
    bad = {"milliseconds_timeout": 1}
    connect = {
        "destinations": ["sip:callee@127.0.0.1:5"],
        "classify_callee": bad,
        "next_page": {"url": "/connected"},
    }
    app.page("/start", [{"connect": connect}])
    app.page("/final", None)
    async with serve(tmp_path, app) as server:
        status, answer = await place_call(
            server, {"to": "sip:x@127.0.0.1:5", "classify_callee": bad}
        )
        assert status == 400, answer
        assert answer["error"]["code"] == "bad_request"
        assert "'classify_callee.milliseconds_timeout'" in answer["error"]["message"], answer
        body = {"to": "sip:x@127.0.0.1:5", "app": "calls", "classify_callee": bad}
        status, installation = await server_api(server, "/api/calls", body)
        assert status == 400, installation
        assert "'classify_callee.milliseconds_timeout'" in json.dumps(installation), installation
        refused = sipp.REFUSED.format(status=603, user="ivr").replace(
            '<recv response="603"/>',
            '<recv response="180" optional="true"/>\n  <recv response="603"/>',
        )
        run = await sipp.call(server.sip, tmp_path, sipp.invite("ivr"), refused)
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/final"), server.output
    (log,) = (tmp_path / "data" / "media").glob("*/logs/*.log")
    assert (
        "$.actions[0].connect.classify_callee.milliseconds_timeout: input should be greater "
        "than or equal to 500, got 1"
    ) in log.read_text(), log.read_text()
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "failed"


async def server_api(server: Server, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST ``path`` on serve with the installation secret: status and JSON body."""
    secret = (server.data_dir / "secret").read_text().strip()
    url = f"http://127.0.0.1:{server.http_port}{path}"
    headers = {"Authorization": f"Bearer {secret}"}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()
