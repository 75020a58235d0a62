"""The call records' part of the REST API's OpenAPI document
(``/api/v1/calls/records``, httpserver/openapi.py): its schemas and its path."""

from __future__ import annotations

from typing import Any

from callhook.httpserver.openapiparts import json_body, op, query, ref

_TIME = {"type": "string", "format": "date-time"}
_RECORD = {
    "type": "object",
    "properties": {
        "application": {"type": "string"},
        "call_id": {"type": "string", "description": "the SIP Call-ID"},
        "application_instance_id": {
            "type": ["string", "null"],
            "description": "its call log's id (null: a far leg, which has none of its own)",
        },
        "leg": {"enum": ["call", "far"], "description": "far: a connect's far leg"},
        "parent_call_id": {
            "type": ["string", "null"],
            "description": "a far leg's call (the one its connect ran on)",
        },
        "call_direction": {"enum": ["in", "out"]},
        "call_from": {"type": "string"},
        "call_to": {"type": "string"},
        "trunk": {"type": ["string", "null"], "description": "the [trunks.NAME] it used"},
        "worker": {
            "type": ["integer", "null"],
            "description": "the worker of serve --workers that ran it (null: one process)",
        },
        "started": {**_TIME, "description": "its INVITE (or the call being placed)"},
        "answered": {"type": ["string", "null"], "format": "date-time"},
        "ended": _TIME,
        "seconds_call_duration": {
            "type": "number",
            "description": "how long it was answered (0: never answered)",
        },
        "call_cause": {"type": "string", "description": "Aculab's call cause"},
        "call_raw_cause": {"type": "string", "description": "the SIP status or cause"},
        "recordings": {"type": "integer", "description": "recordings begun on the call"},
        "pages_requested": {"type": "integer"},
        "pages_failed": {"type": "integer"},
    },
}
RECORD_SCHEMAS: dict[str, Any] = {
    "CallRecord": _RECORD,
    "CallRecordList": {
        "type": "object",
        "required": ["records", "next"],
        "properties": {
            "records": {"type": "array", "items": ref("CallRecord")},
            "next": {
                "type": ["string", "null"],
                "description": "the `after` of the next page (null: the last page)",
            },
        },
    },
}


def record_paths() -> dict[str, Any]:
    """``/api/v1/calls/records``."""
    time = {"type": "string", "description": "ISO 8601 (UTC unless it says) or Unix seconds"}
    return {
        "/api/v1/calls/records": {
            "get": op(
                "The call records of ended calls, oldest first: the key's application's (the "
                "installation secret: every application's)",
                {
                    "200": {
                        **json_body(ref("CallRecordList"), "a page of records"),
                        "content": {
                            "application/json": {"schema": ref("CallRecordList")},
                            "text/csv": {"schema": {"type": "string"}},
                        },
                    }
                },
                (400, 403),
                parameters=[
                    query("since", "calls that started at or after this time", time),
                    query("until", "calls that started before this time", time),
                    query(
                        "application",
                        "applications, comma-separated (the installation secret's key; an "
                        "application's key: its own only)",
                        {"type": "string"},
                    ),
                    query("cause", "calls that ended with this call cause", {"type": "string"}),
                    query("after", "the `next` of the previous page", {"type": "string"}),
                    query(
                        "limit",
                        "records per page",
                        {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                    ),
                    query(
                        "format",
                        "csv: every matching record as CSV (no pages)",
                        {"enum": ["json", "csv"], "default": "json"},
                    ),
                ],
            )
        }
    }
