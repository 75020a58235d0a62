"""The HTTP server of ``callhook serve``: the built-in demo application (later the REST API)."""

from __future__ import annotations

from aiohttp import web

from callhook import __version__, demo

INDEX = """<!doctype html>
<title>callhook</title>
<h1>callhook {version}</h1>
<p>The built-in demo application is at <code>{base}/demo/start</code>.
Try it with no phone: <code>callhook call</code>.</p>
"""


def application(secret: str) -> web.Application:
    """The aiohttp application: the demo pages (signed with ``secret``) and an index page."""
    app = web.Application()
    app.add_routes(demo.routes(secret))

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
