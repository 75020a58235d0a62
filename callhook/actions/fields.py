"""The field types of the wire models: what a digit, a URL, a file name or a word is.

Each type carries its check (with the message a problem reports) and, through
``pattern``, the same rule for the published JSON Schema. :class:`Strict` is the
base of every wire model: unknown properties and wrong JSON types are errors, and
``null`` for an optional property (``Opt``) means "not given".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from callhook.speech import ssml
from callhook.store.names import BadName, check_name

DIGIT_CHARACTERS = "0123456789ABCD#*"


def _check_digit_or_empty(value: str) -> str:
    if len(value) > 1 or (value and value not in DIGIT_CHARACTERS):
        raise ValueError(
            f"expected one digit of {DIGIT_CHARACTERS} or an empty string, got {value!r}"
        )
    return value


def _check_digits(value: str) -> str:
    bad = sorted({c for c in value if c not in DIGIT_CHARACTERS})
    if bad:
        raise ValueError(
            f"expected digits from {DIGIT_CHARACTERS}, got {value!r} (not digits: {''.join(bad)!r})"
        )
    return value


def hex_of(*lengths: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        wanted = " or ".join(str(n) for n in lengths)
        if not re.fullmatch(r"[0-9A-Fa-f]*", value):
            raise ValueError(f"expected {wanted} hexadecimal characters (0-9, a-f), got others")
        if len(value) not in lengths:
            raise ValueError(
                f"expected {wanted} hexadecimal characters, got {len(value)} characters"
            )
        return value

    return check


def _check_language(value: str) -> str:
    # BCP-47 language tag, e.g. en-US, en-GB, fr-FR, cmn-Hans-CN.
    if not re.fullmatch(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*", value):
        raise ValueError(f"expected a BCP-47 language tag such as 'en-US', got {value!r}")
    return value


def _check_page_url(value: str) -> str:
    # Absolute http(s) URLs, or a URL relative to the page that returned the action.
    if not value.strip():
        raise ValueError("expected a page URL, got an empty string")
    scheme = value.split(":", 1)[0].lower() if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value) else ""
    if scheme and scheme not in ("http", "https"):
        raise ValueError(f"expected an http or https URL (or a relative one), got {value!r}")
    return value


def _check_file_name(value: str) -> str:
    # Names in the application's media file namespace (docs/api.md): the store's own
    # rules, so a name that could never be played is refused when the list is validated.
    try:
        check_name(value)
    except BadName as exc:
        raise ValueError(f"expected a file name in the media file store: {exc}") from None
    return value


def _check_text_to_say(value: str) -> str:
    # SSML (a text that starts with <speak) must be well formed: its error, where in the
    # text, is the action list's (docs/behaviour.md, "SSML").
    try:
        ssml.check(value)
    except ssml.SsmlError as exc:
        raise ValueError(str(exc)) from None
    return value


def _check_words(value: str) -> str:
    # Words to listen for (a menu option, a barge-in phrase) need something to hear in them.
    if not re.search(r"\w", value):
        raise ValueError(f"expected a word or short phrase, got {value!r}")
    return value


T = TypeVar("T")


class _Optional:
    """An optional property: left out (or ``null``: :class:`Strict` drops it) for its
    default. Pydantic sees just ``T``, so an error inside the value keeps a plain JSON
    path (no union branches in it)."""

    def __class_getitem__(cls, item: Any) -> Any:
        return item


if TYPE_CHECKING:
    Opt: TypeAlias = T | None  # for the type checker: None means "not given"
else:
    Opt = _Optional


def pattern(regex: str) -> Any:
    # The checks above give the messages; this puts the same rule into the JSON Schema.
    return Field(json_schema_extra={"pattern": regex})


Words = Annotated[str, AfterValidator(_check_words), pattern(r"\w")]
#: Text to speak: plain, or SSML (``<speak>...</speak>``).
TextToSay = Annotated[str, Field(min_length=1), AfterValidator(_check_text_to_say)]
DigitOrEmpty = Annotated[str, AfterValidator(_check_digit_or_empty), pattern(r"^[0-9A-D#*]?$")]
Digits = Annotated[str, AfterValidator(_check_digits), pattern(r"^[0-9A-D#*]*$")]
Language = Annotated[
    str, AfterValidator(_check_language), pattern(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
]
# A relative URL (no scheme) or an http(s) one.
PageUrl = Annotated[
    str,
    AfterValidator(_check_page_url),
    pattern(r"^(?!\s*$)(?![A-Za-z][A-Za-z0-9+.-]*:)|^[Hh][Tt][Tt][Pp][Ss]?:"),
]
FileName = Annotated[
    str,
    AfterValidator(_check_file_name),
    # The same rules as store.names.check_name, for the published JSON Schema.
    pattern(
        r"^(?=.{1,255}$)[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}"
        r"(/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127})*$"
    ),
]


def _null_siblings_in_schema(schema: dict[str, Any], model: type[Any]) -> None:
    # The published schema says it too: a sibling form's property may be there, as null.
    for name in sorted(getattr(model, "null_siblings", ())):
        schema.setdefault("properties", {}).setdefault(name, {"type": "null"})


class Strict(BaseModel):
    """The base of the wire models: strict types, no unknown properties, frozen.

    A ``null`` optional property means "not given": it gets its default, as an Aculab
    application expects. Where an Aculab page gives null a meaning of its own, the model
    names the property in :attr:`null_meanings` and reads the null itself. A null for a
    required property, or for one the model does not know, is still an error.
    """

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, json_schema_extra=_null_siblings_in_schema
    )
    #: Properties whose ``null`` is kept for the model to read (docs/behaviour.md).
    null_meanings: ClassVar[frozenset[str]] = frozenset()
    #: Properties the model does not have that may still be given as ``null``: those of
    #: the other forms of one Aculab object (a play media item is text, a file or digits).
    null_siblings: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _null_is_not_given(cls, data: Any) -> Any:
        if not isinstance(data, dict) or None not in data.values():
            return data
        fields = cls.model_fields
        return {
            key: value
            for key, value in data.items()
            if value is not None
            or key in cls.null_meanings
            or (key not in fields and key not in cls.null_siblings)
            or (key in fields and fields[key].is_required())
        }


def _check_one_digit(value: str) -> str:
    if len(value) != 1 or value not in DIGIT_CHARACTERS:
        raise ValueError(f"expected one digit of {DIGIT_CHARACTERS}, got {value!r}")
    return value


OneDigit = Annotated[str, AfterValidator(_check_one_digit), pattern(r"^[0-9A-D#*]$")]


def menu_words(text: str) -> str:
    """A spoken option as the menus compare it: lower-case words, single-spaced."""
    return " ".join(re.findall(r"[\w']+", text.lower()))
