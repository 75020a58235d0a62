"""Two nodes, as on two machines: ``callhook serve`` on 127.0.0.2 and on 127.0.0.3, one
PostgreSQL server (``[database] url``) and one data directory (the shared filesystem).

Either node's REST API knows the other's live calls (each node's private address is
in the ``nodes`` table). A node killed with SIGKILL in the middle of a recording is
gone for good once its row in ``nodes`` runs out (``node_timeout``): the other node
finishes its recording and announces it once. A notification queued by one node is
delivered once, by either.

A trunk is registered by one node of the installation (the one holding the trunks' row
in ``leaders``), not by each; when that node dies, the other registers it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer, Received, Reply
from tests.e2e import sipp
from tests.e2e.harness import Server
from tests.e2e.kamailio import Provider, make_provider_fixture  # noqa: F401 (fixture)
from tests.e2e.test_notifications import talking
from tests.e2e.test_trunks import answering_app, call_the_did, trunk_states
from tests.e2e.test_trunks import config as trunk_config
from tests.e2e.test_workers import record, until
from tests.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp is not installed")


async def test_a_node_that_dies_has_its_recording_finished_by_the_other(
    tmp_path: Path,
    app: AppServer,
    postgres_url: str,  # noqa: F811
) -> None:
    plan: list[list[dict[str, Any]]] = [record(800), record(3000)]
    app.page("/start", lambda _: plan.pop(0))
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/final", None)
    answering = False
    delivered: list[dict[str, Any]] = []

    def available(request: Received) -> Reply:
        if not answering:  # 503 until the second node is killed: pending in the outbox
            return Reply(status=503)
        delivered.append(request.json["action_result"]["result"])
        return Reply(status=204)

    app.page("/available", available)
    config = tmp_path / "node.toml"
    config.write_text(
        f'[database]\nurl = "{postgres_url}"\nnode_timeout = 3\n'
        "[notifications]\nfirst_retry = 0.5\nmax_retry = 1\n"
        "[speech]\npreload = false\n"
    )
    data_dir = tmp_path / "shared"  # one data directory for both, as on NFS
    extra = ("--config", str(config))
    nodes = [Server.for_app(data_dir, app, extra, host=h) for h in ("127.0.0.2", "127.0.0.3")]
    short = talking(2.0).write_pcap(tmp_path / "short.pcap")
    long_talk = talking(8.0).write_pcap(tmp_path / "long.pcap")

    def caller(pcap: Path) -> list[str]:
        return [
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.PLAY.format(pcap=pcap),
            sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
        ]

    async with nodes[0] as a, nodes[1] as b:
        # On node A: a recording whose notification waits in the shared outbox.
        run = await sipp.call(a.sip, tmp_path, *caller(short))
        assert run.returncode == 0, run.output + run.errors + a.output
        await until(lambda: len(app.bodies("/available")) >= 2, "retries", lambda: a.output)
        # On node B: a recording, and B is killed while it is being made.
        call = asyncio.create_task(sipp.call(b.sip, tmp_path, *caller(long_talk)))
        folder = data_dir / "media" / "default" / "recordings"

        def b_recording() -> bool:
            files = list(folder.glob("*.wav")) if folder.exists() else []
            return sum(f.stat().st_size > 58 + 16000 for f in files) >= 2

        await until(b_recording, "node B's recording", lambda: b.output)
        # Asked on node A, the REST API knows B's live call (the nodes table says where
        # B is asked), and B's counters beside A's.
        status, listed = await a.api("GET", "/api/v1/calls")
        assert status == 200 and len(listed["calls"]) == 1, listed
        call_id = listed["calls"][0]["call_id"]
        status, one = await a.api("GET", f"/api/v1/calls/{call_id}")
        assert status == 200 and one["call_id"] == call_id, one
        status, stats = await a.api("GET", "/api/stats")
        assert status == 200 and len(stats["workers"]) == 2, stats
        assert stats["calls_active"] == 0  # A's own: its call ended
        assert sum(w["calls_active"] for w in stats["workers"]) == 1, stats
        assert b.proc is not None
        os.kill(b.proc.pid, signal.SIGKILL)
        answering = True
        assert (await call).returncode != 0  # B's call died with B
        # A finds B gone (3 s silent) and finishes its recording; the pending one goes too.
        await until(lambda: len(delivered) >= 2, "both notifications", lambda: a.output)
        await asyncio.sleep(2.0)  # time for a duplicate to come (retries are 1 s apart)
        assert len(delivered) == 2, delivered
        reasons = sorted(r["reason"] for r in delivered)
        assert reasons == ["error", "silence"], delivered  # B's was cut: reason error
        cut = next(r for r in delivered if r["reason"] == "error")
        assert cut["seconds_duration"] >= 1.0 and cut["file_available"] is True, cut
        assert "interrupted by a restart" in a.output
        assert "finished 1 recording(s) of a process that stopped" in a.output
        assert await a.stop() == 0, a.output


async def test_one_node_registers_the_trunk_and_the_other_takes_over_when_it_dies(
    tmp_path: Path,
    app: AppServer,
    postgres_url: str,  # noqa: F811
    make_provider: Callable[..., Provider],
) -> None:
    provider = make_provider()
    answering_app(app)
    config = trunk_config(tmp_path, app, provider)
    with config.open("a") as file:
        file.write(
            f'[database]\nurl = "{postgres_url}"\nnode_timeout = 3\n[speech]\npreload = false\n'
        )
    data_dir = tmp_path / "shared"
    extra = ("--config", str(config))
    a, b = (Server.for_app(data_dir, app, extra, host=h) for h in ("127.0.0.2", "127.0.0.3"))
    async with a:
        (contact,) = await provider.wait_registered(timeout=20)
        async with b:
            # One binding at the provider, A's; B asked says so too (it asks A).
            await asyncio.sleep(2.0)  # (B's beats: it does not take the role from A)
            assert provider.registered() == [contact], provider.registered()
            assert contact.startswith(f"sip:{provider.username}@127.0.0.2:{a.sip_port}")
            for node in (a, b):
                (state,) = await trunk_states(node)
                assert state["state"] == "registered", (state, node.output)
            assert "trunk provider: registered" not in b.output

            assert a.proc is not None
            os.kill(a.proc.pid, signal.SIGKILL)
            # A's row runs out (3 s): B takes the role at its next beat and registers.
            wanted = f"sip:{provider.username}@127.0.0.3:{b.sip_port}"
            await until(
                lambda: any(c.startswith(wanted) for c in provider.registered()),
                "B's registration",
                lambda: b.output + provider.log_text(),
                seconds=20,
            )
            # (Said before the REGISTER goes, but read from B's output a moment later.)
            await until(
                lambda: "this node registers the trunks now" in b.output,
                "B's line saying it took the role",
                lambda: b.output,
                seconds=5,
            )
            (state,) = await trunk_states(b)
            assert state["state"] == "registered", state
            # The DID's calls reach B (the provider tries A's stale binding too).
            run = await call_the_did(tmp_path, provider)
            assert run.returncode == 0, run.output + run.errors + b.output
            assert app.bodies("/support"), b.output
            assert await b.stop() == 0, b.output
    assert not any(c.startswith(wanted) for c in provider.registered())  # B unregistered
