"""callhook as the registrar of its users' phones (issue 15): real phones register with a real
``serve`` (digest), ``connect`` to ``user:NAME`` reaches them, the bindings survive a restart,
wrong passwords are refused and counted, and a user's phones all ring (the first to answer wins).

The phones are baresip (a softphone registering with its own digest code) and SIPp
(REGISTER answered with SIPp's ``[authentication]``, then a SIPp UAS on the same port
takes the call: a phone reached at its Contact).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import (
    CALLHOOK,
    Server,
    free_even_udp_port,
    free_tcp_port,
    free_udp_port,
    wait_for_request,
)
from tests.e2e.test_baresip import (
    _pcm16_wav,
    baresip_config,
    command,
    started,
)
from tests.e2e.test_baresip_tls_srtp import _certificates, _free_port_pair
from tests.e2e.test_connect import UAS_REFUSES, UAS_RINGS_UNTIL_CANCEL, bridged_calls

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

PASSWORD = "alice-digest-password-7f3a"
WRONG = "not-alices-password-00"


def users_config(tmp_path: Path, extra: str = "") -> tuple[str, ...]:
    path = tmp_path / "callhook.toml"
    path.write_text(f'[users.alice]\npassword = "{PASSWORD}"\n{extra}')
    return ("--config", str(path))


def connect_to_alice(app: AppServer) -> None:
    app.page(
        "/start",
        [{"connect": {"destinations": ["user:alice"], "next_page": {"url": "/connected"}}}],
    )
    app.page("/connected", [{"hang_up": {}}])
    app.page("/final", None)


async def wait_for_output(server: Server, text: str, timeout: float = 10.0) -> bool:
    """Wait until ``text`` is in ``server``'s output (False if it is not in time)."""
    for _ in range(round(timeout / 0.05)):
        if text in server.output:
            return True
        await asyncio.sleep(0.05)
    return False


def from_elsewhere(text: str) -> str:
    """SIPp's scenario ``text`` with a From of another domain than callhook's: SIPp's own
    address is callhook's here (both on 127.0.0.1), and a call from callhook's domain is
    challenged as a user's."""
    return text.replace(
        "From: sipp <sip:sipp@[local_ip]:[local_port]>", "From: sipp <sip:sipp@caller.example>"
    )


async def call_in(server: Server, tmp_path: Path) -> sipp.SippRun:
    """A SIPp caller (not a user) calls ``ivr`` on ``server`` and waits for its BYE."""
    return await sipp.call(
        server.sip,
        tmp_path,
        from_elsewhere(sipp.invite("ivr")),
        from_elsewhere(sipp.ANSWERED),
        sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
    )


def restarted(first: Server, tmp_path: Path, app: AppServer) -> Server:
    """Another ``serve`` on ``first``'s data directory and SIP port, as after a restart."""
    again = Server.for_app(first.data_dir, app, extra=users_config(tmp_path))
    again.sip_port = first.sip_port
    again.args[again.args.index("--sip") + 1] = f"127.0.0.1:{first.sip_port}"
    return again


# --- baresip ------------------------------------------------------------------------------

BARESIP = shutil.which("baresip")


@contextlib.asynccontextmanager
async def baresip(phone_dir: Path, ctrl_port: int) -> AsyncIterator[asyncio.StreamWriter]:
    """baresip on the config in ``phone_dir``; yields its control connection. Killed at the
    end: on SIGTERM it would unregister first, from a serve that is stopped by then."""
    phone, (_, writer) = await started(phone_dir, ctrl_port, "-t", "120", quiet=True)
    try:
        yield writer
        writer.close()
    finally:
        with contextlib.suppress(ProcessLookupError):  # (it may have exited by itself)
            phone.kill()
        await asyncio.wait_for(phone.wait(), 10)


def baresip_as_alice(
    tmp_path: Path, serve_port: int, transport: str = "udp", ca: Path | None = None
) -> tuple[Path, int]:
    """baresip's configuration as alice's phone registering with ``serve_port`` (an hour's
    registration: it does not register again during a test); its directory and control
    port. Over TLS, ``ca`` is the authority it is given for callhook's certificate."""
    microphone = tmp_path / "mic.wav"
    microphone.write_bytes(_pcm16_wav(np.zeros(8000 * 60, dtype=np.int16)))
    # (baresip listens for TLS on its SIP port + 1.)
    sip_port = _free_port_pair() if transport == "tls" else free_udp_port()
    ctrl_port = free_tcp_port()
    phone_dir = tmp_path / "baresip"
    phone_dir.mkdir()
    baresip_config(phone_dir, sip_port, ctrl_port, microphone)
    if ca is not None:
        with (phone_dir / "config").open("a") as f:
            f.write(f"sip_cafile\t\t{ca}\n")
    via = "" if transport == "udp" else f";transport={transport}"
    (phone_dir / "accounts").write_text(
        f"<sip:alice@127.0.0.1:{serve_port}{via}>;auth_pass={PASSWORD};regint=3600;"
        "answermode=auto;audio_codecs=PCMU,PCMA\n"
    )
    return phone_dir, ctrl_port


def two_workers() -> str:
    """The configuration of ``serve --workers 2`` in these tests (quick to start and stop)."""
    return (
        f"[workers]\nfirst_port = {free_even_udp_port()}\n"
        "[speech]\npreload = false\n[sip]\nshutdown_grace = 2\n"
    )


@pytest.mark.skipif(BARESIP is None, reason="baresip is not installed")
async def test_baresip_registered_as_alice_is_reached_and_still_is_after_a_restart(
    tmp_path: Path, app: AppServer
) -> None:
    connect_to_alice(app)
    first = Server.for_app(tmp_path / "data", app, extra=users_config(tmp_path))
    phone_dir, ctrl_port = baresip_as_alice(tmp_path, first.sip_port)
    await first.__aenter__()  # serve first (baresip registers once, as it starts)
    try:
        async with baresip(phone_dir, ctrl_port) as phone:
            assert await wait_for_output(first, "user alice: registered"), first.output
            calling = asyncio.create_task(call_in(first, tmp_path))
            assert await bridged_calls(first), first.output  # baresip answered
            await command(phone, "hangup")
            caller = await calling
            assert caller.returncode == 0, caller.output + caller.errors + first.output
            assert await wait_for_request(app, "/connected")
            await first.__aexit__(None, None, None)
            # serve again, on the same data directory: baresip does not register again.
            async with restarted(first, tmp_path, app) as second:
                assert "1 registered phone(s) loaded" in second.output, second.output
                calling = asyncio.create_task(call_in(second, tmp_path))
                assert await bridged_calls(second), second.output
                await command(phone, "hangup")
                caller = await calling
                assert caller.returncode == 0, caller.output + caller.errors + second.output
                for _ in range(100):
                    if len(app.bodies("/connected")) == 2:
                        break
                    await asyncio.sleep(0.05)
            assert "user alice: registered" not in second.output, second.output
    finally:
        await first.__aexit__(None, None, None)  # (again: it is idempotent)
    for connected in app.bodies("/connected"):
        outcome = connected["action_result"]["result"]
        assert outcome["connected"] is True, outcome
        assert outcome["destination"] == "user:alice"
        assert outcome["call_cause"] == "hung_up"  # baresip hung up
    assert len(app.bodies("/connected")) == 2


async def new_bridged_call(server: Server, seen: set[str]) -> bool:
    """Whether a call not in ``seen`` shows bridged within 10 s (added to ``seen``)."""
    for _ in range(20):
        fresh = [call for call, _ in await bridged_calls(server) if call not in seen]
        if fresh:
            seen.update(fresh)
            return True
        await asyncio.sleep(0.5)
    return False


@pytest.mark.skipif(BARESIP is None, reason="baresip is not installed")
@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_baresip_registered_over_tcp_or_tls_with_two_workers_is_reached_from_both(
    tmp_path: Path, app: AppServer, transport: str
) -> None:
    """``serve --workers 2``: baresip registers over TCP (or TLS, which ends at Kamailio)
    with Kamailio (worker 0 is the registrar); two calls in, one on each worker, reach
    it through Kamailio over the connection it opened, and it answers both."""
    from tests.e2e.test_workers import worker_pids

    connect_to_alice(app)
    data = tmp_path / "data"
    more, ca, tls_port = two_workers(), None, None
    if transport == "tls":
        pki = _certificates(tmp_path)
        ca, tls_port = pki["ca"], free_tcp_port()
        more = more.replace(
            "[sip]\n",
            f'[sip]\ntls_port = {tls_port}\ntls_certificate = "{pki["callhook"]}"\n'
            f'tls_key = "{pki["callhook_key"]}"\n',
        )
    extra = (*users_config(tmp_path, more), "--workers", "2")
    server = Server.for_app(data, app, extra=extra)
    server.start_timeout = 150.0
    phone_dir, ctrl_port = baresip_as_alice(tmp_path, tls_port or server.sip_port, transport, ca)
    async with server:
        assert sorted(worker_pids(data)) == [0, 1], server.output
        async with baresip(phone_dir, ctrl_port) as phone:
            assert await wait_for_output(server, " 0:callhook.sip: user alice: registered")
            (line,) = [x for x in server.output.splitlines() if "user alice: registered" in x]
            # The phone's own connection, as Kamailio names it (its TLS ends there).
            assert f" from {transport} 127.0.0.1:" in line, line
            assert await wait_for_output(server, " 1:callhook.sip: user alice: 1 phone(s)")
            seen: set[str] = set()
            for done in (1, 2):
                calling = asyncio.create_task(call_in(server, tmp_path))
                # baresip answered this call (not one before it).
                assert await new_bridged_call(server, seen), server.output
                await command(phone, "hangup")
                caller = await calling
                assert caller.returncode == 0, caller.output + caller.errors + server.output
                for _ in range(100):
                    if len(app.bodies("/connected")) == done:
                        break
                    await asyncio.sleep(0.05)
                # Each call's outcome as it ends, with the server's log if it is wrong.
                bodies = app.bodies("/connected")
                assert len(bodies) == done, server.output
                outcome = bodies[-1]["action_result"]["result"]
                assert (outcome["connected"], outcome["call_cause"]) == (True, "hung_up"), (
                    f"call {done}: {outcome}\n{server.output}"
                )
    callers = re.findall(
        r" (\d):callhook\.sip: call \S+: calling .*a phone of user:alice", server.output
    )
    assert sorted(callers) == ["0", "1"], server.output
    assert len(app.bodies("/connected")) == 2


# --- SIPp phones --------------------------------------------------------------------------

REGISTER = """
  <send retrans="500"><![CDATA[
REGISTER sip:127.0.0.1:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: <sip:{user}@127.0.0.1>;tag=[pid]SIPpReg[call_number]
To: <sip:{user}@127.0.0.1>
Call-ID: [call_id]
CSeq: {cseq} REGISTER
Contact: <sip:{user}@[local_ip]:[local_port]>
Expires: {expires}
Max-Forwards: 70
{auth}Content-Length: 0

]]></send>
"""


def register_scenario(password: str, expect: str = "200", expires: int = 3600) -> str:
    """REGISTER as alice, answer the 401 with SIPp's digest of ``password``, expect ``expect``."""
    auth = f"[authentication username=alice password={password}]\n"
    return sipp.scenario(
        REGISTER.format(user="alice", cseq=1, expires=expires, auth=""),
        '  <recv response="401" auth="true"/>\n',
        REGISTER.format(user="alice", cseq=2, expires=expires, auth=auth),
        f'  <recv response="{expect}"/>\n',
    )


async def sipp_from(
    scenario_text: str,
    server: tuple[str, int],
    workdir: Path,
    *,
    local_port: int,
    address: str = "127.0.0.1",
    calls: int = 1,
    timeout: int = 30,
) -> sipp.SippRun:
    """SIPp runs ``scenario_text`` ``calls`` times (one after the other) from ``address``."""
    assert sipp.SIPP is not None
    path = workdir / f"client-{local_port}.xml"
    path.write_text(scenario_text)
    proc = await asyncio.create_subprocess_exec(
        sipp.SIPP,
        "-sf",
        str(path),
        f"{server[0]}:{server[1]}",
        "-i",
        address,
        "-p",
        str(local_port),
        *sipp.control_socket(free_udp_port()),
        "-m",
        str(calls),
        "-l",
        "1",
        "-nostdin",
        "-timeout",
        f"{timeout}s",
        "-recv_timeout",
        f"{timeout * 1000}",
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout + 10)
    return sipp.SippRun(proc.returncode or 0, out.decode(errors="replace"), "")


async def register_phone(server: Server, tmp_path: Path, port: int) -> None:
    """A SIPp phone on ``port`` registers as alice (with the right password)."""
    run = await sipp_from(register_scenario(PASSWORD), server.sip, tmp_path, local_port=port)
    assert run.returncode == 0, run.output + server.output


ANSWERS_THEN_HANGS_UP = (
    sipp.UAS_ANSWER.format(receive=sipp.UAS_RECEIVE_REMEMBERING)
    + sipp.PAUSE.format(ms=1500)
    + sipp.BYE_FROM_UAS
)


async def call_reaches_phone(server: Server, tmp_path: Path, port: int) -> None:
    """A caller calls in; alice's SIPp phone on ``port`` answers it, then hangs up."""
    phone = await sipp.start_sipp(
        sipp.scenario(ANSWERS_THEN_HANGS_UP),
        tmp_path,
        local_port=port,
        media_port=free_even_udp_port(),
    )
    caller = await call_in(server, tmp_path)
    out, _ = await asyncio.wait_for(phone.communicate(), 30)
    assert phone.returncode == 0, out.decode(errors="replace") + server.output
    assert caller.returncode == 0, caller.output + caller.errors + server.output


async def test_a_phone_registered_once_is_reached_after_a_restart(
    tmp_path: Path, app: AppServer
) -> None:
    """The binding is in the state database: ``/api/users`` lists it, and a restarted
    serve lists it and calls the phone at once."""
    connect_to_alice(app)
    port = free_udp_port()
    first = Server.for_app(tmp_path / "data", app, extra=users_config(tmp_path))
    async with first:
        assert await first.api("GET", "/api/users") == (200, [])
        await register_phone(first, tmp_path, port)
        status, phones = await first.api("GET", "/api/users")
        assert status == 200 and [(p["user"], p["transport"], p["source"]) for p in phones] == [
            ("alice", "udp", f"127.0.0.1:{port}")
        ], phones
    async with restarted(first, tmp_path, app) as second:
        assert [p["user"] for p in (await second.api("GET", "/api/users"))[1]] == ["alice"]
        await call_reaches_phone(second, tmp_path, port)
        assert await wait_for_request(app, "/connected")
    outcome = app.bodies("/connected")[0]["action_result"]["result"]
    assert (outcome["connected"], outcome["destination"]) == (True, "user:alice"), outcome


async def test_both_phones_of_a_user_ring_and_the_first_to_answer_wins(
    tmp_path: Path, app: AppServer
) -> None:
    connect_to_alice(app)
    ringing_port, answering_port = free_udp_port(), free_udp_port()
    async with Server.for_app(tmp_path / "data", app, extra=users_config(tmp_path)) as server:
        for port in (ringing_port, answering_port):
            await register_phone(server, tmp_path, port)
        phones = [
            await sipp.start_sipp(
                sipp.scenario(scenario),
                tmp_path,
                local_port=port,
                media_port=free_even_udp_port(),
            )
            for scenario, port in (
                (UAS_RINGS_UNTIL_CANCEL, ringing_port),
                (ANSWERS_THEN_HANGS_UP, answering_port),
            )
        ]
        caller = await call_in(server, tmp_path)
        for phone in phones:  # the one that rang got CANCEL; the other answered, hung up
            out, _ = await asyncio.wait_for(phone.communicate(), 30)
            assert phone.returncode == 0, out.decode(errors="replace") + server.output
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/connected")
    outcome = app.bodies("/connected")[0]["action_result"]["result"]
    assert (outcome["connected"], outcome["destination"]) == (True, "user:alice"), outcome
    assert outcome["call_cause"] == "hung_up"
    assert len(re.findall(r"a phone of user:alice", server.output)) == 2, server.output


async def test_when_every_phone_refuses_the_most_telling_cause_is_the_users(
    tmp_path: Path, app: AppServer
) -> None:
    connect_to_alice(app)
    ports = [free_udp_port(), free_udp_port()]
    async with Server.for_app(tmp_path / "data", app, extra=users_config(tmp_path)) as server:
        for port in ports:
            await register_phone(server, tmp_path, port)
        refusals = (
            UAS_REFUSES.format(status=404, reason="Not Found"),
            UAS_REFUSES.format(status=486, reason="Busy Here"),
        )
        phones = [
            await sipp.start_sipp(
                sipp.scenario(text), tmp_path, local_port=port, media_port=free_even_udp_port()
            )
            for text, port in zip(refusals, ports, strict=True)
        ]
        caller = await call_in(server, tmp_path)
        for phone in phones:
            out, _ = await asyncio.wait_for(phone.communicate(), 30)
            assert phone.returncode == 0, out.decode(errors="replace") + server.output
        assert caller.returncode == 0, caller.output + caller.errors + server.output
    outcome = app.bodies("/connected")[0]["action_result"]["result"]
    assert (outcome["connected"], outcome["call_cause"], outcome["call_raw_cause"]) == (
        False,
        "busy",
        "486",
    )


async def test_unknown_users_and_users_with_no_phone_are_unobtainable(
    tmp_path: Path, app: AppServer
) -> None:
    app.page(
        "/start",
        [{"connect": {"destinations": ["user:alice"], "next_page": {"url": "/one"}}}],
    )
    app.page(
        "/one",
        [{"connect": {"destinations": ["user:nobody"], "next_page": {"url": "/two"}}}],
    )
    app.page("/two", [{"hang_up": {}}])
    app.page("/final", None)
    async with Server.for_app(tmp_path / "data", app, extra=users_config(tmp_path)) as server:
        caller = await call_in(server, tmp_path)
        assert caller.returncode == 0, caller.output + caller.errors + server.output
    (one,) = app.bodies("/one")
    (two,) = app.bodies("/two")
    first, second = one["action_result"]["result"], two["action_result"]["result"]
    assert (first["call_cause"], first["call_raw_cause"]) == ("unobtainable", "480")
    assert (second["call_cause"], second["call_raw_cause"]) == ("unobtainable", "404")


async def test_a_wrong_password_is_refused_and_counted_until_the_source_is_banned(
    tmp_path: Path, app: AppServer
) -> None:
    """From 127.0.0.2 (the server's own 127.0.0.1 is never banned for failed
    authentications): each wrong REGISTER gets 403 and counts; the fifth bans the source."""
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    async with Server.for_app(tmp_path / "data", app, extra=users_config(tmp_path)) as server:
        wrong = register_scenario(WRONG, expect="403")
        run = await sipp_from(
            wrong, server.sip, tmp_path, local_port=free_udp_port(), address="127.0.0.2", calls=5
        )
        assert run.returncode == 0, run.output + server.output
        status, bans = await server.api("GET", "/api/bans")
        assert status == 200
        assert [b["address"] for b in bans] == ["127.0.0.2"], bans
        assert bans[0]["reason"] == "5 failed digest authentications in a minute", bans
        assert "failed digest authentication (REGISTER as alice)" in server.output
        # Banned: even the right password gets no answer now.
        right = await sipp_from(
            register_scenario(PASSWORD),
            server.sip,
            tmp_path,
            local_port=free_udp_port(),
            address="127.0.0.2",
            timeout=3,
        )
        assert right.returncode != 0
    assert "user alice: registered" not in server.output


def invite_as_alice(cseq: int, auth: str = "") -> str:
    """SIPp's INVITE to ``ivr``, from alice (CSeq ``cseq``, with ``auth`` if given)."""
    text = sipp.invite("ivr").replace("sipp <sip:sipp@", "alice <sip:alice@")
    return text.replace("CSeq: 1 INVITE\n", f"CSeq: {cseq} INVITE\n{auth}")


ACK_THE_401 = """
  <send><![CDATA[
ACK sip:ivr@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch-3]
From: alice <sip:alice@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: 1 ACK
Max-Forwards: 70
Content-Length: 0

]]></send>
"""


async def test_a_users_phone_calling_in_is_challenged_and_runs_the_users_app(
    tmp_path: Path, app: AppServer
) -> None:
    app.page("/start", [{"hang_up": {}}])  # the default application: not for alice
    app.page("/alice", [{"sleep": {"seconds": 0.5}}, {"hang_up": {}}])
    app.page("/final", None)
    desk = f'[apps.desk]\nfirst_page = "{app.url("/alice")}"\nsecret = "{app.secret}"\n'
    extra = users_config(tmp_path, 'app = "desk"\n' + desk)
    auth = f"[authentication username=alice password={PASSWORD}]\n"
    async with Server.for_app(tmp_path / "data", app, extra=extra) as server:
        host, port = server.sip
        caller = await sipp.run_sipp(
            sipp.scenario(
                invite_as_alice(1),
                '  <recv response="100" optional="true"/>\n  <recv response="401" auth="true"/>\n',
                ACK_THE_401,
                invite_as_alice(2, auth),
                sipp.ANSWERED.replace("CSeq: 1 ACK", "CSeq: 2 ACK"),
                sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
            ),
            server.sip,
            tmp_path,
            local_port=free_udp_port(),
            media_port=free_even_udp_port(),
            # SIPp's digest uri is sip:<its remote address> unless -auth_uri (to which it
            # adds "sip:") says otherwise: callhook checks that it is the Request-URI (RFC
            # 7616 §3.4.6), as a phone's is.
            extra=("-t", "u1", "-auth_uri", f"ivr@{host}:{port}"),
        )
        assert caller.returncode == 0, caller.output + caller.errors + server.output
    assert len(app.bodies("/alice")) == 1 and app.bodies("/start") == []
    assert "from user alice" in server.output


def invite_as(name: str) -> str:
    """SIPp's INVITE to ``ivr`` from ``name`` at SIPp's address, which is callhook's."""
    return sipp.invite("ivr").replace("sipp <sip:sipp@", f"{name} <sip:{name}@")


async def test_a_call_from_callhooks_domain_is_challenged_whatever_the_name(
    tmp_path: Path, app: AppServer
) -> None:
    """A scanner calling as one name after another learns nothing: alice (a user) and
    nobody (none) get the same 401; a caller from elsewhere is not challenged."""
    app.page("/start", [{"sleep": {"seconds": 0.5}}, {"hang_up": {}}])
    app.page("/final", None)
    async with Server.for_app(tmp_path / "data", app, extra=users_config(tmp_path)) as server:
        for name in ("alice", "nobody"):
            caller = await sipp.call(
                server.sip,
                tmp_path,
                invite_as(name),
                '  <recv response="100" optional="true"/>\n  <recv response="401"/>\n',
                ACK_THE_401.replace("alice", name),
            )
            assert caller.returncode == 0, caller.output + caller.errors + server.output
        elsewhere = await call_in(server, tmp_path)
        assert elsewhere.returncode == 0, elsewhere.output + elsewhere.errors + server.output
    assert len(app.bodies("/start")) == 1  # only the caller from elsewhere ran the app


async def test_two_workers_phones_register_through_kamailio_and_every_worker_calls_them(
    tmp_path: Path, app: AppServer
) -> None:
    """``serve --workers 2`` with ``[users]``: a phone's REGISTER reaches worker 0 through
    Kamailio, which names its real source (the phone's digest is checked there, its flow
    is that source); worker 1 reads the binding from the database. Two calls in, one on
    each worker, both reach the phone through Kamailio. Five wrong passwords from
    127.0.0.2 ban that source on worker 0, which tells worker 1 (``/api/bans`` lists it
    on both): its next REGISTER gets 403, through Kamailio."""
    from tests.e2e.test_workers import worker_pids

    connect_to_alice(app)
    port = free_udp_port()
    data = tmp_path / "data"
    extra = (*users_config(tmp_path, two_workers()), "--workers", "2")
    server = Server.for_app(data, app, extra=extra)
    server.start_timeout = 150.0
    async with server:
        assert sorted(worker_pids(data)) == [0, 1], server.output
        await register_phone(server, tmp_path, port)
        assert await wait_for_output(server, " 0:callhook.sip: user alice: registered")
        # From the phone's own address and port (Kamailio's word), not Kamailio's.
        (line,) = [x for x in server.output.splitlines() if "user alice: registered" in x]
        assert line.split(" from ")[1].startswith(f"udp 127.0.0.1:{port} "), line
        # Worker 1 reads it from the database (within a second).
        assert await wait_for_output(
            server, " 1:callhook.sip: user alice: 1 phone(s) registered (read from the database)"
        ), server.output
        # One view for the operator, whichever worker answers: the phone and where it is.
        for _ in range(4):
            status, phones = await server.api("GET", "/api/users")
            assert status == 200 and [(p["user"], p["source"]) for p in phones] == [
                ("alice", f"127.0.0.1:{port}")
            ], phones
            assert 3590 <= phones[0]["expires_in"] <= 3600, phones
        listed = await asyncio.create_subprocess_exec(
            *CALLHOOK, "users", "--http", f"127.0.0.1:{server.http_port}",
            "--data-dir", str(data), stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await listed.communicate()
        assert listed.returncode == 0 and f"udp 127.0.0.1:{port}" in out.decode(), out
        for _ in range(2):
            await call_reaches_phone(server, tmp_path, port)
        wrong = register_scenario(WRONG, expect="403")
        run = await sipp_from(
            wrong, server.sip, tmp_path, local_port=free_udp_port(), address="127.0.0.2", calls=5
        )
        assert run.returncode == 0, run.output + server.output
        status, bans = await server.api("GET", "/api/bans")
        # Counted by worker 0, the ban holds on both (told on the private port).
        assert status == 200 and [(b["address"], b["worker"]) for b in bans] == [
            ("127.0.0.2", 0),
            ("127.0.0.2", 1),
        ], bans
        banned = sipp.scenario(
            REGISTER.format(user="alice", cseq=1, expires=3600, auth=""),
            '  <recv response="403"/>\n',
        )
        run = await sipp_from(
            banned, server.sip, tmp_path, local_port=free_udp_port(), address="127.0.0.2"
        )
        assert run.returncode == 0, run.output + server.output
        # Each worker called the phone once.
        callers = re.findall(
            r" (\d):callhook\.sip: call \S+: calling .*a phone of user:alice", server.output
        )
        assert sorted(callers) == ["0", "1"], server.output
        # Worker 0, the registrar, killed: a phone still registers (Kamailio tries the next
        # worker, or worker 0's successor) and is called.
        os.kill(worker_pids(data)[0], signal.SIGKILL)
        moved = free_udp_port()
        await register_phone(server, tmp_path, moved)
        await call_reaches_phone(server, tmp_path, moved)
        for _ in range(100):
            if len(app.bodies("/connected")) == 3:
                break
            await asyncio.sleep(0.05)
    outcomes = [b["action_result"]["result"] for b in app.bodies("/connected")]
    assert [(o["connected"], o["destination"]) for o in outcomes] == [(True, "user:alice")] * 3
