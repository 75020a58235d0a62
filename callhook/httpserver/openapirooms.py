"""The conference rooms' part of the REST API's OpenAPI document
(``/api/v1/conferences``, httpserver/openapi.py): its schemas and its paths."""

from __future__ import annotations

from typing import Any

from callhook.httpserver.openapiparts import json_body, op, ref

_ROOM = {
    "type": "object",
    "required": ["conference_name", "state", "participant_count", "created"],
    "properties": {
        "conference_name": {"type": "string"},
        "state": {"enum": ["HOLDING", "ACTIVE"]},
        "participant_count": {"type": "integer"},
        "created": {"type": "string", "format": "date-time"},
    },
}
_PARTICIPANT = {
    "type": "object",
    "required": ["participant_id", "talker", "muted", "start_on_entry", "destroy_on_exit"],
    "properties": {
        "participant_id": {
            "type": "string",
            "description": "the application instance that joined it (Aculab's conference "
            "participant id)",
        },
        "talker": {"type": "boolean"},
        "muted": {"type": "boolean"},
        "start_on_entry": {"type": "boolean"},
        "destroy_on_exit": {"type": "boolean"},
        "joined": {"type": "string", "format": "date-time"},
    },
}
_ROOM_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "the room's name (URL-encoded)",
    "schema": {"type": "string"},
}
_PARTICIPANT_ID = {
    "name": "pid",
    "in": "path",
    "required": True,
    "description": "the participant's id",
    "schema": {"type": "string"},
}

#: The rooms' schemas, by name.
ROOM_SCHEMAS: dict[str, Any] = {
    "Conference": _ROOM,
    "ConferenceList": {
        "type": "object",
        "properties": {"conferences": {"type": "array", "items": ref("Conference")}},
    },
    "Participant": _PARTICIPANT,
    "ParticipantList": {
        "type": "object",
        "properties": {
            "conference_name": {"type": "string"},
            "state": {"enum": ["HOLDING", "ACTIVE"]},
            "participants": {"type": "array", "items": ref("Participant")},
        },
    },
    "ParticipantOptions": {
        "type": "object",
        "minProperties": 1,
        "additionalProperties": False,
        "properties": {"muted": {"type": "boolean"}, "talker": {"type": "boolean"}},
    },
    "RecordRoom": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "mode": {"enum": ["mixed", "separate"], "default": "mixed"},
            "channels": {"type": "integer", "minimum": 1, "maximum": 16},
            "recording_available_page": {
                "type": "object",
                "required": ["url"],
                "properties": {
                    "url": {"type": "string", "format": "uri"},
                    "method": {"enum": ["POST", "GET"], "default": "POST"},
                },
            },
        },
    },
    "RoomRecording": {
        "type": "object",
        "properties": {
            "conference_name": {"type": "string"},
            "filename": {"type": "string"},
            "mode": {"enum": ["mixed", "separate"]},
            "channels": {"type": "integer"},
        },
    },
    "RoomRecordingStopped": {
        "type": "object",
        "properties": {
            "conference_name": {"type": "string"},
            "filename": {"type": "string"},
            "seconds_duration": {"type": "number"},
        },
    },
    "Ejected": {
        "type": "object",
        "properties": {"participant_id": {"type": "string"}, "ejected": {"const": True}},
    },
}


def room_paths() -> dict[str, Any]:
    """The ``/api/v1/conferences`` paths."""
    return {
        "/api/v1/conferences": {
            "get": op(
                "The application's conference rooms in progress, every worker's",
                {"200": json_body(ref("ConferenceList"), "the rooms")},
                (),
            )
        },
        "/api/v1/conferences/{name}/participants": {
            "parameters": [_ROOM_NAME],
            "get": op(
                "A room's participants",
                {"200": json_body(ref("ParticipantList"), "the room and its participants")},
                (404,),
            ),
        },
        "/api/v1/conferences/{name}/participants/{pid}": {
            "parameters": [_ROOM_NAME, _PARTICIPANT_ID],
            "patch": op(
                "Mute or unmute a participant, make it a talker or a listener",
                {"200": json_body(ref("Participant"), "the participant now")},
                (400, 404),
                requestBody={
                    "required": True,
                    "content": {"application/json": {"schema": ref("ParticipantOptions")}},
                },
            ),
            "delete": op(
                "Put a participant out of the room (its action's next_page follows)",
                {"200": json_body(ref("Ejected"), "ejected")},
                (404,),
            ),
        },
        "/api/v1/conferences/{name}/recording": {
            "parameters": [_ROOM_NAME],
            "post": op(
                "Record the room as one file until it ends or is stopped (mixed, or a channel "
                "per participant); recording_available_page is notified once it is safe",
                {"201": json_body(ref("RoomRecording"), "recording")},
                (400, 404, 409, 507),
                requestBody={
                    "required": False,
                    "content": {"application/json": {"schema": ref("RecordRoom")}},
                },
            ),
            "delete": op(
                "Stop the room's recording",
                {"200": json_body(ref("RoomRecordingStopped"), "stopped")},
                (404,),
            ),
        },
    }
