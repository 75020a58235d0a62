"""The page request body (the "instance info") as typed objects.

callhook (like Aculab Cloud) sends every page the same JSON object: who the call is
(``this_call``), the application's ``token``, and after an action completed its
``action_result``; a notification has ``is_notification`` and no ``this_call``; an
error page has ``error_result``; the final page's ``this_call`` has ``call_cause``.
:func:`parse_request` turns that body into a :class:`PageRequest`, and
:meth:`PageRequest.result` gives the action's result as the model of its action
(:class:`GetNumberResult`, :class:`GetInputResult`, ...). Properties a later version
adds are kept (``model_extra``), never an error: an application must not break when
callhook sends more.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class ThisCall(_Lenient):
    """The call the page is about (``this_call``)."""

    call_id: str
    #: Aculab's ``"in"`` or ``"out"``.
    call_direction: str = ""
    call_from: str = ""
    call_to: str = ""
    call_target: str = ""
    #: The caller's original target when the call was diverted ("" otherwise).
    call_divert: str = ""
    #: Inbound calls: the STIR/SHAKEN attestation level, "A", "B", "C" or "".
    call_attestation: str | None = None
    call_state: str = ""
    seconds_call_duration: float = 0.0
    application_parameters: str = ""
    #: Outbound calls started with parameters (Service Start): what they were given.
    outbound_parameters: str | None = None
    #: The final page's: completed, hung_up, no_answer, busy, unobtainable, dropped, failed.
    call_cause: str | None = None
    call_raw_cause: str | None = None
    #: callhook's, on a ``secondary_call`` page: the caller's call.
    primary_call_id: str | None = None


class Alternative(_Lenient):
    """One hypothesis of a phrase: its ``text`` and ``confidence`` (0 to 1; None on a
    transcription's interim results, which have none)."""

    text: str
    confidence: float | None = None


class Phrase(_Lenient):
    """A recognised phrase: its ``alternatives``, best first; whose speech it is
    (``direction``: ``inbound``, the caller's, or ``outbound``, what the caller hears; None
    in a ``mixed`` transcription); ``final``, or an interim result with its ``stability``."""

    alternatives: list[Alternative]
    direction: str | None = None
    final: bool = True
    stability: float | None = None

    @property
    def text(self) -> str:
        """The best alternative's text ("" when there is none)."""
        return self.alternatives[0].text if self.alternatives else ""


class GetNumberResult(_Lenient):
    """``get_number``'s result."""

    entered_number: str


class GetInputResult(_Lenient):
    """``get_input``'s result: speech (``speech_input``) or digits (``digits_input``)."""

    input_type: Literal["speech", "digits"]
    speech_input: list[Phrase] = Field(default_factory=list)
    digits_input: str = ""

    @property
    def text(self) -> str:
        """What the caller said (the best alternatives of the phrases), or the digits."""
        if self.input_type == "digits":
            return self.digits_input
        return " ".join(p.text for p in self.speech_input if p.text)


class RecordResult(_Lenient):
    """``record``'s result (also what ``recording_available_page`` is notified of)."""

    filename: str
    file_available: bool = False
    id: str = ""
    contains_sound: bool = False
    seconds_duration: float = 0.0
    reason: str = ""
    barge_in_digit: str | None = None


class RunMenuResult(_Lenient):
    """``run_menu``'s result."""

    selected_digit: str


class RunSpeechMenuResult(_Lenient):
    """``run_speech_menu``'s result: the option's words said, or its digit pressed."""

    input_type: Literal["speech", "digits"]
    selected_input: str
    speech_input: list[Phrase] = Field(default_factory=list)


class ConnectResult(_Lenient):
    """``connect``'s result."""

    connected: bool
    destination: str | None = None
    call_cause: str = ""
    call_raw_cause: str = ""
    seconds_connected_duration: float = 0.0
    secondary_call: dict[str, Any] | None = None
    call_recording_filename: str | None = None


class TransferResult(_Lenient):
    """``transfer``'s result (callhook's own action)."""

    transferred: bool
    destination: str = ""
    refer_status: str = ""  # the REFER's final status ("501"), "" if none came
    notify_status: str = ""  # the last NOTIFY's sipfrag status, "" if none
    call_cause: str = ""
    call_raw_cause: str = ""
    fell_back: bool = False
    connect_result: ConnectResult | None = None


class TranscriptionResult(_Lenient):
    """What a ``start_transcription``'s ``results_page`` is sent: phrases as they are
    recognised (interim ones too when enabled), then ``completed`` once it is over."""

    transcription: list[Phrase] = Field(default_factory=list)
    id: str = ""
    completed: bool = False


RESULTS: dict[str, type[_Lenient]] = {
    "get_number": GetNumberResult,
    "get_input": GetInputResult,
    "record": RecordResult,
    "run_menu": RunMenuResult,
    "run_speech_menu": RunSpeechMenuResult,
    "connect": ConnectResult,
    "transfer": TransferResult,
    "start_transcription": TranscriptionResult,
}


class ActionResult(_Lenient):
    """``action_result``: which action completed and its ``result`` as sent."""

    action: str
    result: dict[str, Any] = Field(default_factory=dict)


class PageRequest(_Lenient):
    """A page request's body (the instance info)."""

    application_instance_id: str
    token: str | None = None
    log_filename: str = ""
    is_notification: bool = False
    this_call: ThisCall | None = None
    action_result: ActionResult | None = None
    error_result: dict[str, Any] | None = None

    def result(self) -> Any:
        """The completed action's result as its model (:data:`RESULTS`; a result of an
        action this library does not know stays a dict), or None on a first page."""
        if self.action_result is None:
            return None
        model = RESULTS.get(self.action_result.action)
        if model is None:
            return self.action_result.result
        return model.model_validate(self.action_result.result)


def parse_request(body: bytes | str | Mapping[str, Any]) -> PageRequest:
    """The page request: a POST page's body, or a GET page's ``instance_info`` query
    parameter (the same JSON). Raises :class:`pydantic.ValidationError` (a ``ValueError``)
    when it is not one."""
    document = body if isinstance(body, Mapping) else json.loads(body)
    return PageRequest.model_validate(document)
