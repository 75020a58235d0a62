"""The HTTP server of ``callhook serve``: the built-in demo application (later the REST API)."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from callhook import __version__, demo

#: Places an outbound call from a JSON request; returns (HTTP status, JSON answer).
Dial = Callable[[dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]
#: The server's counters (``GET /api/stats``).
Stats = Callable[[], dict[str, Any]]

INDEX = """<!doctype html>
<title>callhook</title>
<h1>callhook {version}</h1>
<p>The built-in demo application is at <code>{base}/demo/start</code>.
Try it with no phone: <code>callhook call</code>.</p>
"""


def application(
    secret: str, dial: Dial | None = None, stats: Stats | None = None
) -> web.Application:
    """The aiohttp application: the demo pages (signed with ``secret``), the API, an index.

    ``POST /api/calls`` places an outbound call; ``GET /api/stats`` gives the
    server's counters. Both need ``Authorization: Bearer <the installation
    secret>`` (``<data_dir>/secret``).
    """
    app = web.Application(client_max_size=64 * 1024)
    app.add_routes(demo.routes(secret))

    def authorised(request: web.Request) -> bool:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(token.encode(), secret.encode())

    async def stats_page(request: web.Request) -> web.Response:
        if not authorised(request):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        return web.json_response(stats() if stats is not None else {})

    app.router.add_get("/api/stats", stats_page)

    async def calls(request: web.Request) -> web.Response:
        if not authorised(request):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        if dial is None:
            return web.json_response({"error": "this server does not place calls"}, status=503)
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "expected a JSON object"}, status=400)
        status, answer = await dial(body)
        return web.json_response(answer, status=status)

    app.router.add_post("/api/calls", calls)

    async def index(request: web.Request) -> web.Response:
        base = f"{request.scheme}://{request.host}"
        return web.Response(
            text=INDEX.format(version=__version__, base=base), content_type="text/html"
        )

    app.router.add_get("/", index)
    return app


async def start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on host:port (port 0: any free port); returns the runner and base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    return runner, f"http://{bound_host}:{bound_port}"
