"""Web clients signed in to receive calls: ``connect`` to ``webrtc:CLIENT_ID`` rings them.

docs/webphone.md ("Receiving calls") is the user's guide. A page (the web phone, or
an application's own) opens the WebSocket ``/phone/client`` and signs in as a client
id of one application; a ``connect`` of that application to ``webrtc:ID`` rings it,
and the user answers or rejects. Once answered, the socket's binary messages are RTP
packets both ways, exactly as a web phone call's (G.711 µ-law, RFC 4733 digits).

Text messages are JSON objects with a ``type``:

* from the page: ``register`` (first: ``client_id``, and ``app`` with a ``key``, or a
  ``token`` from the web service ``webrtc_generate_token``; from loopback ``app``
  alone), again later with a fresh token; ``answer``, ``reject`` (optional SIP
  ``cause``, 486 when not given) and ``hangup``, each with the ``call_id``;
* to the page: ``registered``, ``incoming`` (``call_id``, ``call_from``, ``call_to``),
  ``ended`` (``call_id``: the caller's side is over), ``error`` (``code``,
  ``message``; the socket then closes).

A client id is of one application: only that application's calls ring it, and a page
signing in as an id already signed in takes it over, on this worker or another (the
older page gets ``error`` ``replaced``). A client rings for one call at a time; another call to it
meanwhile is told busy.

With ``serve --workers`` (and nodes sharing PostgreSQL) the page's socket is on one
worker and the call may be on another: the caller's worker asks each of the others, on
its private port (cluster/siblings.py), for ``/webrtc/ring/APP/ID``; the one where the
client is signed in answers with a WebSocket and relays the call's messages between it
and the page unchanged. Everything else (media session, joining, recording) stays on
the caller's worker, where the far leg is (telephony/webclientleg.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import WSMsgType, web

from callhook.cluster.siblings import RING_PATH, SIGN_OUT_PATH, Siblings
from callhook.config.settings import AppConfig
from callhook.dialplan.destinations import CLIENT_ID
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.restapi import ApiError
from callhook.httpserver.server import Bans
from callhook.telephony import webrtctoken
from callhook.telephony.webphone import Outbox, loads, local_rights, same_origin

logger = logging.getLogger("callhook.webclients")

#: How long a page has to sign in once its socket is open.
REGISTER_TIMEOUT = 10.0
#: The header carrying the call's ``incoming`` message to the worker that has the client.
INCOMING = "X-Callhook-Incoming"


class Busy(Exception):
    """The client is ringing for, or in, another call."""


class NotSignedIn(Exception):
    """No page is signed in as that client."""


class Line(Protocol):
    """The caller's side of one call to a client: what the page says reaches it."""

    def to_caller(self, message: str | bytes) -> None: ...

    def gone(self, why: str) -> None:
        """The page (or the worker relaying it) went away."""


class Channel(Protocol):
    """The way to the page of one call, from the caller's side."""

    def to_client(self, message: str | bytes) -> None: ...

    def close(self) -> None:
        """The caller's side is over: the page is told ``ended`` if it still has the call."""


class ClientSocket:
    """One signed-in page (see the module docstring)."""

    def __init__(self, ws: web.WebSocketResponse, outbox: Outbox, remote: str) -> None:
        self.ws = ws
        self.outbox = outbox
        self.remote = remote
        self.app = ""
        self.client_id = ""
        self.expires: float | None = None  # a token's expiry (None: a key's, or loopback)
        self.signed_in = 0.0  # wall-clock time of the last sign-in
        self.call_id: str | None = None
        self.line: Line | None = None
        self.answered = False

    def offer(self, call_id: str, line: Line, incoming: dict[str, Any]) -> Channel:
        """Ring this page for ``call_id``; :class:`Busy` if it has a call."""
        if self.line is not None:
            raise Busy()
        self.call_id, self.line, self.answered = call_id, line, False
        self.outbox.event("incoming", call_id=call_id, **incoming)
        return _LocalChannel(self, call_id)

    def from_page(self, message: str | bytes) -> None:
        line = self.line
        if line is None:
            return
        if isinstance(message, bytes):
            if self.answered:
                line.to_caller(message)
            return
        try:
            parsed = loads(message)
        except ValueError:
            return
        if not isinstance(parsed, dict) or parsed.get("call_id") != self.call_id:
            return  # about a call that is over
        kind = parsed.get("type")
        if kind == "answer" and not self.answered:
            self.answered = True
            line.to_caller(json.dumps({"type": "answer"}))
        elif kind in ("reject", "hangup") and not self.answered:
            # (Hanging up a call that rings is rejecting it.)
            cause = parsed.get("cause", 486) if kind == "reject" else 486
            if not isinstance(cause, int) or not 400 <= cause <= 699:
                cause = 486
            self._forget()
            line.to_caller(json.dumps({"type": "reject", "cause": cause}))
        elif kind == "hangup":
            self._forget()
            line.to_caller(json.dumps({"type": "hangup"}))

    def page_gone(self, why: str) -> None:
        line = self.line
        self._forget()
        if line is not None:
            line.gone(why)

    def _forget(self) -> None:
        self.call_id, self.line, self.answered = None, None, False


class _LocalChannel:
    """The way to a page signed in on this process."""

    def __init__(self, client: ClientSocket, call_id: str) -> None:
        self.client = client
        self.call_id = call_id

    def to_client(self, message: str | bytes) -> None:
        if self.client.call_id != self.call_id:
            return  # the page is done with this call
        if isinstance(message, bytes):
            self.client.outbox.audio(message)
        else:
            self.client.outbox.queue.put_nowait(message)

    def close(self) -> None:
        if self.client.call_id == self.call_id:
            self.client.outbox.event("ended", call_id=self.call_id)
            self.client._forget()


class _RemoteChannel:
    """The way to a page signed in on another worker: the socket to that worker."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.queue: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._send())

    def to_client(self, message: str | bytes) -> None:
        if isinstance(message, bytes) and self.queue.qsize() >= 60:
            return  # a second behind: dropped, as a congested network would
        self.queue.put_nowait(message)

    def close(self) -> None:
        self.queue.put_nowait(None)

    async def _send(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
            while (item := await self.queue.get()) is not None:
                if isinstance(item, bytes):
                    await self.ws.send_bytes(item)
                else:
                    await self.ws.send_str(item)
        with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
            await self.ws.close()


class _RelayLine:
    """On the worker where the page is: the caller's worker, at the end of a socket."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.over = asyncio.Event()

    def to_caller(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            self.outbox.audio(message)
        else:
            self.outbox.queue.put_nowait(message)

    def gone(self, why: str) -> None:
        self.outbox.event("gone", why=why)
        self.over.set()


@dataclass(frozen=True)
class SignedIn:
    """A client as ``webrtc_registered_clients`` lists it."""

    app: str
    client_id: str
    since: float


class WebClients:
    """The signed-in pages of this process, and the routes that sign them in."""

    def __init__(
        self,
        keys: KeyRing,
        apps: Callable[[], dict[str, AppConfig]],
        *,
        bans: Bans | None = None,
        siblings: Siblings | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.apps = apps
        self.bans = bans
        self.siblings = siblings
        self.now = now
        self.clients: dict[tuple[str, str], ClientSocket] = {}
        self._telling: set[asyncio.Task[None]] = set()  # sign-outs told, relays read

    def routes(self) -> list[web.RouteDef]:
        out = [web.get("/phone/client", self.client_socket, allow_head=False)]
        if self.siblings is not None:
            out.append(web.get(RING_PATH + "/{app}/{client}", self.relay, allow_head=False))
            out.append(
                web.get(
                    SIGN_OUT_PATH + "/{app}/{client}", self.signed_in_elsewhere, allow_head=False
                )
            )
        return out

    def signed_in(self, app: str) -> list[SignedIn]:
        """The clients of ``app`` signed in on this process."""
        return [
            SignedIn(a, c, s.signed_in)
            for (a, c), s in self.clients.items()
            if a == app and self._valid(s)
        ]

    def _valid(self, client: ClientSocket) -> bool:
        return client.expires is None or self.now() < client.expires

    # --- signing in ---------------------------------------------------------------------------

    async def client_socket(self, request: web.Request) -> web.StreamResponse:
        """The WebSocket of one page receiving calls (see the module docstring)."""
        if self.bans is not None and request.remote and self.bans.banned(request.remote):
            raise ApiError(403, "banned", "this address is banned for a while")
        if not same_origin(request):
            raise ApiError(403, "forbidden", "a page of another site may not sign in here")
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=64 * 1024)
        await ws.prepare(request)
        outbox = Outbox(ws)
        client = ClientSocket(ws, outbox, request.remote or "")
        try:
            try:
                async with asyncio.timeout(REGISTER_TIMEOUT):
                    first = await ws.receive()
            except TimeoutError:
                raise ApiError(400, "bad_request", "no register message in time") from None
            self._register(request, client, first)
        except ApiError as exc:
            try:  # (counted, then told; the outbox's task ends whatever befalls the count)
                await self._failed(request, exc)
                outbox.event("error", code=exc.code, message=exc.message)
            finally:
                outbox.close()
            await outbox.task
            return ws
        except BaseException:  # (a bug, or the server stopping: the outbox's task ends too)
            outbox.close()
            raise
        why = "the page closed its socket"
        try:
            async for msg in ws:
                if msg.type is WSMsgType.BINARY:
                    client.from_page(msg.data)
                elif msg.type is WSMsgType.TEXT:
                    if _kind(msg.data) == "register":
                        try:
                            self._register(request, client, msg)
                        except ApiError as exc:  # a bad renewal: signed out
                            await self._failed(request, exc)
                            outbox.event("error", code=exc.code, message=exc.message)
                            why = f"its sign-in was refused: {exc.message}"
                            break
                    else:
                        client.from_page(msg.data)
        finally:
            key = (client.app, client.client_id)
            if self.clients.get(key) is client:
                del self.clients[key]
                logger.info("web client %s of %s signed out: %s", client.client_id, client.app, why)
            client.page_gone(why)
            outbox.close()
            await outbox.task
        return ws

    def _register(self, request: web.Request, client: ClientSocket, msg: Any) -> None:
        if msg.type is not WSMsgType.TEXT:
            raise ApiError(400, "bad_request", "the first message must be a register message")
        try:
            data = loads(msg.data)
        except ValueError:
            data = None
        if not isinstance(data, dict) or data.get("type") != "register":
            raise ApiError(400, "bad_request", "the first message must be {'type': 'register'}")
        client_id = data.get("client_id")
        if not isinstance(client_id, str) or not CLIENT_ID.fullmatch(client_id):
            raise ApiError(400, "bad_request", "client_id: 1 to 256 letters, digits and + - . _")
        if client.client_id and client_id != client.client_id:
            raise ApiError(400, "bad_request", "a socket signs in as one client id")
        app, expires = self._credentials(request, data, client_id)
        if client.client_id:  # a renewal: of the same client id of the same application
            if app != client.app:
                raise ApiError(
                    401, "unauthorized", "the renewal is another application's", wrong_key=True
                )
            client.expires = expires
            client.outbox.event("registered", app=app, client_id=client_id, expires=expires)
            return
        client.expires = expires
        # (Kept through renewals: which of two pages signed in as one id is the newer.)
        client.signed_in = time.time()
        client.app, client.client_id = app, client_id
        older = self.clients.get((app, client_id))
        if older is not None and older is not client:
            _replaced(older)
        self.clients[(app, client_id)] = client
        logger.info("web client %s of %s signed in from %s", client_id, app, client.remote)
        client.outbox.event("registered", app=app, client_id=client_id, expires=expires)
        if self.siblings is not None:  # an older sign-in on another worker ends too
            path = f"{SIGN_OUT_PATH}/{app}/{client_id}?since={client.signed_in!r}"
            task = asyncio.get_running_loop().create_task(self.siblings.tell(path))
            self._telling.add(task)
            task.add_done_callback(self._telling.discard)

    def _credentials(
        self, request: web.Request, data: dict[str, Any], client_id: str
    ) -> tuple[str, float | None]:
        """The application and the sign-in's expiry (None: none) the message proves."""
        token = data.get("token")
        if isinstance(token, str) and token:
            try:
                app = webrtctoken.audience(token)
                key = self.keys.signing_key(app)
                if key is None or app not in self.apps():
                    raise webrtctoken.BadToken("the token's application has no key")
                grant = webrtctoken.check(token, key, app, self.now())
            except webrtctoken.BadToken as exc:
                raise ApiError(401, "unauthorized", str(exc), wrong_key=True) from None
            if grant.client_id != client_id:
                raise ApiError(401, "unauthorized", "the token is for another client id")
            if not grant.incoming:
                raise ApiError(403, "forbidden", "the token does not enable incoming calls")
            return app, grant.expires
        name = data.get("app")
        if local_rights(request):
            if not isinstance(name, str) or name not in self.apps():
                raise ApiError(404, "not_found", f"no application {name!r}")
            return name, None
        # Elsewhere the key first: no answer says which applications exist.
        key = data.get("key")
        if not isinstance(key, str) or not key:
            raise ApiError(401, "unauthorized", "a token or the application's key is needed")
        owner = self.keys.app_for(key)
        if owner is None:
            raise ApiError(401, "unauthorized", "the API key is not valid", wrong_key=True)
        if owner != name or name not in self.apps():
            raise ApiError(401, "unauthorized", "the API key is not that application's")
        return name, None

    async def _failed(self, request: web.Request, refused: ApiError) -> None:
        """A wrong token or key counts towards a ban of its source, and the page is told
        only once the other workers counted it too (as the REST API's guesser is: the next
        guess, to another worker, is counted there with this one)."""
        if refused.wrong_key and self.bans is not None and request.remote:
            with contextlib.suppress(Exception):  # (the page is refused whatever befalls it)
                await asyncio.shield(self.bans.auth_failed(request.remote, "web client sign-in"))

    async def sign_out_all(self, reason: str) -> None:
        """Shutdown: every page is told (``error`` ``shutting_down``) and its socket
        closed, so the web server's end does not wait for them."""
        for client in list(self.clients.values()):
            client.outbox.event("error", code="shutting_down", message=reason)
            client.outbox.close()
        for _ in range(100):  # each socket's handler ends with it, at most 5 s
            if not self.clients:
                break
            await asyncio.sleep(0.05)
        for task in list(self._telling):
            task.cancel()

    # --- ringing ------------------------------------------------------------------------------

    def ring_here(
        self, app: str, client_id: str, call_id: str, line: Line, incoming: dict[str, Any]
    ) -> Channel:
        """Ring the page signed in here; :class:`NotSignedIn` or :class:`Busy` if not."""
        client = self.clients.get((app, client_id))
        if client is None or not self._valid(client):
            raise NotSignedIn()
        return client.offer(call_id, line, incoming)

    async def ring(
        self, app: str, client_id: str, call_id: str, line: Line, incoming: dict[str, Any]
    ) -> tuple[Channel, str]:
        """Ring the client wherever it is signed in: the way to it, and where it is (for
        the log). :class:`NotSignedIn` or :class:`Busy` if it cannot ring."""
        with contextlib.suppress(NotSignedIn):
            return self.ring_here(app, client_id, call_id, line, incoming), "here"
        siblings = self.siblings
        if siblings is None:
            raise NotSignedIn()
        headers = {INCOMING: json.dumps({"call_id": call_id, **incoming})}
        found = await siblings.socket_to(f"{RING_PATH}/{app}/{client_id}", headers)
        if found is None:
            raise NotSignedIn()
        label, ws = found
        channel = _RemoteChannel(ws)
        task = asyncio.get_running_loop().create_task(self._from_sibling(ws, channel, line))
        self._telling.add(task)  # (held: the loop keeps only weak references to tasks)
        task.add_done_callback(self._telling.discard)
        return channel, f"worker {label}" if isinstance(label, int) else f"node {label}"

    async def _from_sibling(
        self, ws: aiohttp.ClientWebSocketResponse, channel: _RemoteChannel, line: Line
    ) -> None:
        why = "the worker relaying the page went away"
        try:
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.BINARY:
                    line.to_caller(msg.data)
                elif msg.type is aiohttp.WSMsgType.TEXT:
                    if _kind(msg.data) == "gone":
                        why = str(loads(msg.data).get("why", why))
                        break
                    line.to_caller(msg.data)
        finally:
            channel.close()
            line.gone(why)

    def _from_a_sibling(self, request: web.Request) -> None:
        """404 unless ``request`` came to the private port with the siblings' token."""
        assert self.siblings is not None
        self.siblings.require_sibling(request)

    async def signed_in_elsewhere(self, request: web.Request) -> web.Response:
        """A sibling's page signed in as a client id at ``since``: one signed in here
        before that is replaced (as on one process)."""
        self._from_a_sibling(request)
        try:
            since = float(request.query["since"])
        except (KeyError, ValueError):
            raise web.HTTPBadRequest() from None
        key = (request.match_info["app"], request.match_info["client"])
        older = self.clients.get(key)
        if older is None or older.signed_in >= since:
            return web.json_response({"replaced": False})
        del self.clients[key]  # rung no more from now
        logger.info("web client %s of %s signed in on another worker", key[1], key[0])
        _replaced(older)
        return web.json_response({"replaced": True})

    async def relay(self, request: web.Request) -> web.StreamResponse:
        """A sibling's call to a client signed in here (see the module docstring)."""
        self._from_a_sibling(request)
        app, client_id = request.match_info["app"], request.match_info["client"]
        client = self.clients.get((app, client_id))
        if client is None or not self._valid(client):
            raise web.HTTPNotFound()
        try:
            incoming = loads(request.headers.get(INCOMING, ""))
            call_id = str(incoming.pop("call_id"))
        except (ValueError, KeyError, AttributeError):
            raise web.HTTPBadRequest() from None
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=64 * 1024)
        await ws.prepare(request)
        outbox = Outbox(ws)
        line = _RelayLine(outbox)
        try:
            channel = self.ring_here(app, client_id, call_id, line, incoming)
        except NotSignedIn:  # (signed out since the question came)
            outbox.event("absent")
            outbox.close()
            await outbox.task
            return ws
        except Busy:
            outbox.event("busy")
            outbox.close()
            await outbox.task
            return ws
        outbox.event("ringing")
        logger.info("call %s: ringing web client %s for another worker", call_id, client_id)

        async def from_caller() -> None:
            async for msg in ws:
                if msg.type is WSMsgType.BINARY or msg.type is WSMsgType.TEXT:
                    channel.to_client(msg.data)
                else:
                    break

        reading = asyncio.get_running_loop().create_task(from_caller())
        over = asyncio.get_running_loop().create_task(line.over.wait())
        try:
            await asyncio.wait({reading, over}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reading.cancel()
            over.cancel()
            channel.close()  # (the caller's side went: the page is free again)
            outbox.close()
            await outbox.task
        return ws


def _replaced(client: ClientSocket) -> None:
    """A newer page signed in as ``client``'s id: it is told, and its socket closes."""
    client.outbox.event("error", code="replaced", message="signed in as this client id elsewhere")
    client.outbox.close()


def _kind(text: str) -> str | None:
    try:
        data = loads(text)
    except ValueError:
        return None
    kind = data.get("type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None
