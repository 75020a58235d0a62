"""The values that cross layers: media events in, media commands out.

The action state machines (``callhook.actions``) are sans-IO: they are fed
*events* from a call's media session (a digit, the end of a prompt, speech
recognised, voice activity starting or stopping, ...) and answer with
*commands* for that media session (start this prompt, stop it, start
recognising speech, start recording, ...). The media session is the only thing
that touches audio: the real one (RTP, see ``callhook.media``) or a scripted
one in tests (``callhook.devtools.harness``). Both speak exactly these types.

Events carry no timestamps: the time of an event is the clock's ``now`` when
it is delivered, which the caller of a state machine passes alongside it.

(Past 600 lines: every value that crosses the layers is here, one small frozen
dataclass each, so that the actions, the media and the telephony agree on one list.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# --- speech results -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Alternative:
    """One recognition hypothesis: its text and the recogniser's confidence (0..1)."""

    text: str
    confidence: float


@dataclass(frozen=True, slots=True)
class Phrase:
    """A recognised phrase, the ``phrase object`` of docs/reference.md ("Phrase")."""

    alternatives: tuple[Alternative, ...]
    final: bool = True
    # Whose speech it is. callhook recognises only the caller's side of the call
    # (the audio it receives), which the reference's result calls "inbound".
    direction: str = "inbound"
    # True when the phrase did not come from a recogniser but was typed in the
    # terminal phone (so logs and the terminal can say so).
    typed: bool = False

    def to_json(self) -> dict[str, Any]:
        """The phrase as it appears in ``action_result.result.speech_input``."""
        return {
            "alternatives": [
                {"text": a.text, "confidence": round(a.confidence, 3)} for a in self.alternatives
            ],
            "direction": self.direction,
            "final": self.final,
        }


# --- events: media session -> actions ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class DigitReceived:
    """The caller pressed a key (one event per key press, whatever the transport)."""

    digit: str


@dataclass(frozen=True, slots=True)
class PromptFinished:
    """Prompt ``prompt_id`` played to its end (or could not be played: ``error``).

    A prompt stopped by :class:`StopPrompt` does not report finishing.
    """

    prompt_id: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    """The recogniser heard the caller start speaking."""


@dataclass(frozen=True, slots=True)
class SpeechRecognised:
    """The recogniser produced a phrase."""

    phrase: Phrase


@dataclass(frozen=True, slots=True)
class SpeechRejected:
    """The caller spoke but the recogniser matched nothing.

    ``cause`` is set when that is because the recogniser failed (crashed, hung,
    restarting: issue 14); the action takes it as nothing recognised, the call
    log says why.
    """

    cause: str | None = None
    #: What was heard, when it was rejected for its confidence: an answer to word hints
    #: under ``RecognitionOptions.min_confidence`` (not understood: the caller is asked
    #: again, docs/speech.md "The confidence floor").
    unsure: Phrase | None = None


@dataclass(frozen=True, slots=True)
class SpeechUnavailable:
    """Speech cannot be recognised as the action asks (a language the configured
    recogniser does not know): only digits count. ``cause`` says why, for the call log."""

    cause: str


@dataclass(frozen=True, slots=True)
class PromptNote:
    """A prompt plays, but not quite as asked (a remote voice failed and the embedded one
    speaks; an SSML ``audio`` file is missing and its text is said): for the call log."""

    note: str


@dataclass(frozen=True, slots=True)
class VoiceActivity:
    """Sound above the background noise started (``active``) or stopped on the caller's side."""

    active: bool


@dataclass(frozen=True, slots=True)
class RecorderFailed:
    """The recording sink stopped on its own: a write error or the size limit."""

    reason: Literal["error", "filesize"]
    detail: str = ""


@dataclass(frozen=True, slots=True)
class CallEnded:
    """The call is gone: the caller hung up, or the network dropped it.

    ``cause`` is one of the final page's ``call_cause`` values; ``raw_cause`` the
    SIP status (or method) that ended it, as a string.
    """

    cause: str = "hung_up"
    raw_cause: str = "BYE"


@dataclass(frozen=True, slots=True)
class Aborted:
    """callhook itself is ending the call (shutdown): stop the running action now."""

    reason: str


# --- events of the far legs of a connect (callhook.actions.connect) -----------------------


@dataclass(frozen=True, slots=True)
class CalleeRinging:
    """Far leg ``attempt`` of a connect rings (180/183); ``early_media``: it sends audio."""

    attempt: int
    early_media: bool = False


@dataclass(frozen=True, slots=True)
class CalleeAnswered:
    """Far leg ``attempt`` answered; ``info`` is its call's description (``this_call``-like)."""

    attempt: int
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CalleeEnded:
    """Far leg ``attempt`` ended: before answering (busy, no answer, unreachable) or after.

    ``cause`` is one of the call causes of the final page (``busy``, ``no_answer``,
    ``unobtainable``, ``failed``, ``hung_up``, ...); ``raw_cause`` the SIP status or
    method, as a string.
    """

    attempt: int
    cause: str
    raw_cause: str


@dataclass(frozen=True, slots=True)
class CalleeReady:
    """Far leg ``attempt`` answered and its ``secondary_call.first_page`` actions have all
    run on it: it is to be joined to the call now. ``cipher``: the
    ``call_recording_cipher`` its first page's response gave, as (type, key, IV)."""

    attempt: int
    cipher: tuple[str, str, str] | None = None


@dataclass(frozen=True, slots=True)
class ReferAnswered:
    """The final response to the REFER (202: accepted; 408 when none came)."""

    status: int


@dataclass(frozen=True, slots=True)
class ReferNotified:
    """A NOTIFY of the transfer's progress: the status line of its ``message/sipfrag``
    (RFC 3515 §2.4.5), with ``cause`` the final page cause that status maps to; ``final``
    when it ends the transfer (a final status, or the subscription terminated)."""

    status: int
    cause: str = ""
    final: bool = False


# --- events of a conference room (callhook.actions.conference) -----------------------------


@dataclass(frozen=True, slots=True)
class RoomJoined:
    """The caller is in the room its :class:`JoinRoom` named."""


@dataclass(frozen=True, slots=True)
class RoomRefused:
    """The room would not take the caller: ``cause`` as a final page's (``busy``: it is
    full), ``raw_cause`` why."""

    cause: str
    raw_cause: str


@dataclass(frozen=True, slots=True)
class RoomHolding:
    """The room holds (``on``: the caller hears its ``while_stopped_media``) or has started."""

    on: bool


@dataclass(frozen=True, slots=True)
class RoomPrompt:
    """Something for the caller to hear of the room: a beep (someone came in), a name and
    its joined or left message."""

    items: tuple[PromptItem, ...]


@dataclass(frozen=True, slots=True)
class RoomLeft:
    """The caller is out of the room (``reason``: ``exit_digit``, ``ejected``, ``destroyed``,
    ``hung_up``) after ``seconds`` in it."""

    reason: str
    seconds: float


@dataclass(frozen=True, slots=True)
class FarEndClassified:
    """The callee was classified (:mod:`callhook.media.classify`), ``seconds`` after the
    answer: the call itself (``attempt`` None) or far leg ``attempt`` of a connect."""

    far_end_type: Literal["live", "answering_machine", "fax_machine", "unknown"]
    reason: str
    seconds: float
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class GreetingEnded:
    """An answering machine's greeting is over, ``seconds`` after the answer (``how``:
    ``beep``, ``silence``, ``timeout``); the beep's start and end and its tones' frequencies."""

    how: Literal["beep", "silence", "timeout"]
    seconds: float
    beep_start: float | None = None
    beep_end: float | None = None
    beep_hz: tuple[float, ...] = ()
    attempt: int | None = None


MediaEvent = (
    DigitReceived
    | PromptFinished
    | SpeechStarted
    | SpeechRecognised
    | SpeechRejected
    | SpeechUnavailable
    | PromptNote
    | VoiceActivity
    | RecorderFailed
    | CallEnded
    | Aborted
    | CalleeRinging
    | CalleeAnswered
    | CalleeEnded
    | CalleeReady
    | ReferAnswered
    | ReferNotified
    | RoomJoined
    | RoomRefused
    | RoomHolding
    | RoomPrompt
    | RoomLeft
    | FarEndClassified
    | GreetingEnded
)

# --- commands: actions -> media session -----------------------------------------------


@dataclass(frozen=True, slots=True)
class SayText:
    """A prompt item: text to speak with a TTS voice (``None``: the default voice)."""

    text: str
    voice: str | None = None
    # text_is_private: the text is kept out of every log.
    private: bool = False
    # The language of the action the prompt belongs to (its speech options), which
    # picks the voice when ``voice`` does not (callhook.speech.synthesis).
    language: str | None = None


@dataclass(frozen=True, slots=True)
class PlayFile:
    """A prompt item: a WAV file from the application's media file namespace."""

    name: str
    # (type, key hex, iv hex) of an aescbc cipher when the file is encrypted; never shown.
    cipher: tuple[str, str, str] | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class PlayTone:
    """A prompt item: a sine tone (the record beep), or two summed (``and_hz``: ringback's
    440 + 480 Hz); a frequency of 0 is silence."""

    frequency_hz: float
    seconds: float
    and_hz: float | None = None


@dataclass(frozen=True, slots=True)
class PlayDigits:
    """A prompt item: DTMF digits sent to the far end (play media ``digits_to_play``).

    As RFC 4733 telephone-events when the peer negotiated them, as in-band tones
    otherwise; ``digits`` are characters of ``0123456789*#ABCD``.
    """

    digits: str


@dataclass(frozen=True, slots=True)
class PlayUrl:
    """A prompt item: a WAV file fetched with GET from ``url`` (absolute, already resolved)."""

    url: str


PromptItem = SayText | PlayFile | PlayTone | PlayDigits | PlayUrl


@dataclass(frozen=True, slots=True)
class StartPrompt:
    """Play ``items`` in order; report :class:`PromptFinished` with ``prompt_id`` at the end."""

    prompt_id: int
    items: tuple[PromptItem, ...]


@dataclass(frozen=True, slots=True)
class StopPrompt:
    """Stop prompt ``prompt_id`` now if it is still playing."""

    prompt_id: int


@dataclass(frozen=True, slots=True)
class RecognitionOptions:
    """What the recogniser is asked to do (the reference's speech recognition options)."""

    language: str = "en-US"
    word_hints: tuple[str, ...] = ()
    max_alternatives: int = 1
    # "timeout": keep recognising phrase after phrase; "auto": one phrase is enough.
    mode: Literal["timeout", "auto"] = "timeout"
    # An answer to word hints whose best alternative is less sure than this is not
    # understood (``[speech] min_confidence``); free transcription is never held back.
    min_confidence: float = 0.0

    def doubts(self, alternatives: tuple[Alternative, ...]) -> bool:
        """Whether an answer is under the confidence floor (not understood)."""
        return bool(self.word_hints and alternatives) and (
            alternatives[0].confidence < self.min_confidence
        )


@dataclass(frozen=True, slots=True)
class StartRecognition:
    """Start the call's speech recognition stream with ``options``."""

    options: RecognitionOptions = field(default_factory=RecognitionOptions)


@dataclass(frozen=True, slots=True)
class StopRecognition:
    """Stop the call's speech recognition stream."""


@dataclass(frozen=True, slots=True)
class StartRecording:
    """Start writing the caller's audio to ``filename`` in the media file store.

    ``preroll`` seconds of audio heard just before this command are included, so
    that the first syllable, which the voice-activity detector needs to hear
    before it reports sound, is not cut off. The file never holds more than
    ``max_seconds`` (``seconds_max_duration``: exact even if the timer that ends
    the action fires late on a busy machine).
    """

    filename: str
    format: Literal["alaw", "ulaw"] | None
    cipher: tuple[str, str, str] | None = field(default=None, repr=False)  # keys never shown
    preroll: float = 0.0
    max_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class StopRecording:
    """Finish the recording file (flush, close, encrypt when asked)."""

    filename: str


@dataclass(frozen=True, slots=True)
class DetectVoice:
    """Voice activity is wanted (``on``) or no longer (the record action's silence rules).

    Recording and recognition want it anyway; a session may save the cost of
    its speech model while nothing does.
    """

    on: bool


# --- commands of a connect: its far legs (callhook.actions.connect) ------------------------


@dataclass(frozen=True, slots=True)
class CallCallee:
    """Place far leg ``attempt`` of a connect: call ``destination`` (a ``sip:`` URI, a number
    through a trunk, ``user:NAME``) as ``call_from`` (None: the caller's identity)."""

    attempt: int
    destination: str
    call_from: str | None = None


@dataclass(frozen=True, slots=True)
class DropCallee:
    """End far leg ``attempt``: CANCEL while it rings, BYE once it answered."""

    attempt: int


@dataclass(frozen=True, slots=True)
class JoinCallee:
    """Bridge the call with far leg ``attempt``: audio and digits both ways
    (``early``: its early media only, to the caller, before it answers)."""

    attempt: int
    early: bool = False


@dataclass(frozen=True, slots=True)
class SecondaryPages:
    """A connect's ``secondary_call`` pages, as absolute URLs with their methods (None: not
    given), and how long the far leg may last."""

    first_page: tuple[str, str] | None = None
    final_page: tuple[str, str] | None = None
    error_page: tuple[str, str] | None = None
    max_seconds: float = 240 * 60.0
    #: The whole-call recording is to be encrypted and the action gave no cipher: the
    #: response to ``first_page`` must (Aculab's ``call_recording_cipher``).
    needs_cipher: bool = False
    #: Who answered, when it was classified (``classify_callee``): its pages' ``this_call``
    #: says so.
    far_end: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunCallee:
    """Far leg ``attempt`` answered: run its ``secondary_call`` pages on it (its
    ``first_page`` actions before it is joined, then :class:`CalleeReady`; its
    ``final_page`` when it ends)."""

    attempt: int
    pages: SecondaryPages


@dataclass(frozen=True, slots=True)
class RecordCall:
    """Record the bridged call, both directions, into ``filename`` (a connect's
    ``secondary_call.call_recording``): ``mode`` ``mixed`` (one channel: the two sides
    summed) or ``separate`` (stereo: the caller left, the far end right). Ended by
    :class:`StopRecording` with the same ``filename``."""

    filename: str
    mode: Literal["mixed", "separate"] = "mixed"
    cipher: tuple[str, str, str] | None = field(default=None, repr=False)  # keys never shown
    eliminate_dtmf: bool = True  # in-band key presses silenced in the file


# --- a transfer (callhook.actions.transfer) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refer:
    """Ask the caller's side to call ``destination`` instead (a SIP REFER in the call's
    dialog, RFC 3515; ``referred_by``: its Referred-By, RFC 3892; None: the call's own
    address)."""

    destination: str
    referred_by: str | None = None


# --- live transcription (start_transcription) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Transcribe:
    """Transcribe the call (both directions as ``mode`` says), posting each phrase to
    ``results`` (absolute URL, method) with ``transcription_id``; replaces any running."""

    mode: Literal["separate", "mixed", "inbound", "outbound"]
    options: RecognitionOptions
    interim: bool
    results: tuple[str, str]
    transcription_id: str = ""
    #: The application instance and its log file, named in every result posted.
    instance_id: str = ""
    log_filename: str = ""


@dataclass(frozen=True, slots=True)
class StopTranscribing:
    """End the call's transcription (its phrase in progress is still decoded and sent)."""


# --- a conference room (callhook.actions.conference) --------------------------------------


@dataclass(frozen=True, slots=True)
class ParticipantOptions:
    """How a participant takes part in a room (Aculab's ``conference participant``, less
    its media: :mod:`callhook.conference.room` reads them).

    An empty digit is no digit. With a ``mute_digit`` and no ``unmute_digit`` the mute
    digit toggles; with both, one mutes and the other unmutes.
    """

    talker: bool = True
    start_on_entry: bool = True
    destroy_on_exit: bool = False
    beep_on_entry: bool = True
    exit_digit: str = ""
    mute_digit: str = ""
    unmute_digit: str = ""

    def __post_init__(self) -> None:
        for name in ("exit_digit", "mute_digit", "unmute_digit"):
            digit = getattr(self, name)
            if digit and (len(digit) != 1 or digit not in "0123456789ABCD#*"):
                raise ValueError(f"{name}: one of 0123456789ABCD#*, or empty ({digit!r})")


@dataclass(frozen=True, slots=True)
class JoinRoom:
    """Put the caller in its application's conference room ``room`` (made for it when there
    is none) with ``options``; ``joined`` and ``left``: what the others hear when it comes
    in and when it goes (its name and messages; nothing when empty)."""

    room: str
    options: ParticipantOptions = field(default_factory=ParticipantOptions)
    joined: tuple[PromptItem, ...] = ()
    left: tuple[PromptItem, ...] = ()


@dataclass(frozen=True, slots=True)
class RoomDigit:
    """A digit the caller pressed in its room: its exit, mute or unmute digit, or nothing."""

    digit: str


@dataclass(frozen=True, slots=True)
class LeaveRoom:
    """Take the caller out of its room (its action stopped)."""


@dataclass(frozen=True, slots=True)
class ClassifyOptions:
    """How a callee is classified (:mod:`callhook.media.classify`; the wire's
    ``classify_callee`` object: callhook/actions/connectschema.py)."""

    milliseconds_timeout: int = 7000
    milliseconds_initial_silence: int = 5000
    milliseconds_greeting: int = 2400
    milliseconds_after_greeting_silence: int = 800
    wait_for_beep: bool = True
    milliseconds_min_beep_duration: int = 180
    milliseconds_post_beep_silence: int = 1000
    milliseconds_no_beep_silence: int = 4000
    seconds_beep_timeout: int = 10


#: Each whole-number option of :class:`ClassifyOptions`: its least and greatest value
#: (the wire's and the configuration's checks).
CLASSIFY_RANGES: dict[str, tuple[int, int]] = {
    "milliseconds_timeout": (500, 10000),
    "milliseconds_initial_silence": (1000, 10000),
    "milliseconds_greeting": (1000, 6000),
    "milliseconds_after_greeting_silence": (300, 5000),
    "milliseconds_min_beep_duration": (100, 2000),
    "milliseconds_post_beep_silence": (100, 5000),
    "milliseconds_no_beep_silence": (1000, 10000),
    "seconds_beep_timeout": (1, 60),
}


@dataclass(frozen=True, slots=True)
class ClassifyFarEnd:
    """Classify the callee from its audio from now on: the call itself (``attempt``
    None: an outbound call's answer) or far leg ``attempt`` of a connect. What is
    decided comes as :class:`FarEndClassified`, then :class:`GreetingEnded`.
    ``options`` None: stop (the action gave up waiting)."""

    options: ClassifyOptions | None
    attempt: int | None = None


MediaCommand = (
    StartPrompt
    | StopPrompt
    | StartRecognition
    | StopRecognition
    | StartRecording
    | StopRecording
    | DetectVoice
    | CallCallee
    | DropCallee
    | JoinCallee
    | RunCallee
    | RecordCall
    | Refer
    | Transcribe
    | StopTranscribing
    | JoinRoom
    | RoomDigit
    | LeaveRoom
    | ClassifyFarEnd
)
