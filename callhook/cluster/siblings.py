"""The other workers' live calls, for the REST routes of ``serve --workers N`` and of nodes
sharing a PostgreSQL database.

Every worker serves the one web address (SO_REUSEPORT: the kernel gives each new
connection to one of them), but a live call is in one worker's memory. So a worker
also listens on a private port (its SIP port number, over TCP, on loopback), and this
middleware completes, on the shared address, the routes that are about live calls.
Nodes sharing PostgreSQL (``[database] url``: on other machines too) do the same with
every other node alive: each listens on ``[database] node_address`` (and
``node_port``, or any free port), which it writes into the ``nodes`` table
(:meth:`callhook.store.postgres.Nodes.peers`). The routes:

* ``GET /api/v1/calls``: the application's calls on every worker, one list;
* ``GET`` / ``DELETE /api/v1/calls/{id}`` and ``GET /api/calls/{id}/log``: when the
  call is not this worker's (404 here), the same request goes to the others in
  turn; the first answer that is a success (2xx) is the answer;
* Aculab's web services about one instance (``service_status``, ``service_cancel``,
  ``application_status``, ``GET`` or ``POST``, the form body passed on): the same;
  ``webrtc_registered_clients``: every worker's signed-in web clients, one list;

* ``GET /readyz``: each one's own readiness (serving/readiness.py asks them all);
* ``GET /webrtc/ring/APP/ID`` (a WebSocket): a call to web client ``ID`` of ``APP``,
  when it is signed in on the worker asked (telephony/webclients.py);
  ``GET /webrtc/signout/APP/ID?since=T``: that client signed in elsewhere at ``T``, so
  an older sign-in here ends; both must carry the workers' shared token
  (:data:`callhook.cluster.workers.WORKERS_TOKEN`) or the node's, in :data:`NODE`;

and the server's own routes, which are about every worker too:

* ``GET /api/stats``: the answering worker's counters, as in one process, and
  ``workers``: every worker's, each with its ``worker`` index (a node: its address);
* ``GET /api/trunks``: the trunks as the worker that registers them (worker 0; among
  nodes, the one that holds the role) sees them;
* ``GET /api/bans``: every worker's bans, one list (each with its ``worker``), and
  Kamailio's in front of them (``worker``: ``"front"``, cluster/frontbans.py);
  ``DELETE /api/bans/{address}`` lifts the ban on every worker that has it, and in
  front.

Forwarded requests carry the caller's own ``Authorization`` (every worker has the
same keys; a request this worker refused with 401 or 403 is not passed on) and
:data:`HEADER`, so the worker that gets one answers for itself only; to a node, also
:data:`NODE`, its token, so that a node reached at another's address (two machines
both saying ``127.0.0.1``) answers nothing rather than count its calls twice. A
worker that does not answer, or answers what is not JSON, is skipped. The private
port answers these requests and no others (not even other methods on their paths).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from callhook.cluster.frontbans import FrontBans
from callhook.dialplan.trunks import ELSEWHERE
from callhook.httpserver.aculabshape import WEB_SERVICE_PARAMS
from callhook.httpserver.server import Handler

logger = logging.getLogger("callhook.workers")

HEADER = "X-Callhook-Worker"
#: The token of the node a forwarded request is meant for.
NODE = "X-Callhook-Node"
#: The machine whose Kamailio is in front of the asker (cluster/frontbans.py): a node on
#: another machine adds its own Kamailio's bans to its answer.
FRONT = "X-Callhook-Front"
#: Routes about one live call, answered by the worker that has it.
ONE_CALL = re.compile(r"/api/v1/calls/.+|/api/calls/[^/]+/log")
#: Aculab's web services about one application instance, answered by the one that has it.
ONE_INSTANCE = frozenset({"/service_status", "/service_cancel", "/application_status"})
ALL_CALLS = "/api/v1/calls"
#: Each one's own readiness (serving/readiness.py gathers them).
READY = "/readyz"
#: Aculab's list of the signed-in web clients: every worker's, one list.
ALL_CLIENTS = "/webrtc_registered_clients"
#: A call to a web client signed in on the worker asked (telephony/webclients.py): a
#: WebSocket, relayed to the client's page.
RING_PATH = "/webrtc/ring"
#: A web client signed in on the worker that tells (its older sign-ins elsewhere end).
SIGN_OUT_PATH = "/webrtc/signout"
WEB_CLIENT = re.compile(rf"(?:{RING_PATH}|{SIGN_OUT_PATH})/[^/]+/[^/]+")
#: A participant of a room held by the worker asked (telephony/roomlinks.py): a WebSocket
#: carrying its media and its room's news.
ROOM_PATH = "/conference/link"
#: The conference rooms (webservices/conferences.py): every worker's, one list.
ALL_ROOMS = frozenset({"/conference_list", "/api/v1/conferences"})
#: A question about one room: the worker that holds it answers (the others: 404).
ONE_ROOM_SERVICE = frozenset(
    {
        "/conference_participant_list",
        "/conference_participant_set_options",
        "/conference_participant_eject",
    }
)
ONE_ROOM = re.compile(r"/api/v1/conferences/[^/]+/(?:participants(?:/[^/]+)?|recording)")
#: A failed authentication a sibling counted, and the ban it earned (sharedbans.py).
FAILURE_PATH = "/guard/failure"
#: A sibling's outbound calls, by application (outboundshare.py).
OUTBOUND_PATH = "/outbound/calls"
STATS = "/api/stats"
#: The trunks' states: the registration is worker 0's (``serving/workerplan.py``), or
#: the node's that holds the role (``store/postgres.py``).
TRUNKS = "/api/trunks"
BANS = "/api/bans"
ONE_BAN = re.compile(r"/api/bans/.+")
#: How long a sibling may take to answer.
TIMEOUT = 5.0
#: How long the nodes read from the database are taken as they are (also after a
#: failed read: the database is not asked again at every request while it is away).
PEERS_SECONDS = 2.0

#: The others: (their label in ``workers`` lists, the base URL of their private port,
#: their node token or None for a worker of this machine).
Peers = list[tuple[int | str, str, str | None]]
#: Reads the other nodes: (base URL, token) each.
NodeLookup = Callable[[], Awaitable[list[tuple[str, str]]]]


def asked(method: str, path: str) -> bool:
    """Whether ``method path`` is one of the siblings' questions (the private port's)."""
    if method == "GET" and path in (ALL_CALLS, STATS, BANS, TRUNKS):
        return True
    if ONE_CALL.fullmatch(path) is not None:
        return method in ("GET", "DELETE")
    if path in ONE_INSTANCE or path == ALL_CLIENTS or path in ONE_ROOM_SERVICE:
        return method in ("GET", "POST")
    if path == "/conference_list":
        return method in ("GET", "POST")
    if path == "/api/v1/conferences":
        return method == "GET"
    if ONE_ROOM.fullmatch(path) is not None:
        return method in ("GET", "PATCH", "DELETE", "POST")
    if WEB_CLIENT.fullmatch(path) is not None or path in (READY, FAILURE_PATH, OUTBOUND_PATH):
        return method == "GET"
    if path == ROOM_PATH:
        return method == "GET"
    return method == "DELETE" and ONE_BAN.fullmatch(path) is not None


class Siblings:
    """The other workers' (or nodes') private addresses, and the middleware that asks them."""

    def __init__(
        self,
        label: int | str,
        private_port: int,
        peers: Peers | NodeLookup,
        token: str | None = None,
        front: FrontBans | None = None,
    ) -> None:
        #: This process in ``workers`` lists: a worker's index, or a node's address.
        self.label = label
        #: The port the siblings' questions come to.
        self.private_port = private_port
        #: This node's token (None: a worker of ``serve --workers`` on SQLite).
        self.token = token
        #: Kamailio's bans, in front of this machine's workers (None: no front).
        self.front = front
        self._static = peers if isinstance(peers, list) else None
        self._lookup = None if isinstance(peers, list) else peers
        self._cached: tuple[float, Peers] = (float("-inf"), [])
        self._reading = asyncio.Lock()
        self._client: aiohttp.ClientSession | None = None
        self._socket_client: aiohttp.ClientSession | None = None

    @classmethod
    def of_workers(
        cls,
        index: int,
        ports: list[int],
        token: str | None = None,
        front: FrontBans | None = None,
    ) -> Siblings:
        """Worker ``index`` of ``serve --workers``, whose private ports are ``ports``;
        ``token``: their shared secret (:data:`callhook.cluster.workers.WORKERS_TOKEN`), which
        what is more than a question about calls (a web client's call relayed) carries."""
        others: Peers = [
            (i, f"http://127.0.0.1:{p}", token) for i, p in enumerate(ports) if i != index
        ]
        return cls(index, ports[index], others, token=token, front=front)

    async def peers(self) -> Peers:
        """The others to ask now (nodes: read at most every :data:`PEERS_SECONDS`, one
        read at a time)."""
        if self._static is not None:
            return self._static
        assert self._lookup is not None
        async with self._reading:
            when, found = self._cached
            if time.monotonic() - when < PEERS_SECONDS:
                return found
            try:
                nodes = await self._lookup()
                found = [(base.split("://", 1)[-1], base, token) for base, token in nodes]
            except Exception as exc:  # the database is away: the last ones known, for now
                logger.warning("the other nodes could not be read: %s", exc)
            self._cached = (time.monotonic(), found)
            return found

    def _session(self) -> aiohttp.ClientSession:
        if self._client is None or self._client.closed:
            self._client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TIMEOUT), auto_decompress=False
            )
        return self._client

    def _sockets(self) -> aiohttp.ClientSession:
        """The session of the sockets to siblings: no total timeout (a call lasts)."""
        if self._socket_client is None or self._socket_client.closed:
            self._socket_client = aiohttp.ClientSession(
                # (sock_read: the handshake's answer; a socket's reads have no timeout)
                timeout=aiohttp.ClientTimeout(total=None, connect=TIMEOUT, sock_read=TIMEOUT)
            )
        return self._socket_client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._socket_client is not None:
            await self._socket_client.close()

    async def socket_to(
        self, path: str, headers: dict[str, str]
    ) -> tuple[int | str, aiohttp.ClientWebSocketResponse] | None:
        """A WebSocket to the first sibling that accepts one on ``path`` (its label and
        the socket), asking each in turn; None if none does (a 404 is "not here")."""
        for label, base, token in await self.peers():
            sent = {**headers, HEADER: str(self.label)}
            if token is not None:
                sent[NODE] = token
            url = base.replace("http://", "ws://", 1) + path
            try:
                ws = await self._sockets().ws_connect(url, headers=sent, heartbeat=20.0)
            except aiohttp.WSServerHandshakeError as exc:
                if exc.status != 404:
                    logger.info("worker at %s refused %s: %s", base, path, exc.status)
                continue
            except (aiohttp.ClientError, TimeoutError) as exc:
                logger.info("worker at %s did not answer %s: %s", base, path, exc)
                continue
            return label, ws
        return None

    async def socket_at(
        self, label: int | str, path: str, headers: dict[str, str]
    ) -> aiohttp.ClientWebSocketResponse:
        """A WebSocket to the sibling ``label`` on ``path``; :class:`ConnectionError`
        naming the cause if it is not among the others now, refuses or does not answer."""
        for known, base, token in await self.peers():
            if known != label:
                continue
            sent = {**headers, HEADER: str(self.label)}
            if token is not None:
                sent[NODE] = token
            url = base.replace("http://", "ws://", 1) + path
            try:
                return await self._sockets().ws_connect(url, headers=sent, heartbeat=20.0)
            except aiohttp.WSServerHandshakeError as exc:
                raise ConnectionError(f"{_named(label)} refused it ({exc.status})") from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ConnectionError(f"{_named(label)} did not answer: {exc}") from None
        raise ConnectionError(f"{_named(label)} is not running")

    async def members(self) -> list[int | str]:
        """The labels of every process of the installation now: this one's and the others'."""
        return [self.label, *(label for label, _, _ in await self.peers())]

    def require_sibling(self, request: web.Request) -> None:
        """404 unless ``request`` came to the private port from a sibling with the token
        (the workers' shared one, or the node's)."""
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        private = sockname is not None and sockname[1] == self.private_port
        if not private or HEADER not in request.headers:
            raise web.HTTPNotFound()
        given = request.headers.get(NODE, "").encode()
        if self.token is None or not hmac.compare_digest(given, self.token.encode()):
            raise web.HTTPNotFound()

    async def ask_all(self, path: str) -> list[tuple[int | str, int | None, Any]]:
        """``GET path`` of every sibling at once: (label, status or None when it did not
        answer, its JSON body or None) each."""

        async def one(label: int | str, base: str, token: str | None) -> tuple[Any, ...]:
            headers = {HEADER: str(self.label)}
            if token is not None:
                headers[NODE] = token
            try:
                async with self._session().get(base + path, headers=headers) as answer:
                    try:
                        body = await answer.json(content_type=None)
                    except ValueError:
                        body = None
                    return label, answer.status, body
            except (aiohttp.ClientError, TimeoutError):
                return label, None, None

        found = await asyncio.gather(*(one(*peer) for peer in await self.peers()))
        return [(label, status, body) for label, status, body in found]

    async def tell(self, path: str) -> None:
        """``GET path`` of every sibling at once (with the token), answers ignored."""

        async def one(base: str, token: str | None) -> None:
            headers = {HEADER: str(self.label)}
            if token is not None:
                headers[NODE] = token
            try:
                async with self._session().get(base + path, headers=headers) as answer:
                    await answer.read()
            except Exception as exc:  # (told or not, the teller goes on: one line)
                logger.info("worker at %s did not answer %s: %s", base, path, exc)

        await asyncio.gather(*(one(base, token) for _, base, token in await self.peers()))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        private = sockname is not None and sockname[1] == self.private_port
        method, path = request.method, request.path
        if private and not asked(method, path):
            # The private port answers the siblings' questions and nothing else (the web
            # phone there would be a keyless door to every application).
            raise web.HTTPNotFound()
        if HEADER in request.headers:
            meant = request.headers.get(NODE)
            mismatch = not hmac.compare_digest((meant or "").encode(), (self.token or "").encode())
            if meant is not None and self.token is not None and mismatch:
                raise web.HTTPNotFound()  # meant for another node: nothing of ours
            own = await handler(request)  # a sibling's question: this worker's own answer
            if self.front is not None and request.headers.get(FRONT) != self.front.host:
                # A node on another machine asking: this machine's Kamailio, out of its reach.
                own = await self._with_front(method, path, own)
            return own
        response = await handler(request)
        if not asked(method, path) or response.status in (401, 403):
            return response  # not about the others; or refused here, so there too
        siblings = await self.peers()
        if path == TRUNKS and response.status == 200:
            return await self._trunks(request, response, siblings)
        if not siblings:
            return response
        if path in (STATS, BANS) and response.status == 200:
            return await self._everyones(request, response, siblings)
        if ONE_BAN.fullmatch(path):
            if response.status not in (200, 404):
                return response
            answers = await asyncio.gather(*(self._ask(peer, request) for peer in siblings))
            lifted = [a for a in answers if a is not None and a.status == 200]
            address = request.match_info.get("address") or path.rsplit("/", 1)[-1]
            if self.front is not None and await self.front.lift(address):
                body = json.dumps({"address": address, "status": "lifted"}).encode()
                lifted.append(_Answer(200, body, {"Content-Type": "application/json"}))
            if response.status != 200 and lifted:  # lifted elsewhere: that is the answer
                return web.Response(status=200, body=lifted[0].body, headers=lifted[0].headers)
            return response
        if (path in (ALL_CALLS, ALL_CLIENTS) or path in ALL_ROOMS) and response.status == 200:
            assert isinstance(response, web.Response) and response.text is not None
            field = {ALL_CALLS: "calls", ALL_CLIENTS: "clients"}.get(path, "conferences")
            listed: list[Any] = json.loads(response.text)[field]
            answers = await asyncio.gather(*(self._ask(peer, request) for peer in siblings))
            for answer in answers:
                theirs = _json(answer)
                if isinstance(theirs, dict) and isinstance(theirs.get(field), list):
                    listed += theirs[field]
            return web.json_response({field: listed})
        room = ONE_ROOM.fullmatch(path) is not None or path in ONE_ROOM_SERVICE
        one = ONE_CALL.fullmatch(path) or path in ONE_INSTANCE
        if response.status == 404 and (one or room):
            for peer in siblings:
                answer = await self._ask(peer, request)
                # (A room's holder answers for it whatever it says: 409, 507 ...)
                answered = answer is not None and (
                    200 <= answer.status < 300 or (room and answer.status != 404)
                )
                if answer is not None and answered:
                    return web.Response(
                        status=answer.status, body=answer.body, headers=answer.headers
                    )
        return response

    async def _with_front(
        self, method: str, path: str, answer: web.StreamResponse
    ) -> web.StreamResponse:
        """A node's own answer about bans, with its machine's Kamailio's (listed; lifted)."""
        assert self.front is not None
        if method == "GET" and path == BANS and answer.status == 200:
            assert isinstance(answer, web.Response) and answer.text is not None
            return web.json_response(json.loads(answer.text) + await self.front.listed())
        if method == "DELETE" and ONE_BAN.fullmatch(path) and answer.status in (200, 404):
            address = path.rsplit("/", 1)[-1]
            if await self.front.lift(address) and answer.status == 404:
                return web.json_response({"address": address, "status": "lifted"})
        return answer

    async def _everyones(
        self, request: web.Request, response: web.StreamResponse, siblings: Peers
    ) -> web.Response:
        """``/api/stats`` or ``/api/bans`` with every worker's answer (the module docstring)."""
        assert isinstance(response, web.Response) and response.text is not None
        own = json.loads(response.text)
        answers = await asyncio.gather(*(self._ask(peer, request) for peer in siblings))
        found: list[tuple[int | str, Any]] = [(self.label, own)]
        for (label, _, _), answer in zip(siblings, answers, strict=True):
            theirs = _json(answer)
            if isinstance(theirs, dict if request.path == STATS else list):
                found.append((label, theirs))
        if request.path == STATS:
            workers = sorted(({"worker": i, **stats} for i, stats in found), key=_index)
            return web.json_response({**own, "workers": workers})
        # (A node's answer has its machine's Kamailio's too, already labelled.)
        bans = [ban if "front" in ban else {**ban, "worker": i} for i, got in found for ban in got]
        if self.front is not None:  # this machine's Kamailio
            bans += await self.front.listed()
        seen: set[tuple[str, str]] = set()  # (nodes on one machine share its Kamailio)
        unique = []
        for ban in bans:
            key = (str(ban.get("front", "")), str(ban.get("address")))
            if "front" in ban and key in seen:
                continue
            seen.add(key)
            unique.append(ban)
        return web.json_response(sorted(unique, key=_index))

    async def _trunks(
        self, request: web.Request, response: web.StreamResponse, siblings: Peers
    ) -> web.Response:
        """``/api/trunks`` with each trunk this worker does not register as the worker or
        node that does reports it; as this worker sees it when none answers."""
        assert isinstance(response, web.Response) and response.text is not None
        own: list[dict[str, Any]] = json.loads(response.text)
        if any(entry.get(ELSEWHERE) for entry in own) and siblings:
            answers = await asyncio.gather(*(self._ask(peer, request) for peer in siblings))
            known: dict[str, dict[str, Any]] = {}
            for answer in answers:
                theirs = _json(answer)
                for entry in theirs if isinstance(theirs, list) else []:
                    if isinstance(entry, dict) and not entry.get(ELSEWHERE):
                        known.setdefault(str(entry.get("name")), entry)
            own = [known.get(str(e["name"]), e) if e.get(ELSEWHERE) else e for e in own]
        return web.json_response([{k: v for k, v in e.items() if k != ELSEWHERE} for e in own])

    async def _ask(
        self, peer: tuple[int | str, str, str | None], request: web.Request
    ) -> _Answer | None:
        """``request`` asked of ``peer`` (None: it did not answer)."""
        _, base, token = peer
        headers = {HEADER: str(self.label), FRONT: self.front.host if self.front else ""}
        if token is not None:
            headers[NODE] = token
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        method, target, body = request.method, base + request.path_qs, None
        params = request.get(WEB_SERVICE_PARAMS)
        if params is not None:
            # A web service read its parameters (query and form body together) already:
            # they go on as a form, whatever form they came in.
            method, target = "POST", base + request.path
            body = urlencode(list(params.items())).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif request.body_exists:
            body = await request.read()  # (read by the handler already: kept by aiohttp)
            headers["Content-Type"] = request.headers.get("Content-Type", "application/json")
        try:
            async with self._session().request(
                method, target, headers=headers, data=body
            ) as answer:
                kept = {
                    k: v
                    for k, v in answer.headers.items()
                    if k.lower() in ("content-type", "www-authenticate")
                }
                return _Answer(answer.status, await answer.read(), kept)
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.info("worker at %s did not answer %s: %s", base, request.path, exc)
            return None


def _json(answer: _Answer | None) -> Any:
    """A sibling's successful JSON answer (None: none, a failure, or not JSON)."""
    if answer is None or answer.status != 200:
        return None
    try:
        return json.loads(answer.body)
    except ValueError:
        logger.info("a worker answered what is not JSON: skipped")
        return None


def _index(entry: dict[str, Any]) -> tuple[int, int, str]:
    """Workers by their index, nodes by their address."""
    label = entry["worker"]
    return (0, label, "") if isinstance(label, int) else (1, 0, str(label))


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes
    headers: dict[str, str]


def _named(label: int | str) -> str:
    return f"worker {label}" if isinstance(label, int) else f"node {label}"
