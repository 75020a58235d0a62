"""The far end of :mod:`bench.websocket_load`: a WebSocket server that echoes each call.

    .venv/bin/python -m bench.ws_echo --port 8766 [--seconds 14.3]

Each call (``/echo``, sub-protocol v2) gets back every binary frame it sends, at once
(an agent that takes no time of its own), and is hung up ``--seconds`` after its
``start`` message (``call_hangup``, raw cause 200): the load kit's call length. Run in
its own process, so that its CPU is not counted as callhook's. ``GET /stats``: calls,
frames echoed, digits received.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from aiohttp import WSMsgType, web

from callhook.telephony.wsprotocol import V2


def application(seconds: float) -> web.Application:
    stats: dict[str, Any] = {"calls": 0, "frames": 0, "digits": 0, "ended": 0}

    async def echo(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(protocols=(V2,), compress=False)
        await ws.prepare(request)
        hangup: asyncio.Task[None] | None = None

        async def hang_up_later() -> None:
            await asyncio.sleep(seconds)
            await ws.send_str(json.dumps({"type": "call_hangup", "raw_cause": "200"}))

        async for message in ws:
            if message.type is WSMsgType.BINARY:
                stats["frames"] += 1
                await ws.send_bytes(message.data)
            elif message.type is WSMsgType.TEXT:
                kind = json.loads(message.data).get("type")
                if kind == "start":
                    stats["calls"] += 1
                    hangup = asyncio.create_task(hang_up_later())
                elif kind == "dtmf":
                    stats["digits"] += 1
        stats["ended"] += 1
        if hangup is not None:
            hangup.cancel()
        return ws

    async def show(request: web.Request) -> web.Response:
        return web.json_response(stats)

    async def reset(request: web.Request) -> web.Response:
        stats.update(calls=0, frames=0, digits=0, ended=0)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_get("/echo", echo)
    app.router.add_get("/stats", show)
    app.router.add_post("/stats/reset", reset)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--seconds", type=float, default=14.3)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(application(args.seconds), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
