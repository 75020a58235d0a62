"""``connect`` to ``webrtc:ID`` against a real ``serve``: a page signs in to receive calls
with a token from Aculab's ``webrtc_generate_token`` (tests/e2e/aculab_client.py), a
SIPp caller's application connects to it, the page rings, answers, talks (the caller
hears it) and hears the caller's digit, then hangs up; the connect result says so.
With workers behind Kamailio, the page's socket is on one worker and each call on the
next (Kamailio hands INVITEs out in turn): one of the two calls is rung through the
other worker. Rejected, busy and signed-out clients, and wrong tokens, with one process.
The real browser answering is in tests/e2e/test_webphone.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.aculab_client import AculabWebServices
from tests.e2e.harness import WORKERS, Server, served, wait_for_request
from tests.e2e.rtpsink import RtpSink
from tests.e2e.test_aculab_compat import app_table, call_in
from tests.e2e.test_connect import energy_at
from tests.e2e.webclient import Page

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

KEY = "web-client-key-0123456789abcdef"
ACCOUNT = ("1-2-0", "agents@example.com")
PAGE_HZ = 880.0


def serve(tmp_path: Path, app: AppServer, workers: int) -> Server:
    table = app_table(app, "ivr", "/start", api_key=KEY, webservices_username="/".join(ACCOUNT))
    return served(tmp_path, app, workers, table)


def services(server: Server, key: str = KEY) -> AculabWebServices:
    return AculabWebServices(f"http://127.0.0.1:{server.http_port}", *ACCOUNT, key)


def connect_to(app: AppServer, *destinations: str) -> None:
    app.page(
        "/start",
        [{"connect": {"destinations": list(destinations), "next_page": {"url": "/connected"}}}],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/start-final", None)


async def answer_and_talk(page: Page) -> dict[str, Any]:
    """The page's user: the call rings, they answer, talk until they hear the caller's
    digit, then hang up. The incoming message."""
    incoming = await page.next("incoming")
    digits = len(page.events)
    await asyncio.sleep(0.3)  # it rings a moment
    await page.send({"type": "answer", "call_id": incoming["call_id"]})
    page.talk(PAGE_HZ)
    for _ in range(150):
        if len(page.events) > digits:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    await page.send({"type": "hangup", "call_id": incoming["call_id"]})
    return incoming


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_signed_in_page_rings_answers_talks_and_hangs_up(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    connect_to(app, "webrtc:agent-7")
    async with serve(tmp_path, app, workers) as server:
        ws = services(server)
        token = await ws.webrtc_generate_token("agent-7", ttl=600)
        assert token.status == 200, token.raw
        older = Page(f"http://127.0.0.1:{server.http_port}")
        page = Page(f"http://127.0.0.1:{server.http_port}")
        try:
            # Signed in twice (a second tab): the newer page takes the client id over,
            # whichever worker each socket is on.
            assert (await older.sign_in("agent-7", token=token.body["token"]))["type"] == (
                "registered"
            )
            await asyncio.sleep(0.05)
            registered = await page.sign_in("agent-7", token=token.body["token"])
            assert registered == {
                "type": "registered",
                "app": "ivr",
                "client_id": "agent-7",
                "expires": registered["expires"],
            }, registered
            replaced = await older.next()
            assert (replaced["type"], replaced["code"]) == ("error", "replaced"), replaced
            listed = await ws.webrtc_registered_clients()
            assert [c["client_id"] for c in listed.body["clients"]] == ["agent-7"], listed.raw
            for n in (1, 2):
                async with RtpSink() as ear:
                    invite = sipp.invite("ivr").replace(
                        "m=audio [media_port]", f"m=audio {ear.port}"
                    )
                    talking = asyncio.create_task(answer_and_talk(page))
                    run = await call_in(
                        server,
                        tmp_path,
                        # Longer than a question between workers may take (5 s): the
                        # socket relaying the page lasts as long as the call.
                        sipp.PAUSE.format(ms=6000),
                        sipp.INFO.format(cseq=2, digit="4"),
                        invite=invite,
                    )
                    assert run.returncode == 0, run.output + run.errors + server.output
                    incoming = await talking
                    heard = ear.audio()
                assert incoming["call_to"] == "webrtc:agent-7"
                assert incoming["call_from"].startswith("sip:sipp@"), incoming
                assert energy_at(heard, PAGE_HZ) > 0.3, (
                    f"call {n}: the caller did not hear the page"
                )
                assert page.events.count(4) == n, f"call {n}: the page did not hear the digit"
                assert await wait_for_request(app, "/start-final", timeout=10)
        finally:
            await page.close()
            await older.close()
    results = [b["action_result"]["result"] for b in app.bodies("/connected")]
    assert len(results) == 2
    for result in results:
        assert (result["connected"], result["destination"]) == (True, "webrtc:agent-7")
        assert (result["call_cause"], result["call_raw_cause"]) == ("hung_up", "BYE")
    assert server.output.count("ringing webrtc:agent-7") == 2
    if workers > 1:  # one of the two calls was on the other worker than the page's socket
        assert "signed in worker" in server.output, server.output
        assert "ringing web client agent-7 for another worker" in server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_rejecting_an_unknown_and_a_vanishing_client(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """A page that rejects with 603: failed, 603 (as a SIP callee's Decline); a client id
    nobody signed in as: unobtainable, 404, logged; a page that goes away while ringing:
    no_answer, 480."""
    app.page(
        "/start",
        [
            {"connect": {"destinations": ["webrtc:agent-7"], "next_page": {"url": "/a"}}},
        ],
    )
    app.page("/a", [{"connect": {"destinations": ["webrtc:nobody"], "next_page": {"url": "/b"}}}])
    app.page("/b", [{"connect": {"destinations": ["webrtc:agent-7"], "next_page": {"url": "/c"}}}])
    app.page("/c", [{"hang_up": {}}])
    app.page("/start-final", None)
    async with serve(tmp_path, app, workers) as server:
        page = Page(f"http://127.0.0.1:{server.http_port}")
        try:
            # From loopback the application's name is enough (as for the web phone).
            assert (await page.sign_in("agent-7", app="ivr"))["type"] == "registered"

            async def user() -> None:
                first = await page.next("incoming")
                await page.send({"type": "reject", "call_id": first["call_id"], "cause": 603})
                await page.next("incoming")  # the third connect: the page goes away
                await page.close()

            acting = asyncio.create_task(user())
            run = await call_in(server, tmp_path)
            assert run.returncode == 0, run.output + run.errors + server.output
            await acting
        finally:
            await page.close()
    causes = [
        (r["connected"], r["call_cause"], r["call_raw_cause"])
        for r in (app.bodies(p)[0]["action_result"]["result"] for p in ("/a", "/b", "/c"))
    ]
    assert causes == [
        (False, "failed", "603"),
        (False, "unobtainable", "404"),
        (False, "no_answer", "480"),
    ], causes
    assert "cannot call webrtc:nobody: no such client is signed in" in server.output


async def test_tokens_that_do_not_sign_in(tmp_path: Path, app: AppServer) -> None:
    """A token for another client id, one that does not enable incoming calls, a forged
    one and a wrong key are refused, each with its reason; a wrong key is an error in
    Aculab's shape for the token service."""
    connect_to(app, "webrtc:agent-7")
    async with serve(tmp_path, app, 1) as server:
        ws = services(server)
        base = f"http://127.0.0.1:{server.http_port}"
        other = (await ws.webrtc_generate_token("agent-8")).body["token"]
        outgoing = (await ws.webrtc_generate_token("agent-7", enable_incoming=False)).body
        head, body, _ = other.split(".")
        forged = f"{head}.{body}.{'A' * 43}"
        for token, code in (
            (other, "unauthorized"),
            (outgoing["token"], "forbidden"),
            (forged, "unauthorized"),
        ):
            page = Page(base)
            try:
                answer = await page.sign_in("agent-7", token=token)
            finally:
                await page.close()
            assert (answer["type"], answer["code"]) == ("error", code), answer
        bad_ttl = await ws.webrtc_generate_token("agent-7", ttl=60)
        assert bad_ttl.status == 400, server.output
        assert bad_ttl.body["error"]["code"] == "0002", bad_ttl.raw
        wrong = await services(server, "not-the-key").webrtc_generate_token("agent-7")
        assert wrong.status == 401 and "error" in wrong.body, wrong.raw
