"""Kamailio's bans as the workers read and lift them (cluster/frontbans.py), against a
stand-in of Kamailio's JSON-RPC datagram socket (the real one: tests/e2e/test_security.py
floods a real Kamailio in front of workers)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

from callhook.cluster.frontbans import FrontBans


class Rpc:
    """Answers each JSON-RPC datagram as Kamailio's jsonrpcs would, from ``table``."""

    def __init__(self, path: Path, table: dict[str, int]) -> None:
        self.table = table
        self.seen: list[dict[str, Any]] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                data, source = self.sock.recvfrom(65536)
            except OSError:
                return
            request = json.loads(data)
            self.seen.append(request)
            method, params = request["method"], request["params"]
            if method == "htable.dump":
                slots = [{"name": k, "value": v, "type": "int"} for k, v in self.table.items()]
                result: Any = [{"entry": 1, "size": len(slots), "slot": slots}] if slots else []
            elif method == "htable.delete":
                self.table.pop(params[1], None)
                result = "Ok. Key deleted."
            else:
                result = "Ok."
            answer = {"jsonrpc": "2.0", "result": result, "id": request["id"]}
            self.sock.sendto(json.dumps(answer).encode(), source)

    def close(self) -> None:
        self.sock.close()


async def test_the_bans_in_force_with_their_time_left_and_a_lift(tmp_path: Path) -> None:
    path = tmp_path / "rpc.sock"
    rpc = Rpc(path, {"192.0.2.7": int(time.time()) - 100, "192.0.2.8": int(time.time())})
    try:
        front = FrontBans(path, rate=20, ban_seconds=600)
        bans = await front.bans()
        assert [b["address"] for b in bans] == ["192.0.2.8", "192.0.2.7"]  # most left first
        assert 598 <= bans[0]["seconds_left"] <= 600 and 498 <= bans[1]["seconds_left"] <= 500
        assert "more than 20 SIP messages a second" in bans[0]["reason"]
        assert await front.lift("192.0.2.7")
        assert not await front.lift("192.0.2.7")  # not banned any more
        assert [b["address"] for b in await front.bans()] == ["192.0.2.8"]
        # The lift let the source be for a while, then deleted the ban.
        methods = [(r["method"], r["params"]) for r in rpc.seen]
        assert ("htable.seti", ["lifted", "192.0.2.7", 1]) in methods
        assert ("htable.delete", ["ban", "192.0.2.7"]) in methods
    finally:
        rpc.close()


async def test_a_front_that_does_not_answer_has_no_bans_and_lifts_none(tmp_path: Path) -> None:
    front = FrontBans(tmp_path / "nobody.sock", rate=20, ban_seconds=600)
    assert await front.bans() == []
    assert not await front.lift("192.0.2.7")
