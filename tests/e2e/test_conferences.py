"""Conference rooms on real calls: SIPp callers join one room through ``serve``, with one
process and with workers behind Kamailio (which gives the calls to the workers in turn,
so some callers of the room are on the worker that does not hold it), and on two nodes
sharing PostgreSQL.

Each caller is a phone made of SIPp for its signalling and a socket of the test for its
media (tests/e2e/rtpsink.py), which its SDP names: the socket sends the caller's tone
(and its key presses, RFC 4733) to the media address of callhook's answer, which SIPp
writes to a file, and keeps what callhook sends it. (SIPp's own pcap replay sends from
another port, where callhook's symmetric RTP would then send.) Each must hear the other
talkers' tones and not its own; a muted participant and a listener are heard by nobody
but hear the room; the exit digit takes a caller out, and its ``next_page`` gets the
result.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from callhook.devtools.harness import AppServer, Received
from callhook.media import tones
from tests.e2e import sipp
from tests.e2e.aculab_client import AculabWebServices
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.e2e.rtpsink import RtpSink
from tests.e2e.rtpstream import Stream
from tests.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

#: Each caller's tone (away from ringback's 440 and 480 Hz and from one another).
TONES = {1: 600.0, 2: 850.0, 3: 1100.0, 4: 1350.0, 5: 1650.0}
#: When the tones play in each caller's stream (after the digits that set it up).
TONE_FROM, TONE_SECONDS = 2.0, 5.0


def energy_at(samples: npt.NDArray[np.int16], hz: float) -> float:
    """The share of the signal's energy within 20 Hz of ``hz``."""
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / 8000)
    total = float(spectrum.sum()) or 1.0
    return float(spectrum[np.abs(freqs - hz) <= 20].sum()) / total


def caller_number(received: Received) -> int:
    call_to = str(received.json["this_call"]["call_to"])
    found = re.search(r"(?:p|100)(\d)@", call_to)
    assert found is not None, call_to
    return int(found.group(1))


def room_app(
    app: AppServer, participant: dict[int, dict[str, Any]], ids: dict[int, str] | None = None
) -> None:
    """Every caller to room ``weekly``, with the options ``participant`` gives its number
    (its application instance, its participant id, noted in ``ids``)."""

    def start(received: Received) -> list[dict[str, Any]]:
        n = caller_number(received)
        if ids is not None:
            ids[n] = received.json["application_instance_id"]
        options = {"beep_on_entry": False, **participant.get(n, {})}
        return [
            {
                "connect_to_conference": {
                    "name": "weekly",
                    "conference_participant": options,
                    "next_page": {"url": f"/left/{n}"},
                }
            }
        ]

    app.page("/start", start)
    for n in TONES:
        app.page(f"/left/{n}", [{"hang_up": {}}])
    app.page("/final", None)


#: SIPp's part that takes callhook's answer: the media port and address of its SDP, to a
#: file.
ANSWERED_TELLING_PORT = sipp.ANSWERED.replace(
    '<recv response="200" rrs="true"/>',
    """<recv response="200" rrs="true">
    <action>
      <ereg regexp="m=audio ([0-9]+)" search_in="body" check_it="true" assign_to="line,port"/>
      <ereg regexp="c=IN IP4 ([0-9.]+)" search_in="body" check_it="true" assign_to="c,ip"/>
      <exec command="echo '[$port] [$ip] [$line] [$c]' > PORT_FILE"/>
    </action>
  </recv>""",
)


async def speak(ear: RtpSink, stream: Stream, port_file: Path) -> None:
    """The caller's RTP, from its ear's socket, once callhook's media address is known."""
    loop = asyncio.get_running_loop()
    for _ in range(1000):
        if port_file.exists() and port_file.read_text().strip():
            break
        await asyncio.sleep(0.01)
    port, address = port_file.read_text().split()[:2]
    to = (address, int(port))
    start = loop.time()
    for t, rtp in stream.packets():
        delay = start + t - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        ear.send(rtp, to)


async def join(
    tmp_path: Path,
    server_sip: tuple[str, int],
    n: int,
    ear: RtpSink,
    *,
    digits: str = "",
    user: str = "",
    put_out: bool = False,
    said: Stream | None = None,
) -> sipp.SippRun:
    """Caller ``n`` (calling ``user``, else ``p<n>``): its digits at 1 s (RFC 4733), its
    tone (or what ``said`` holds), then it hangs up at 9 s (or when ``said`` ends); or,
    with ``#`` among its digits (pressed a second before its tone ends) or ``put_out``,
    it waits for callhook to hang up."""
    stream = said or Stream(TONE_FROM + TONE_SECONDS + 0.5).speech(
        tones.tone(TONES[n], TONE_SECONDS, -12), at=TONE_FROM
    )
    leaves = "#" in digits or put_out
    if digits:
        stream.rfc4733(digits, at=1.0 if "#" not in digits else TONE_FROM + TONE_SECONDS - 1.0)
    workdir = tmp_path / f"p{n}"
    workdir.mkdir()
    port_file = workdir / "media-port"
    invite = sipp.invite(user or f"p{n}").replace("m=audio [media_port]", f"m=audio {ear.port}")
    parts = [invite, ANSWERED_TELLING_PORT.replace("PORT_FILE", str(port_file))]
    if leaves:
        parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=20000))
    else:
        stay = round(1000 * stream.seconds) + 1500 if said is not None else 9000
        parts += [sipp.PAUSE.format(ms=stay), sipp.BYE_FROM_CALLER.format(cseq=2)]
    calling = asyncio.create_task(sipp.call(server_sip, workdir, *parts))
    talking = asyncio.create_task(speak(ear, stream, port_file))
    try:
        return await calling
    finally:
        talking.cancel()


def heard(ear: RtpSink) -> dict[int, float]:
    """The share of each caller's tone in what ``ear`` heard."""
    audio = ear.audio()
    assert len(audio) > 8000 * 3, f"only {len(audio) / 8000:.1f} s heard"
    return {n: energy_at(audio, hz) for n, hz in TONES.items()}


def assert_linked_if_workers(workers: int, output: str) -> None:
    """With workers, some callers joined the room from the worker that does not hold it."""
    if workers > 1:
        assert re.search(r"call \S+ \(of \d\): in conference 'weekly'", output), output


@pytest.mark.parametrize("workers", WORKERS)
async def test_five_callers_each_hear_the_other_four_and_not_themselves(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    room_app(app, {})
    ears = [RtpSink() for _ in TONES]
    async with served(tmp_path, app, workers) as server:
        for ear in ears:
            await ear.__aenter__()
        try:
            runs = await asyncio.gather(
                *(join(tmp_path, server.sip, n, ear) for n, ear in zip(TONES, ears, strict=True))
            )
        finally:
            for ear in ears:
                await ear.__aexit__(None, None, None)
        for _ in range(100):  # (each caller hung up: its action ends without a next_page)
            if len(app.bodies("/final")) == len(TONES):
                break
            await asyncio.sleep(0.1)
        output = server.output
    for run in runs:
        assert run.returncode == 0, run.output + run.errors + output
    assert len(app.bodies("/final")) == len(TONES), output
    assert app.bodies("/left/1") == []
    for n, ear in zip(TONES, ears, strict=True):
        shares = heard(ear)
        others = {m: s for m, s in shares.items() if m != n}
        assert all(s > 0.04 for s in others.values()), (n, shares)
        assert shares[n] < 0.002, (n, shares)  # never itself
    assert output.count("out of conference 'weekly' (hung_up") == len(TONES), output
    assert_linked_if_workers(workers, output)


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_muted_caller_and_a_listener_are_not_heard_but_hear_and_the_exit_digit_leaves(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Callers 1 and 2 talk; 3 mutes itself with its mute digit; 4 is a listener; 1
    leaves with its exit digit before the others hang up."""
    room_app(app, {1: {"exit_digit": "#"}, 3: {"mute_digit": "5"}, 4: {"talker": False}})
    numbers = (1, 2, 3, 4)
    ears = {n: RtpSink() for n in numbers}
    async with served(tmp_path, app, workers) as server:
        for ear in ears.values():
            await ear.__aenter__()
        try:
            runs = await asyncio.gather(
                join(tmp_path, server.sip, 1, ears[1], digits="#"),
                join(tmp_path, server.sip, 2, ears[2]),
                join(tmp_path, server.sip, 3, ears[3], digits="5"),
                join(tmp_path, server.sip, 4, ears[4]),
            )
        finally:
            for ear in ears.values():
                await ear.__aexit__(None, None, None)
        assert await wait_for_request(app, "/left/1", timeout=10.0), server.output
        for _ in range(100):
            if len(app.bodies("/final")) == len(numbers):
                break
            await asyncio.sleep(0.1)
        output = server.output
    for run in runs:
        assert run.returncode == 0, run.output + run.errors + output
    shares = {n: heard(ear) for n, ear in ears.items()}
    for n in numbers:
        for silent in (3, 4):  # muted, listener: nobody hears them
            assert shares[n][silent] < 0.002, (n, shares[n])
    assert shares[1][2] > 0.2 and shares[2][1] > 0.2, shares  # the two talkers
    for n in (3, 4):  # they hear the room
        assert shares[n][1] > 0.1 and shares[n][2] > 0.1, (n, shares[n])
    (left,) = app.bodies("/left/1")  # the exit digit, pressed a second before its tone ends
    assert left["action_result"]["action"] == "connect_to_conference"
    seconds = left["action_result"]["result"]["seconds_connected_duration"]
    assert 4.0 < seconds < 8.0, left
    assert [app.bodies(f"/left/{n}") for n in (2, 3, 4)] == [[], [], []]  # they hung up
    assert "out of conference 'weekly' (exit_digit" in output, output
    assert "muted" in output
    assert_linked_if_workers(workers, output)


def audio_between(ear: RtpSink, start: float, end: float) -> npt.NDArray[np.int16]:
    """What ``ear`` heard between two times of the test's loop (packet arrival)."""
    from callhook.media import g711

    kept = [p for p in ear.packets if p.payload_type == 0 and start <= p.arrived < end]
    kept.sort(key=lambda p: p.arrived)
    return g711.decode("ulaw", b"".join(p.payload for p in kept))


WS_KEY = "conference-services-key-0123456789"


@pytest.mark.parametrize("workers", WORKERS)
async def test_the_web_services_list_mute_and_eject_live_participants(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Three callers; the application's back end lists the room and its participants,
    mutes caller 2 (caller 1 hears it before, not after) and ejects caller 3 (its
    ``next_page`` follows, and its call goes on to hang up). With workers, a service
    asked of a worker that does not hold the room is answered by the one that does."""
    config = "\n".join(
        [
            "[apps.conf]",
            f'first_page = "{app.url("/start")}"',
            f'final_page = "{app.url("/final")}"',
            f'secret = "{app.secret}"',
            f'api_key = "{WS_KEY}"',
            'numbers = ["1001", "1002", "1003"]',
        ]
    )
    ids: dict[int, str] = {}
    room_app(app, {}, ids)
    ears = {n: RtpSink() for n in (1, 2, 3)}
    async with served(tmp_path, app, workers, config + "\n") as server:
        ws = AculabWebServices(
            f"http://127.0.0.1:{server.http_port}", "1-2-0", "user@example.com", WS_KEY
        )
        for ear in ears.values():
            await ear.__aenter__()
        try:
            calls = [
                asyncio.create_task(
                    join(tmp_path, server.sip, n, ears[n], user=f"100{n}", put_out=n == 3)
                )
                for n in (1, 2, 3)
            ]
            loop = asyncio.get_running_loop()
            for _ in range(200):
                listed = await ws.conference_participant_list("weekly")
                if listed.status == 200 and len(listed.body["participants"]) == 3:
                    break
                await asyncio.sleep(0.05)
            assert listed.status == 200, (listed.raw, server.output)
            assert {p["participant_id"] for p in listed.body["participants"]} == set(ids.values())
            rooms = await ws.conference_list()
            assert rooms.status == 200, rooms.raw
            ((room,),) = [rooms.body["conferences"]]
            assert (room["conference_name"], room["state"], room["participant_count"]) == (
                "weekly",
                "ACTIVE",
                3,
            )
            await asyncio.sleep(TONE_FROM + 1.0)  # every tone playing for a second
            before = loop.time()
            muted = await ws.conference_participant_set_options("weekly", ids[2], mute=True)
            assert muted.status == 200 and muted.body["muted"] is True, muted.raw
            after = loop.time()
            await asyncio.sleep(1.2)
            ejected = await ws.conference_participant_eject("weekly", ids[3])
            assert ejected.status == 200, ejected.raw
            out = loop.time()
            assert await wait_for_request(app, "/left/3", timeout=10.0), server.output
            again = await ws.conference_participant_eject("weekly", ids[3])
            assert again.status == 404 and again.body["error"]["code"] == "HTTP 404"
            runs = await asyncio.gather(*calls)
        finally:
            for ear in ears.values():
                await ear.__aexit__(None, None, None)
        output = server.output
    for run in runs:
        assert run.returncode == 0, run.output + run.errors + output
    heard_before = audio_between(ears[1], before - 1.0, before)
    heard_after = audio_between(ears[1], after + 0.3, out)
    assert energy_at(heard_before, TONES[2]) > 0.2, output
    assert energy_at(heard_after, TONES[2]) < 0.002  # muted: caller 1 no longer hears 2
    assert energy_at(heard_after, TONES[3]) > 0.2  # (but 3, still there)
    (left,) = app.bodies("/left/3")
    assert left["action_result"]["action"] == "connect_to_conference"
    assert 1.0 < left["action_result"]["result"]["seconds_connected_duration"] < 10.0
    assert "out of conference 'weekly' (ejected" in output
    assert_linked_if_workers(workers, output)


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_participants_transcription_hears_the_room(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Caller 2 starts a transcription, then joins the room; caller 1 speaks there. Caller
    2's transcription has caller 1's words as what it heard (outbound), from the room's mix
    (with workers, whichever worker caller 2's call is on)."""
    from bench.transcription import wer, words
    from callhook.edge.speechworkers import build_synthesiser

    synthesiser = build_synthesiser("piper:joe")
    assert synthesiser is not None
    script = (
        "Please call me back tomorrow morning after nine o'clock.",
        "I need to change the delivery address for my new phone.",
    )
    spoken = Stream(16.0)
    at = 3.0
    for line in script:
        audio = synthesiser.speak(line)
        spoken = spoken.speech(audio, at=at)
        at += len(audio) / 8000 + 1.5

    def start(received: Received) -> list[dict[str, Any]]:
        join_room = {
            "connect_to_conference": {
                "name": "weekly",
                "conference_participant": {"beep_on_entry": False},
            }
        }
        if caller_number(received) == 2:
            results = {"results_page": {"url": "/results"}, "id": "listener"}
            return [{"start_transcription": results}, join_room]
        return [join_room]

    app.page("/start", start)
    app.page("/results", None)
    app.page("/final", None)
    ears = {n: RtpSink() for n in (1, 2)}
    async with served(tmp_path, app, workers) as server:
        for ear in ears.values():
            await ear.__aenter__()
        try:
            quiet = Stream(16.0)
            runs = await asyncio.gather(
                join(tmp_path, server.sip, 1, ears[1], said=spoken),
                join(tmp_path, server.sip, 2, ears[2], said=quiet),
            )
        finally:
            for ear in ears.values():
                await ear.__aexit__(None, None, None)
        for _ in range(150):  # the call's end stops it: the completed result comes last
            if any(b["action_result"]["result"]["completed"] for b in app.bodies("/results")):
                break
            await asyncio.sleep(0.1)
        output = server.output
    for run in runs:
        assert run.returncode == 0, run.output + run.errors + output[-3000:]
    results = [b["action_result"]["result"] for b in app.bodies("/results")]
    assert results and all(r["id"] == "listener" for r in results), output[-3000:]
    finals = [p for r in results for p in r["transcription"] if p["final"]]
    heard = " ".join(p["alternatives"][0]["text"] for p in finals if p["direction"] == "outbound")
    reference = words(" ".join(script))
    errors, _ = wer(reference, words(heard))
    assert errors / len(reference) <= 0.15, heard
    assert not [p for p in finals if p["direction"] == "inbound"]  # caller 2 said nothing


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_room_recorded_through_the_rest_api_and_announced(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Three callers talk; the back end records the room (mixed) for a while through
    ``/api/v1/conferences/weekly/recording`` and stops it; the file holds the three tones
    and ``recording_available_page`` announces it, signed."""
    import aiohttp

    from callhook.media import wav

    config = "\n".join(
        [
            "[apps.conf]",
            f'first_page = "{app.url("/start")}"',
            f'final_page = "{app.url("/final")}"',
            f'secret = "{app.secret}"',
            f'api_key = "{WS_KEY}"',
            'numbers = ["1001", "1002", "1003"]',
        ]
    )
    room_app(app, {})
    app.page("/room-recorded", None)
    ears = {n: RtpSink() for n in (1, 2, 3)}
    headers = {"Authorization": f"Bearer {WS_KEY}"}
    async with served(tmp_path, app, workers, config + "\n") as server:
        base = f"http://127.0.0.1:{server.http_port}/api/v1/conferences"
        for ear in ears.values():
            await ear.__aenter__()
        try:
            calls = [
                asyncio.create_task(join(tmp_path, server.sip, n, ears[n], user=f"100{n}"))
                for n in (1, 2, 3)
            ]
            async with aiohttp.ClientSession(headers=headers) as http:
                for _ in range(200):
                    async with http.get(f"{base}/weekly/participants") as r:
                        if r.status == 200 and len((await r.json())["participants"]) == 3:
                            break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(TONE_FROM)  # the tones are playing
                page = {"url": app.url("/room-recorded")}
                async with http.post(
                    f"{base}/weekly/recording", json={"recording_available_page": page}
                ) as r:
                    assert r.status == 201, (await r.text(), server.output)
                    started = await r.json()
                async with http.post(f"{base}/weekly/recording", json={}) as r:
                    assert r.status == 409  # (one at a time)
                await asyncio.sleep(2.0)
                async with http.delete(f"{base}/weekly/recording") as r:
                    assert r.status == 200, await r.text()
                    stopped = await r.json()
            assert await wait_for_request(app, "/room-recorded", timeout=15.0), server.output
            runs = await asyncio.gather(*calls)
        finally:
            for ear in ears.values():
                await ear.__aexit__(None, None, None)
        output = server.output
    for run in runs:
        assert run.returncode == 0, run.output + run.errors + output
    assert started["mode"] == "mixed" and started["filename"].startswith("recordings/")
    assert stopped["filename"] == started["filename"]
    assert 1.5 <= stopped["seconds_duration"] <= 3.0, stopped
    (notice,) = [r for r in app.requests if r.path == "/room-recorded"]
    assert notice.signature_ok(app.secret)
    body = notice.json
    assert body["is_notification"] is True and body["conference_name"] == "weekly"
    result = body["action_result"]["result"]
    assert result["filename"] == started["filename"] and result["file_available"] is True
    assert result["reason"] == "stopped" and result["contains_sound"] is True
    data = (tmp_path / "data" / "media" / "conf" / started["filename"]).read_bytes()
    pcm = wav.decode_to_8k(data)
    assert abs(len(pcm) / 8000 - stopped["seconds_duration"]) < 0.05
    shares = {n: energy_at(pcm, TONES[n]) for n in (1, 2, 3)}
    assert all(s > 0.2 for s in shares.values()), shares


async def test_a_room_whose_callers_arrive_on_two_nodes(
    tmp_path: Path,
    app: AppServer,
    postgres_url: str,  # noqa: F811
) -> None:
    """Two nodes sharing PostgreSQL (as on two machines: 127.0.0.2 and 127.0.0.3), a
    caller on each, one room: it is held by one node, chosen among the nodes alive, and
    the other's caller takes part from there; each hears the other's tone."""
    from tests.e2e.harness import Server

    room_app(app, {})
    config = tmp_path / "node.toml"
    config.write_text(f'[database]\nurl = "{postgres_url}"\n[speech]\npreload = false\n')
    data_dir = tmp_path / "shared"
    extra = ("--config", str(config))
    nodes = [Server.for_app(data_dir, app, extra, host=h) for h in ("127.0.0.2", "127.0.0.3")]
    ears = {n: RtpSink() for n in (1, 2)}
    async with nodes[0] as a, nodes[1] as b:
        for ear in ears.values():
            await ear.__aenter__()
        try:
            for _ in range(100):  # each node has seen the other in the nodes table
                status, stats = await a.api("GET", "/api/stats")
                if status == 200 and len(stats.get("workers", [])) == 2:
                    break
                await asyncio.sleep(0.1)
            runs = await asyncio.gather(
                join(tmp_path, a.sip, 1, ears[1]), join(tmp_path, b.sip, 2, ears[2])
            )
        finally:
            for ear in ears.values():
                await ear.__aexit__(None, None, None)
        output = a.output + b.output
    for run in runs:
        assert run.returncode == 0, run.output + run.errors + output
    shares = {n: heard(ear) for n, ear in ears.items()}
    assert shares[1][2] > 0.3 and shares[1][1] < 0.002, shares
    assert shares[2][1] > 0.3 and shares[2][2] < 0.002, shares
    assert re.search(r"call \S+ \(of \S+\): in conference 'weekly'", output), output
