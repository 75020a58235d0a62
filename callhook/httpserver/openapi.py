"""The OpenAPI 3.1 document of the REST API (``GET /openapi.json``), written by hand.

It describes every route :class:`callhook.httpserver.restapi.Api` serves and the
two older ones of ``httpserver/server.py``; a unit test checks that the two agree
and that the document is valid OpenAPI. docs/api.md says the same for people.
"""

from __future__ import annotations

from typing import Any

from callhook import __version__
from callhook.httpserver.openapiparts import ERROR_TEXT, ERRORS, json_body, op, query, ref
from callhook.httpserver.openapirecords import RECORD_SCHEMAS, record_paths
from callhook.httpserver.openapirooms import ROOM_SCHEMAS, room_paths

_PAGING = [
    query("after", "the `next` of the previous page", {"type": "string"}),
    query(
        "limit",
        "files per page",
        {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
    ),
]
_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "the file's name in the namespace; it may hold `/` (e.g. `prompts/welcome.wav`)",
    "schema": {
        "type": "string",
        "pattern": "^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$",
        "maxLength": 255,
    },
}
_CALL_ID = {
    "name": "call_id",
    "in": "path",
    "required": True,
    "description": "the call's id (its SIP Call-ID), percent-encoded",
    "schema": {"type": "string"},
}
_FILE_INFO = {
    "type": "object",
    "required": ["name", "size", "modified"],
    "properties": {
        "name": {"type": "string"},
        "size": {"type": "integer", "description": "bytes"},
        "modified": {"type": "string", "format": "date-time"},
    },
}
_CALL = {
    "type": "object",
    "properties": {
        "call_id": {"type": "string"},
        "call_direction": {"enum": ["in", "out"]},
        "call_from": {"type": "string"},
        "call_to": {"type": "string"},
        "call_target": {"type": "string"},
        "call_state": {"enum": ["inbound", "calling", "answered"]},
        "started": {"type": "string", "format": "date-time"},
        "bridged_to": {
            "description": "the far leg a connect joined this call to (absent: none)",
            "type": "object",
            "properties": {"call_id": {"type": "string"}, "call_to": {"type": "string"}},
        },
    },
}
_SCHEMAS: dict[str, Any] = {
    **ROOM_SCHEMAS,
    **RECORD_SCHEMAS,
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "description": "stable, snake_case"},
                    "message": {"type": "string", "description": "for people; may change"},
                },
            }
        },
    },
    "FileInfo": _FILE_INFO,
    "FileList": {
        "type": "object",
        "properties": {
            "files": {"type": "array", "items": ref("FileInfo")},
            "next": {"type": ["string", "null"], "description": "`after` for the next page"},
        },
    },
    "LogList": {
        "type": "object",
        "properties": {
            "logs": {
                "type": "array",
                "items": {
                    "allOf": [
                        ref("FileInfo"),
                        {"properties": {"application_instance_id": {"type": "string"}}},
                    ]
                },
            },
            "next": {"type": ["string", "null"]},
        },
    },
    "Call": _CALL,
    "CallList": {
        "type": "object",
        "properties": {"calls": {"type": "array", "items": ref("Call")}},
    },
    "Rename": {
        "type": "object",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "description": "the new name"},
            "overwrite": {"type": "boolean", "default": False},
        },
    },
    "PlaceCall": {
        "type": "object",
        "required": ["to"],
        "additionalProperties": False,
        "properties": {
            "to": {
                "type": "string",
                "description": "a sip: or sips: URI; with a trunk, also a number (+ and digits)",
            },
            "trunk": {
                "type": "string",
                "description": "the [trunks.NAME] to call through (its proxy, credentials, "
                "caller id)",
            },
            "application_parameters": {"type": "string", "description": "for this call only"},
            "ring_timeout": {"type": "number", "minimum": 1, "maximum": 600, "default": 60},
            "classify_callee": {
                "description": "who answered, found before the first page (true: the "
                "defaults; the object is connect's classify_callee; left out: the "
                "application's configured one)",
                "oneOf": [{"type": "boolean"}, {"type": "object"}, {"type": "null"}],
            },
        },
    },
    "Ban": {
        "type": "object",
        "properties": {
            "address": {"type": "string"},
            "reason": {"type": "string"},
            "seconds_left": {"type": "integer"},
            "worker": {
                "type": ["integer", "string"],
                "description": "where it holds: a worker's index, a node's address, or"
                ' "front" (Kamailio, in front of the workers)',
            },
            "front": {"type": "string", "description": "the machine of that Kamailio"},
        },
        "required": ["address", "reason", "seconds_left"],
    },
    "TrunkState": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "state": {
                "enum": ["registered", "registering", "failing", "unregistered", "static"],
                "description": "static: a trunk without a registrar",
            },
            "reason": {"type": "string", "description": "why it is failing or unregistered"},
            "expires_in": {
                "type": ["integer", "null"],
                "description": "seconds until the registration lapses",
            },
            "next_try_in": {
                "type": ["integer", "null"],
                "description": "seconds until the next attempt while failing",
            },
        },
        "required": ["name", "state", "reason", "expires_in", "next_try_in"],
    },
    "RegisteredPhone": {
        "type": "object",
        "properties": {
            "user": {"type": "string", "description": "the [users.NAME] it registered as"},
            "contact": {"type": "string", "description": "its Contact"},
            "transport": {"enum": ["udp", "tcp", "tls"]},
            "source": {
                "type": "string",
                "description": "HOST:PORT its REGISTER came from: where it is called",
            },
            "expires_in": {"type": "integer", "description": "seconds until it lapses"},
        },
        "required": ["user", "contact", "transport", "source", "expires_in"],
    },
    "CallPlaced": {
        "type": "object",
        "properties": {
            "call_id": {"type": "string"},
            "to": {"type": "string"},
            "application": {"type": "string"},
            "status": {"const": "calling"},
        },
    },
}
_WAV = {"schema": {"type": "string", "contentMediaType": "audio/wav"}}


def document(max_upload_bytes: int) -> dict[str, Any]:
    """The OpenAPI document, with this server's upload limit."""
    media_item = {
        "parameters": [_NAME],
        "get": op(
            "Download a file",
            {"200": {"description": "the file", "content": {"audio/wav": _WAV}}},
            (400, 404),
        ),
        "put": op(
            f"Upload a WAV file (at most {max_upload_bytes} bytes; PCM, IEEE float, A-law or "
            "µ-law, any rate and channel count)",
            {
                "200": json_body(ref("FileInfo"), "replaced"),
                "201": json_body(ref("FileInfo"), "created"),
            },
            (400, 409, 413, 415, 507),
            parameters=[
                query("overwrite", "replace an existing file (default true)", {"type": "boolean"}),
                query(
                    "encrypted",
                    "the file is an aescbc-encrypted WAV, for play's decryption_cipher: only its"
                    " size is checked (a whole number of 16-byte blocks)",
                    {"type": "boolean"},
                ),
            ],
            requestBody={"required": True, "content": {"audio/wav": _WAV}},
        ),
        "patch": op(
            "Rename a file",
            {"200": json_body(ref("FileInfo"), "renamed")},
            (400, 404, 409, 413),
            requestBody={
                "required": True,
                "content": {"application/json": {"schema": ref("Rename")}},
            },
        ),
        "delete": op("Delete a file", {"204": {"description": "deleted"}}, (400, 404)),
    }
    paths: dict[str, Any] = {
        "/api/v1/media": {
            "get": op(
                "List the application's media files (call logs excepted), by name",
                {"200": json_body(ref("FileList"), "a page of files")},
                (400,),
                parameters=[
                    query("prefix", "only names starting so", {"type": "string"}),
                    *_PAGING,
                ],
            )
        },
        "/api/v1/media/{name}": media_item,
        "/api/v1/logs": {
            "get": op(
                "List the application's call logs",
                {"200": json_body(ref("LogList"), "a page of logs")},
                (400,),
                parameters=_PAGING,
            )
        },
        "/api/v1/logs/{id}": {
            "get": op(
                "Download a call log",
                {
                    "200": {
                        "description": "the log",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
                (400, 404),
                parameters=[
                    {
                        "name": "id",
                        "in": "path",
                        "required": True,
                        "description": "an application_instance_id (log_filename: logs/<id>.log)",
                        "schema": {"type": "string"},
                    }
                ],
            )
        },
        "/api/v1/calls": {
            "get": op(
                "List the application's calls in progress",
                {"200": json_body(ref("CallList"), "the calls")},
                (503,),
            ),
            "post": op(
                "Place an outbound call that runs this application when answered",
                {"202": json_body(ref("CallPlaced"), "the INVITE is out")},
                (400, 404, 413, 503),
                requestBody={
                    "required": True,
                    "content": {"application/json": {"schema": ref("PlaceCall")}},
                },
            ),
        },
        "/api/v1/calls/{call_id}": {
            "parameters": [_CALL_ID],
            "get": op(
                "A call in progress", {"200": json_body(ref("Call"), "the call")}, (404, 503)
            ),
            "delete": op(
                "Hang up a call (its final page says `dropped`; a call still ringing: `no_answer`)",
                {"202": {"description": "hanging up; it leaves the list when it has ended"}},
                (404, 503),
            ),
        },
        **record_paths(),
        **room_paths(),
        "/api/calls": {
            "post": op(
                "Older: place a call for any application (the installation secret's key)",
                {"202": {"description": "calling"}},
                (400, 404, 413, 503),
            )
        },
        "/api/calls/{call_id}/log": {
            "get": op(
                "Older: a recent call's log so far, by its SIP Call-ID, for any application "
                "(the installation secret's key; callhook test --sip reads its calls with it)",
                {
                    "200": {
                        "description": "the log",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
                (404,),
                parameters=[
                    {
                        "name": "call_id",
                        "in": "path",
                        "required": True,
                        "description": "the SIP Call-ID of one of the last 1000 calls",
                        "schema": {"type": "string"},
                    }
                ],
            )
        },
        "/api/stats": {
            "get": op(
                "Server counters (the installation secret's key)",
                {"200": json_body({"type": "object"}, "counters")},
                (),
            )
        },
        "/api/bans": {
            "get": op(
                "SIP sources banned now: flooding, failed authentications "
                "(the installation secret's key)",
                {"200": json_body({"type": "array", "items": ref("Ban")}, "bans")},
                (),
            )
        },
        "/api/bans/{address}": {
            "parameters": [
                {"name": "address", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "delete": op(
                "Lift a ban (the installation secret's key)",
                {"200": json_body({"type": "object"}, "lifted")},
                (404,),
            ),
        },
        "/api/trunks": {
            "get": op(
                "The trunks and their registration state (the installation secret's key)",
                {"200": json_body({"type": "array", "items": ref("TrunkState")}, "trunks")},
                (),
            )
        },
        "/api/users": {
            "get": op(
                "The phones registered now, from any worker or node (the installation "
                "secret's key)",
                {"200": json_body({"type": "array", "items": ref("RegisteredPhone")}, "phones")},
                (),
            )
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {"200": json_body({"type": "object"}, "OpenAPI 3.1")},
            }
        },
    }
    responses = {
        name: json_body(ref("Error"), ERROR_TEXT[status]) for status, name in ERRORS.items()
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "callhook REST API",
            "version": __version__,
            "description": "Media files, call logs, calls and conference rooms of the "
            "application whose API key is given. Every error is "
            '`{"error": {"code", "message"}}`.',
        },
        "servers": [{"url": "/"}],
        "security": [{"apiKey": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The application's api_key ([apps.<name>] in the config)",
                }
            },
            "schemas": _SCHEMAS,
            "responses": responses,
        },
    }
