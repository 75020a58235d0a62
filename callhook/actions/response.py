"""The page response envelope, ``{"actions": [...], "token": ..., "api_version": ...}``.

:func:`parse_response` is the one entry point the call runner uses; it never
raises on bad input, it returns the list of :class:`Problem` instead, each with
the JSON path of the offending value. :func:`json_schema` publishes the same
rules as a JSON Schema (``callhook schema``). The actions themselves are the
models of :mod:`callhook.actions.schema`.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    create_model,
)

from callhook.actions.catalogue import ACTION_MODELS
from callhook.actions.fields import Opt, Strict, pattern
from callhook.actions.schema import Cipher, PlayStep

# --- the response envelope --------------------------------------------------------------

# Each action in the list is an object with one key, the action name (docs/reference.md,
# "The response").
# One wrapper model per action (``GetNumberStep`` with the one property ``get_number``)
# makes the JSON Schema of the envelope say exactly that.
_STEPS: dict[str, type[Strict]] = {"play": PlayStep}
for _name, _model in ACTION_MODELS.items():
    if _name not in _STEPS:
        _title = "".join(part.title() for part in _name.split("_")) + "Step"
        _fields: dict[str, Any] = {_name: (_model, ...)}
        _STEPS[_name] = create_model(_title, __base__=Strict, **_fields)


def _action_kind(value: Any) -> str | None:
    if isinstance(value, dict) and len(value) == 1:
        (key,) = value
        if key in ACTION_MODELS:
            return f"~{key}"
    return None


if TYPE_CHECKING:
    ActionItem: TypeAlias = Strict
else:
    ActionItem = Annotated[
        Union[tuple(Annotated[step, Tag(f"~{name}")] for name, step in _STEPS.items())],  # noqa: UP007
        Discriminator(_action_kind),
    ]


def _check_api_version(value: str) -> str:
    if not re.fullmatch(r"2(\.\d+)*", value):
        raise ValueError(f"callhook implements REST API version 2; expected '2.0', got {value!r}")
    return value


ApiVersion = Annotated[str, AfterValidator(_check_api_version), pattern(r"^2(\.\d+)*$")]


class Envelope(Strict):
    """What a page answers: ``{"actions": [...], "token": "...", "api_version": "2.0"}``."""

    actions: list[ActionItem]
    # Aculab: "an optional user-defined string of up to 5000 characters", null by default.
    token: Annotated[str, Field(max_length=5000)] | None = None
    api_version: Opt[ApiVersion] = None
    # Aculab's key for encrypting a whole-call recording: a connect's far leg takes it
    # from its first page's response; the service's own whole-call recording callhook
    # does not make, so on any other page it is checked and ignored (the call log says so).
    call_recording_cipher: Opt[Cipher] = None


# --- parsing with precise problems --------------------------------------------------------


class Problem(BaseModel):
    """One validation problem: where (a JSON path such as ``$.actions[0].play``) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class Response(BaseModel):
    """A validated page response: the actions, in order, and the token."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    actions: list[Any]
    token: str | None
    #: The response's ``call_recording_cipher`` (a connect's far leg: its recording's).
    call_recording_cipher: Cipher | None = None


class InvalidResponse(Exception):
    """A page answered something that is not a valid action list."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _json_path(loc: tuple[int | str, ...]) -> str:
    path = "$"
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not part.startswith("~"):  # discriminator tags are not part of the document
            path += f".{part}"
    return path


def _describe(value: Any, private: list[str] | None = None) -> str:
    text = json.dumps(value, ensure_ascii=False) if _jsonable(value) else repr(value)
    for secret in private or []:  # before shortening: no prefix of a private text shows
        text = text.replace(secret, "<private text>")
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _message(err: Any, private: list[str]) -> str:
    kind = err["type"]
    msg: str = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif kind == "extra_forbidden":
        msg = "unknown property"
    elif kind == "missing":
        msg = "required property is missing"
    elif kind == "union_tag_invalid" or kind == "union_tag_not_found":
        item = err.get("input")
        if isinstance(item, dict) and len(item) == 1:
            msg = f"unknown action {next(iter(item))!r}; expected one of {', '.join(ACTION_MODELS)}"
        elif isinstance(item, dict):
            keys = ", ".join(map(str, item)) or "none"
            msg = f"expected an object with exactly one key, the action name; got keys: {keys}"
        else:
            msg = (
                f"expected an object with one key, the action name; got {_describe(item, private)}"
            )
    else:
        msg = msg[0].lower() + msg[1:]
        if "input" in err and kind not in ("play_item",):
            msg += f", got {_describe(err['input'], private)}"
    return msg


def _problems(exc: ValidationError, document: Any) -> list[Problem]:
    private = _private_texts(document)
    problems = []
    for err in exc.errors():
        message = _message(err, private)
        for text in private:  # and in case a message quotes it some other way
            message = message.replace(text, "<private text>")
        problems.append(Problem(path=_json_path(err["loc"]), message=message))
    return problems


def _private_texts(node: Any) -> list[str]:
    """Every string under a ``text_to_say`` whose item says ``text_is_private: true``.

    Problems quote the values they are about; these never reach a log (play media
    ``text_is_private``), not even from a list that is otherwise invalid.
    """
    found: list[str] = []
    if isinstance(node, dict):
        if node.get("text_is_private") is True:
            found += _strings(node.get("text_to_say"))
        for value in node.values():
            found += _private_texts(value)
    elif isinstance(node, list):
        for value in node:
            found += _private_texts(value)
    # Longest first, so a text is never half-replaced by one of its own parts.
    return sorted({t for t in found if t}, key=len, reverse=True)


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node, json.dumps(node, ensure_ascii=False)[1:-1]]  # as quoted in JSON too
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    if isinstance(node, dict):
        return [s for item in node.values() for s in _strings(item)]
    if isinstance(node, int | float) and not isinstance(node, bool):
        return [json.dumps(node)]  # a number where the text belongs is private too
    return []


def parse_response(body: bytes | str) -> Response:
    """Parse and validate a page's response body.

    Raises :class:`InvalidResponse` listing every problem (the body is not JSON,
    or is JSON but not a valid action list).
    """
    try:
        return _parse(body)
    except RecursionError:  # nesting deeper than Python's stack: not an action list
        message = "nested too deeply to be an action list"
        raise InvalidResponse([Problem(path="$", message=message)]) from None


def _parse(body: bytes | str) -> Response:
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidResponse([Problem(path="$", message=f"not valid JSON: {exc}")]) from None
    if not isinstance(document, dict):
        shown = _describe(document, _private_texts(document))
        message = f"expected an object with 'actions', got {shown}"
        raise InvalidResponse([Problem(path="$", message=message)])
    try:
        envelope = Envelope.model_validate(document)
    except ValidationError as exc:
        raise InvalidResponse(_problems(exc, document)) from None
    actions = [getattr(item, next(iter(type(item).model_fields))) for item in envelope.actions]
    return Response(
        actions=actions,
        token=envelope.token,
        call_recording_cipher=envelope.call_recording_cipher,
    )


def _drop_null_defaults(node: Any) -> Any:
    # "default": null on an Opt property says nothing: its default is to be left out.
    if isinstance(node, dict):
        return {
            k: _drop_null_defaults(v) for k, v in node.items() if not (k == "default" and v is None)
        }
    if isinstance(node, list):
        return [_drop_null_defaults(v) for v in node]
    return node


_KEPT_OUTSIDE = ("title", "description", "default")


def _null_allowed(node: Any) -> Any:
    # A null optional property means "not given" (fields.Strict): every property that
    # is not required also takes null in the published schema.
    if isinstance(node, list):
        return [_null_allowed(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _null_allowed(v) for k, v in node.items()}
    properties = node.get("properties")
    if node.get("type") == "object" and isinstance(properties, dict):
        required = set(node.get("required", []))
        node["properties"] = {
            name: prop if name in required else _or_null(prop) for name, prop in properties.items()
        }
    return node


def _or_null(prop: dict[str, Any]) -> dict[str, Any]:
    if prop.get("type") == "null" or any(
        branch.get("type") == "null" for branch in prop.get("anyOf", [])
    ):
        return prop
    inner = {k: v for k, v in prop.items() if k not in _KEPT_OUTSIDE}
    outer = {k: v for k, v in prop.items() if k in _KEPT_OUTSIDE}
    return {**outer, "anyOf": [inner, {"type": "null"}]}


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the response envelope."""
    schema: dict[str, Any] = _null_allowed(_drop_null_defaults(Envelope.model_json_schema()))
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "callhook page response (Aculab Cloud REST API v2 shape)"
    return schema
