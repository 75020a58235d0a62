"""The building blocks of the REST API's OpenAPI document (httpserver/openapi.py): a
reference, a JSON body, an operation with its error responses, a query parameter."""

from __future__ import annotations

from typing import Any

#: The response of each error status, by reference.
ERRORS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    413: "TooLarge",
    415: "UnsupportedMediaType",
    503: "Unavailable",
    507: "StorageFull",
}

ERROR_TEXT = {
    400: "Bad input: `bad_request`, `bad_name`, `outside_namespace`, `reserved_name`.",
    401: "No API key, or not a valid one: `unauthorized`.",
    403: "`forbidden`: not this key's to see or do (another application's records).",
    404: "`not_found`: no such file, log or call for this application (or an unknown route).",
    409: "`file_exists` (not overwriting), `name_conflict` (a file and a directory) or "
    "`already_recording` (a conference room's recording runs).",
    413: "`too_large`: over the upload limit, or a JSON body over 64 KiB.",
    415: "`unsupported_media_type`, `not_wav`, `unsupported_wav` or `not_aescbc`.",
    503: "`unavailable`: this server cannot do it now.",
    507: "`storage_full`: the media file store has no room.",
}


def ref(name: str) -> dict[str, str]:
    """A reference to a schema of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def json_body(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """A response (or body) of JSON in ``schema``."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def op(
    summary: str,
    ok: dict[str, dict[str, Any]],
    errors: tuple[int, ...],
    **extra: Any,
) -> dict[str, Any]:
    responses = dict(ok)
    for status in (401, *errors):
        responses[str(status)] = {"$ref": f"#/components/responses/{ERRORS[status]}"}
    return {"summary": summary, "responses": responses, **extra}


def query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }
