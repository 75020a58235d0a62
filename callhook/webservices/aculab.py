"""Aculab's web services, served by callhook: an Aculab back end changes its base URL.

An Aculab application has two halves: the pages callhook requests, and a back end that
calls Aculab's web services (``https://ws.aculabcloud.net/<service>``). callhook serves
those under the same paths, with the same parameters (query string, or a form body:
``GET`` or ``POST`` alike), authentication and error shape, on its HTTP address:

* **outbound services**: ``service_start`` (an outbound call running the application
  named in the username, each of ``rest_calls``), ``service_cancel``,
  ``service_status``; ``application_status`` of any instance, inbound or outbound;
* **media files**: ``file_list``, ``file_get``, ``file_write`` (``encrypted``),
  ``file_delete``, ``file_rename``, on the store the REST API uses (``filetype``
  ``media``; ``rest`` for the call logs, read only);
* **WebRTC clients**: ``webrtc_generate_token``, ``webrtc_registered_clients``
  (webservices/webrtc.py);
* **conferences**: ``conference_list``, ``conference_participant_list``,
  ``conference_participant_set_options``, ``conference_participant_eject``
  (webservices/conferences.py).

Authentication is HTTP Basic, Aculab's form: the username ``cloudID/username`` and the
application's API key as the password (Aculab's API Access Key); for ``service_start``
``cloudID/username/<application>`` and that application's key (Aculab's outbound
service password). ``[apps.NAME] webservices_username`` pins the ``cloudID/username``
an application answers to. A wrong password counts towards ``[security]`` bans like
any wrong key.

Errors are Aculab's JSON: ``{"error": {"code", "text", "datetime", "link"},
"request": {"url", "datetime"}}``, ``code`` a four-digit code (``0001`` a missing
parameter, ``0002`` a malformed one, ``0003`` one given twice) or ``HTTP <status>``.
What Aculab's pages leave open, and what callhook decided, is in docs/aculab.md.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from aiohttp import BodyPartReader, web
from multidict import MultiDict, MultiDictProxy

from callhook.calls import applicationstatus
from callhook.calls.applicationstatus import aculab_datetime
from callhook.config.settings import AppConfig
from callhook.dialplan import destinations
from callhook.dialplan.trunks import RouteError
from callhook.httpserver.aculabshape import WEB_SERVICE_PARAMS
from callhook.httpserver.restapi import (
    CHUNK,
    LOGS,
    LOGS_END,
    WAV_HEAD,
    Api,
    ApiError,
    blocking,
    check_wav,
)
from callhook.httpserver.server import Handler
from callhook.store.callrecords import CallRecords
from callhook.store.files import FileInfo, FileStore
from callhook.store.names import BadName, check_name
from callhook.telephony.webclients import WebClients
from callhook.webservices.conferences import ConferenceServices, RoomViews
from callhook.webservices.webrtc import WebClientServices

logger = logging.getLogger("callhook.api")

#: How long ``service_start`` waits for a call to be placed before it answers.
RING_TIMEOUT = 60.0
#: The most files ``file_list`` answers with (more: ``"truncated": true``; a prefix).
LIST_LIMIT = 10000
#: The bytes a ``file_write`` form's text fields may have in all, names and values.
FIELD_MAX = 65536
#: The most parts a ``file_write`` form may have before its file (Aculab's parameters
#: are a handful: a form of thousands of empty fields is not one).
FIELD_COUNT = 100


def _missing(name: str) -> NoReturn:
    raise ApiError(400, "0001", f"the parameter {name!r} is missing")


def _malformed(name: str, why: str) -> NoReturn:
    raise ApiError(400, "0002", f"the parameter {name!r} is malformed: {why}")


@dataclass
class Params:
    """A request's parameters: the query string and a form body's fields together."""

    values: MultiDict[str]

    def get(self, name: str, *, required: bool = False) -> str | None:
        found = self.values.getall(name, [])
        if len(found) > 1:
            raise ApiError(400, "0003", f"the parameter {name!r} is given more than once")
        if not found:
            if required:
                _missing(name)
            return None
        return found[0]

    def need(self, name: str) -> str:
        value = self.get(name, required=True)
        assert value is not None
        return value

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.get(name)
        if value is None or value == "":
            return default
        if value.lower() not in ("true", "false"):
            _malformed(name, "expected true or false")
        return value.lower() == "true"


class WebServices:
    """The web services' routes over the REST API's store, keys and calls."""

    def __init__(
        self,
        api: Api,
        number_trunk: Callable[[], str | None],
        clients: WebClients | None = None,
        rooms: RoomViews | None = None,
        records: CallRecords | None = None,
    ) -> None:
        """``number_trunk``: the trunk a number is called through (None: none);
        ``clients``: the pages signed in to receive calls (the WebRTC Clients services:
        webservices/webrtc.py; None: not served); ``rooms``: the conference rooms (the
        conference services: webservices/conferences.py; None: not served); ``records``:
        the call records (an instance whose call log is gone is told from its record)."""
        self.api = api
        self.records = records
        self.number_trunk = number_trunk
        self.clients = clients
        self.rooms = rooms

    def routes(self) -> list[web.RouteDef]:
        handlers: dict[str, Handler] = {
            "service_start": self.service_start,
            "service_cancel": self.service_cancel,
            "service_status": self.service_status,
            "application_status": self.application_status,
            "file_list": self.file_list,
            "file_get": self.file_get,
            "file_write": self.file_write,
            "file_delete": self.file_delete,
            "file_rename": self.file_rename,
        }
        if self.clients is not None:
            webrtc = WebClientServices(self.app_of, self.params, self.api.keys, self.clients)
            handlers.update(webrtc.handlers())
        if self.rooms is not None:
            handlers.update(ConferenceServices(self.rooms, self.app_of, self.params).handlers())
        out = []
        for name, handler in handlers.items():
            out.append(web.get(f"/{name}", handler, allow_head=False))
            out.append(web.post(f"/{name}", handler))
        return out

    # --- who is asking ------------------------------------------------------------------

    def _credentials(self, request: web.Request) -> tuple[list[str], str]:
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded.strip():
            raise ApiError(401, "unauthorized", "HTTP Basic authentication is needed")
        try:
            user, colon, password = base64.b64decode(encoded.strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise ApiError(401, "unauthorized", "the Basic credentials are malformed") from None
        if not colon or not password:
            raise ApiError(401, "unauthorized", "the Basic credentials have no password")
        return user.split("/"), password

    def _account(self, app: AppConfig, parts: list[str]) -> None:
        """401 unless the username's ``cloudID/username`` is the one ``app`` answers to."""
        wanted = app.webservices_username
        if wanted is not None and "/".join(parts[:2]) != wanted:
            raise ApiError(401, "unauthorized", "the credentials are not valid", wrong_key=True)

    def app_of(self, request: web.Request) -> AppConfig:
        """The application whose key is the password (Aculab's API Access Key)."""
        parts, password = self._credentials(request)
        name = self.api.keys.app_for(password)
        app = self.api.apps(name) if name is not None else None
        if app is None:
            raise ApiError(401, "unauthorized", "the credentials are not valid", wrong_key=True)
        self._account(app, parts)
        return app

    def service_of(self, request: web.Request) -> AppConfig:
        """``cloudID/username/<application>``, with that application's key."""
        parts, password = self._credentials(request)
        if len(parts) < 3 or not parts[-1]:
            raise ApiError(
                401,
                "unauthorized",
                "service_start's username is cloudID/username/<outbound service name>",
            )
        # The key ring compares every key in constant time: whose key it is, if anyone's.
        owner = self.api.keys.app_for(password)
        app = self.api.apps(parts[-1]) if owner == parts[-1] else None
        if app is None:
            raise ApiError(401, "unauthorized", "the credentials are not valid", wrong_key=True)
        self._account(app, parts)
        return app

    async def params(self, request: web.Request) -> Params:
        values: MultiDict[str] = MultiDict(request.query)
        if request.method == "POST" and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            try:
                form: MultiDictProxy[Any] = await request.post()
            except (ValueError, UnicodeDecodeError) as exc:
                raise ApiError(400, "0002", f"the form body cannot be read: {exc}") from None
            for key, value in form.items():
                if isinstance(value, str):
                    values.add(key, value)
        request[WEB_SERVICE_PARAMS] = values  # (what a worker passes on, read once)
        return Params(values)

    # --- outbound services --------------------------------------------------------------

    async def service_start(self, request: web.Request) -> web.Response:
        app = self.service_of(request)
        params = await self.params(request)
        text = params.get("rest_calls")
        if text is None:
            text = params.get("outbound_parameters")  # Aculab: "a legacy alias"
        if text is None:
            _missing("rest_calls")
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            _malformed("rest_calls", "not JSON (or nested too deeply)")
        calls = document if isinstance(document, list) else [document]
        if not calls or not all(isinstance(c, dict) for c in calls):
            _malformed("rest_calls", "expected an object, or a list of objects")
        starts = [self._checked_call(call, n) for n, call in enumerate(calls)]
        references: list[str] = []
        placed: list[str] = []
        for target, trunk, from_user, call in starts:
            reference = secrets.token_hex(16)  # the call's application_instance_id
            try:
                call_id = await self.api.calls_or_503().place_call(
                    target,
                    app,
                    RING_TIMEOUT,
                    trunk,
                    from_user=from_user,
                    instance_id=reference,
                    outbound_parameters=json.dumps(call, separators=(",", ":")),
                    token=call.get("token"),
                )
            except (RouteError, OSError) as exc:
                # All or nothing: the calls placed already would run with no reference
                # the client knows of, so they are cancelled.
                for earlier in placed:
                    self.api.calls_or_503().hang_up_call(earlier)
                status = exc.status if isinstance(exc, RouteError) else 503
                why = str(exc) if isinstance(exc, RouteError) else f"not placed: {exc}"
                raise ApiError(status, f"http_{status}", why) from None
            placed.append(call_id)
            references.append(reference)
            logger.info("service_start: %s calls %s (instance %s)", app.name, target, reference)
        return web.json_response(references)

    def _checked_call(
        self, call: dict[str, Any], index: int
    ) -> tuple[str, str | None, str | None, dict[str, Any]]:
        """(target, trunk, From user, the call) of one ``rest_calls`` object."""
        where = "rest_calls" if index == 0 else f"rest_calls[{index}]"
        to = call.get("to")
        if not isinstance(to, str) or not to.strip():
            _missing(f"{where}.to")
        for name in ("from", "token"):
            if name in call and not isinstance(call[name], str):
                _malformed(f"{where}.{name}", "expected a string")
        try:
            target = destinations.parse(to)
        except destinations.BadDestination as exc:
            _malformed(f"{where}.to", str(exc))
        caller = call.get("from")
        if target.kind == "number":
            trunk = self.number_trunk()
            if trunk is None:
                raise ApiError(404, "not_found", f"{to} is a number and no trunk is configured")
            if not caller:
                _missing(f"{where}.from")  # Aculab: required when 'to' is a number
            return target.value, trunk, caller, call
        if target.kind == "sip":
            return target.value, None, caller or None, call
        _malformed(
            f"{where}.to",
            f"callhook's service_start calls numbers and SIP addresses, not {target.kind}",
        )

    def _instance_call(self, app: AppConfig, instance: str) -> dict[str, Any] | None:
        for call in self.api.calls_or_503().active_calls():
            if call.get("application_instance_id") == instance and call["application"] == app.name:
                return call
        return None

    async def _log_status(
        self, app: AppConfig, instance: str
    ) -> applicationstatus.InstanceStatus | None:
        if not instance.isalnum() or len(instance) > 128:
            _malformed("application_instance_id", "not an application instance id")
        try:
            data = await blocking(_read, self.api.store, app.name, f"{LOGS}{instance}.log")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return applicationstatus.read(instance, app.name, data.decode(errors="replace"))

    async def service_status(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        reference = (await self.params(request)).need("reference_id")
        call = self._instance_call(app, reference)
        if call is not None:
            status = "calling" if call["call_state"] == "calling" else "in_progress"
            return web.json_response(
                {"reference_id": reference, "status": status, "call_id": call["call_id"]}
            )
        found = await self._log_status(app, reference)
        if found is None:
            raise ApiError(404, "not_found", f"no service invocation {reference!r}")
        answer: dict[str, Any] = {
            "reference_id": reference,
            "status": "in_progress" if found.running else "completed",
            "call_id": found.call_id,
        }
        if not found.running:
            answer["call_cause"] = found.cause
            answer["call_raw_cause"] = found.raw_cause
        return web.json_response(answer)

    async def service_cancel(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        reference = (await self.params(request)).need("reference_id")
        call = self._instance_call(app, reference)
        if call is None:
            raise ApiError(404, "not_found", f"no service invocation {reference!r} running")
        self.api.calls_or_503().hang_up_call(call["call_id"])
        return web.json_response({"reference_id": reference, "status": "cancelled"})

    async def application_status(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        instance = (await self.params(request)).need("application_instance_id")
        found = await self._log_status(app, instance)
        if found is None and self.records is not None:
            # Its log deleted past its retention: its call record still tells the call.
            record = await blocking(self.records.of_instance, app.name, instance)
            found = applicationstatus.from_record(record) if record is not None else None
        if found is None:
            raise ApiError(404, "not_found", f"no application instance {instance!r}")
        return web.json_response(found.as_aculab())

    # --- media files ----------------------------------------------------------------------

    def _file(self, params: Params, name: str = "filename") -> tuple[str, str]:
        """(filetype, the store's name) of a file the request names."""
        filetype = params.need("filetype")
        if filetype not in ("media", "rest"):
            _malformed("filetype", "callhook has 'media' and 'rest' files")
        filename = _checked_name(params.need(name), name)
        if filetype == "rest":
            return filetype, f"{LOGS}{filename}"
        if filename.startswith(LOGS):
            _malformed(name, "logs/ holds the call logs: filetype rest")
        return filetype, filename

    async def file_list(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        params = await self.params(request)
        filetype = params.need("filetype")
        if filetype not in ("media", "rest"):
            _malformed("filetype", "callhook has 'media' and 'rest' files")
        base = LOGS if filetype == "rest" else ""
        filename = params.get("filename")
        if filename is not None:  # "Matches just one file"
            name = base + _checked_name(filename, "filename")
            try:
                info = await blocking(self.api.store.stat, app.name, name)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                return web.json_response({"files": []})
            return web.json_response({"files": [_file_json(info, base)]})
        prefix = params.get("prefix") or ""
        files: list[FileInfo] = []
        after = ""
        truncated = False
        while True:
            page = await blocking(self.api.store.list, app.name, base + prefix, after, 1000)
            if filetype == "media" and any(f.name.startswith(LOGS) for f in page.files):
                # The call logs sort together: step over them (they are filetype rest).
                files += [f for f in page.files if f.name < LOGS]
                after = max(page.next or "", LOGS_END)
            else:
                files += page.files
                if page.next is None:
                    break
                after = page.next
            if len(files) >= LIST_LIMIT:
                files, truncated = files[:LIST_LIMIT], True
                break
        shown = [_file_json(f, base) for f in files]
        answer: dict[str, Any] = {"files": shown}
        if truncated:
            answer["truncated"] = True  # more than LIST_LIMIT: ask with a prefix
        return web.json_response(answer)

    async def file_get(self, request: web.Request) -> web.StreamResponse:
        app = self.app_of(request)
        filetype, name = self._file(await self.params(request))
        content = "text/plain; charset=utf-8" if filetype == "rest" else "audio/wav"
        return await self.api._send_file(request, app.name, name, content)

    async def file_delete(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        filetype, name = self._file(await self.params(request))
        if filetype == "rest":
            _malformed("filetype", "call logs are not deleted through the web services")
        await blocking(self.api.store.delete, app.name, name)
        return web.json_response({"filename": name, "status": "deleted"})

    async def file_rename(self, request: web.Request) -> web.Response:
        app = self.app_of(request)
        params = await self.params(request)
        filetype, name = self._file(params)
        if filetype == "rest":
            _malformed("filetype", "call logs are not renamed through the web services")
        new_name = params.get("new_filename") or params.get("newfilename")
        if new_name is None:
            _missing("new_filename")
        new = _checked_name(new_name, "new_filename")
        if new.startswith(LOGS):
            _malformed("new_filename", "logs/ holds the call logs")
        overwrite = params.flag("overwrite", False)
        info = await blocking(self.api.store.rename, app.name, name, new, overwrite=overwrite)
        return web.json_response(_file_json(info, ""))

    async def file_write(self, request: web.Request) -> web.Response:
        """The file is the body (parameters in the query), or a multipart form's file part
        (parameters as its other fields, or in the query)."""
        app = self.app_of(request)
        values: MultiDict[str] = MultiDict(request.query)
        limit = self.api.max_upload_bytes
        if request.content_length is not None and request.content_length > limit + 65536:
            raise ApiError(413, "too_large", f"uploads are limited to {limit} bytes")
        if request.content_type == "multipart/form-data":
            reader = await request.multipart()
            # (Held in memory until the file part: at most FIELD_COUNT parts and
            # FIELD_MAX bytes of names and values in all.)
            fields = parts = 0
            async for part in reader:
                if isinstance(part, BodyPartReader) and part.filename is not None:
                    return await self._store_upload(app, Params(values), part, limit)
                parts += 1
                if parts > FIELD_COUNT:
                    _malformed("the form", f"more than {FIELD_COUNT} parts before its file")
                if not isinstance(part, BodyPartReader):
                    continue  # (a nested form: counted, not read)
                name = part.name or ""
                fields += len(name.encode())
                value = await _field(part, FIELD_MAX - fields)
                fields += len(value.encode())
                values.add(name, value)
            _missing("the file")
        return await self._store_upload(app, Params(values), request.content, limit)

    async def _store_upload(
        self, app: AppConfig, params: Params, body: Any, limit: int
    ) -> web.Response:
        filetype, name = self._file(params)
        if filetype != "media":
            _malformed("filetype", "only media files are written")
        encrypted = params.flag("encrypted")
        overwrite = params.flag("overwrite", True)
        head = bytearray()
        chunks = _chunks(body)
        async for chunk in chunks:
            head += chunk
            if len(head) >= WAV_HEAD:
                break
        if not encrypted:
            await blocking(check_wav, bytes(head[:WAV_HEAD]))
        out = await blocking(self.api.store.create, app.name, name, overwrite=overwrite)
        try:
            await blocking(out.write, bytes(head))
            size = len(head)
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "too_large", f"uploads are limited to {limit} bytes")
                await blocking(out.write, chunk)
            if encrypted and (size == 0 or size % 16):
                _malformed("encrypted", f"an aescbc file is whole 16-byte blocks, not {size} bytes")
            info = await blocking(out.commit)
        except BaseException:
            await blocking(out.abort)
            raise
        return web.json_response(_file_json(info, ""))


def _checked_name(value: str, parameter: str) -> str:
    """A file name of the media store (Aculab's leading '/' allowed), or 0002."""
    name = value.lstrip("/")
    try:
        check_name(name)
    except BadName as exc:
        _malformed(parameter, str(exc))
    return name


async def _field(part: BodyPartReader, room: int = FIELD_MAX) -> str:
    """A multipart form's text field: at most ``room`` bytes of UTF-8 (what is left of
    :data:`FIELD_MAX` for the form's names and values in all)."""
    data = bytearray()
    while True:
        # (Its name is not quoted: it may be the long part.)
        if len(data) > room:
            _malformed("the form", f"its fields come to over the {FIELD_MAX} bytes allowed")
        chunk = await part.read_chunk(CHUNK)
        if not chunk:
            break
        data += chunk
    try:
        return data.decode()
    except UnicodeDecodeError:
        _malformed((part.name or "a field")[:64], "not UTF-8 text")


async def _chunks(body: Any) -> Any:
    """The bytes of a request body or a multipart part, a chunk at a time."""
    if isinstance(body, BodyPartReader):
        while chunk := await body.read_chunk(CHUNK):
            yield chunk
        return
    async for chunk in body.iter_chunked(CHUNK):
        yield chunk


def _file_json(info: FileInfo, base: str) -> dict[str, Any]:
    return {
        "filename": info.name[len(base) :] if base else info.name,
        "size": info.size,
        "modified": info.modified,
        "modified_datetime": aculab_datetime(info.modified),
    }


def _read(store: FileStore, app: str, name: str) -> bytes:
    with store.open(app, name) as file:
        return file.read()
