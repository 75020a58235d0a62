"""The HTTP server of ``callhook serve``: the built-in demo application and the REST API.

The REST API (``/api/v1``, per-application keys) is :mod:`callhook.httpserver.restapi`;
the two older routes here (``POST /api/calls``, ``GET /api/stats``) take the
installation secret as their key. Every ``/api/`` error has the API's one
JSON shape (:func:`callhook.httpserver.restapi.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import json
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.core import Metric

from callhook import __version__
from callhook.httpserver import demo
from callhook.httpserver.aculabshape import is_webservice
from callhook.httpserver.restapi import Api, ApiError, _is_api, errors
from callhook.monitoring import prometheus

#: The largest JSON body (and demo form) the server reads; uploads have their own limit.
MAX_JSON_BYTES = 64 * 1024
#: Error codes of the statuses ``POST /api/calls`` answers with.
_CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    429: "too_many_calls",
    503: "unavailable",
}

#: Places an outbound call from a JSON request; returns (HTTP status, JSON answer).
Dial = Callable[[dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]
#: What ``GET /metrics`` reads when scraped (the shared outbox's families).
State = Callable[[], Awaitable[Sequence[Metric]]]
#: The server's counters (``GET /api/stats``).
Stats = Callable[[], dict[str, Any]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: A recent call's log so far, by its SIP Call-ID (``GET /api/calls/{call_id}/log``).
CallLogOf = Callable[[str], bytes | None]
#: The trunks' states (``GET /api/trunks``).
TrunkStates = Callable[[], list[dict[str, Any]]]
#: The phones registered now (``GET /api/users``).
Phones = Callable[[], Awaitable[list[dict[str, Any]]]]


class Bans(Protocol):
    """The banned sources (``GET /api/bans``, ``DELETE /api/bans/{address}``); the REST API
    refuses them too, and reports its failed authentications."""

    def bans(self) -> list[dict[str, Any]]: ...
    def lift_ban(self, address: str) -> bool: ...
    def banned(self, address: str) -> bool: ...
    def auth_failed(self, address: str, what: str) -> Awaitable[None]: ...


class Routes(Protocol):
    """More routes for the server (the web phone: :mod:`callhook.telephony.webphone`)."""

    def routes(self) -> list[web.RouteDef]: ...


def guard(bans: Bans) -> Middleware:
    """``/api/`` from a banned source gets 403; a wrong key (REST API key, installation
    secret) counts towards a ban of its source (``[security] ban_seconds``; five in a
    minute, docs/security.md). Runs inside :func:`~callhook.httpserver.restapi.errors`."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        source = request.remote
        if source is None or not _is_api(request):
            return await handler(request)
        if bans.banned(source):
            raise ApiError(403, "banned", "this address is banned for a while")
        try:
            return await handler(request)
        except ApiError as exc:
            if exc.wrong_key:
                what = "web service" if is_webservice(request.path) else "REST API"
                # Answered once the other workers counted it too (sharedbans.py); whatever
                # befalls that telling, the guesser gets the 401.
                with contextlib.suppress(Exception):
                    await asyncio.shield(bans.auth_failed(source, f"{what} authentication"))
            raise

    return middleware


INDEX = """<!doctype html>
<title>callhook</title>
<h1>callhook {version}</h1>
<p>The built-in demo application is at <code>{base}/demo/start</code>.
Try it with no phone: the <a href="/phone">web phone</a>, or <code>callhook call</code>.</p>
"""


def application(
    secret: str,
    dial: Dial | None = None,
    stats: Stats | None = None,
    api: Api | None = None,
    trunks: TrunkStates | None = None,
    users: Phones | None = None,
    bans: Bans | None = None,
    phone: Routes | None = None,
    call_log: CallLogOf | None = None,
    outer: Middleware | None = None,
    webservices: Routes | None = None,
    extra: tuple[Routes, ...] = (),
    state: State | None = None,
) -> web.Application:
    """The aiohttp application: the demo pages (signed with ``secret``), the API, an index.

    ``POST /api/calls`` places an outbound call; ``GET /api/stats`` gives the
    server's counters; ``GET /api/trunks`` each trunk's state; ``GET
    /api/calls/{call_id}/log`` a recent call's log by its SIP Call-ID. They need
    ``Authorization: Bearer <the installation secret>`` (``<data_dir>/secret``).
    ``api`` adds the REST API (``/api/v1``) and its OpenAPI document (``/openapi.json``).
    ``outer`` wraps everything (``serve --workers``: the other workers' live calls).
    ``webservices`` adds Aculab's web services (:mod:`callhook.webservices.aculab`);
    ``extra``: more routes (the sign-in of pages receiving calls,
    :mod:`callhook.telephony.webclients`; health and readiness,
    :mod:`callhook.serving.readiness`). ``GET /metrics`` (the same key) answers in
    Prometheus' text format, with the families ``state`` reads when scraped.
    """
    middlewares: list[Middleware] = [errors] if outer is None else [outer, errors]
    if bans is not None:
        middlewares.append(guard(bans))
    app = web.Application(client_max_size=MAX_JSON_BYTES, middlewares=middlewares)
    app.add_routes(demo.routes(secret))
    if api is not None:
        app.add_routes(api.routes())
    if phone is not None:
        app.add_routes(phone.routes())
    if webservices is not None:
        app.add_routes(webservices.routes())
    for routes in extra:
        app.add_routes(routes.routes())

    def authorise(request: web.Request) -> None:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(token.encode(), secret.encode()):
            raise ApiError(
                401,
                "unauthorized",
                "missing or wrong bearer token (the installation secret)",
                {"WWW-Authenticate": 'Bearer realm="callhook"'},
                wrong_key=bool(token),
            )

    async def stats_page(request: web.Request) -> web.Response:
        authorise(request)
        return web.json_response(stats() if stats is not None else {})

    app.router.add_get("/api/stats", stats_page)

    async def metrics_page(request: web.Request) -> web.Response:
        # Prometheus' scrape, with the same bearer token as /api/stats (its scrape
        # config's `authorization`): call counts are no one else's business.
        authorise(request)
        families = list(await state()) if state is not None else []
        if bans is not None:
            families.append(prometheus.bans_family(len(bans.bans())))
        body, content_type = prometheus.exposition(families)
        return web.Response(body=body, headers={"Content-Type": content_type})

    app.router.add_get("/metrics", metrics_page)

    async def trunks_page(request: web.Request) -> web.Response:
        authorise(request)
        return web.json_response(trunks() if trunks is not None else [])

    app.router.add_get("/api/trunks", trunks_page)

    async def users_page(request: web.Request) -> web.Response:
        authorise(request)
        return web.json_response(await users() if users is not None else [])

    app.router.add_get("/api/users", users_page)

    async def bans_page(request: web.Request) -> web.Response:
        authorise(request)
        return web.json_response(bans.bans() if bans is not None else [])

    async def lift_ban(request: web.Request) -> web.Response:
        authorise(request)
        address = request.match_info["address"]
        if bans is None or not bans.lift_ban(address):
            raise ApiError(404, "not_found", f"{address} is not banned")
        return web.json_response({"address": address, "status": "lifted"})

    app.router.add_get("/api/bans", bans_page)
    app.router.add_delete("/api/bans/{address}", lift_ban)

    async def calls(request: web.Request) -> web.Response:
        authorise(request)
        if dial is None:
            raise ApiError(503, "unavailable", "this server does not place calls")
        try:
            body = json.loads(await request.read())
        except ValueError:
            raise ApiError(400, "bad_request", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "bad_request", "expected a JSON object")
        status, answer = await dial(body)
        if status >= 400:
            code = _CODES.get(status, f"http_{status}")
            raise ApiError(status, code, str(answer.get("error", "the call was refused")))
        return web.json_response(answer, status=status)

    app.router.add_post("/api/calls", calls)

    async def log_of_call(request: web.Request) -> web.Response:
        authorise(request)
        call_id = request.match_info["call_id"]
        text = await asyncio.to_thread(call_log, call_id) if call_log is not None else None
        if text is None:
            raise ApiError(404, "not_found", "no recent call with that Call-ID (or no log yet)")
        return web.Response(body=text, content_type="text/plain", charset="utf-8")

    app.router.add_get("/api/calls/{call_id}/log", log_of_call)

    async def index(request: web.Request) -> web.Response:
        # (The Host header is the client's to say: escaped, it cannot add markup.)
        base = html.escape(f"{request.scheme}://{request.host}")
        return web.Response(
            text=INDEX.format(version=__version__, base=base), content_type="text/html"
        )

    app.router.add_get("/", index)
    return app


async def start(
    app: web.Application,
    host: str,
    port: int,
    *,
    reuse_port: bool = False,
    private: socket.socket | None = None,
) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on host:port (port 0: any free port); returns the runner and base URL.

    ``reuse_port``: the port is shared with the other workers of ``serve --workers``
    (SO_REUSEPORT: the kernel spreads connections over them); ``private``: the bound
    socket of this worker (or node) alone, where the others ask it about its calls."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None)
    await site.start()
    if private is not None:
        await web.SockSite(runner, private).start()
    bound_host, bound_port = runner.addresses[0][:2]
    # Listening on every address: our own requests (the demo's pages) go to loopback.
    if bound_host in ("0.0.0.0", "::"):
        bound_host = "127.0.0.1" if bound_host == "0.0.0.0" else "::1"
    if ":" in bound_host:
        bound_host = f"[{bound_host}]"
    return runner, f"http://{bound_host}:{bound_port}"
