"""``[sip] external_address``: behind NAT, callhook advertises the public address.

SIPp calls ``serve`` configured with a documentation address as its public one
(203.0.113.7, RFC 5737); the 200 OK's Contact and the SDP's c= line must name
it, while SIP and RTP still work on the machine's own address (SIPp sends its
requests and RTP to where it called, as a NAT's port forward would).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import Server
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

PUBLIC = "203.0.113.7"

ANSWERED_CHECKED = """
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="200" rrs="true">
    <action>
      <ereg regexp="c=IN IP4 203\\.0\\.113\\.7" search_in="body" check_it="true" assign_to="c"/>
      <ereg regexp="o=[^\\r\\n]* IN IP4 203\\.0\\.113\\.7" search_in="body" check_it="true"
            assign_to="o"/>
      <ereg regexp="sip:[^@>]*@203\\.0\\.113\\.7" search_in="hdr" header="Contact:"
            check_it="true" assign_to="contact"/>
      <log message="advertised: [$c] [$o] [$contact]"/>
    </action>
  </recv>
""" + sipp.ANSWERED.split('<recv response="200" rrs="true"/>', 1)[1]


async def test_contact_and_sdp_name_the_external_address(tmp_path: Path, app: AppServer) -> None:
    app.page("/start", [{"sleep": {"seconds": 1}}, {"hang_up": {}}])
    app.page("/final", None)
    config = tmp_path / "callhook.toml"
    config.write_text(f'[sip]\nexternal_address = "{PUBLIC}"\n')
    pcap = Stream(3.0).write_pcap(tmp_path / "caller.pcap")
    parts = [
        sipp.invite("ivr"),
        ANSWERED_CHECKED,
        sipp.PLAY.format(pcap=pcap),
        sipp.BYE_FROM_SERVER.format(timeout_ms=15000),
    ]
    async with Server.for_app(tmp_path / "data", app, extra=("--config", str(config))) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
    assert run.returncode == 0, run.output + run.errors + server.output
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"  # the call ran its course
    assert f"advertising {PUBLIC} in Contact, Via and SDP" in server.output
