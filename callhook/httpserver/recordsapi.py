"""``GET /api/v1/calls/records``: the call records (:mod:`callhook.store.callrecords`).

An application's API key sees its own records; the installation secret (the operator's,
as for ``/api/stats``) sees every application's, and may pick some with
``application``. Filters: ``since`` and ``until`` (when calls started: ISO 8601 or Unix
seconds; ``until`` excluded), ``cause`` (Aculab's call cause). JSON pages of ``limit``
records (``after``: the ``next`` of the previous page), or with ``format=csv`` every
matching record as CSV, written as it is read.
"""

from __future__ import annotations

import csv
import datetime
import hmac
import io
from typing import Any

from aiohttp import web

from callhook.httpserver.restapi import Api, ApiError, blocking, iso_time
from callhook.store.callrecords import PAGE_MAX, CallRecord, CallRecords, Filters

#: The fields of a record as the API gives it, in order (CSV's columns).
FIELDS = (
    "application",
    "call_id",
    "application_instance_id",
    "leg",
    "parent_call_id",
    "call_direction",
    "call_from",
    "call_to",
    "trunk",
    "worker",
    "started",
    "answered",
    "ended",
    "seconds_call_duration",
    "call_cause",
    "call_raw_cause",
    "recordings",
    "pages_requested",
    "pages_failed",
)
_PARAMETERS = frozenset({"since", "until", "application", "cause", "after", "limit", "format"})


class RecordsApi:
    """The route's handler (see the module docstring)."""

    def __init__(self, records: CallRecords, api: Api, installation_key: str) -> None:
        self.records = records
        self.api = api
        self._installation_key = installation_key.encode()

    async def list_records(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        unknown = set(query) - _PARAMETERS
        if unknown:
            names = ", ".join(sorted(unknown))
            raise ApiError(400, "bad_request", f"unknown query parameter(s): {names}")
        filters = Filters(
            apps=self._apps(request),
            since=_time(query, "since"),
            until=_time(query, "until"),
            cause=query.get("cause") or None,
        )
        form = query.get("format", "json")
        if form not in ("json", "csv"):
            raise ApiError(400, "bad_request", "'format' must be json or csv")
        after = _whole(query, "after", 0, 0, 2**62)
        if form == "csv":
            return await self._csv(request, filters, after)
        limit = _whole(query, "limit", 100, 1, PAGE_MAX)
        page = await blocking(self.records.page, filters, after, limit)
        return web.json_response(
            {
                "records": [as_json(record) for _, record in page.records],
                "next": str(page.next) if page.next is not None else None,
            }
        )

    def _apps(self, request: web.Request) -> tuple[str, ...] | None:
        """The applications the key may see and the request asks for (None: every one)."""
        asked = [name for name in request.query.get("application", "").split(",") if name]
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            key.strip().encode(), self._installation_key
        ):
            return tuple(asked) or None  # the operator's: any application
        own = self.api.app_of(request)
        if any(name != own for name in asked):
            raise ApiError(403, "forbidden", "an application's key sees its own records only")
        return (own,)

    async def _csv(self, request: web.Request, filters: Filters, after: int) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/csv; charset=utf-8",
                "Content-Disposition": 'attachment; filename="call-records.csv"',
            }
        )
        await response.prepare(request)
        await response.write(_csv_rows([FIELDS]))
        while True:
            page = await blocking(self.records.page, filters, after, PAGE_MAX)
            rows = [[as_json(record)[name] for name in FIELDS] for _, record in page.records]
            if rows:
                await response.write(_csv_rows(rows))
            if page.next is None:
                break
            after = page.next
        await response.write_eof()
        return response


def as_json(record: CallRecord) -> dict[str, Any]:
    """A record as the API gives it."""
    return {
        "application": record.app,
        "call_id": record.call_id,
        "application_instance_id": record.instance_id or None,
        "leg": record.leg,
        "parent_call_id": record.parent_call_id or None,
        "call_direction": record.direction,
        "call_from": record.call_from,
        "call_to": record.call_to,
        "trunk": record.trunk or None,
        "worker": record.worker,
        "started": iso_time(record.started),
        "answered": iso_time(record.answered) if record.answered is not None else None,
        "ended": iso_time(record.ended),
        "seconds_call_duration": round(record.seconds, 3),
        "call_cause": record.cause,
        "call_raw_cause": record.raw_cause,
        "recordings": record.recordings,
        "pages_requested": record.pages,
        "pages_failed": record.pages_failed,
    }


def _csv_rows(rows: list[Any]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue().encode()


def _time(query: Any, name: str) -> float | None:
    """A time parameter: Unix seconds, or ISO 8601 (UTC unless it says otherwise)."""
    value = query.get(name)
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ApiError(
            400, "bad_request", f"'{name}' must be a time: ISO 8601 or Unix seconds"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def _whole(query: Any, name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(query.get(name, str(default)))
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ApiError(400, "bad_request", f"'{name}' must be a whole number from {low} to {high}")
    return value
