"""The web phone: call an application from a browser, and watch the call (``GET /phone``).

docs/webphone.md is the user's guide. The page (``callhook/web/``: HTML, a
script, an AudioWorklet; no CDN) opens a WebSocket, ``/phone/call``, whose
binary messages are RTP packets both ways: G.711 µ-law (payload type 0) from
the microphone, RFC 4733 telephone-events (payload type 101) from the keypad,
and the call's audio back. On the server the packets go through exactly what
a SIP call's go through: a :class:`~callhook.media.session.MediaSession`
driven by the media engine's tick (:meth:`MediaEngine.attach`), a
:class:`~callhook.telephony.leg.SipLeg`, the call runner, the speech service.
Only the transport differs (a WebSocket instead of UDP, and the WebSocket's
opening and closing instead of INVITE and BYE): why not WebRTC is in the docs.

Text messages carry the rest, as JSON objects with a ``type``:

* from the page: ``start`` (first, with ``app`` and, away from loopback, ``key``),
  ``hangup``;
* to the page: ``started`` (the call's id and log), ``log`` (each call-log line as
  it is written), ``page`` (each page request: body, answer, status, time),
  ``answered``, ``ended``.

Access is the REST API's (docs/api.md): from loopback every application; from
anywhere else only the application whose API key is given (``Authorization:
Bearer`` on the JSON routes, ``key`` in the ``start`` message), and a wrong key
counts towards a ban of its source. Loopback's rights are a browser's on this machine
at ``127.0.0.1``, ``[::1]`` or ``localhost`` (:func:`local_rights`): a name rebound to
127.0.0.1 (DNS rebinding) and callhook's own HTTP client (a page's prompt URL aimed at
this server) get none; a page of another site (its ``Origin``) is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import ipaddress
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from importlib import resources
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from callhook.calls.runner import CallRunner
from callhook.calls.services import Services
from callhook.config.settings import AppConfig
from callhook.edge.mediaengine import MediaEngine
from callhook.edge.pages import HttpPages
from callhook.events import CallEnded
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.restapi import LOGS, ApiError
from callhook.httpserver.server import Bans
from callhook.media.meter import LevelMeter
from callhook.media.session import MediaSession
from callhook.ports import CallInfo, PageError, Pages
from callhook.telephony.leg import SipLeg, new_leg
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.sipcall import CallMedia, SipCall

logger = logging.getLogger("callhook.webphone")

#: The page's files (callhook/web/), by the name they are served under.
ASSETS = {
    "phone.js": "application/javascript",
    "worklet.js": "application/javascript",
    "phone.css": "text/css",
}
#: RTP payload types the page uses (static PCMU; the usual dynamic telephone-event).
PCMU, TELEPHONE_EVENT = 0, 101
#: Messages waiting to go to a page that reads slowly, at most (a second of audio):
#: beyond that audio is dropped, as a congested network would drop it.
OUTBOX = 60
#: How long the page has to say which application to call.
START_TIMEOUT = 10.0
#: Past calls listed at most.
PAST_CALLS = 50
#: How often the caller's audio level goes to the call log (``levels`` lines).
LEVELS_EVERY = 1.0
#: How callhook's own HTTP clients name themselves (``User-Agent``: edge/pages.py,
#: edge/remotemedia.py, telephony/websocketleg.py); see :func:`own_client`.
OWN_CLIENT = "callhook/"


def _asset(name: str) -> bytes:
    return resources.files("callhook").joinpath("web", name).read_bytes()


class Outbox:
    """What goes to one page, in order, sent by one task: the media tick must never wait."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.queue: asyncio.Queue[bytes | str | None] = asyncio.Queue()
        self.dropped = 0
        self.task = asyncio.get_running_loop().create_task(self._send())

    def audio(self, data: bytes) -> None:
        if self.queue.qsize() >= OUTBOX:
            self.dropped += 1
            return
        self.queue.put_nowait(data)

    def event(self, kind: str, **fields: Any) -> None:
        self.queue.put_nowait(json.dumps({"type": kind, **fields}))

    def close(self) -> None:
        self.queue.put_nowait(None)

    async def _send(self) -> None:
        while (item := await self.queue.get()) is not None:
            if self.ws.closed:
                continue
            with contextlib.suppress(ConnectionError, RuntimeError):
                if isinstance(item, bytes):
                    await self.ws.send_bytes(item)
                else:
                    await self.ws.send_str(item)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.close()


class _WatchedPages:
    """The application's pages, each request also shown to the page (body, answer, time)."""

    def __init__(self, pages: Pages, show: Callable[..., None], since: Callable[[], float]):
        self._pages = pages
        self._show = show
        self._since = since

    async def fetch(self, url: str, method: str, body: bytes, secret: str) -> bytes:
        at, started = self._since(), time.monotonic()
        request = body.decode("utf-8", "replace")
        status: int | None = None
        try:
            if isinstance(self._pages, HttpPages):
                status, answer = await self._pages.fetch_status(url, method, body, secret)
            else:
                answer = await self._pages.fetch(url, method, body, secret)
        except PageError as exc:
            ms = round((time.monotonic() - started) * 1000)
            self._show(
                url=url, method=method, at=at, ms=ms, request=request, ok=False,
                status=exc.status, error=f"{exc.kind}: {exc.detail}", response="",
            )  # fmt: skip
            raise
        ms = round((time.monotonic() - started) * 1000)
        response = answer[:65536].decode("utf-8", "replace")
        self._show(
            url=url, method=method, at=at, ms=ms, request=request, ok=True,
            status=status, error=None, response=response,
        )  # fmt: skip
        return answer


class FarLegService(Protocol):
    """What places a call's far legs (a ``connect``: the SIP service's
    :class:`~callhook.telephony.lifecycle.Lifecycle`)."""

    def attach_far_legs(self, call: SipCall) -> None: ...
    def detach_far_legs(self, call: SipCall) -> None: ...


class WebPhone:
    """The web phone's routes and its calls (see the module docstring)."""

    def __init__(
        self,
        services: Services,
        media: Callable[[], MediaEngine | None],
        prompts: PromptAudio,
        keys: KeyRing,
        apps: Callable[[], dict[str, AppConfig]],
        bans: Bans | None = None,
        far_legs: FarLegService | None = None,
        sip_calls: Callable[[], int] = lambda: 0,
    ) -> None:
        """``far_legs``: a ``connect`` on a web phone call puts it through to SIP callees
        there (None: it cannot); ``transfer`` cannot REFER a WebSocket, so it gets 501 and
        its ``fallback_connect`` runs. ``sip_calls``: how many calls the server has
        besides these (``[sip] max_calls`` counts both)."""
        self.services = services
        self.far_legs = far_legs
        self.sip_calls = sip_calls
        self._media = media
        self.prompts = prompts
        self.keys = keys
        self.apps = apps
        self.bans = bans
        self.calls: dict[str, SipLeg] = {}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/phone", self.page, allow_head=False),
            web.get("/phone/assets/{name}", self.asset, allow_head=False),
            web.get("/phone/api/apps", self.list_apps, allow_head=False),
            web.get("/phone/api/calls/{app}", self.past_calls, allow_head=False),
            web.get("/phone/api/calls/{app}/{id}", self.past_call, allow_head=False),
            web.get("/phone/api/media/{app}/{name:.+}", self.media_file, allow_head=False),
            web.get("/phone/call", self.call, allow_head=False),
        ]

    # --- access ------------------------------------------------------------------------------

    async def _scope(self, request: web.Request, key: str | None = None) -> str | None:
        """None: every application (loopback, :func:`local_rights`); else the one
        application of the key given."""
        if not same_origin(request):
            raise ApiError(403, "forbidden", "a page of another site may not use the web phone")
        if local_rights(request):
            return None
        if key is None:
            scheme, _, key = request.headers.get("Authorization", "").partition(" ")
            key = key.strip() if scheme.lower() == "bearer" else ""
        if not key:
            raise ApiError(401, "unauthorized", "an API key is needed away from loopback")
        app = self.keys.app_for(key)
        if app is None:
            if self.bans is not None and request.remote:
                # Answered once the other workers counted it too (as the REST API's
                # guesser is): the next guess, to another worker, is counted with this one.
                with contextlib.suppress(Exception):
                    failed = self.bans.auth_failed(request.remote, "web phone authentication")
                    await asyncio.shield(failed)
            raise ApiError(401, "unauthorized", "the API key is not valid", wrong_key=True)
        return app

    async def _app(self, request: web.Request, name: str, key: str | None = None) -> AppConfig:
        scope = await self._scope(request, key)
        app = self.apps().get(name)
        if app is None or (scope is not None and scope != name):
            raise ApiError(404, "not_found", f"no application {name!r}")
        return app

    def _banned(self, request: web.Request) -> None:
        if self.bans is not None and request.remote and self.bans.banned(request.remote):
            raise ApiError(403, "banned", "this address is banned for a while")

    # --- the page and what it reads ----------------------------------------------------------

    async def page(self, request: web.Request) -> web.Response:
        return web.Response(body=_asset("phone.html"), content_type="text/html")

    async def asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in ASSETS:
            raise ApiError(404, "not_found", f"no asset {name!r}")
        return web.Response(body=_asset(name), content_type=ASSETS[name])

    async def list_apps(self, request: web.Request) -> web.Response:
        self._banned(request)
        scope = await self._scope(request)
        names = [n for n in self.apps() if scope is None or n == scope]
        return web.json_response({"apps": names, "loopback": scope is None})

    async def past_calls(self, request: web.Request) -> web.Response:
        self._banned(request)
        app = await self._app(request, request.match_info["app"])
        newest = await asyncio.to_thread(self._newest_logs, app.name)
        calls = [{"id": name.removesuffix(".log"), "modified": when} for when, name in newest]
        return web.json_response({"calls": calls})

    def _newest_logs(self, app: str) -> list[tuple[float, str]]:
        """(modified, file name) of the app's :data:`PAST_CALLS` newest call logs (their
        names are random: the store's listing by name says nothing of their age)."""
        found = []
        try:
            with os.scandir(self.services.store.namespace(app) / LOGS.rstrip("/")) as it:
                for entry in it:
                    if entry.name.endswith(".log") and entry.is_file(follow_symlinks=False):
                        found.append((entry.stat(follow_symlinks=False).st_mtime, entry.name))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return heapq.nlargest(PAST_CALLS, found)

    async def past_call(self, request: web.Request) -> web.Response:
        self._banned(request)
        app = await self._app(request, request.match_info["app"])
        name = f"{LOGS}{request.match_info['id']}.log"
        if "/" in request.match_info["id"]:
            raise ApiError(404, "not_found", "no such call")
        try:
            text = await asyncio.to_thread(self._read, app.name, name)
        except (FileNotFoundError, ValueError):
            raise ApiError(404, "not_found", "no such call") from None
        return web.Response(text=text, content_type="text/plain")

    def _read(self, app: str, name: str) -> str:
        with self.services.store.open(app, name) as f:
            return f.read().decode("utf-8", "replace")

    async def media_file(self, request: web.Request) -> web.Response:
        self._banned(request)
        app = await self._app(request, request.match_info["app"])
        name = request.match_info["name"]
        if name.startswith(LOGS) or not name.lower().endswith(".wav"):
            raise ApiError(404, "not_found", "only recordings are played here")
        try:
            data = await asyncio.to_thread(self._read_bytes, app.name, name)
        except (FileNotFoundError, ValueError):
            raise ApiError(404, "not_found", f"no file {name!r}") from None
        return web.Response(body=data, content_type="audio/wav")

    def _read_bytes(self, app: str, name: str) -> bytes:
        with self.services.store.open(app, name) as f:
            return f.read()

    # --- a call ------------------------------------------------------------------------------

    async def call(self, request: web.Request) -> web.StreamResponse:
        """The WebSocket of one call (see the module docstring)."""
        self._banned(request)
        if not same_origin(request):
            raise ApiError(403, "forbidden", "a page of another site may not call from here")
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=64 * 1024)
        await ws.prepare(request)
        outbox = Outbox(ws)
        try:  # (whatever happens, the outbox's task ends with the socket)
            try:
                app = await self._start(request, ws)
                # (No await from here until _run has put the call in self.calls: the
                # count _admit read is still the count.)
                media = self._admit()
            except ApiError as exc:
                outbox.event("error", code=exc.code, message=exc.message)
                return ws
            except (TimeoutError, ValueError, KeyError) as exc:
                outbox.event("error", code="bad_request", message=f"no valid start message: {exc}")
                return ws
            await self._run(request, ws, outbox, app, media)
        finally:
            outbox.close()
            await outbox.task
        return ws

    async def _start(self, request: web.Request, ws: web.WebSocketResponse) -> AppConfig:
        async with asyncio.timeout(START_TIMEOUT):
            msg = await ws.receive()
        if msg.type is not WSMsgType.TEXT:
            raise ValueError("the first message must be a JSON start message")
        start = loads(msg.data)
        if not isinstance(start, dict) or start.get("type") != "start":
            raise ValueError("the first message must be {'type': 'start', ...}")
        key = start.get("key")
        return await self._app(request, str(start["app"]), key if isinstance(key, str) else "")

    def _admit(self) -> MediaEngine:
        """The media engine for a new call, or the refusal (an ApiError) a SIP call would
        get now (telephony/inbound.py): ``[sip] max_calls`` calls already, the server's
        and these together, or its media running behind (``[media] max_lag_ms``)."""
        media = self._media()
        if media is None:
            raise ApiError(503, "unavailable", "the media engine is not running")
        limit = self.services.settings.sip.max_calls
        if limit and self.sip_calls() + len(self.calls) >= limit:
            logger.warning("web phone call refused: %d calls already (max_calls)", limit)
            raise ApiError(503, "unavailable", f"too many calls ({limit}: [sip] max_calls)")
        if media.overload.overloaded:
            # (The engine logged when this began, as for the SIP calls it refuses.)
            media.overload.refused += 1
            raise ApiError(503, "unavailable", "media overloaded ([media] max_lag_ms)")
        return media

    async def _run(
        self,
        request: web.Request,
        ws: web.WebSocketResponse,
        outbox: Outbox,
        app: AppConfig,
        media: MediaEngine,
    ) -> None:
        services = self.services
        call_id = f"web-{uuid.uuid4().hex[:16]}"
        peer = request.transport.get_extra_info("peername") if request.transport else None
        source = (str(peer[0]), int(peer[1])) if peer else ("127.0.0.1", 0)
        session = MediaSession("PCMU", PCMU, TELEPHONE_EVENT, source, label=f"call {call_id}")
        session.meter = LevelMeter()
        info = CallInfo(
            call_id=call_id,
            direction="in",
            call_from=f"sip:webphone@{source[0]}",
            call_to=f"sip:{app.name}@webphone",
            call_target=app.name,
        )
        ended = False

        async def answer() -> None:
            outbox.event("answered")

        def hang_up() -> str:
            nonlocal ended
            ended = True
            outbox.event("ended", by="callhook")
            return "200"

        leg = new_leg(
            services, info, app.name, session, self.prompts, answer=answer, hang_up=hang_up
        )
        clock = services.clock
        holder: list[Callable[[float], float]] = []
        pages = _WatchedPages(
            services.pages,
            lambda **page: outbox.event("page", **page),
            lambda: holder[0](clock.now()) if holder else 0.0,
        )

        key = media.attach(session, outbox.audio, leg.wake)
        call = SipCall(call_id, app, leg, CallMedia(session, key, 0))
        if self.far_legs is not None:
            self.far_legs.attach_far_legs(call)
            leg.referrer = None  # no SIP dialog to send a REFER in
        self.calls[call_id] = leg
        runners: list[CallRunner] = []
        levels: asyncio.Task[None] | None = None

        def started(runner: CallRunner) -> None:
            nonlocal levels
            runners.append(runner)
            call.instance_id = runner.instance_id
            holder.append(runner.log.since)
            outbox.event("started", call_id=call_id, app=app.name, log=runner.log_filename)
            levels = loop.create_task(self._levels(session, runner.log.write))

        def line(kind: str, text: str) -> None:
            lines = runners[0].log.lines if runners else []
            outbox.event("log", line=lines[-1] if lines else "")
            if kind == "call_end" and runners:  # the last levels, while the log is open
                self._flush_levels(session, runners[0].log.write)

        loop = asyncio.get_running_loop()
        listener = loop.create_task(self._listen(ws, media, key, source))
        try:
            task = loop.create_task(
                services.run_call(app, leg, [line], pages=pages, started=started)
            )
            done, _ = await asyncio.wait({task, listener}, return_when=asyncio.FIRST_COMPLETED)
            if listener in done and not task.done():
                leg.far_end_ended(CallEnded("hung_up", "BYE"))  # the page hung up or went away
            await task
            if not ended:
                outbox.event("ended", by="caller")
        finally:
            listener.cancel()
            if levels is not None:
                levels.cancel()
            leg.finish()
            if self.far_legs is not None:
                self.far_legs.detach_far_legs(call)  # (and lets the call go by reference count)
            media.close(key)
            self.calls.pop(call_id, None)

    async def _listen(
        self, ws: web.WebSocketResponse, media: MediaEngine, key: int, source: tuple[str, int]
    ) -> None:
        """The page's messages until it hangs up or goes away."""
        async for msg in ws:
            if msg.type is WSMsgType.BINARY:
                media.deliver(key, msg.data, source)
            elif msg.type is WSMsgType.TEXT:
                with contextlib.suppress(ValueError):  # (bad JSON: ignored)
                    message = loads(msg.data)
                    if isinstance(message, dict) and message.get("type") == "hangup":
                        return
            else:
                return

    async def _levels(self, session: MediaSession, write: Callable[[str, str], None]) -> None:
        while True:
            await asyncio.sleep(LEVELS_EVERY)
            self._flush_levels(session, write)

    @staticmethod
    def _flush_levels(session: MediaSession, write: Callable[[str, str], None]) -> None:
        if session.meter is not None and (chars := session.meter.take()):
            write("levels", chars)

    async def hang_up_all(self, reason: str) -> None:
        """Shutdown: every web phone call ends now (its final page is requested)."""
        for leg in list(self.calls.values()):
            leg.abort(reason)
        for _ in range(200):  # each call's runner ends its call, at most 10 s
            if not self.calls:
                return
            await asyncio.sleep(0.05)


def same_origin(request: web.Request) -> bool:
    """Whether a WebSocket's page is of this server (RFC 6455 §10.2: a browser says whose
    page opens it in ``Origin``; a page of another site, open in a browser on this host,
    must not get loopback's rights). No ``Origin``: no browser, nothing to check."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == request.host.lower()


def local_rights(request: web.Request) -> bool:
    """Whether ``request`` has loopback's key-less rights (every application, no key).

    Three things must hold:

    * it comes from a loopback address;
    * its ``Host`` names loopback: an IP literal of it or ``localhost``, with or
      without a port (:func:`loopback_host`). A site whose name a browser on this
      machine was made to resolve to 127.0.0.1 (DNS rebinding) sends its own name, and
      is then a client like any other: it needs a key;
    * it is not made by callhook's own HTTP client (:func:`own_client`). An
      application's page names the URLs callhook fetches (prompts, pages, a connect's
      WebSocket), and ``[egress]`` lets them reach this server's own port: the demo's
      pages are there (Services.start_web trusts it), and ``allow_private``,
      ``endpoints`` or an application's page on this host would open it too. Refusing
      here, rather than trusting the port for the demo's fetches alone, closes every
      one of those ways at once: the egress check sees only the address of each new
      connection (a kept-alive one opened for the demo's page would serve another
      application's fetch), and with ``serve --workers`` the kernel hands a fetch to
      whichever worker it likes (SO_REUSEPORT), where a marker of this process alone
      would mean nothing, while every worker's client names itself the same way. Its
      requests then need a key like any remote client's, which a page cannot give it:
      another application's file is refused exactly as an absent one.
    """
    return (
        loopback(request.remote)
        and loopback_host(request.headers.get("Host"))
        and not own_client(request)
    )


def loopback_host(host: str | None) -> bool:
    """Whether a ``Host`` header names loopback: ``localhost``, ``127.x.y.z`` or
    ``[::1]``, each with an optional port. No header: no."""
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("["):  # [v6]:port
        name, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return False
    else:
        name, colon, port = host.partition(":")
        if colon and not port.isdigit():
            return False  # (a port that is no number, or a bare IPv6 address)
    if name == "localhost":
        return True
    return loopback(name)


def own_client(request: web.Request) -> bool:
    """Whether ``request`` was made by callhook's own HTTP client (its ``User-Agent``,
    :data:`OWN_CLIENT`, which no page can change): a fetch an application's page asked
    for, never a person's."""
    return request.headers.get("User-Agent", "").startswith(OWN_CLIENT)


def loads(text: str | bytes) -> Any:
    """A JSON message from the network; :class:`ValueError` for anything that is none,
    nesting too deep to read included (``json.loads`` raises RecursionError for it, which
    is not one)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def loopback(address: str | None) -> bool:
    """Whether ``address`` is a loopback address (the web phone needs no key from it)."""
    if not address:
        return False
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False
