"""Wire models of the action list an application returns, and their validation.

Names, types and defaults are those of the Aculab Cloud REST API v2 reference of the
input actions (docs/behaviour.md, "The wire form"); callhook adds ``sleep``, ``hang_up``,
``redirect`` and ``clear_input``, and, in the shapes of Aculab's own version 2
pages, ``run_menu``, ``run_speech_menu`` and ``delete_file`` (docs/behaviour.md
records what those pages leave open). Validation is strict: unknown actions and
properties, wrong JSON types (``"5"`` for an integer, ``1`` for a boolean, ``null``
for a required property; a null optional one is "not given"), values outside the
allowed sets and the invalid combinations the reference names are all errors, each reported with
the JSON path of the offending value and what was expected there.

The field types (digits, URLs, file names, words) are in
:mod:`callhook.actions.fields`; the envelope around the actions, and
:func:`~callhook.actions.response.parse_response` that turns a page's body into
actions or precise problems, are in :mod:`callhook.actions.response`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import (
    AfterValidator,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from callhook.actions.fields import (
    DigitOrEmpty,
    Digits,
    FileName,
    Language,
    Opt,
    PageUrl,
    Strict,
    TextToSay,
    Words,
    hex_of,
    pattern,
)

# --- shared objects (docs/reference.md, "Objects used by several actions") ---------------


class WebPageRequest(Strict):
    """A page to request: ``url`` (absolute, or relative to the page that returned it)."""

    url: PageUrl
    # POST sends the instance info as the JSON body; GET sends it in the
    # ``instance_info`` query parameter (as the Aculab service does).
    method: Literal["POST", "GET"] = "POST"


class Cipher(Strict):
    """``aescbc`` cipher: AES-128/192/256 key (32/48/64 hex characters), 16-byte IV."""

    type: Literal["aescbc"]
    key: Annotated[
        str,
        AfterValidator(hex_of(32, 48, 64)),
        pattern(r"^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{48}|[0-9A-Fa-f]{64})$"),
    ]
    initialisation_vector: Annotated[str, AfterValidator(hex_of(32)), pattern(r"^[0-9A-Fa-f]{32}$")]

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.type, self.key, self.initialisation_vector)

    def __repr__(self) -> str:  # keys are never logged (docs/recordings.md)
        return "Cipher(type='aescbc', key=<hidden>, initialisation_vector=<hidden>)"

    __str__ = __repr__


#: Aculab's play media object's properties, of its three forms together: a null one of
#: another form is "not given".
PLAY_MEDIA = frozenset(
    {"text_to_say", "tts_voice", "text_is_private", "file_to_play", "decryption_cipher"}
    | {"digits_to_play"}
)


class TextItem(Strict):
    """A play list item spoken by text-to-speech."""

    null_siblings: ClassVar[frozenset[str]] = PLAY_MEDIA

    text_to_say: TextToSay
    tts_voice: Opt[str] = None
    text_is_private: bool = False


class MediaPageRequest(Strict):
    """``file_to_play`` as a web page request: a WAV fetched from ``url`` with GET.

    Aculab's play media: the URL is absolute or relative to the page that returned the
    action, the method defaults to GET and only GET is allowed; nothing is sent to it.
    """

    url: PageUrl
    method: Literal["GET"] = "GET"


def _file_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "~name"
    if isinstance(value, dict | MediaPageRequest):
        return "~page"
    return None


if TYPE_CHECKING:
    FileToPlay: TypeAlias = str | MediaPageRequest
else:
    FileToPlay = Annotated[
        Annotated[FileName, Tag("~name")] | Annotated[MediaPageRequest, Tag("~page")],
        Discriminator(
            _file_kind,
            custom_error_type="file_to_play",
            custom_error_message=(
                "expected a file name of the media file store, or a web page request "
                'object such as {"url": "https://example.com/prompt.wav"}'
            ),
        ),
    ]


class FileItem(Strict):
    """A play list item: a WAV file from the media file store, or from the web."""

    null_siblings: ClassVar[frozenset[str]] = PLAY_MEDIA

    file_to_play: FileToPlay
    decryption_cipher: Opt[Cipher] = None

    @model_validator(mode="after")
    def _no_cipher_for_the_web(self) -> FileItem:
        if self.decryption_cipher is not None and isinstance(self.file_to_play, MediaPageRequest):
            raise ValueError(
                "decryption_cipher cannot be used when file_to_play is a web page request"
            )
        return self


class DigitsItem(Strict):
    """A play list item of DTMF digits sent to the far end (to drive another IVR or a PBX)."""

    null_siblings: ClassVar[frozenset[str]] = PLAY_MEDIA

    digits_to_play: Annotated[Digits, Field(min_length=1, max_length=128)]


def _play_item_kind(value: Any) -> str | None:
    if isinstance(value, TextItem):
        return "~text"
    if isinstance(value, FileItem):
        return "~file"
    if isinstance(value, DigitsItem):
        return "~digits"
    if isinstance(value, dict):
        # (A null one is "not given": it says nothing of what the item is.)
        if value.get("text_to_say") is not None:
            return "~text"
        if value.get("file_to_play") is not None:
            return "~file"
        if value.get("digits_to_play") is not None:
            return "~digits"
    return None


PlayItem = Annotated[
    Annotated[TextItem, Tag("~text")]
    | Annotated[FileItem, Tag("~file")]
    | Annotated[DigitsItem, Tag("~digits")],
    Discriminator(
        _play_item_kind,
        custom_error_type="play_item",
        custom_error_message="expected an object with text_to_say, file_to_play or digits_to_play",
    ),
]


class SpeechBargeInOptions(Strict):
    """Options of speech barge-in on a ``play`` (Aculab's speech barge in options)."""

    language: Language = "en-US"
    # Only speech containing one of these (whole words) barges in; none: any speech.
    barge_in_phrases: list[Words] = Field(default_factory=list)
    # Engine-specific options; accepted for compatibility and passed to nothing.
    speech_model_options: Opt[dict[str, Any]] = None


class Play(Strict):
    """The ``play`` action: play the items of ``play_list`` in order."""

    name: ClassVar[str] = "play"
    play_list: Annotated[list[PlayItem], Field(min_length=1)]
    barge_in_on_digit: bool = True
    barge_in_on_speech: bool = False
    barge_in_on_speech_options: Opt[SpeechBargeInOptions] = None


class MessagePlay(Play):
    """A play action inside ``on_*_messages``: barge-in is off by default there
    (docs/reference.md)."""

    barge_in_on_digit: bool = False


# --- a play action nested in another action ----------------------------------------------
#
# Where the reference types a property "play action" (``prompt``) or "array of play
# actions" (``on_*_messages``), the value is an action as section 4.1 defines one: an
# object with the single key ``play`` (docs/behaviour.md). That keyed form is canonical;
# the bare play body (``{"play_list": [...]}``) is accepted too, as a documented
# shorthand (docs/behaviour.md). Both become the same :class:`Play`, so nothing after
# validation knows which form the application wrote.


class PlayStep(Strict):
    """``{"play": {...}}``: a play action in its wire form (docs/reference.md, "Play action")."""

    play: Play


class MessagePlayStep(Strict):
    """``{"play": {...}}`` inside ``on_*_messages`` (barge-in off by default)."""

    play: MessagePlay


def _play_form(value: Any) -> str | None:
    if isinstance(value, PlayStep | MessagePlayStep | Play):
        return "~action" if not isinstance(value, Play) else "~body"
    if not isinstance(value, dict):
        return None
    if "play" in value:
        return "~action"
    if len(value) == 1 and next(iter(value)) not in Play.model_fields:
        return None  # another action (or nothing like a play) where a play action belongs
    return "~body"


def _unwrap_play(value: Any) -> Any:
    return value.play if isinstance(value, PlayStep | MessagePlayStep) else value


_KEYED = (
    'A play action: {"play": {"play_list": [...], ...}} (canonical; docs/reference.md), '
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


class WordHint(Strict):
    """Words the recogniser should favour."""

    words: list[Annotated[str, Field(min_length=1)]]


class SpeechRecognitionOptions(Strict):
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


class DigitInputOptions(Strict):
    """Which digits ``get_input`` accepts and how digit entry completes."""

    digit_count: Annotated[int, Field(ge=0, le=32)] = 0
    end_digit: DigitOrEmpty = "#"
    valid_digits: Digits = "0123456789"

    @model_validator(mode="after")
    def _combination(self) -> DigitInputOptions:
        _check_digit_entry(self.digit_count, self.end_digit)
        return self


# --- input actions (docs/reference.md: get_number, get_input, record) --------------------


class GetNumber(Strict):
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
    # None: the value of milliseconds_inter_digit_timeout (docs/reference.md, "get_number").
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


class GetInput(Strict):
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


class Record(Strict):
    """The ``record`` action: record the caller to a WAV file."""

    name: ClassVar[str] = "record"
    next_page: WebPageRequest
    id: str = ""
    barge_in_digits: Digits = "#"
    seconds_max_duration: Annotated[int, Field(ge=1)] = 60
    milliseconds_max_silence: Annotated[int, Field(ge=1)] = 3000
    # 0: use milliseconds_max_silence (docs/reference.md, "record").
    milliseconds_max_initial_silence: Annotated[int, Field(ge=0)] = 0
    format: Opt[Literal["alaw", "ulaw"]] = None
    encryption_cipher: Opt[Cipher] = None
    beep_on_start: bool = False
    recording_available_page: Opt[WebPageRequest] = None


# --- control actions (callhook's: docs/behaviour.md) -------------------------------------


class Sleep(Strict):
    """The ``sleep`` action: wait ``seconds`` (up to an hour) on the call."""

    name: ClassVar[str] = "sleep"
    seconds: Annotated[float, Field(ge=0, le=3600)]


class HangUp(Strict):
    """The ``hang_up`` action: end the call."""

    name: ClassVar[str] = "hang_up"


class Redirect(Strict):
    """The ``redirect`` action: request ``next_page`` and run its actions instead of the rest."""

    name: ClassVar[str] = "redirect"
    next_page: WebPageRequest


class ClearInput(Strict):
    """The ``clear_input`` action: discard digits and speech cached from barge-in."""

    name: ClassVar[str] = "clear_input"


class DeleteFile(Strict):
    """The ``delete_file`` action: delete a file of the application's media namespace."""

    name: ClassVar[str] = "delete_file"
    filename: FileName


class StartTranscription(Strict):
    """The ``start_transcription`` action: transcribe the call as it goes on, the phrases
    posted to ``results_page`` outside the application's flow; the next action runs at
    once. A second one replaces the first (Aculab REST API v2)."""

    name: ClassVar[str] = "start_transcription"
    results_page: WebPageRequest
    transcription_mode: Literal["separate", "mixed", "inbound", "outbound"] = "separate"
    id: str = ""
    speech_recognition_options: SpeechRecognitionOptions = Field(
        default_factory=SpeechRecognitionOptions
    )
    enable_interim_results: bool = False


class StopTranscription(Strict):
    """The ``stop_transcription`` action: end the call's transcription (its last results
    may still come for a few seconds)."""

    name: ClassVar[str] = "stop_transcription"
