"""Aculab's WebRTC Clients web services: ``webrtc_generate_token`` and
``webrtc_registered_clients``, with the other web services' authentication and errors
(webservices/aculab.py).

* ``webrtc_generate_token``: ``client_id`` (required), ``ttl`` (600 to 86400 seconds,
  3600 when not given), ``enable_incoming`` (``true`` when not given), ``call_client``
  (repeated or comma-separated; kept in the token, unused: callhook's web clients do
  not call each other). The answer is ``{"token": "..."}``, a token the page signs in
  with (telephony/webclients.py; :mod:`callhook.telephony.webrtctoken`) for the application whose
  key authenticated the request.
* ``webrtc_registered_clients``: ``{"clients": [{"client_id", "last_modified"}]}``,
  the application's signed-in clients (with ``serve --workers``, every worker's:
  cluster/siblings.py); ``last_modified`` is the last sign-in, in the web services'
  ``YYYY-MM-DD_hh:mm:ss`` UTC form. Aculab's page is cut before it names the list:
  ``clients`` is callhook's name (docs/aculab.md).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web
from multidict import MultiDict

from callhook.calls.applicationstatus import aculab_datetime
from callhook.config.settings import AppConfig
from callhook.dialplan.destinations import CLIENT_ID
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.restapi import ApiError
from callhook.httpserver.server import Handler
from callhook.telephony import webrtctoken
from callhook.telephony.webclients import WebClients


class Params(Protocol):
    """A web service request's parameters (webservices/aculab.py ``Params``)."""

    values: MultiDict[str]

    def get(self, name: str, *, required: bool = False) -> str | None: ...
    def need(self, name: str) -> str: ...
    def flag(self, name: str, default: bool = False) -> bool: ...


class WebClientServices:
    """The two services, over the web services' authentication and the signed-in pages."""

    def __init__(
        self,
        app_of: Callable[[web.Request], AppConfig],
        params: Callable[[web.Request], Awaitable[Params]],
        keys: KeyRing,
        clients: WebClients,
        now: Callable[[], float] = time.time,
    ) -> None:
        """``app_of``: the application a request's credentials are of (or ApiError);
        ``params``: its parameters, read once."""
        self.app_of = app_of
        self.params = params
        self.keys = keys
        self.clients = clients
        self.now = now

    def handlers(self) -> dict[str, Handler]:
        return {
            "webrtc_generate_token": self.generate_token,
            "webrtc_registered_clients": self.registered_clients,
        }

    async def generate_token(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        params = await self.params(request)
        client_id = params.need("client_id")
        if not CLIENT_ID.fullmatch(client_id):
            raise ApiError(
                400,
                "0002",
                "the parameter 'client_id' is malformed: 1 to 256 of A-Z a-z 0-9 + - . _",
            )
        ttl_text = params.get("ttl")
        ttl = webrtctoken.TTL_DEFAULT
        if ttl_text not in (None, ""):
            try:
                ttl = int(ttl_text)
            except ValueError:
                ttl = -1
            if not webrtctoken.TTL_MIN <= ttl <= webrtctoken.TTL_MAX:
                raise ApiError(
                    400,
                    "0002",
                    f"the parameter 'ttl' is malformed: {webrtctoken.TTL_MIN} to "
                    f"{webrtctoken.TTL_MAX} seconds",
                )
        incoming = params.flag("enable_incoming", default=True)
        callable_ = tuple(
            name.strip()
            for value in params.values.getall("call_client", [])
            for name in value.split(",")
            if name.strip()
        )
        key = self.keys.signing_key(app.name)
        if key is None:  # (app_of found it by its key)
            raise ApiError(401, "unauthorized", "the application has no API key")
        token = webrtctoken.mint(
            key, app.name, client_id, self.now(), ttl, incoming=incoming, call_client=callable_
        )
        return web.json_response({"token": token})

    async def registered_clients(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        await self.params(request)  # (read once: what a worker passes on)
        clients = [
            {"client_id": c.client_id, "last_modified": aculab_datetime(c.since)}
            for c in sorted(self.clients.signed_in(app.name), key=lambda c: c.client_id)
        ]
        return web.json_response({"clients": clients})
