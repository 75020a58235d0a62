"""The REST API of ``callhook serve`` (``/api/v1``): media files, call logs, calls.

Every request names its application by its API key (``Authorization: Bearer
<key>``, config ``[apps.<name>] api_key``) and sees only that application's
files, logs and calls: a missing or unknown key is ``401``; another
application's file or call is ``404``, exactly as if it did not exist.
Errors always have one shape, ``{"error": {"code": "<stable code>",
"message": "<for people>"}}``, aiohttp's own (unknown route, method not
allowed, body too large) included: :func:`errors` is the middleware that
makes them so. docs/api.md is the reference; ``GET /openapi.json`` the
machine-readable one (:mod:`callhook.httpserver.openapi`).

File work blocks on the disk, so it runs on worker threads: the event loop
also plays every call's audio and must never wait for a disk.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import errno
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, NoReturn, Protocol

from aiohttp import web

from callhook.actions import connectschema
from callhook.config.settings import AppConfig
from callhook.dialplan.trunks import RouteError
from callhook.httpserver.aculabshape import aculab_error, is_webservice
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.openapi import document
from callhook.media import wav
from callhook.sip.message import parse_uri
from callhook.store.files import LIST_MAX, BadName, FileInfo, FileStore, Listing

logger = logging.getLogger("callhook.api")

#: Call logs live in each namespace under this prefix; the media routes leave it alone.
LOGS = "logs/"
#: A cursor past every ``logs/`` name: ``~`` sorts after every character names may hold.
LOGS_END = "logs/~"
#: How much of an upload is read before it is checked to be a WAV callhook can play.
WAV_HEAD = 64 * 1024
CHUNK = 256 * 1024
#: Content types an upload may declare (none at all is fine too: the bytes decide).
#: curl's ``--data-binary`` says form-urlencoded unless told otherwise: that says
#: nothing about the body, so it is let through to the check of the bytes.
WAV_TYPES = frozenset(
    {
        "audio/wav",
        "audio/x-wav",
        "audio/wave",
        "audio/vnd.wave",
        "application/octet-stream",
        "application/x-www-form-urlencoded",
    }
)
_INSTANCE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")

#: The error code of each status aiohttp itself may answer with.
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}


#: Codes of the statuses a refused outbound call gets (RouteError).
_ROUTE_CODES = {403: "forbidden", 404: "not_found", 429: "too_many_calls", 503: "unavailable"}


class ApiError(Exception):
    """An error answer: HTTP ``status``, stable ``code``, human ``message``.

    ``wrong_key``: a key was given and it is wrong (a failed authentication, which
    counts towards a ban of the source; a request with no key at all does not).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
        *,
        wrong_key: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.wrong_key = wrong_key


def error_response(status: int, code: str, message: str, **headers: str) -> web.Response:
    """The JSON body every API error has."""
    body = {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers)


def _is_api(request: web.Request) -> bool:
    """``/api/``, the OpenAPI document, ``/metrics`` and Aculab's web services."""
    path = request.path
    return path.startswith("/api/") or path in ("/openapi.json", "/metrics") or is_webservice(path)


def _error(
    request: web.Request, status: int, code: str, message: str, **headers: str
) -> web.Response:
    """The error in the shape its route has: Aculab's for the web services, else ours."""
    if is_webservice(request.path):
        return aculab_error(request, status, code, message)
    return error_response(status, code, message, **headers)


@web.middleware
async def errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """JSON errors of one shape for ``/api/`` (aiohttp's own too); elsewhere (the web
    phone's routes, ``/phone/...``) an :class:`ApiError` is answered in that shape too,
    and the rest is left to aiohttp."""
    if not _is_api(request):
        try:
            return await handler(request)
        except ApiError as exc:  # (not an aiohttp exception: else a 500 and a traceback)
            return error_response(exc.status, exc.code, exc.message, **exc.headers)
    try:
        return await handler(request)
    except ApiError as exc:
        return _error(request, exc.status, exc.code, exc.message, **exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, f"http_{exc.status}")
        headers = {k: v for k, v in exc.headers.items() if k in ("Allow", "WWW-Authenticate")}
        return _error(request, exc.status, code, exc.reason, **headers)
    except Exception:
        logger.exception("%s %s failed", request.method, request.path)
        return _error(request, 500, "internal_error", "internal error (see the server log)")


class Calls(Protocol):
    """The calls side of the server (:class:`~callhook.telephony.service.SipService`)."""

    def active_calls(self) -> list[dict[str, Any]]: ...
    def hang_up_call(self, call_id: str) -> bool: ...
    async def place_call(
        self,
        target: str,
        app: AppConfig,
        ring_timeout: float = 60.0,
        trunk: str | None = None,
        *,
        from_user: str | None = None,
        instance_id: str | None = None,
        outbound_parameters: str | None = None,
        token: str | None = None,
    ) -> str: ...


@dataclass
class Api:
    """What the API serves: the store, the keys, the applications (by name), the calls."""

    store: FileStore
    keys: KeyRing
    apps: Callable[[str], AppConfig | None]
    calls: Calls | None = None
    max_upload_bytes: int = 50 * 2**20
    #: ``GET /api/v1/calls/records`` (httpserver/recordsapi.py; None: not served).
    records: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None

    def routes(self) -> list[web.RouteDef]:
        """The ``/api/v1`` routes and ``/openapi.json``."""
        return [
            web.get("/openapi.json", self.openapi, allow_head=False),
            web.get("/api/v1/media", self.list_media, allow_head=False),
            web.get("/api/v1/media/{name:.+}", self.download),
            web.put("/api/v1/media/{name:.+}", self.upload),
            web.patch("/api/v1/media/{name:.+}", self.rename),
            web.delete("/api/v1/media/{name:.+}", self.delete),
            web.get("/api/v1/logs", self.list_logs, allow_head=False),
            web.get("/api/v1/logs/{id}", self.download_log),
            web.get("/api/v1/calls", self.list_calls, allow_head=False),
            web.post("/api/v1/calls", self.place_call),
            # (Before a call's route, which would take "records" for a Call-ID.)
            *(
                [web.get("/api/v1/calls/records", self.records, allow_head=False)]
                if self.records
                else []
            ),
            web.get("/api/v1/calls/{call_id:.+}", self.get_call, allow_head=False),
            web.delete("/api/v1/calls/{call_id:.+}", self.hang_up),
        ]

    def app_of(self, request: web.Request) -> str:
        """The application of the request's API key; 401 if there is none."""
        challenge = {"WWW-Authenticate": 'Bearer realm="callhook"'}
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "unauthorized", "an API key is needed: Bearer <key>", challenge)
        app = self.keys.app_for(key.strip())
        if app is None:
            raise ApiError(
                401, "unauthorized", "the API key is not valid", challenge, wrong_key=True
            )
        return app

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(document(self.max_upload_bytes))

    # --- media files --------------------------------------------------------------------------

    async def list_media(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        prefix, after, limit = _paging(request)
        if prefix.startswith(LOGS):
            _reserved()
        page = await blocking(self.store.list, app, prefix, after, limit)
        if any(f.name.startswith(LOGS) for f in page.files):
            # The call logs sort together: keep what is before them, continue past them.
            before = [f for f in page.files if f.name < LOGS]
            rest = await blocking(
                self.store.list, app, prefix, max(after, LOGS_END), limit - len(before)
            )
            page = Listing(before + rest.files, rest.next)
        return web.json_response({"files": [_file_json(f) for f in page.files], "next": page.next})

    async def download(self, request: web.Request) -> web.StreamResponse:
        app = self.app_of(request)
        name = _media_name(request.match_info["name"])
        content_type = "audio/wav" if name.lower().endswith(".wav") else "application/octet-stream"
        return await self._send_file(request, app, name, content_type)

    async def upload(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        name = _media_name(request.match_info["name"])
        overwrite = _flag(request, "overwrite", True)
        # An aescbc-encrypted WAV (for play's decryption_cipher): its bytes cannot be checked.
        encrypted = _flag(request, "encrypted", False)
        declared = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if declared and declared not in WAV_TYPES:
            raise ApiError(
                415, "unsupported_media_type", f"upload a WAV file (audio/wav), not {declared}"
            )
        limit = self.max_upload_bytes
        if request.content_length is not None and request.content_length > limit:
            _too_large(limit)
        # The name is checked (400), and a taken one refused (409), before the body is read.
        existed = await blocking(self._exists, app, name)
        if existed and not overwrite:
            raise ApiError(409, "file_exists", f"{name} exists (ask to overwrite it)")
        head = bytearray()
        stream = request.content.iter_chunked(CHUNK)
        async for chunk in stream:
            head += chunk
            if len(head) >= WAV_HEAD:
                break
        if len(head) > limit:
            _too_large(limit)
        if not encrypted:
            await blocking(check_wav, bytes(head[:WAV_HEAD]))
        out = await blocking(self.store.create, app, name, overwrite=overwrite)
        try:
            await blocking(out.write, bytes(head))
            size = len(head)
            async for chunk in stream:
                size += len(chunk)
                if size > limit:
                    _too_large(limit)
                await blocking(out.write, chunk)
            if encrypted and (size == 0 or size % 16):
                raise ApiError(
                    415,
                    "not_aescbc",
                    f"an aescbc file is a whole number of 16-byte blocks, not {size} bytes",
                )
            info = await blocking(out.commit)
        except BaseException:
            await blocking(out.abort)
            raise
        location = f"/api/v1/media/{name}"
        status = 200 if existed else 201
        return web.json_response(_file_json(info), status=status, headers={"Location": location})

    def _exists(self, app: str, name: str) -> bool:
        try:
            self.store.stat(app, name)
        except FileNotFoundError:
            return False
        return True

    async def rename(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        name = _media_name(request.match_info["name"])
        body = await _json_object(request, {"name", "overwrite"})
        new = body.get("name")
        overwrite = body.get("overwrite", False)
        if not isinstance(new, str) or not isinstance(overwrite, bool):
            raise ApiError(400, "bad_request", 'expected {"name": "<new name>", "overwrite": bool}')
        info = await blocking(self.store.rename, app, name, _media_name(new), overwrite=overwrite)
        return web.json_response(_file_json(info))

    async def delete(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        name = _media_name(request.match_info["name"])
        await blocking(self.store.delete, app, name)
        return web.Response(status=204)

    async def _send_file(
        self, request: web.Request, app: str, name: str, content_type: str
    ) -> web.StreamResponse:
        file = await blocking(self.store.open, app, name)
        try:
            size = await blocking(_size, file)
            response = web.StreamResponse(
                headers={
                    "Content-Type": content_type,
                    "Content-Disposition": f'attachment; filename="{name.rsplit("/", 1)[-1]}"',
                }
            )
            response.content_length = size
            await response.prepare(request)
            if request.method != "HEAD":
                while chunk := await blocking(file.read, CHUNK):
                    await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            await blocking(file.close)

    # --- call logs ----------------------------------------------------------------------------

    async def list_logs(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        _, after, limit = _paging(request, prefix=False)
        page = await blocking(self.store.list, app, LOGS, after, limit)
        logs = [
            {"application_instance_id": f.name[len(LOGS) :].removesuffix(".log"), **_file_json(f)}
            for f in page.files
        ]
        return web.json_response({"logs": logs, "next": page.next})

    async def download_log(self, request: web.Request) -> web.StreamResponse:
        app = self.app_of(request)
        instance = request.match_info["id"].removesuffix(".log")
        if not _INSTANCE_ID.fullmatch(instance):
            raise ApiError(400, "bad_name", f"{instance!r} is not an application instance id")
        return await self._send_file(
            request, app, f"{LOGS}{instance}.log", "text/plain; charset=utf-8"
        )

    # --- calls --------------------------------------------------------------------------------

    def calls_or_503(self) -> Calls:
        """The calls side (503 when this server handles no calls)."""
        return self._calls()

    def _calls(self) -> Calls:
        if self.calls is None:
            raise ApiError(503, "unavailable", "this server does not handle calls")
        return self.calls

    def _calls_of(self, app: str) -> list[dict[str, Any]]:
        return [_call_json(c) for c in self._calls().active_calls() if c["application"] == app]

    async def list_calls(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        return web.json_response({"calls": self._calls_of(app)})

    async def get_call(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        return web.json_response(self._call(app, request.match_info["call_id"]))

    def _call(self, app: str, call_id: str) -> dict[str, Any]:
        for call in self._calls_of(app):
            if call["call_id"] == call_id:
                return call
        raise ApiError(404, "not_found", "no such call (it may have ended)")

    async def hang_up(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        call_id = request.match_info["call_id"]
        self._call(app, call_id)  # 404 unless it is this application's
        self._calls().hang_up_call(call_id)
        return web.json_response({"call_id": call_id, "status": "hanging_up"}, status=202)

    async def place_call(self, request: web.Request) -> web.Response:
        name = self.app_of(request)
        calls = self._calls()
        body = await _json_object(
            request, {"to", "application_parameters", "ring_timeout", "trunk", "classify_callee"}
        )
        target = body.get("to")
        trunk = body.get("trunk")
        if trunk is not None and not isinstance(trunk, str):
            raise ApiError(400, "bad_request", "'trunk' must be the name of a trunk")
        if trunk is None:
            if not isinstance(target, str) or not target.lower().startswith(("sip:", "sips:")):
                raise ApiError(400, "bad_request", "'to' must be a sip: URI")
            try:
                parse_uri(target)
            except ValueError as exc:
                raise ApiError(400, "bad_request", f"'to' is not a valid SIP URI: {exc}") from None
        elif not isinstance(target, str):
            raise ApiError(400, "bad_request", "'to' must be a number or a sip: URI")
        ring_timeout = body.get("ring_timeout", 60)
        if (
            not isinstance(ring_timeout, int | float)
            or isinstance(ring_timeout, bool)
            or not 1 <= ring_timeout <= 600
        ):
            raise ApiError(400, "bad_request", "'ring_timeout' must be 1 to 600 seconds")
        app = self.apps(name)
        if app is None:
            raise ApiError(503, "unavailable", f"application {name!r} cannot place calls now")
        parameters = body.get("application_parameters")
        if parameters is not None:
            if not isinstance(parameters, str):
                raise ApiError(400, "bad_request", "'application_parameters' must be a string")
            app = dataclasses.replace(app, application_parameters=parameters)
        if "classify_callee" in body:
            try:
                classify = connectschema.classify_options(body["classify_callee"])
            except ValueError as exc:
                raise ApiError(400, "bad_request", str(exc)) from None
            app = dataclasses.replace(app, classify_callee=classify)
        try:
            call_id = await calls.place_call(target, app, float(ring_timeout), trunk)
        except RouteError as exc:
            code = _ROUTE_CODES.get(exc.status, "bad_request")
            raise ApiError(exc.status, code, str(exc)) from None
        except OSError as exc:
            raise ApiError(503, "unavailable", f"the call could not be placed: {exc}") from None
        answer = {"call_id": call_id, "to": target, "application": name, "status": "calling"}
        return web.json_response(answer, status=202)


# --- helpers ----------------------------------------------------------------------------------


async def blocking(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run store work on a worker thread, turning its errors into API errors (400 bad
    name, 404, 409, 507)."""
    try:
        return await asyncio.to_thread(func, *args, **kwargs)
    except BadName as exc:
        raise ApiError(400, exc.code, str(exc)) from None
    except FileExistsError as exc:
        name = exc.filename or "the file"
        raise ApiError(409, "file_exists", f"{name} exists (ask to overwrite it)") from None
    except (IsADirectoryError, NotADirectoryError) as exc:
        raise ApiError(
            409, "name_conflict", f"{exc.filename}: a file and a directory would share a name"
        ) from None
    except FileNotFoundError:
        raise ApiError(404, "not_found", "no such file") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # (The operator's line names the cause; the client hears only that it is full.)
            logger.warning("a media file write refused: %s", exc.strerror or exc)
            raise ApiError(507, "storage_full", "the media file store is full") from None
        raise


def _reserved() -> NoReturn:
    raise ApiError(400, "reserved_name", "logs/ holds the call logs: see /api/v1/logs")


def _too_large(limit: int) -> NoReturn:
    raise ApiError(
        413, "too_large", f"uploads are limited to {limit} bytes", {"Connection": "close"}
    )


def _media_name(name: str) -> str:
    if name.startswith(LOGS):
        _reserved()
    return name


def check_wav(head: bytes) -> None:
    """415 unless ``head`` (an upload's first bytes) starts a WAV file callhook can play."""
    try:
        wav.read_info(head)
    except wav.WavError as exc:
        raise ApiError(415, "not_wav", f"not a WAV file callhook can read: {exc}") from None
    try:
        wav.decode_to_8k(head)  # the encodings it cannot play fail here, saying which
    except wav.WavError as exc:
        raise ApiError(415, "unsupported_wav", str(exc)) from None


def _size(file: BinaryIO) -> int:
    file.seek(0, 2)
    size = file.tell()
    file.seek(0)
    return size


def _paging(request: web.Request, prefix: bool = True) -> tuple[str, str, int]:
    query = request.query
    unknown = set(query) - {"after", "limit", *(["prefix"] if prefix else [])}
    if unknown:
        raise ApiError(400, "bad_request", f"unknown query parameter(s): {', '.join(unknown)}")
    try:
        limit = int(query.get("limit", "100"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= LIST_MAX:
        raise ApiError(400, "bad_request", f"'limit' must be a whole number from 1 to {LIST_MAX}")
    return query.get("prefix", ""), query.get("after", ""), limit


def _flag(request: web.Request, name: str, default: bool) -> bool:
    value = request.query.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise ApiError(400, "bad_request", f"'{name}' must be true or false")
    return value.lower() == "true"


async def _json_object(request: web.Request, allowed: set[str]) -> dict[str, Any]:
    """The request's JSON object body (413 over the JSON limit, 400 if not JSON or unknown keys)."""
    raw = await request.read()  # raises 413 past the application's client_max_size
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "bad_request", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", "the body must be a JSON object")
    unknown = set(body) - allowed
    if unknown:
        raise ApiError(400, "bad_request", f"unknown properties: {', '.join(sorted(unknown))}")
    return body


def iso_time(seconds: float) -> str:
    """Unix seconds as the API gives times: ISO 8601 in UTC, to the millisecond."""
    when = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _file_json(info: FileInfo) -> dict[str, Any]:
    return {"name": info.name, "size": info.size, "modified": iso_time(info.modified)}


def _call_json(call: dict[str, Any]) -> dict[str, Any]:
    # (The instance id is the web services' business: the REST API's calls keep their shape.)
    hidden = ("application", "application_instance_id")
    shown = {k: v for k, v in call.items() if k not in hidden}
    shown["started"] = iso_time(call["started"])
    return shown
