"""The conference rooms seen and steered from outside the call: Aculab's conference web
services, and the same through callhook's REST API (``/api/v1/conferences``).

Aculab's "Managing Conferences" page names the services (Conference List, Conference
Participant List, Conference Participant Set Options, Conference Participant Eject) and
the rooms' states (``HOLDING``, ``ACTIVE``); every stored copy of it is cut before their
parameters and answers, so those are callhook's, in the other services' style
(docs/aculab.md):

* ``conference_list``: ``{"conferences": [{"conference_name", "state",
  "participant_count", "created"}]}``, the rooms of the application whose key
  authenticated the request;
* ``conference_participant_list``: ``conference_name``; ``{"conference_name", "state",
  "participants": [{"participant_id", "talker", "muted", "start_on_entry",
  "destroy_on_exit", "joined"}]}``;
* ``conference_participant_set_options``: ``conference_name``, ``participant_id``, and
  ``mute`` and/or ``talker`` (``true`` or ``false``); answers the participant as listed;
* ``conference_participant_eject``: ``conference_name``, ``participant_id``; answers
  ``{"participant_id", "ejected": true}``.

A room or participant that is not there is ``404`` ``not_found``. Times are the web
services' ``YYYY-MM-DD_hh:mm:ss`` UTC, and ISO 8601 in the REST API, whose routes are
``GET /api/v1/conferences``, ``GET /api/v1/conferences/{name}/participants``,
``PATCH /api/v1/conferences/{name}/participants/{id}`` (``{"muted", "talker"}``) and
``DELETE`` of the same; ``POST /api/v1/conferences/{name}/recording`` (``{"mode",
"channels", "recording_available_page"}``) starts the room's own recording
(telephony/roomrecording.py), ``DELETE`` stops it. With ``serve --workers`` each room
is one worker's: the lists are every worker's, and a question about one room goes on
to the worker that holds it (cluster/siblings.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from callhook.calls.applicationstatus import aculab_datetime
from callhook.conference.room import Participant, Room
from callhook.config.settings import AppConfig
from callhook.httpserver.restapi import Api, ApiError, iso_time
from callhook.httpserver.server import Handler
from callhook.telephony.conferences import Conferences
from callhook.telephony.roomrecording import MAX_CHANNELS, Mode
from callhook.webservices.webrtc import Params

#: How times are written: the web services' form, or the REST API's.
Stamp = Callable[[float], str]


class RoomViews:
    """The rooms of an application as the services show them."""

    def __init__(self, conferences: Conferences, wall: Callable[[], float] = time.time) -> None:
        self.conferences = conferences
        self.wall = wall

    def _when(self, at: float) -> float:
        """A time on the rooms' clock as a time of day (seconds since the epoch)."""
        return self.wall() - (self.conferences.now() - at)

    def rooms(self, app: str, stamp: Stamp) -> list[dict[str, Any]]:
        return [
            {
                "conference_name": room.name,
                "state": room.state,
                "participant_count": len(room.participants),
                "created": stamp(self._when(room.created_at)),
            }
            for room in sorted(self.conferences.rooms.of(app), key=lambda r: r.name)
        ]

    def room(self, app: str, name: str) -> Room:
        found = self.conferences.rooms.get(app, name)
        if found is None:
            raise ApiError(404, "not_found", f"no conference {name!r} in progress")
        return found

    def participants(self, app: str, name: str, stamp: Stamp) -> dict[str, Any]:
        room = self.room(app, name)
        people = sorted(room.participants.values(), key=lambda p: p.joined_at)
        return {
            "conference_name": room.name,
            "state": room.state,
            "participants": [self.participant(p, stamp) for p in people],
        }

    def participant(self, p: Participant, stamp: Stamp) -> dict[str, Any]:
        return {
            "participant_id": p.id,
            "talker": p.talker,
            "muted": p.muted,
            "start_on_entry": p.options.start_on_entry,
            "destroy_on_exit": p.options.destroy_on_exit,
            "joined": stamp(self._when(p.joined_at)),
        }

    def _one(self, app: str, name: str, pid: str) -> Participant:
        found = self.room(app, name).participants.get(pid)
        if found is None:
            raise ApiError(404, "not_found", f"no participant {pid!r} in conference {name!r}")
        return found

    def set_options(
        self, app: str, name: str, pid: str, muted: bool | None, talker: bool | None, stamp: Stamp
    ) -> dict[str, Any]:
        self._one(app, name, pid)
        self.conferences.set_options(app, name, pid, muted=muted, talker=talker)
        return self.participant(self._one(app, name, pid), stamp)

    def eject(self, app: str, name: str, pid: str) -> dict[str, Any]:
        self._one(app, name, pid)
        self.conferences.eject(app, name, pid)
        return {"participant_id": pid, "ejected": True}

    def start_recording(
        self, app: str, name: str, mode: Mode, channels: int | None, notify: tuple[str, str] | None
    ) -> dict[str, Any]:
        room = self.room(app, name)
        if channels is None:
            channels = min(MAX_CHANNELS, max(2, len(room.participants)))
        try:
            recording = self.conferences.start_recording(app, name, mode, channels, notify)
        except KeyError:
            raise ApiError(404, "not_found", f"no conference {name!r} in progress") from None
        except ValueError as exc:
            raise ApiError(409, "already_recording", str(exc)) from None
        except OSError as exc:
            raise ApiError(507, "storage_full", str(exc)) from None
        return {
            "conference_name": name,
            "filename": recording.filename,
            "mode": recording.mode,
            "channels": recording.channels,
        }

    def stop_recording(self, app: str, name: str) -> dict[str, Any]:
        recording = self.conferences.stop_recording(app, name)
        if recording is None:
            raise ApiError(404, "not_found", f"conference {name!r} is not being recorded")
        return {
            "conference_name": name,
            "filename": recording.filename,
            "seconds_duration": round(recording.seconds, 1),
        }


class ConferenceServices:
    """Aculab's four conference web services (see the module docstring)."""

    def __init__(
        self,
        views: RoomViews,
        app_of: Callable[[web.Request], AppConfig],
        params: Callable[[web.Request], Awaitable[Params]],
    ) -> None:
        self.views = views
        self.app_of = app_of
        self.params = params

    def handlers(self) -> dict[str, Handler]:
        return {
            "conference_list": self.conference_list,
            "conference_participant_list": self.participant_list,
            "conference_participant_set_options": self.set_options,
            "conference_participant_eject": self.eject,
        }

    async def conference_list(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        await self.params(request)  # (read once: what a worker passes on)
        return web.json_response({"conferences": self.views.rooms(app.name, aculab_datetime)})

    async def participant_list(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        name = (await self.params(request)).need("conference_name")
        return web.json_response(self.views.participants(app.name, name, aculab_datetime))

    async def set_options(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        params = await self.params(request)
        name, pid = params.need("conference_name"), params.need("participant_id")
        muted = _maybe(params, "mute")
        talker = _maybe(params, "talker")
        if muted is None and talker is None:
            raise ApiError(400, "0001", "give 'mute' or 'talker' (true or false)")
        shown = self.views.set_options(app.name, name, pid, muted, talker, aculab_datetime)
        return web.json_response(shown)

    async def eject(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        params = await self.params(request)
        name, pid = params.need("conference_name"), params.need("participant_id")
        return web.json_response(self.views.eject(app.name, name, pid))


def _maybe(params: Params, name: str) -> bool | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    return params.flag(name)


class ConferenceApi:
    """``/api/v1/conferences``: the same, with the REST API's keys and errors."""

    def __init__(self, views: RoomViews, api: Api) -> None:
        self.views = views
        self.api = api

    def routes(self) -> list[web.RouteDef]:
        one = "/api/v1/conferences/{name}/participants/{pid}"
        recording = "/api/v1/conferences/{name}/recording"
        return [
            web.get("/api/v1/conferences", self.list_rooms, allow_head=False),
            web.get("/api/v1/conferences/{name}/participants", self.list_people, allow_head=False),
            web.patch(one, self.set_options),
            web.delete(one, self.eject),
            web.post(recording, self.start_recording),
            web.delete(recording, self.stop_recording),
        ]

    async def start_recording(self, request: web.Request) -> web.Response:
        app = self.api.app_of(request)
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            raise ApiError(400, "bad_request", "the body is not JSON") from None
        if not isinstance(body, dict) or set(body) - {
            "mode",
            "channels",
            "recording_available_page",
        }:
            raise ApiError(
                400, "bad_request", 'expected {"mode", "channels", "recording_available_page"}'
            )
        mode = body.get("mode", "mixed")
        if mode not in ("mixed", "separate"):
            raise ApiError(400, "bad_request", 'mode is "mixed" or "separate"')
        channels = body.get("channels")
        if channels is not None and (
            isinstance(channels, bool)
            or not isinstance(channels, int)
            or not 1 <= channels <= MAX_CHANNELS
        ):
            raise ApiError(400, "bad_request", f"channels is 1 to {MAX_CHANNELS}")
        notify = _page(body.get("recording_available_page"))
        shown = self.views.start_recording(app, request.match_info["name"], mode, channels, notify)
        return web.json_response(shown, status=201)

    async def stop_recording(self, request: web.Request) -> web.Response:
        app = self.api.app_of(request)
        return web.json_response(self.views.stop_recording(app, request.match_info["name"]))

    async def list_rooms(self, request: web.Request) -> web.Response:
        app = self.api.app_of(request)
        return web.json_response({"conferences": self.views.rooms(app, iso_time)})

    async def list_people(self, request: web.Request) -> web.Response:
        app = self.api.app_of(request)
        return web.json_response(self.views.participants(app, request.match_info["name"], iso_time))

    async def set_options(self, request: web.Request) -> web.Response:
        app = self.api.app_of(request)
        try:
            body = json.loads(await request.read() or b"null")
        except ValueError:
            raise ApiError(400, "bad_request", "the body is not JSON") from None
        if not isinstance(body, dict) or not body or set(body) - {"muted", "talker"}:
            raise ApiError(400, "bad_request", 'expected {"muted": bool, "talker": bool}')
        if any(not isinstance(v, bool) for v in body.values()):
            raise ApiError(400, "bad_request", "muted and talker are true or false")
        name, pid = request.match_info["name"], request.match_info["pid"]
        shown = self.views.set_options(
            app, name, pid, body.get("muted"), body.get("talker"), iso_time
        )
        return web.json_response(shown)

    async def eject(self, request: web.Request) -> web.Response:
        app = self.api.app_of(request)
        name, pid = request.match_info["name"], request.match_info["pid"]
        return web.json_response(self.views.eject(app, name, pid))


def _page(page: object) -> tuple[str, str] | None:
    """A ``recording_available_page`` (a web page request with an absolute URL)."""
    if page is None:
        return None
    if not isinstance(page, dict) or set(page) - {"url", "method"}:
        raise ApiError(400, "bad_request", 'recording_available_page is {"url", "method"}')
    url, method = page.get("url"), page.get("method", "POST")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise ApiError(400, "bad_request", "recording_available_page.url: an http(s) URL")
    if method not in ("POST", "GET"):
        raise ApiError(400, "bad_request", 'recording_available_page.method: "POST" or "GET"')
    return url, method
