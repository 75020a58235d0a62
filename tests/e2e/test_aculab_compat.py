"""An application written for Aculab Cloud, on real calls: Aculab's call info from real
SIP INVITEs, with one ``serve`` process and with the default deployment (workers behind
Kamailio).

SIPp calls ``callhook serve``; the INVITE carries the headers a carrier sends
(Diversion, History-Info, P-Attestation-Indicator, an RFC 8224 Identity); the test's
application server records the page requests, whose ``this_call`` is checked against
Aculab's call-info page: ``call_direction`` ``"in"``, ``call_divert`` and
``call_attestation`` from those headers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callhook.devtools.harness import AppServer, Reply
from callhook.media import g711, tones, wav
from tests.e2e import sipp
from tests.e2e.harness import (
    WORKERS,
    Server,
    free_even_udp_port,
    free_udp_port,
    served,
    wait_for_request,
)
from tests.e2e.rtpsink import RtpSink
from tests.e2e.test_connect import UAS_RINGS_UNTIL_CANCEL, connect_call, energy_at
from tests.e2e.test_secondary_pages import connect_app

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

#: The config that lets a connect call the tests' SIPp callees.
ALLOW = '[outbound]\nallow = ["sip:*@127.0.0.1:*"]\n'


def app_table(app: AppServer, name: str, page: str, **more: str) -> str:
    """An ``[apps.NAME]`` table for ``app``'s ``page`` (and ``page``-final as its final page)."""
    lines = [
        f"[apps.{name}]",
        f'first_page = "{app.url(page)}"',
        f'final_page = "{app.url(page + "-final")}"',
        f'secret = "{app.secret}"',
        *(f'{key} = "{value}"' for key, value in more.items()),
    ]
    return "\n".join(lines) + "\n"


async def call_in(server: Server, tmp_path: Path, *middle: str, invite: str = "") -> sipp.SippRun:
    """One SIPp call to ``ivr`` at ``server`` (``invite``: another INVITE), answered, with
    ``middle`` (scenario parts) before callhook's BYE."""
    return await sipp.call(
        server.sip,
        tmp_path,
        invite or sipp.invite("ivr"),
        sipp.ANSWERED,
        *middle,
        sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
    )


def staying_callee(ms: int = 3000) -> str:
    """A SIPp callee that answers, stays ``ms``, and hangs up."""
    return sipp.scenario(
        sipp.UAS_ANSWER.format(receive=sipp.UAS_RECEIVE_REMEMBERING),
        sipp.PAUSE.format(ms=ms),
        sipp.BYE_FROM_UAS,
    )


def invite_with(*headers: str) -> str:
    """SIPp's INVITE to ``ivr`` carrying ``headers`` (``Name: value`` lines)."""
    lines = "".join(f"{h}\n" for h in headers)
    return sipp.invite("ivr").replace("Max-Forwards: 70\n", f"Max-Forwards: 70\n{lines}", 1)


def passport(attest: str) -> str:
    """An Identity header's PASSporT (RFC 8225 compact form) with ``attest``."""

    def part(value: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    claims = {"attest": attest, "orig": {"tn": "15551230000"}, "dest": {"tn": ["15554560000"]}}
    header = {"alg": "ES256", "ppt": "shaken", "typ": "passport", "x5u": "https://cr.example/c"}
    return f"{part(header)}.{part(claims)}.c2lnbmF0dXJl"


CALLS = [
    (
        (
            "Diversion: <sip:+441908273800@carrier.example>;reason=unconditional;counter=1",
            "P-Attestation-Indicator: A",
        ),
        "sip:+441908273800@carrier.example",
        "A",
    ),
    (
        (
            "History-Info: <sip:sales@pbx.example>;index=1, "
            "<sip:ivr@pbx.example?Reason=SIP%3Bcause%3D302>;index=1.1",
            f"Identity: {passport('B')};info=<https://cr.example/c>;alg=ES256;ppt=shaken",
        ),
        "sip:sales@pbx.example",
        "B",
    ),
    ((), "", ""),
]


@pytest.mark.parametrize("workers", WORKERS)
async def test_call_info_from_the_invite(tmp_path: Path, app: AppServer, workers: int) -> None:
    # The token as Aculab has it: set by /start, null after a response without one.
    app.page(
        "/start", {"actions": [{"redirect": {"next_page": {"url": "/second"}}}], "token": "t1"}
    )
    app.page("/second", [{"sleep": {"seconds": 1}}])
    app.page("/final", [])
    async with served(tmp_path, app, workers) as server:
        if workers > 1:
            assert f"with {workers} workers behind Kamailio" in server.output
        for number, (headers, _, _) in enumerate(CALLS):
            workdir = tmp_path / f"call-{number}"
            workdir.mkdir()
            run = await sipp.call(
                server.sip,
                workdir,
                invite_with(*headers),
                sipp.ANSWERED,
                sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
            )
            assert run.returncode == 0, run.output + run.errors + server.output
    firsts = [body["this_call"] for body in app.bodies("/start")]
    finals = [body["this_call"] for body in app.bodies("/final")]
    assert len(firsts) == len(finals) == len(CALLS)
    assert [b["token"] for b in app.bodies("/second")] == ["t1"] * len(CALLS)
    assert [b["token"] for b in app.bodies("/final")] == [None] * len(CALLS)
    for (_, divert, attestation), first, last in zip(CALLS, firsts, finals, strict=True):
        for this_call in (first, last):
            assert this_call["call_direction"] == "in"
            assert this_call["call_divert"] == divert
            assert this_call["call_attestation"] == attestation
            assert "outbound_parameters" not in this_call


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_hold_media_that_cannot_be_played_gives_ringback_logged_once(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """The caller hears ringback, not silence, while the far end rings; the missing file
    is one line in the server log and one in the call log, not one every 20 ms. The
    connect's nulls are Aculab's: classify_callee null is no classification."""
    missing = {"play": {"play_list": [{"file_to_play": "prompts/missing.wav"}]}}
    server, sink, (callee,), _ = await connect_call(
        tmp_path,
        app,
        {"seconds_answer_timeout": 4, "hold_media": missing, "classify_callee": None},
        UAS_RINGS_UNTIL_CANCEL,
        workers=workers,
    )
    out, _ = await asyncio.wait_for(callee.communicate(), 30)
    assert callee.returncode == 0, out.decode(errors="replace") + server.output
    (connected,) = app.bodies("/connected")
    outcome = connected["action_result"]["result"]
    assert (outcome["connected"], outcome["call_cause"]) == (False, "no_answer")
    heard = sink.audio()[: 2 * 8000]  # the first ringback burst: 440 + 480 Hz
    assert energy_at(heard, 440.0) + energy_at(heard, 480.0) > 0.8
    assert server.output.count("could not be played") == 1, server.output
    # The CANCEL's path through the front: every response reached its transaction.
    assert "SIP response dropped" not in server.output, server.output
    log = "".join(p.read_text() for p in (tmp_path / "data" / "media").glob("*/logs/*.log"))
    assert log.count("could not be played") == 1, log
    assert "prompts/missing.wav" in log


async def connect_with_first_page(
    tmp_path: Path, app: AppServer, workers: int, first_page: Any
) -> dict[str, Any]:
    """A SIPp caller is put through to a SIPp callee that stays 3 s; the callee's
    ``secondary_call.first_page`` answers ``first_page``. The connect's result."""
    callee_port = free_udp_port()
    connect_app(app, callee_port, first_page)
    process = await sipp.start_sipp(
        staying_callee(), tmp_path, local_port=callee_port, media_port=free_even_udp_port()
    )
    async with served(tmp_path, app, workers, ALLOW) as server:
        caller = await call_in(server, tmp_path)
        # (The callee's own status is not checked: a failed first page hangs it up
        # before its scenario's BYE.)
        await asyncio.wait_for(process.communicate(), 30)
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/far-final"), server.output
        assert await wait_for_request(app, "/connected"), server.output
    (connected,) = app.bodies("/connected")
    result: dict[str, Any] = connected["action_result"]["result"]
    return result


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_first_page_with_an_empty_body_puts_the_call_through(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """The application's author: "the call is simply connected". A 200 with no body is
    an empty action list: the far leg's list runs out at once, and it is joined."""
    result = await connect_with_first_page(tmp_path, app, workers, Reply(b""))
    assert (result["connected"], result["call_cause"]) == (True, "hung_up"), result
    assert result["seconds_connected_duration"] > 1.0
    (far_final,) = app.bodies("/far-final")
    assert far_final["this_call"]["call_cause"] == "hung_up"


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_first_page_that_fails_is_a_failed_connect_not_a_clean_hang_up(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    result = await connect_with_first_page(tmp_path, app, workers, Reply("<html>oops</html>"))
    assert (result["connected"], result["destination"]) == (False, None)
    assert result["call_cause"] == "failed", result
    (far_final,) = app.bodies("/far-final")
    assert far_final["this_call"]["call_cause"] == "failed"
    error = far_final["error_result"]  # why, on the far leg's final page
    assert (error["cause"], error["url"]) == ("invalid", app.url("/whisper"))


KEY, IV = "0f" * 16, "a5" * 16  # AES-128, as Aculab's encrypted-media guide's example


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
@pytest.mark.parametrize("workers", WORKERS)
async def test_aculabs_secondary_call_example_encrypts_with_the_first_pages_cipher(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Aculab's secondary_call example: ``call_recording_encryption: true`` with no cipher
    in the action; the far leg's first page answers with ``call_recording_cipher``. The
    recording is encrypted with it: ``openssl`` decrypts it to the bridged call's WAV."""
    callee_port = free_udp_port()
    app.page(
        "/start",
        [
            {
                "connect": {
                    "destinations": [f"sip:callee@127.0.0.1:{callee_port}"],
                    "secondary_call": {
                        "call_recording": True,
                        "call_recording_encryption": True,
                        "minutes_max_call_duration": 30,
                        "first_page": {"url": "my_secondary_call_first_page"},
                        "final_page": {"url": "my_secondary_call_final_page"},
                    },
                    "next_page": {"url": "/connected"},
                }
            }
        ],
    )
    cipher = {"type": "aescbc", "key": KEY, "initialisation_vector": IV}
    app.page(
        "/my_secondary_call_first_page",
        {"actions": [], "call_recording_cipher": cipher, "api_version": "2.0"},
    )
    app.page("/my_secondary_call_final_page", None)
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)
    process = await sipp.start_sipp(
        staying_callee(), tmp_path, local_port=callee_port, media_port=free_even_udp_port()
    )
    async with served(tmp_path, app, workers, ALLOW) as server:
        caller = await call_in(server, tmp_path)
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, out.decode(errors="replace") + server.output
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/connected")
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    assert result["connected"] is True, result
    (path,) = (tmp_path / "data" / "media").glob(f"*/{result['call_recording_filename']}")
    assert path.read_bytes()[:4] != b"RIFF"  # not in clear
    plain = subprocess.run(
        ["openssl", "enc", "-d", "-aes-128-cbc", "-K", KEY, "-iv", IV, "-in", str(path)],
        capture_output=True,
        check=True,
    ).stdout
    info = wav.read_info(plain)
    assert 2.0 < info.data_length / 8000 < 8  # the bridged call's few seconds
    logs = [p.read_text() for p in (tmp_path / "data" / "media").glob("*/logs/*.log")]
    for text in (server.output, *logs):
        assert KEY not in text and IV not in text  # the key never reaches a log


SUPPORT_HZ = 880.0


@pytest.mark.parametrize("workers", WORKERS)
async def test_loc_puts_the_caller_through_to_another_application(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """``loc:support``: the caller is put through to application ``support`` of the same
    installation, with no SIP call and no packet between them. The caller hears
    support's prompt; support hears the caller's digits; support's pages see an inbound
    call to ``loc:support``; its hanging up ends the caller's connect ``hung_up``."""
    data = tmp_path / "data"
    tone = data / "media" / "support" / "prompts" / "hello.wav"
    tone.parent.mkdir(parents=True)
    tone.write_bytes(wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(SUPPORT_HZ, 1.5))))
    app.page(
        "/start",
        [{"connect": {"destinations": ["loc:support"], "next_page": {"url": "/connected"}}}],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)
    app.page(
        "/support",
        [
            {"play": {"play_list": [{"file_to_play": "prompts/hello.wav"}]}},
            {"get_number": {"digit_count": 2, "next_page": {"url": "/support-got"}}},
        ],
    )
    app.page("/support-got", [{"hang_up": {}}])
    app.page("/support-final", None)
    server = served(tmp_path, app, workers, app_table(app, "support", "/support"))
    async with RtpSink() as ear, server:
        invite = sipp.invite("ivr").replace("m=audio [media_port]", f"m=audio {ear.port}")
        run = await call_in(
            server,
            tmp_path,
            # (Digits as SIP INFO: RTP from SIPp's own port would move callhook's audio
            # there, away from the test's ear: symmetric RTP.) They cross the bridge.
            sipp.PAUSE.format(ms=3000),
            sipp.INFO.format(cseq=2, digit="4"),
            sipp.PAUSE.format(ms=300),
            sipp.INFO.format(cseq=3, digit="2"),
            invite=invite,
        )
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/support-final"), server.output
    heard = ear.audio()
    assert energy_at(heard[: 3 * 8000], SUPPORT_HZ) > 0.5, "the caller did not hear support"
    (got,) = app.bodies("/support-got")
    assert got["action_result"]["result"]["entered_number"] == "42"
    this_call = got["this_call"]
    assert (this_call["call_direction"], this_call["call_to"]) == ("in", "loc:support")
    assert this_call["call_target"] == "support"
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    assert (result["connected"], result["destination"]) == (True, "loc:support")
    assert result["call_cause"] == "hung_up"
    (support_final,) = app.bodies("/support-final")
    assert support_final["this_call"]["call_cause"] == "completed"
    assert "calling loc:support (far leg loc-" in server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_loc_to_no_such_application_or_one_that_refuses(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """``loc:nosuch`` fails ``unobtainable`` (404, logged); an application that hangs up
    before answering refuses the call: ``failed``, raw cause 603 (a SIP Decline's)."""
    app.page(
        "/start",
        [{"connect": {"destinations": ["loc:nosuch"], "next_page": {"url": "/first"}}}],
    )
    app.page(
        "/first",
        [{"connect": {"destinations": ["loc:refuser"], "next_page": {"url": "/second"}}}],
    )
    app.page("/second", [{"hang_up": {}}])
    app.page("/final", None)
    app.page("/refuser", [{"hang_up": {}}])
    app.page("/refuser-final", None)
    async with served(tmp_path, app, workers, app_table(app, "refuser", "/refuser")) as server:
        run = await call_in(server, tmp_path)
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/refuser-final")
    first = app.bodies("/first")[0]["action_result"]["result"]
    assert (first["connected"], first["call_cause"], first["call_raw_cause"]) == (
        False,
        "unobtainable",
        "404",
    )
    assert "cannot call loc:nosuch: no such application" in server.output
    second = app.bodies("/second")[0]["action_result"]["result"]
    assert (second["connected"], second["call_cause"], second["call_raw_cause"]) == (
        False,
        "failed",
        "603",
    )
    refused = app.bodies("/refuser-final")[0]["this_call"]
    assert (refused["call_cause"], refused["call_raw_cause"]) == ("completed", "603")


@pytest.mark.parametrize("workers", WORKERS)
async def test_the_called_applications_call_is_one_of_the_servers_calls(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """The call ``loc:support`` makes is listed by the REST API for ``support`` (as an
    inbound call to ``loc:support``) and hung up through it: support's final page says
    ``dropped``, and the caller's connect ends as a far end hanging up."""
    key = "support-api-key-0123456789abcdef"
    app.page(
        "/start",
        [{"connect": {"destinations": ["loc:support"], "next_page": {"url": "/connected"}}}],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)
    app.page("/support", [{"sleep": {"seconds": 30}}])
    app.page("/support-final", None)
    config = app_table(app, "support", "/support", api_key=key)
    async with served(tmp_path, app, workers, config) as server:
        calling = asyncio.create_task(call_in(server, tmp_path))
        base = f"http://127.0.0.1:{server.http_port}/api/v1/calls"
        auth = {"Authorization": f"Bearer {key}"}
        found: list[dict[str, Any]] = []
        async with aiohttp.ClientSession() as http:
            for _ in range(100):
                async with http.get(base, headers=auth) as r:
                    found = (await r.json())["calls"]
                if found and found[0]["call_state"] == "answered":
                    break
                await asyncio.sleep(0.1)
            ((call,),) = (found,)
            assert (call["call_direction"], call["call_to"]) == ("in", "loc:support")
            async with http.delete(f"{base}/{call['call_id']}", headers=auth) as r:
                assert r.status == 202
        run = await calling
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/support-final")
    assert app.bodies("/support-final")[0]["this_call"]["call_cause"] == "dropped"
    result = app.bodies("/connected")[0]["action_result"]["result"]
    assert (result["connected"], result["call_cause"]) == (True, "hung_up")
