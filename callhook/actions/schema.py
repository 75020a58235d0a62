"""Wire models of the action list an application returns, and their validation.

Names, types and defaults are those of ``spec/actions.md`` section 2 (the
Aculab Cloud REST API v2 shape); DESIGN.md §1.2 adds ``sleep``, ``hang_up``,
``redirect`` and ``clear_input``. Validation is strict: unknown actions and
properties, wrong JSON types (``"5"`` for an integer, ``1`` for a boolean,
``null`` for anything but ``token``), values outside the allowed sets and the
invalid combinations the reference names are all errors, each reported with
the JSON path of the offending value and what was expected there.

:func:`parse_response` is the one entry point the call runner uses; it never
raises on bad input, it returns the list of :class:`Problem` instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)

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


def _hex_of(*lengths: int) -> Callable[[str], str]:
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
    # Names in the application's media file namespace (DESIGN.md §1.5): the store's own
    # rules, so a name that could never be played is refused when the list is validated.
    try:
        check_name(value)
    except BadName as exc:
        raise ValueError(f"expected a file name in the media file store: {exc}") from None
    return value


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("expected a value, got null (leave the property out to get its default)")
    return value


T = TypeVar("T")


class _NotNull:
    """An optional property: leave it out for its default; ``null`` is an error.

    Pydantic sees just ``T`` plus a null check, so an explicit null is rejected
    like any other wrong type (only ``token`` may be null) and an error inside
    the value keeps a plain JSON path (no union branches in it).
    """

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[item, BeforeValidator(_not_null)]


if TYPE_CHECKING:
    Opt: TypeAlias = T | None  # for the type checker: None means "not given"
else:
    Opt = _NotNull


def _pattern(regex: str) -> Any:
    # The checks above give the messages; this puts the same rule into the JSON Schema.
    return Field(json_schema_extra={"pattern": regex})


DigitOrEmpty = Annotated[str, AfterValidator(_check_digit_or_empty), _pattern(r"^[0-9A-D#*]?$")]
Digits = Annotated[str, AfterValidator(_check_digits), _pattern(r"^[0-9A-D#*]*$")]
Language = Annotated[
    str, AfterValidator(_check_language), _pattern(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
]
# A relative URL (no scheme) or an http(s) one.
PageUrl = Annotated[
    str,
    AfterValidator(_check_page_url),
    _pattern(r"^(?!\s*$)(?![A-Za-z][A-Za-z0-9+.-]*:)|^[Hh][Tt][Tt][Pp][Ss]?:"),
]
FileName = Annotated[
    str,
    AfterValidator(_check_file_name),
    # The same rules as store.names.check_name, for the published JSON Schema.
    _pattern(
        r"^(?=.{1,255}$)[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}"
        r"(/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127})*$"
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- shared objects (reference section 2.1) --------------------------------------------


class WebPageRequest(_Strict):
    """A page to request: ``url`` (absolute, or relative to the page that returned it)."""

    url: PageUrl
    # POST sends the instance info as the JSON body; GET sends it in the
    # ``instance_info`` query parameter (as the Aculab service does).
    method: Literal["POST", "GET"] = "POST"


class Cipher(_Strict):
    """``aescbc`` cipher: AES-128/192/256 key (32/48/64 hex characters), 16-byte IV."""

    type: Literal["aescbc"]
    key: Annotated[
        str,
        AfterValidator(_hex_of(32, 48, 64)),
        _pattern(r"^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{48}|[0-9A-Fa-f]{64})$"),
    ]
    initialisation_vector: Annotated[
        str, AfterValidator(_hex_of(32)), _pattern(r"^[0-9A-Fa-f]{32}$")
    ]

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.type, self.key, self.initialisation_vector)

    def __repr__(self) -> str:  # keys are never logged (DESIGN.md §1.5)
        return "Cipher(type='aescbc', key=<hidden>, initialisation_vector=<hidden>)"

    __str__ = __repr__


class TextItem(_Strict):
    """A play list item spoken by text-to-speech."""

    text_to_say: Annotated[str, Field(min_length=1)]
    tts_voice: Opt[str] = None
    text_is_private: bool = False


class FileItem(_Strict):
    """A play list item played from a WAV file in the media file store."""

    file_to_play: FileName
    decryption_cipher: Opt[Cipher] = None


def _play_item_kind(value: Any) -> str | None:
    if isinstance(value, TextItem):
        return "~text"
    if isinstance(value, FileItem):
        return "~file"
    if isinstance(value, dict):
        if "text_to_say" in value:
            return "~text"
        if "file_to_play" in value:
            return "~file"
    return None


PlayItem = Annotated[
    Annotated[TextItem, Tag("~text")] | Annotated[FileItem, Tag("~file")],
    Discriminator(
        _play_item_kind,
        custom_error_type="play_item",
        custom_error_message="expected an object with text_to_say or file_to_play",
    ),
]


class SpeechBargeInOptions(_Strict):
    """Options of speech barge-in on a ``play``."""

    language: Language = "en-US"
    barge_in_phrases: list[str] = Field(default_factory=list)


class Play(_Strict):
    """The ``play`` action: play the items of ``play_list`` in order."""

    name: ClassVar[str] = "play"
    play_list: Annotated[list[PlayItem], Field(min_length=1)]
    barge_in_on_digit: bool = True
    barge_in_on_speech: bool = False
    barge_in_on_speech_options: Opt[SpeechBargeInOptions] = None


class MessagePlay(Play):
    """A play action inside ``on_*_messages``: barge-in is off by default there (section 2.2)."""

    barge_in_on_digit: bool = False


# --- a play action nested in another action ----------------------------------------------
#
# Where the reference types a property "play action" (``prompt``) or "array of play
# actions" (``on_*_messages``), the value is an action as section 4.1 defines one: an
# object with the single key ``play`` (DESIGN.md §1.2). That keyed form is canonical;
# the bare play body (``{"play_list": [...]}``) is accepted too, as a documented
# shorthand (docs/behaviour.md). Both become the same :class:`Play`, so nothing after
# validation knows which form the application wrote.


class PlayStep(_Strict):
    """``{"play": {...}}``: a play action in its wire form (reference §4.1)."""

    play: Play


class MessagePlayStep(_Strict):
    """``{"play": {...}}`` inside ``on_*_messages`` (barge-in off by default)."""

    play: MessagePlay


def _play_form(value: Any) -> str | None:
    if isinstance(value, PlayStep | MessagePlayStep | Play):
        return "~action" if not isinstance(value, Play) else "~body"
    if not isinstance(value, dict):
        return None
    if "play" in value:
        return "~action"
    if len(value) == 1 and next(iter(value)) in ACTION_MODELS:
        return None  # another action where a play action belongs
    return "~body"


def _unwrap_play(value: Any) -> Any:
    return value.play if isinstance(value, PlayStep | MessagePlayStep) else value


_KEYED = (
    'A play action: {"play": {"play_list": [...], ...}} (canonical, reference §4.1), '
    'or the bare play body {"play_list": [...], ...} (shorthand).'
)

_PLAY_ACTION_ERROR: dict[str, Any] = {
    "custom_error_type": "play_action",
    "custom_error_message": 'expected a play action, an object {"play": {"play_list": [...]}}',
}

if TYPE_CHECKING:
    PlayAction: TypeAlias = Play
    MessagePlayAction: TypeAlias = MessagePlay
else:
    PlayAction = Annotated[
        Annotated[PlayStep, Tag("~action")] | Annotated[Play, Tag("~body")],
        Discriminator(_play_form, **_PLAY_ACTION_ERROR),
        AfterValidator(_unwrap_play),
        Field(description=_KEYED),
    ]
    MessagePlayAction = Annotated[
        Annotated[MessagePlayStep, Tag("~action")] | Annotated[MessagePlay, Tag("~body")],
        Discriminator(_play_form, **_PLAY_ACTION_ERROR),
        AfterValidator(_unwrap_play),
        Field(description=_KEYED + " Barge-in on digit is off by default here."),
    ]


class WordHint(_Strict):
    """Words the recogniser should favour."""

    words: list[Annotated[str, Field(min_length=1)]]


class SpeechRecognitionOptions(_Strict):
    """Language and recognition options of ``get_input``."""

    language: Language = "en-US"
    # Outbound-direction options exist for transcription; get_input ignores them.
    language_outbound: Opt[Language] = None
    word_hints: list[WordHint] = Field(default_factory=list)
    max_alternatives: Annotated[int, Field(ge=1, le=3)] = 1
    enable_profanity_filtering: bool = False
    # Engine-specific options; accepted for compatibility and passed to nothing.
    speech_model_options: Opt[dict[str, Any]] = None
    speech_model_options_outbound: Opt[dict[str, Any]] = None

    def hint_words(self) -> tuple[str, ...]:
        return tuple(w for hint in self.word_hints for w in hint.words)


def _check_digit_entry(digit_count: int, end_digit: str) -> None:
    # Reference section 7 item 4: unlimited digits need an end digit.
    if digit_count == 0 and end_digit == "":
        raise ValueError(
            "digit_count 0 (unlimited) needs an end_digit, and an empty end_digit "
            "needs a digit_count of 1 or more"
        )


class DigitInputOptions(_Strict):
    """Which digits ``get_input`` accepts and how digit entry completes."""

    digit_count: Annotated[int, Field(ge=0, le=32)] = 0
    end_digit: DigitOrEmpty = "#"
    valid_digits: Digits = "0123456789"

    @model_validator(mode="after")
    def _combination(self) -> DigitInputOptions:
        _check_digit_entry(self.digit_count, self.end_digit)
        return self


# --- input actions (reference sections 2.2 - 2.4) ---------------------------------------


class GetNumber(_Strict):
    """The ``get_number`` action: collect a keypad number."""

    name: ClassVar[str] = "get_number"
    next_page: WebPageRequest
    prompt: Opt[PlayAction] = None
    digit_count: Annotated[int, Field(ge=0, le=32)] = 0
    end_digit: DigitOrEmpty = "#"
    valid_digits: Digits = "0123456789"
    help_digit: DigitOrEmpty = "*"
    seconds_timeout: Annotated[int, Field(ge=0)] = 30
    milliseconds_inter_digit_timeout: int = 5000
    # None: the value of milliseconds_inter_digit_timeout (section 2.2).
    milliseconds_initial_timeout: Opt[int] = None
    on_digit_timeout_messages: Opt[list[MessagePlayAction]] = None
    on_invalid_digit_messages: Opt[list[MessagePlayAction]] = None

    @model_validator(mode="after")
    def _combination(self) -> GetNumber:
        _check_digit_entry(self.digit_count, self.end_digit)
        if self.help_digit and self.help_digit == self.end_digit:
            raise ValueError(
                f"help_digit and end_digit are both {self.end_digit!r}; they must differ"
            )
        return self

    @property
    def initial_timeout_ms(self) -> int:
        if self.milliseconds_initial_timeout is None:
            return self.milliseconds_inter_digit_timeout
        return self.milliseconds_initial_timeout


class GetInput(_Strict):
    """The ``get_input`` action: collect speech or keypad digits."""

    name: ClassVar[str] = "get_input"
    next_page: WebPageRequest
    prompt: Opt[PlayAction] = None
    speech_input_mode: Literal["timeout", "disabled", "auto"] = "timeout"
    speech_recognition_options: Opt[SpeechRecognitionOptions] = None
    digit_input_enabled: bool = True
    digit_input_options: Opt[DigitInputOptions] = None
    seconds_timeout: Annotated[int, Field(ge=0)] = 30
    milliseconds_inter_speech_timeout: int = 1000
    milliseconds_inter_digit_timeout: int = 3000
    milliseconds_initial_timeout: int = 5000
    on_input_timeout_messages: Opt[list[MessagePlayAction]] = None
    on_invalid_input_messages: Opt[list[MessagePlayAction]] = None
    help_digit: DigitOrEmpty = "*"

    @model_validator(mode="after")
    def _combination(self) -> GetInput:
        if self.speech_input_mode == "disabled" and not self.digit_input_enabled:
            raise ValueError(
                "speech_input_mode is 'disabled' and digit_input_enabled is false: "
                "the action could never receive input"
            )
        end = self.digits.end_digit
        if self.help_digit and self.help_digit == end:
            raise ValueError(f"help_digit and end_digit are both {end!r}; they must differ")
        return self

    @property
    def digits(self) -> DigitInputOptions:
        return self.digit_input_options or DigitInputOptions()

    @property
    def recognition(self) -> SpeechRecognitionOptions:
        return self.speech_recognition_options or SpeechRecognitionOptions()


class Record(_Strict):
    """The ``record`` action: record the caller to a WAV file."""

    name: ClassVar[str] = "record"
    next_page: WebPageRequest
    id: str = ""
    barge_in_digits: Digits = "#"
    seconds_max_duration: Annotated[int, Field(ge=1)] = 60
    milliseconds_max_silence: Annotated[int, Field(ge=1)] = 3000
    # 0: use milliseconds_max_silence (section 2.4).
    milliseconds_max_initial_silence: Annotated[int, Field(ge=0)] = 0
    format: Opt[Literal["alaw", "ulaw"]] = None
    encryption_cipher: Opt[Cipher] = None
    beep_on_start: bool = False
    recording_available_page: Opt[WebPageRequest] = None


# --- control actions (DESIGN.md §1.2) ---------------------------------------------------


class Sleep(_Strict):
    """The ``sleep`` action: wait ``seconds`` (up to an hour) on the call."""

    name: ClassVar[str] = "sleep"
    seconds: Annotated[float, Field(ge=0, le=3600)]


class HangUp(_Strict):
    """The ``hang_up`` action: end the call."""

    name: ClassVar[str] = "hang_up"


class Redirect(_Strict):
    """The ``redirect`` action: request ``next_page`` and run its actions instead of the rest."""

    name: ClassVar[str] = "redirect"
    next_page: WebPageRequest


class ClearInput(_Strict):
    """The ``clear_input`` action: discard digits and speech cached from barge-in."""

    name: ClassVar[str] = "clear_input"


Action = Play | GetNumber | GetInput | Record | Sleep | HangUp | Redirect | ClearInput
ACTION_MODELS: dict[str, type[_Strict]] = {
    m.name: m for m in (Play, GetNumber, GetInput, Record, Sleep, HangUp, Redirect, ClearInput)
}


# --- the response envelope --------------------------------------------------------------


# Each action in the list is an object with one key, the action name. These
# wrappers exist so that the JSON Schema of the envelope says exactly that.
class GetNumberStep(_Strict):
    get_number: GetNumber


class GetInputStep(_Strict):
    get_input: GetInput


class RecordStep(_Strict):
    record: Record


class SleepStep(_Strict):
    sleep: Sleep


class HangUpStep(_Strict):
    hang_up: HangUp


class RedirectStep(_Strict):
    redirect: Redirect


class ClearInputStep(_Strict):
    clear_input: ClearInput


def _action_kind(value: Any) -> str | None:
    if isinstance(value, dict) and len(value) == 1:
        (key,) = value
        if key in ACTION_MODELS:
            return f"~{key}"
    return None


ActionItem = Annotated[
    Annotated[PlayStep, Tag("~play")]
    | Annotated[GetNumberStep, Tag("~get_number")]
    | Annotated[GetInputStep, Tag("~get_input")]
    | Annotated[RecordStep, Tag("~record")]
    | Annotated[SleepStep, Tag("~sleep")]
    | Annotated[HangUpStep, Tag("~hang_up")]
    | Annotated[RedirectStep, Tag("~redirect")]
    | Annotated[ClearInputStep, Tag("~clear_input")],
    Discriminator(_action_kind),
]


def _check_api_version(value: str) -> str:
    if not re.fullmatch(r"2(\.\d+)*", value):
        raise ValueError(f"callhook implements REST API version 2; expected '2.0', got {value!r}")
    return value


ApiVersion = Annotated[str, AfterValidator(_check_api_version), _pattern(r"^2(\.\d+)*$")]


class Envelope(_Strict):
    """What a page answers: ``{"actions": [...], "token": "...", "api_version": "2.0"}``."""

    actions: list[ActionItem]
    token: str | None = None
    api_version: Opt[ApiVersion] = None


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
    token_given: bool


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


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if _jsonable(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _message(err: Any, document: Any) -> str:
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
            msg = f"expected an object with one key, the action name; got {_describe(item)}"
    else:
        msg = msg[0].lower() + msg[1:]
        if "input" in err and kind not in ("play_item",):
            msg += f", got {_describe(err['input'])}"
    return msg


def _problems(exc: ValidationError, document: Any) -> list[Problem]:
    problems = []
    for err in exc.errors():
        problems.append(Problem(path=_json_path(err["loc"]), message=_message(err, document)))
    return problems


def parse_response(body: bytes | str) -> Response:
    """Parse and validate a page's response body.

    Raises :class:`InvalidResponse` listing every problem (the body is not JSON,
    or is JSON but not a valid action list).
    """
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidResponse([Problem(path="$", message=f"not valid JSON: {exc}")]) from None
    if not isinstance(document, dict):
        message = f"expected an object with 'actions', got {_describe(document)}"
        raise InvalidResponse([Problem(path="$", message=message)])
    try:
        envelope = Envelope.model_validate(document)
    except ValidationError as exc:
        raise InvalidResponse(_problems(exc, document)) from None
    actions = [getattr(item, next(iter(type(item).model_fields))) for item in envelope.actions]
    return Response(actions=actions, token=envelope.token, token_given="token" in document)


def _drop_null_defaults(node: Any) -> Any:
    # "default": null on an Opt property would suggest null is allowed; it is not.
    if isinstance(node, dict):
        return {
            k: _drop_null_defaults(v) for k, v in node.items() if not (k == "default" and v is None)
        }
    if isinstance(node, list):
        return [_drop_null_defaults(v) for v in node]
    return node


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the response envelope."""
    schema: dict[str, Any] = _drop_null_defaults(Envelope.model_json_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "callhook page response (Aculab Cloud REST API v2 shape)"
    return schema
