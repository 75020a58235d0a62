"""Trunks on real calls: callhook registers with Kamailio playing the provider (digest
auth, UDP, TCP and TLS), a SIPp caller dials the DID through it and the application that
owns the number answers; Kamailio restarts and callhook registers again; a wrong password
is ``failing`` with its reason, backing off; an outbound call goes through the trunk.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import (
    WORKERS,
    Server,
    free_even_udp_port,
    free_udp_port,
    served,
    wait_for_request,
)
from tests.e2e.kamailio import (  # noqa: F401  (fixtures)
    Provider,
    make_provider_fixture,
    provider_fixture,
)

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

DID = "+441234567890"


def config(
    tmp_path: Path, app: AppServer, provider: Provider, transport: str = "udp", **extra: Any
) -> Path:
    host, port = provider.address(transport)  # type: ignore[arg-type]
    lines = [
        "[trunks.provider]",
        f'registrar = "{host}:{port}"',
        f'transport = "{transport}"',
        f'username = "{provider.username}"',
        f'password = "{extra.pop("password", provider.password)}"',
        f"expires = {extra.pop('expires', 300)}",
        *(f"{key} = {value!r}".replace("'", '"') for key, value in extra.items()),
        "[apps.support]",
        f'first_page = "{app.url("/support")}"',
        f'final_page = "{app.url("/final")}"',
        f'secret = "{app.secret}"',
        f'numbers = ["{DID}"]',
        "[outbound]",
        'allow = ["+1555"]',  # the numbers the tests call through the trunk
    ]
    if transport == "tls":
        assert provider.ca_file is not None
        lines = ["[sip]", f'tls_ca = "{provider.ca_file}"', *lines]
    path = tmp_path / "callhook.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


async def trunk_states(server: Server) -> list[dict[str, Any]]:
    status, states = await server.api("GET", "/api/trunks")
    assert status == 200
    return list(states)


async def call_the_did(tmp_path: Path, provider: Provider) -> sipp.SippRun:
    """A SIPp caller dials the DID at the provider; callhook's application hangs up."""
    parts = [sipp.invite(DID), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=15000)]
    return await sipp.call(provider.udp, tmp_path, *parts)


def answering_app(app: AppServer) -> None:
    app.page("/support", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)


@pytest.mark.parametrize("transport", ["udp", "tcp", "tls"])
async def test_callhook_registers_and_a_call_to_the_did_runs_its_application(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider], transport: str
) -> None:
    provider = make_provider(tls=transport == "tls", algorithm="SHA-256")
    answering_app(app)
    data = tmp_path / "data"
    cfg = config(tmp_path, app, provider, transport)
    async with Server.for_app(data, app, extra=("--config", str(cfg))) as server:
        (contact,) = await provider.wait_registered(timeout=10)
        assert contact.startswith("sips:" if transport == "tls" else "sip:")
        (state,) = await trunk_states(server)
        assert state["name"] == "provider" and state["state"] == "registered"
        assert 250 <= state["expires_in"] <= 300
        run = await call_the_did(tmp_path, provider)
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/final")
    assert "trunk provider: registered" in server.output
    (support,) = app.bodies("/support")
    assert DID in support["this_call"]["call_to"]
    assert app.bodies("/start") == []
    # Shutdown removed the binding (Expires: 0).
    assert provider.registered() == []


async def test_after_the_provider_restarts_callhook_registers_again(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider]
) -> None:
    provider = make_provider(min_expires=10)
    answering_app(app)
    data = tmp_path / "data"
    cfg = config(tmp_path, app, provider, expires=10)  # refreshed every 5 s
    async with Server.for_app(data, app, extra=("--config", str(cfg))) as server:
        await provider.wait_registered(timeout=10)
        provider.restart()
        assert provider.registered() == []  # the provider forgot us
        await provider.wait_registered(timeout=12)
        run = await call_the_did(tmp_path, provider)
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/final")
    assert len(app.bodies("/support")) == 1


async def test_a_wrong_password_is_failing_with_its_reason_and_backs_off(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider]
) -> None:
    provider = make_provider()
    answering_app(app)
    data = tmp_path / "data"
    cfg = config(tmp_path, app, provider, password="not-the-password")
    async with Server.for_app(data, app, extra=("--config", str(cfg))) as server:
        for _ in range(100):
            (state,) = await trunk_states(server)
            if state["state"] == "failing":
                break
            await asyncio.sleep(0.05)
        assert state["state"] == "failing"
        assert "password was refused" in state["reason"]
        assert 25 <= state["next_try_in"] <= 30  # RFC 5626 back-off: 30 s first
        await asyncio.sleep(1.0)  # no crash loop: nothing more is tried meanwhile
        (again,) = await trunk_states(server)
        assert again["state"] == "failing" and again["next_try_in"] < state["next_try_in"]
        table = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "callhook",
            "trunks",
            "--http",
            f"127.0.0.1:{server.http_port}",
            "--data-dir",
            str(data),
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await table.communicate()
        assert table.returncode == 0
    assert provider.registered() == []
    assert server.output.count("trunk provider: failing") == 1, server.output
    assert "password was refused" in server.output
    lines = out.decode().splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATE"]
    assert lines[1].split()[:2] == ["provider", "failing"]
    assert "password was refused" in lines[1]


async def start_pstn(
    tmp_path: Path, provider: Provider, port: int, *, by_account: bool = True
) -> asyncio.subprocess.Process:
    """The provider's "PSTN": a SIPp callee that checks it is called at the number (over
    TLS, a ``sips:`` one), by the account (``by_account``: as the From user), and answers."""
    caller = provider.username if by_account else "[^@]+"
    check = (
        '  <recv request="INVITE">\n'
        '    <action><ereg regexp="^INVITE sips?:\\+15551234@" search_in="msg" check_it="true"'
        ' assign_to="ruri"/>\n'
        f'      <ereg regexp="From:.*sips?:{caller}@" search_in="msg" check_it="true"'
        ' assign_to="from"/></action>\n  </recv>\n'
        '  <nop><action><log message="[$ruri] [$from]"/></action></nop>\n'
    )
    answer = sipp.UAS_ANSWER.format(receive=check).replace(
        "[last_CSeq:]\n", "[last_CSeq:]\n[last_Record-Route:]\n"
    )
    return await sipp.start_sipp(
        sipp.scenario(answer, sipp.UAS_BYE.format(timeout_ms=20000)),
        tmp_path,
        local_port=port,
        media_port=free_even_udp_port(),
    )


def call_out(app: AppServer, trunk: str = "provider") -> dict[str, str]:
    """The ``POST /api/calls`` body of a call to the provider's "PSTN" through ``trunk``."""
    return {
        "to": "+15551234",
        "trunk": trunk,
        "first_page": app.url("/start"),
        "final_page": app.url("/final"),
        "secret": app.secret,
    }


async def post_call(server: Server, body: dict[str, str]) -> tuple[int, Any]:
    """``POST /api/calls`` on ``server`` with its secret: the status and JSON (or text)."""
    secret = (server.data_dir / "secret").read_text().strip()
    url = f"http://127.0.0.1:{server.http_port}/api/calls"
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json=body, headers={"Authorization": f"Bearer {secret}"}) as r,
    ):
        text = await r.text()
        return r.status, (await r.json()) if r.content_type == "application/json" else text


async def test_an_outbound_call_through_the_trunk(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider]
) -> None:
    """POST /api/calls with a trunk and a number: the provider challenges (407), callhook
    answers with the trunk's credentials, the provider relays it to its "PSTN" (a SIPp
    callee), which sees the number in the request-URI and the account as the caller."""
    pstn_port = free_udp_port()
    provider = make_provider(outbound=("127.0.0.1", pstn_port))
    app.page("/start", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    app.page("/support", [{"hang_up": {}}])
    app.page("/final", None)
    pstn = await start_pstn(tmp_path, provider, pstn_port)
    data = tmp_path / "data"
    cfg = config(tmp_path, app, provider)
    async with Server.for_app(data, app, extra=("--config", str(cfg))) as server:
        await provider.wait_registered(timeout=10)
        status, _ = await post_call(server, call_out(app, trunk="nobody"))
        assert status == 404
        status, placed = await post_call(server, call_out(app))
        assert status == 202, placed
        assert placed["to"] == "sip:+15551234@127.0.0.1"
        out, _ = await asyncio.wait_for(pstn.communicate(), 30)
        assert await wait_for_request(app, "/final")
    assert pstn.returncode == 0, out.decode(errors="replace") + server.output
    (start,) = app.bodies("/start")
    assert start["this_call"]["call_direction"] == "out"
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"


async def test_a_lan_pattern_lets_no_premium_number_out_through_the_provider(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider]
) -> None:
    """Toll fraud: with a LAN pattern in [outbound] allow, a number dressed as a LAN URI
    (%2B for +, *67 before it) is still refused through the trunk; and a call that came
    in by the trunk is not transferred to one (the provider would place that call)."""
    provider = make_provider()
    app.page(
        "/support",
        [
            {
                "transfer": {
                    "destination": "sip:+19005551234@192.168.1.5",
                    "next_page": {"url": "/transferred"},
                }
            }
        ],
    )
    app.page("/transferred", [{"hang_up": {}}])
    app.page("/final", None)
    data = tmp_path / "data"
    cfg = config(tmp_path, app, provider)
    cfg.write_text(cfg.read_text().replace('["+1555"]', '["+1555", "sip:*@192.168.1.*"]'))
    async with Server.for_app(data, app, extra=("--config", str(cfg))) as server:
        await provider.wait_registered(timeout=10)
        for to in ("sip:%2B19005551234@192.168.1.5", "sip:*67+19005551234@192.168.1.5"):
            status, answer = await post_call(server, call_out(app) | {"to": to})
            assert status == 403 and "refused by [outbound] allow" in str(answer), answer
        # (No REFER reaches the caller: SIPp fails on a message its scenario does not take.)
        run = await call_the_did(tmp_path, provider)
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/final")
    (transferred,) = app.bodies("/transferred")
    result = transferred["action_result"]["result"]
    assert (result["transferred"], result["refer_status"]) == (False, "403")


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_tls_registrar_whose_certificate_is_not_trusted_is_failing(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider], workers: int
) -> None:
    """Without [sip] tls_ca, the test CA is not among the system's: callhook refuses the
    registrar's certificate, so nothing is sent to it, and says why. With workers, the
    same: worker 0 holds the connection (Kamailio's TLS client would have sent)."""
    provider = make_provider(tls=True)
    answering_app(app)
    cfg = config(tmp_path, app, provider, "tls")
    text = "\n".join(line for line in cfg.read_text().splitlines() if "tls_ca" not in line)
    async with served(tmp_path, app, workers, text) as server:
        for _ in range(100):
            (state,) = await trunk_states(server)
            if state["state"] == "failing":
                break
            await asyncio.sleep(0.05)
    assert state["state"] == "failing", server.output
    assert state["reason"].startswith("cannot connect to tls"), state
    assert "CERTIFICATE_VERIFY_FAILED" in server.output
    assert provider.registered() == []


async def test_callhook_dial_through_the_trunk(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider]
) -> None:
    """`callhook dial --trunk provider +15551234` (no serve running): the same path."""
    pstn_port = free_udp_port()
    provider = make_provider(outbound=("127.0.0.1", pstn_port))
    app.page("/start", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    app.page("/support", [{"hang_up": {}}])
    app.page("/final", None)
    pstn = await start_pstn(tmp_path, provider, pstn_port)
    cfg = config(tmp_path, app, provider)
    dial = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "callhook", "dial", "+15551234", "--trunk", "provider",
        "--config", str(cfg), "--app-url", app.url("/start"), "--secret", app.secret,
        "--final-page", app.url("/final"), "--sip", "127.0.0.1:0",
        "--data-dir", str(tmp_path / "data"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(dial.communicate(), 60)
    pstn_out, _ = await asyncio.wait_for(pstn.communicate(), 30)
    text = out.decode(errors="replace")
    assert dial.returncode == 0, text + pstn_out.decode(errors="replace")
    assert pstn.returncode == 0, pstn_out.decode(errors="replace") + text
    assert "calling sip:+15551234@127.0.0.1 through trunk provider" in text
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"


async def test_two_workers_register_once_through_kamailio_and_share_the_trunks_calls(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider]
) -> None:
    """``serve --workers 2`` with a trunk: one registration, worker 0's, whose Contact is
    Kamailio's address; the provider's calls to the DID come to Kamailio, which hands
    them to both workers in turn, and each knows the call came through the trunk (the
    source Kamailio names); a call out through the trunk leaves from Kamailio's address,
    is challenged and answered with the trunk's credentials."""
    pstn_port = free_udp_port()
    provider = make_provider(outbound=("127.0.0.1", pstn_port))
    answering_app(app)
    app.page("/start", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    data = tmp_path / "data"
    cfg = config(tmp_path, app, provider)
    with cfg.open("a") as file:
        file.write(
            f"[workers]\nfirst_port = {free_even_udp_port()}\n"
            "[speech]\npreload = false\n[sip]\nshutdown_grace = 2\n"
        )
    server = Server.for_app(data, app, extra=("--workers", "2", "--config", str(cfg)))
    server.start_timeout = 150.0
    async with server:
        (contact,) = await provider.wait_registered(timeout=20)
        assert contact.startswith(f"sip:{provider.username}@127.0.0.1:{server.sip_port}"), contact
        # Whichever worker takes the connection, the trunk is as worker 0 sees it.
        for _ in range(4):
            (state,) = await trunk_states(server)
            assert state["state"] == "registered", state
        for _ in range(2):
            run = await call_the_did(tmp_path, provider)
            assert run.returncode == 0, run.output + run.errors + server.output
        pstn = await start_pstn(tmp_path, provider, pstn_port)
        status, placed = await post_call(server, call_out(app))
        assert status == 202, placed
        out, _ = await asyncio.wait_for(pstn.communicate(), 30)
        assert pstn.returncode == 0, out.decode(errors="replace") + server.output
        for _ in range(100):
            if len(app.bodies("/final")) == 3:
                break
            await asyncio.sleep(0.1)
    # Both workers took a call from the trunk, and knew it.
    workers = re.findall(r" (\d):callhook\.sip: call \S+: from trunk provider", server.output)
    assert sorted(workers) == ["0", "1"], server.output
    assert len(app.bodies("/support")) == 2
    assert [b["this_call"]["call_direction"] for b in app.bodies("/start")] == ["out"]
    assert server.output.count("trunk provider: registered") == 1, server.output
    assert provider.registered() == []  # worker 0 removed the binding at shutdown


@pytest.mark.parametrize("workers", [1, 2])
async def test_connect_to_a_tel_destination_goes_through_the_trunk(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider], workers: int
) -> None:
    """Aculab's ``tel:`` prefix (the full international number, '+' optional): a caller
    who dialled the DID is put through to ``tel:15551234``, which callhook calls as
    +15551234 through the trunk (challenged, answered with its credentials); the
    provider's "PSTN" sees the number in the request-URI. The same with workers."""
    pstn_port = free_udp_port()
    provider = make_provider(outbound=("127.0.0.1", pstn_port))
    app.page(
        "/support",
        [{"connect": {"destinations": ["tel:15551234"], "next_page": {"url": "/after"}}}],
    )
    app.page("/after", [{"hang_up": {}}])
    app.page("/final", None)
    data = tmp_path / "data"
    cfg = config(tmp_path, app, provider)
    extra: tuple[str, ...] = ("--config", str(cfg))
    if workers > 1:
        with cfg.open("a") as file:
            file.write(
                f"[workers]\nfirst_port = {free_even_udp_port()}\n[speech]\npreload = false\n"
            )
        extra += ("--workers", str(workers))
    server = Server.for_app(data, app, extra=extra)
    server.start_timeout = 150.0
    async with server:
        await provider.wait_registered(timeout=20)
        pstn = await start_pstn(tmp_path, provider, pstn_port)
        caller = await sipp.call(
            provider.udp,
            tmp_path,
            sipp.invite(DID),
            sipp.ANSWERED,
            sipp.PAUSE.format(ms=3000),
            sipp.BYE_FROM_CALLER.format(cseq=2),
        )
        out, _ = await asyncio.wait_for(pstn.communicate(), 30)
        assert await wait_for_request(app, "/final")
    assert caller.returncode == 0, caller.output + caller.errors + server.output
    assert pstn.returncode == 0, out.decode(errors="replace") + server.output
    assert "calling sip:+15551234@127.0.0.1" in server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"


async def test_a_tls_trunk_with_two_workers_each_on_its_own_checked_connection(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider]
) -> None:
    """``serve --workers 2`` with a trunk over TLS: Kamailio's TLS client does not check
    that a certificate names the host it called, so the workers hold their own
    connections (callhook checks both). Worker 0 registers once; the DID's calls come on
    its connection; two calls in through Kamailio, one on each worker, connect to a
    number through the trunk, each from its worker's own connection, on which its
    responses come back and its BYE goes when the caller hangs up."""
    pstn_port = free_udp_port()
    provider = make_provider(tls=True, outbound=("127.0.0.1", pstn_port))
    answering_app(app)
    app.page(
        "/start",
        [{"connect": {"destinations": ["tel:15551234"], "next_page": {"url": "/after"}}}],
    )
    app.page("/after", [{"hang_up": {}}])
    data = tmp_path / "data"
    cfg = config(tmp_path, app, provider, "tls")  # (its [sip] has tls_ca)
    cfg.write_text(
        cfg.read_text().replace("[sip]\n", "[sip]\nshutdown_grace = 2\n", 1)
        + f"[workers]\nfirst_port = {free_even_udp_port()}\n[speech]\npreload = false\n"
    )
    server = Server.for_app(data, app, extra=("--workers", "2", "--config", str(cfg)))
    server.start_timeout = 150.0
    async with server:
        assert "with 2 workers behind Kamailio" in server.output, server.output
        (contact,) = await provider.wait_registered(timeout=20)
        # Worker 0's own address: the provider reaches it on the connection (RFC 5923).
        assert contact.startswith(f"sips:{provider.username}@127.0.0.1:"), contact
        run = await call_the_did(tmp_path, provider)
        assert run.returncode == 0, run.output + run.errors + server.output
        for done in (1, 2):
            # (From: the caller's user, "sipp", which this provider lets through.)
            pstn = await start_pstn(tmp_path, provider, pstn_port, by_account=False)
            caller = await sipp.call(
                server.sip,
                tmp_path,
                sipp.invite("ivr"),
                sipp.ANSWERED,
                sipp.PAUSE.format(ms=2000),
                sipp.BYE_FROM_CALLER.format(cseq=2),
            )
            out, _ = await asyncio.wait_for(pstn.communicate(), 30)
            assert pstn.returncode == 0, out.decode(errors="replace") + server.output
            assert caller.returncode == 0, caller.output + caller.errors + server.output
            for _ in range(100):
                if len(app.bodies("/final")) == done + 1:  # (the DID's call's first)
                    break
                await asyncio.sleep(0.05)
    assert server.output.count("trunk provider: registered") == 1, server.output
    # The DID's call came on worker 0's connection (the callers here all are on the
    # provider's address, 127.0.0.1, so "from trunk" says nothing of where they came).
    did = re.findall(r" (\d):callhook\.call: .* application 'support'", server.output)
    assert did == ["0"], server.output
    callers = re.findall(r" (\d):callhook\.sip: call \S+: calling sips:\+15551234@", server.output)
    assert sorted(callers) == ["0", "1"], server.output
    assert app.bodies("/after") == []  # the callers hung up: no next page
    finals = [b["this_call"]["call_cause"] for b in app.bodies("/final")]
    assert finals.count("hung_up") == 2, finals
    assert provider.registered() == []  # worker 0 removed the binding at shutdown


#: An SDES key (RFC 4568): 30 bytes, base64.
SDES_KEY = "WnD7c1ksDGs+dIefCEDt24MkmOhFq8jRt/ArmQ4t"


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_tls_trunk_that_requires_srtp_answers_with_keys_and_refuses_plain_rtp(
    tmp_path: Path, app: AppServer, make_provider: Callable[..., Provider], workers: int
) -> None:
    """``srtp = "require"`` on a TLS trunk: an offer with SDES keys is answered RTP/SAVP
    with callhook's own key; a plain offer through the trunk is refused 488. With workers
    the same, on worker 0's own connection."""
    provider = make_provider(tls=True)
    answering_app(app)
    text = config(tmp_path, app, provider, "tls", srtp="require").read_text()
    crypto = f"a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{SDES_KEY}\n"
    savp = sipp.invite(DID).replace("RTP/AVP", "RTP/SAVP").replace("a=ptime", crypto + "a=ptime")
    keyed = sipp.ANSWERED.replace(
        '<recv response="200" rrs="true"/>',
        '<recv response="200" rrs="true">\n    <action>'
        '<ereg regexp="m=audio [0-9]+ RTP/SAVP " search_in="body" check_it="true" assign_to="m"/>'
        '<ereg regexp="a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:" search_in="body"'
        ' check_it="true" assign_to="k"/></action>\n  </recv>\n'
        '  <nop><action><log message="[$m] [$k]"/></action></nop>',
    )
    refused = sipp.invite(DID) + sipp.REFUSED.format(status=488, user=DID)
    async with served(tmp_path, app, workers, text) as server:
        await provider.wait_registered(timeout=20)
        bye = sipp.BYE_FROM_SERVER.format(timeout_ms=15000)
        run = await sipp.call(provider.udp, tmp_path, savp, keyed, bye)
        assert run.returncode == 0, run.output + run.errors + server.output
        run = await sipp.call(provider.udp, tmp_path, refused)
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/final")
    assert len(app.bodies("/support")) == 1  # the refused call ran no application
    assert SDES_KEY not in server.output  # (keys are never logged)


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_trunk_added_and_removed_by_a_reload(
    tmp_path: Path, app: AppServer, provider: Provider, workers: int
) -> None:
    """SIGHUP with a trunk added to the config: callhook registers with the provider (with
    workers, worker 0 does) and the DID's calls come in; the trunk removed again: its
    binding is removed (Expires: 0). serve is never restarted."""
    answering_app(app)
    with_trunk = config(tmp_path, app, provider).read_text()
    without = "[apps.support]" + with_trunk.split("[apps.support]")[1]
    async with served(tmp_path, app, workers, without) as server:
        assert server.proc is not None
        path = tmp_path / "callhook.toml"
        assert provider.registered() == []
        path.write_text(path.read_text().replace(without, with_trunk))
        server.proc.send_signal(signal.SIGHUP)
        await provider.wait_registered(timeout=15)
        for _ in range(50):  # (the log line comes through serve's output pipe)
            if "trunks reloaded: provider added" in server.output:
                break
            await asyncio.sleep(0.1)
        assert "trunks reloaded: provider added" in server.output
        run = await call_the_did(tmp_path, provider)
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/final")
        path.write_text(path.read_text().replace(with_trunk, without))
        server.proc.send_signal(signal.SIGHUP)
        for _ in range(100):
            if not provider.registered() and "provider removed" in server.output:
                break
            await asyncio.sleep(0.1)
        assert provider.registered() == [], server.output
        assert "trunks reloaded: provider removed" in server.output
