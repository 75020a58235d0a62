"""callhook.sdk: a small library for writing callhook applications in Python.

No server is needed to use it: it builds the action lists a page answers with
(:mod:`callhook.sdk.actions`, checked by the same validation as ``callhook validate``),
reads the page requests callhook makes (:mod:`callhook.sdk.requests`) and checks their
signatures (:func:`verify_signature`). Any web framework works::

    from callhook import sdk

    def start(headers, body):
        if not sdk.verify_signature(headers, body, SECRET):
            return 403, None
        return 200, sdk.response(
            sdk.get_number("pin", prompt="Enter your four digit PIN.", digit_count=4)
        )

    def pin(headers, body):
        number = sdk.parse_request(body).result().entered_number
        return 200, sdk.response(sdk.play(f"You entered {number}."), sdk.hang_up())

The applications are Aculab Cloud REST API (version 2) applications: the same code
answers Aculab's service (which signs requests its own way: check them as Aculab says).
"""

from callhook.sdk.actions import (
    Action,
    InvalidAction,
    cipher,
    clear_input,
    conference_participant,
    connect,
    connect_to_conference,
    delete_file,
    digit_options,
    digits,
    file,
    get_input,
    get_number,
    hang_up,
    menu_option,
    page,
    play,
    record,
    redirect,
    response,
    run_menu,
    run_speech_menu,
    say,
    secondary_call,
    sleep,
    speech_menu_option,
    speech_options,
    start_transcription,
    stop_transcription,
    transfer,
)
from callhook.sdk.requests import (
    ActionResult,
    ConnectResult,
    GetInputResult,
    GetNumberResult,
    PageRequest,
    Phrase,
    RecordResult,
    RunMenuResult,
    RunSpeechMenuResult,
    ThisCall,
    TranscriptionResult,
    TransferResult,
    parse_request,
)
from callhook.sdk.signatures import verify_signature

__all__ = [
    "Action",
    "ActionResult",
    "ConnectResult",
    "GetInputResult",
    "GetNumberResult",
    "InvalidAction",
    "PageRequest",
    "Phrase",
    "RecordResult",
    "RunMenuResult",
    "RunSpeechMenuResult",
    "ThisCall",
    "TranscriptionResult",
    "TransferResult",
    "cipher",
    "clear_input",
    "conference_participant",
    "connect",
    "connect_to_conference",
    "delete_file",
    "digit_options",
    "digits",
    "file",
    "get_input",
    "get_number",
    "hang_up",
    "menu_option",
    "page",
    "parse_request",
    "play",
    "record",
    "redirect",
    "response",
    "run_menu",
    "run_speech_menu",
    "say",
    "secondary_call",
    "sleep",
    "speech_menu_option",
    "speech_options",
    "start_transcription",
    "stop_transcription",
    "transfer",
    "verify_signature",
]
