"""The bans of Kamailio, in front of ``serve --workers``: listed and lifted by the workers.

Kamailio bans a source over ``[security] rate`` for ``ban_seconds`` (workers.py: its
``pike`` module, the ban an entry of its ``ban`` hash table whose value is when it
began). Its ``jsonrpcs`` module answers JSON-RPC 2.0 on a Unix datagram socket
(``kamailio_rpc.sock`` in the supervisor's run directory); :class:`FrontBans` asks it
``htable.dump ban`` and ``htable.delete ban ADDRESS``. cluster/siblings.py adds these
to ``GET /api/bans`` (``worker``: ``"front"``, ``front``: the machine's name; with
nodes, every machine's Kamailio) and lifts them with ``DELETE /api/bans/{address}``, so
the operator sees and steers the bans in force wherever they live.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("callhook.workers")

#: How long Kamailio may take to answer.
TIMEOUT = 2.0
_ids = itertools.count(1)


class FrontBans:
    """Kamailio's bans through its RPC socket ``path`` (see the module docstring)."""

    def __init__(self, path: Path, rate: float, ban_seconds: float) -> None:
        self.path = path
        self.rate = rate
        self.ban_seconds = ban_seconds
        #: The machine this Kamailio is in front of (nodes: each machine has its own).
        self.host = socket.gethostname()

    async def listed(self) -> list[dict[str, Any]]:
        """:meth:`bans` as ``GET /api/bans`` lists them: ``worker`` ``"front"``, and
        ``front``, the machine whose Kamailio holds each."""
        return [{**ban, "worker": "front", "front": self.host} for ban in await self.bans()]

    async def bans(self) -> list[dict[str, Any]]:
        """The sources Kamailio bans now, as ``GET /api/bans`` lists a worker's ([] when it
        does not answer: logged)."""
        try:
            result = await asyncio.to_thread(self._call, "htable.dump", ["ban"])
        except (OSError, ValueError) as exc:
            logger.info("Kamailio's bans could not be read: %s", exc)
            return []
        now = time.time()
        found = []
        for entry in result if isinstance(result, list) else []:
            for slot in entry.get("slot", []) if isinstance(entry, dict) else []:
                began = slot.get("value")
                left = self.ban_seconds - (now - began) if isinstance(began, int) else 0
                found.append(
                    {
                        "address": str(slot.get("name")),
                        "reason": f"more than {self.rate:g} SIP messages a second "
                        "(Kamailio, in front of the workers)",
                        "seconds_left": max(0, round(left)),
                    }
                )
        return sorted(found, key=lambda b: -b["seconds_left"])

    async def lift(self, address: str) -> bool:
        """End Kamailio's ban of ``address`` (False: it had none, or did not answer)."""
        if address not in [b["address"] for b in await self.bans()]:
            return False
        try:
            # Lifted: not banned again while Kamailio's count of the flood cools down.
            await asyncio.to_thread(self._call, "htable.seti", ["lifted", address, 1])
            await asyncio.to_thread(self._call, "htable.delete", ["ban", address])
        except (OSError, ValueError) as exc:
            logger.info("Kamailio's ban of %s could not be lifted: %s", address, exc)
            return False
        logger.info("SIP from %s: Kamailio's ban lifted through the API", address)
        return True

    def _call(self, method: str, params: list[str | int]) -> Any:
        """One JSON-RPC request and its result (blocking: on a thread). ValueError for
        an error answer (htable.delete of no such key is one)."""
        request = {"jsonrpc": "2.0", "method": method, "params": params, "id": next(_ids)}
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rpc:
            # An abstract address (Linux): Kamailio answers to it; nothing to clean up.
            rpc.bind(f"\0callhook-rpc-{os.getpid()}-{request['id']}")
            rpc.settimeout(TIMEOUT)
            rpc.sendto(json.dumps(request).encode(), str(self.path))
            answer = json.loads(rpc.recv(1 << 20))
        if "error" in answer:
            raise ValueError(str(answer["error"].get("message", answer["error"])))
        return answer.get("result")
