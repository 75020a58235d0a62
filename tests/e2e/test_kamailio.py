"""callhook behind a real SIP proxy: Kamailio (Debian ``kamailio``) with record-routing.

The caller (SIPp) reaches callhook only through Kamailio, which Record-Routes
every dialog and load-balances with its dispatcher module, probing callhook
with OPTIONS. callhook's own in-dialog request (its BYE when the application
hangs up) must follow the route set back through the proxy, or the caller
never gets it (RFC 3261 §12.2.1.1: in-dialog requests follow the route set).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import Server, free_udp_port
from tests.e2e.rtpstream import Stream

KAMAILIO = shutil.which("kamailio") or (
    "/usr/sbin/kamailio" if Path("/usr/sbin/kamailio").exists() else None
)
MODULES = Path("/usr/lib/x86_64-linux-gnu/kamailio/modules")
pytestmark = pytest.mark.skipif(
    KAMAILIO is None or sipp.SIPP is None, reason="kamailio or SIPp is not installed"
)

CONFIG = """#!KAMAILIO
debug=2
log_stderror=yes
fork=yes
children=1
listen=udp:127.0.0.1:{port}
mpath="{modules}"
loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "textops.so"
loadmodule "siputils.so"
loadmodule "xlog.so"
loadmodule "dispatcher.so"
modparam("dispatcher", "list_file", "{dispatcher}")
modparam("dispatcher", "ds_ping_interval", 1)
modparam("dispatcher", "ds_probing_mode", 1)
modparam("dispatcher", "ds_ping_from", "sip:proxy@127.0.0.1")

request_route {{
    if (!mf_process_maxfwd_header("10")) {{ sl_send_reply("483", "Too Many Hops"); exit; }}
    if (has_totag()) {{
        if (loose_route()) {{
            xlog("L_INFO", "in-dialog $rm from $si:$sp\\n");
            t_relay();
            exit;
        }}
        if (is_method("ACK")) {{ if (t_check_trans()) {{ t_relay(); }} exit; }}
        sl_send_reply("404", "Not here");
        exit;
    }}
    if (is_method("CANCEL")) {{ if (t_check_trans()) {{ t_relay(); }} exit; }}
    if (is_method("INVITE")) {{ record_route(); }}
    if (!ds_select_dst("1", "4")) {{ sl_send_reply("503", "No destination"); exit; }}
    xlog("L_INFO", "$rm $ru -> $du\\n");
    t_relay();
}}
"""


async def test_in_dialog_bye_goes_back_through_the_proxy(tmp_path: Path, app: AppServer) -> None:
    app.page("/start", [{"get_number": {"digit_count": 2, "next_page": {"url": "/number"}}}])
    app.page("/number", [{"hang_up": {}}])  # callhook sends the BYE: it must follow the route set
    app.page("/final", None)
    pcap = Stream(6.0).rfc4733("58", at=2.0).write_pcap(tmp_path / "caller.pcap")
    proxy_port = free_udp_port()
    async with Server.for_app(tmp_path / "data", app) as server:
        dispatcher = tmp_path / "dispatcher.list"
        dispatcher.write_text(f"1 sip:127.0.0.1:{server.sip_port}\n")
        config = tmp_path / "kamailio.cfg"
        config.write_text(CONFIG.format(port=proxy_port, modules=MODULES, dispatcher=dispatcher))
        assert KAMAILIO is not None
        proxy = await asyncio.create_subprocess_exec(
            KAMAILIO,
            "-f",
            str(config),
            "-DD",
            "-E",
            "-P",
            str(tmp_path / "kamailio.pid"),
            "-Y",
            str(tmp_path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await asyncio.sleep(1.5)  # up, and its first OPTIONS probe sent
            parts = [
                sipp.invite("ivr"),
                sipp.ANSWERED,
                sipp.PLAY.format(pcap=pcap),
                sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
            ]
            run = await sipp.call(("127.0.0.1", proxy_port), tmp_path, *parts)
        finally:
            proxy.terminate()
            out, _ = await asyncio.wait_for(proxy.communicate(), 10)
    proxy_log = out.decode(errors="replace")
    assert run.returncode == 0, run.output + run.errors + server.output + proxy_log
    assert app.bodies("/number")[0]["action_result"]["result"] == {"entered_number": "58"}
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"
    assert f"INVITE sip:ivr@127.0.0.1:{proxy_port} -> sip:127.0.0.1:{server.sip_port}" in proxy_log
    # callhook's BYE came through the proxy (it followed the Record-Route), not around it
    assert f"in-dialog BYE from 127.0.0.1:{server.sip_port}" in proxy_log, proxy_log
