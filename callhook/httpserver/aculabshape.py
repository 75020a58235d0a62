"""Aculab's web services' paths and error shape, shared by the routes that serve them
(:mod:`callhook.webservices.aculab`), the error middleware (:mod:`callhook.httpserver.restapi`)
and the workers that pass requests on (:mod:`callhook.cluster.siblings`)."""

from __future__ import annotations

import time

from aiohttp import web
from multidict import MultiDict

#: Aculab's web services (:mod:`callhook.webservices.aculab`): the service is the path.
WEB_SERVICES = (
    "service_start",
    "service_cancel",
    "service_status",
    "application_status",
    "file_list",
    "file_get",
    "file_write",
    "file_delete",
    "file_rename",
    "webrtc_generate_token",
    "webrtc_registered_clients",
    "conference_list",
    "conference_participant_list",
    "conference_participant_set_options",
    "conference_participant_eject",
)
_WEB_SERVICE_PATHS = frozenset(f"/{name}" for name in WEB_SERVICES)
#: The request's key under which a web service keeps the parameters it read (query and
#: form together), for a worker that passes the request on (cluster/siblings.py).
WEB_SERVICE_PARAMS = web.RequestKey("callhook.webservice.params", MultiDict[str])
#: Where a web service error's ``link`` points: the page that documents them.
WEB_SERVICES_LINK = "docs/aculab.md#web-services"


def is_webservice(path: str) -> bool:
    """Whether ``path`` is one of Aculab's web services (its errors have Aculab's shape)."""
    return path in _WEB_SERVICE_PATHS


def aculab_error(request: web.Request, status: int, code: str, text: str) -> web.Response:
    """Aculab's error JSON (its Web Service Errors page): ``code`` a four-digit code, or
    ``HTTP <status>``; times as ``YYYY-MM-DD_hh:mm:ss`` UTC."""
    now = time.strftime("%Y-%m-%d_%H:%M:%S", time.gmtime())
    aculab_code = code if code.isdigit() else f"HTTP {status}"
    body = {
        "error": {"code": aculab_code, "text": text, "datetime": now, "link": WEB_SERVICES_LINK},
        "request": {"url": request.path, "datetime": now},
    }
    headers = {"WWW-Authenticate": 'Basic realm="callhook"'} if status == 401 else None
    return web.json_response(body, status=status, headers=headers)
