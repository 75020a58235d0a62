"""The transfer action on real calls: a SIPp caller calls serve, whose application transfers
it with a REFER; the caller (SIPp) accepts and reports the outcome in NOTIFYs, or refuses
(501) and the application's fallback connect puts it through to a SIPp callee."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
from tests.e2e.test_connect import callee_scenario

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

TARGET = "sip:bob@192.0.2.55"
REFERRED_BY = "sip:ivr@callhook.example"

#: The caller receives the REFER: it must name the target and the referrer (SIPp fails
#: the call when a checked regexp does not match), and its From is kept for the NOTIFYs'
#: To (the dialog's remote side, with callhook's tag).
RECEIVE_REFER = """
  <recv request="REFER" timeout="20000">
    <action>
      <ereg regexp="&lt;sip:bob@192\\.0\\.2\\.55&gt;" search_in="hdr" header="Refer-To:"
            check_it="true" assign_to="refer_to"/>
      <ereg regexp="&lt;sip:ivr@callhook\\.example&gt;" search_in="hdr" header="Referred-By:"
            check_it="true" assign_to="referred_by"/>
      <ereg regexp=".*" search_in="hdr" header="From:" assign_to="callhook"/>
    </action>
  </recv>
  <nop><action>
    <log message="referred [$refer_to] by [$referred_by] from [$callhook]"/>
  </action></nop>
"""

ANSWER_REFER = """
  <send><![CDATA[
SIP/2.0 {status} {reason}
[last_Via:]
[last_From:]
[last_To:]
[last_Call-ID:]
[last_CSeq:]
Contact: <sip:sipp@[local_ip]:[local_port]>
Content-Length: 0

]]></send>
"""

NOTIFY = """
  <send retrans="500"><![CDATA[
NOTIFY [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
To: [$callhook]
Call-ID: [call_id]
CSeq: {cseq} NOTIFY
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
Event: refer
Subscription-State: {state}
Content-Type: message/sipfrag
Content-Length: [len]

SIP/2.0 {status} {reason}
]]></send>
  <recv response="200"/>
"""


#: The last NOTIFY, then callhook's BYE: the transfer done, callhook hangs up its part of the
#: call (RFC 5589 §6.1) right after it answers the NOTIFY. Through Kamailio the 200 and the
#: BYE may cross (its UDP workers forward each on its own), so either order passes, and the
#: 200 must still arrive after the BYE.
FINAL_NOTIFY_THEN_BYE = (
    NOTIFY.format(cseq=3, state="terminated;reason=noresource", status=200, reason="OK").replace(
        '<recv response="200"/>', '<recv response="200" optional="true" next="answered"/>'
    )
    + sipp.BYE_FROM_SERVER.format(timeout_ms=10000)
    + """  <recv response="200" timeout="5000"/>
  <nop next="done"/>
  <label id="answered"/>
"""
    + sipp.BYE_FROM_SERVER.format(timeout_ms=10000)
    + """  <label id="done"/>
"""
)


def transfer_app(app: AppServer, **props: object) -> None:
    app.page(
        "/start",
        [
            {
                "transfer": {
                    "destination": TARGET,
                    "referred_by": REFERRED_BY,
                    "next_page": {"url": "/transferred"},
                    **props,
                }
            }
        ],
    )
    app.page("/transferred", [{"play": {"play_list": [{"text_to_say": "still here"}]}}])
    app.page("/final", None)


def allow_target(tmp_path: Path) -> tuple[str, ...]:
    """[outbound] lets the application call (and so transfer to) TARGET, and call the
    test's SIPp callees."""
    path = tmp_path / "callhook.toml"
    path.write_text('[outbound]\nallow = ["sip:bob@192.0.2.55", "sip:*@127.0.0.1:*"]\n')
    return ("--config", str(path))


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_caller_that_accepts_the_refer_is_transferred_and_callhook_leaves(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """(With workers the REFER and the NOTIFYs cross Kamailio in the call's dialog.)"""
    transfer_app(app)
    allow = '[outbound]\nallow = ["sip:bob@192.0.2.55", "sip:*@127.0.0.1:*"]\n'
    async with served(tmp_path, app, workers, allow) as server:
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            RECEIVE_REFER,
            ANSWER_REFER.format(status=202, reason="Accepted"),
            NOTIFY.format(cseq=2, state="active;expires=60", status=100, reason="Trying"),
            sipp.PAUSE.format(ms=300),
            FINAL_NOTIFY_THEN_BYE,
        )
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/transferred")
        assert await wait_for_request(app, "/final")
    (transferred,) = app.bodies("/transferred")
    assert transferred["action_result"] == {
        "action": "transfer",
        "result": {
            "transferred": True,
            "destination": TARGET,
            "refer_status": "202",
            "notify_status": "200",
            "call_cause": "",
            "call_raw_cause": "200",
            "fell_back": False,
        },
    }
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"
    log = "".join(p.read_text() for p in (tmp_path / "data" / "media").glob("*/logs/*.log"))
    for line in (f"refer {TARGET}", "refer_answered 202", "refer_notify 100", "refer_notify 200"):
        assert line in log, log


async def test_a_failed_transfer_leaves_the_caller_with_the_application(
    tmp_path: Path, app: AppServer
) -> None:
    transfer_app(app)
    async with Server.for_app(tmp_path / "data", app, extra=allow_target(tmp_path)) as server:
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            RECEIVE_REFER,
            ANSWER_REFER.format(status=202, reason="Accepted"),
            NOTIFY.format(
                cseq=2, state="terminated;reason=noresource", status=486, reason="Busy Here"
            ),
            # The application goes on (it says "still here"), then its list ends.
            sipp.BYE_FROM_SERVER.format(timeout_ms=15000),
        )
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/final")
    (transferred,) = app.bodies("/transferred")
    result = transferred["action_result"]["result"]
    assert (result["transferred"], result["notify_status"]) == (False, "486")
    assert (result["call_cause"], result["call_raw_cause"]) == ("busy", "486")
    log = "".join(p.read_text() for p in (tmp_path / "data" / "media").glob("*/logs/*.log"))
    assert "prompt_start" in log.split("refer_notify 486", 1)[1], log  # "still here" played


async def test_a_caller_that_refuses_refer_is_put_through_by_the_fallback_connect(
    tmp_path: Path, app: AppServer
) -> None:
    callee_port = free_udp_port()
    transfer_app(
        app,
        fallback_connect={"connect": {"destinations": [f"sip:callee@127.0.0.1:{callee_port}"]}},
    )
    callee = await sipp.start_sipp(
        callee_scenario(None), tmp_path, local_port=callee_port, media_port=free_even_udp_port()
    )
    async with Server.for_app(tmp_path / "data", app, extra=allow_target(tmp_path)) as server:
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            RECEIVE_REFER,
            ANSWER_REFER.format(status=501, reason="Not Implemented"),
            sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
        )
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        try:
            callee_out, _ = await asyncio.wait_for(callee.communicate(), 30)
        except TimeoutError:
            callee.kill()
            raise AssertionError(
                "the callee was never called and hung up\n" + server.output
            ) from None
        assert callee.returncode == 0, callee_out.decode(errors="replace") + server.output
        assert await wait_for_request(app, "/transferred")
    (transferred,) = app.bodies("/transferred")
    result = transferred["action_result"]["result"]
    assert (result["transferred"], result["refer_status"], result["fell_back"]) == (
        False,
        "501",
        True,
    )
    connected = result["connect_result"]
    assert connected["connected"] is True and connected["call_cause"] == "hung_up"
    assert connected["destination"] == f"sip:callee@127.0.0.1:{callee_port}"


async def test_a_transfer_outbound_refuses_is_never_referred(
    tmp_path: Path, app: AppServer
) -> None:
    transfer_app(app)  # no [outbound] allow: the target is not the installation's to call
    async with Server.for_app(tmp_path / "data", app) as server:
        caller = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            # No REFER comes (SIPp would fail on an unexpected one): the app goes on, and
            # its list ends.
            sipp.BYE_FROM_SERVER.format(timeout_ms=15000),
        )
        assert caller.returncode == 0, caller.output + caller.errors + server.output
        assert await wait_for_request(app, "/final")
        assert "refused by [outbound] allow" in server.output
    (transferred,) = app.bodies("/transferred")
    result = transferred["action_result"]["result"]
    assert (result["transferred"], result["refer_status"]) == (False, "403")
