"""Wire models of the actions that put the caller through: ``connect`` (Aculab REST API
version 2's, with its ``secondary_call`` object) and ``transfer`` (callhook's own: Aculab
has no transfer). The decisions where Aculab is silent are in docs/behaviour.md."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from callhook.actions.fields import Opt, Strict
from callhook.actions.schema import Cipher, PlayAction, WebPageRequest
from callhook.dialplan import destinations
from callhook.events import CLASSIFY_RANGES, ClassifyOptions

# --- putting the caller through (Aculab v2's connect; docs/behaviour.md) --------------


class SecondaryCall(Strict):
    """The ``secondary_call`` object: pages and properties of the far leg's lifetime."""

    call_recording: bool = False
    call_recording_encryption: bool = False
    call_recording_eliminate_dtmf: bool = True
    call_recording_mode: Literal["mixed", "separate"] = "mixed"
    call_recording_cipher: Opt[Cipher] = None
    minutes_max_call_duration: Annotated[int, Field(ge=1)] = 240
    first_page: Opt[WebPageRequest] = None
    final_page: Opt[WebPageRequest] = None
    error_page: Opt[WebPageRequest] = None


def _range(name: str) -> Any:
    low, high = CLASSIFY_RANGES[name]
    return Field(ge=low, le=high)


class ClassifyCallee(Strict):
    """The ``classify_callee`` object: whether and how the far end is classified (a live
    speaker, an answering machine, a fax machine) and, for a machine, whether the end of
    its greeting is waited for. ``enable`` is Aculab's; the thresholds are callhook's,
    after Aculab's UAS API, Twilio's and Asterisk's (docs/behaviour.md)."""

    enable: bool = True
    milliseconds_timeout: Annotated[int, _range("milliseconds_timeout")] = 7000
    milliseconds_initial_silence: Annotated[int, _range("milliseconds_initial_silence")] = 5000
    milliseconds_greeting: Annotated[int, _range("milliseconds_greeting")] = 2400
    milliseconds_after_greeting_silence: Annotated[
        int, _range("milliseconds_after_greeting_silence")
    ] = 800
    wait_for_beep: bool = True
    milliseconds_min_beep_duration: Annotated[int, _range("milliseconds_min_beep_duration")] = 180
    milliseconds_post_beep_silence: Annotated[int, _range("milliseconds_post_beep_silence")] = 1000
    milliseconds_no_beep_silence: Annotated[int, _range("milliseconds_no_beep_silence")] = 4000
    seconds_beep_timeout: Annotated[int, _range("seconds_beep_timeout")] = 10

    def options(self) -> ClassifyOptions | None:
        """What the media session is told (None: not enabled)."""
        if not self.enable:
            return None
        return ClassifyOptions(**self.model_dump(exclude={"enable"}))


def classify_options(given: Any) -> ClassifyOptions | None:
    """A placed call's ``classify_callee``: ``true`` (the defaults), ``false`` or ``null``
    (none), or the object as on ``connect``. ValueError naming the problem otherwise."""
    if given is None or given is False:
        return None
    try:
        return ClassifyCallee.model_validate({} if given is True else given).options()
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        field = f"classify_callee.{where}" if where else "classify_callee"
        raise ValueError(f"'{field}': {problem['msg']}") from None


def check_room_secondary_call(second: SecondaryCall | None) -> None:
    """What of ``secondary_call`` a room takes: its recording of the participant's call
    and its longest time, not its pages (no far leg runs them)."""
    if second is None:
        return
    pages = [n for n in ("first_page", "final_page", "error_page") if getattr(second, n)]
    if pages:
        raise ValueError(
            f"secondary_call.{pages[0]}: a conference room has no far leg to run pages on "
            "(callhook); leave it out"
        )
    if second.call_recording_encryption and second.call_recording_cipher is None:
        raise ValueError("secondary_call.call_recording_encryption needs call_recording_cipher")


def _check_destination(value: str) -> str:
    try:
        destinations.parse(value)
    except destinations.BadDestination as exc:
        raise ValueError(str(exc)) from None
    return value


#: A destination in Aculab's forms (callhook/dialplan/destinations.py), checked before any call.
Destination = Annotated[
    str,
    Field(min_length=1),
    AfterValidator(_check_destination),
    Field(json_schema_extra={"pattern": destinations.SCHEMA_PATTERN}),
]


class Connect(Strict):
    """The ``connect`` action: call ``destinations`` and bridge the first to answer."""

    name: ClassVar[str] = "connect"
    destinations: Annotated[list[Destination], Field(min_length=1)]
    call_from: Opt[str] = None
    hold_media: Opt[PlayAction] = None
    pass_early_media: bool = False
    seconds_answer_timeout: Annotated[int, Field(ge=1)] = 30
    classify_callee: Opt[ClassifyCallee] = None
    secondary_call: Opt[SecondaryCall] = None
    next_page: Opt[WebPageRequest] = None

    @model_validator(mode="after")
    def _combination(self) -> Connect:
        rooms = [d for d in self.destinations if d[:4].lower() == "con:"]
        if rooms and self.classify_callee is not None and self.classify_callee.enable:
            raise ValueError(
                f"{rooms[0]!r}: a conference room (con:) has no far end to classify: "
                "leave classify_callee out"
            )
        if rooms and len(self.destinations) > 1:
            # A room takes the caller at once: it would always be the first to answer.
            raise ValueError(
                f"{rooms[0]!r}: a conference room (con:) is joined at once, so it cannot be "
                "one of several destinations"
            )
        if rooms:
            check_room_secondary_call(self.secondary_call)
        classify = self.classify_callee is not None and self.classify_callee.enable
        if self.pass_early_media and classify:
            # The caller would hear the far end (one way) while it is classified.
            raise ValueError("pass_early_media cannot be used with classify_callee")
        if self.pass_early_media and len(self.destinations) != 1:
            raise ValueError("pass_early_media needs exactly one destination")
        if self.pass_early_media and self.secondary_call and self.secondary_call.first_page:
            raise ValueError("pass_early_media cannot be used with secondary_call.first_page")
        second = self.secondary_call
        # Aculab's secondary call page: "The cipher can be specified here or in the response
        # to the first page request". With neither a cipher nor a first page, it cannot be.
        if (
            second
            and second.call_recording_encryption
            and not second.call_recording_cipher
            and not second.first_page
        ):
            raise ValueError(
                "secondary_call.call_recording_encryption needs call_recording_cipher, here or "
                "in the response to secondary_call.first_page (not given)"
            )
        return self


class ConnectStep(Strict):
    """``{"connect": {...}}``: a connect action in its wire form (docs/reference.md,
    "The response")."""

    connect: Connect


#: A transfer's destination: a SIP URI, or a number (digits, ``+`` first, ``-`` between).
_NUMBER = re.compile(r"\+?[0-9]+(?:-[0-9]+)*")
#: A URI that can go in ``Refer-To: <...>`` as it is: printable, no space, no ``<>"``.
_URI = re.compile(r"sips?:[!#-;=?-~]+", re.IGNORECASE)


class Transfer(Strict):
    """The ``transfer`` action (callhook's): hand the caller to ``destination`` with a SIP
    REFER (RFC 3515, blind, Referred-By: RFC 3892) and report how it went."""

    name: ClassVar[str] = "transfer"
    destination: Annotated[str, Field(min_length=1)]
    referred_by: Opt[Annotated[str, Field(min_length=1)]] = None
    seconds_timeout: Annotated[int, Field(ge=1, le=3600)] = 30
    fallback_connect: Opt[ConnectStep] = None
    next_page: Opt[WebPageRequest] = None

    @field_validator("destination")
    @classmethod
    def _destination(cls, value: str) -> str:
        if _URI.fullmatch(value) or _NUMBER.fullmatch(value):
            return value
        raise ValueError("a sip: or sips: URI, or a number (digits, + first, - between)")

    @model_validator(mode="after")
    def _fallback(self) -> Transfer:
        fallback = self.fallback_connect
        if fallback and any(d[:4].lower() == "con:" for d in fallback.connect.destinations):
            raise ValueError(
                "fallback_connect: a conference room (con:) is not supported there: use "
                "connect_to_conference after the transfer"
            )
        return self

    @field_validator("referred_by")
    @classmethod
    def _referred_by(cls, value: str | None) -> str | None:
        if value is not None and not value.lower().startswith(("sip:", "sips:")):
            raise ValueError("a sip: or sips: URI (RFC 3892)")
        return value
