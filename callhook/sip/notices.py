"""What the SIP agent tells the application side about calls (``Agent.take_events``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from callhook.sip.transport import Target

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class IncomingCall:
    """A new INVITE: answer, ring or reject it."""

    call_id: str
    user: str  # the request-URI's user part: which application to run
    from_uri: str
    to_uri: str
    request_uri: str
    offer: bytes
    source: Target  # where the INVITE came from (its transport, for a stream its connection;
    # behind the proxy of serve --workers, the source the proxy names: sip/front.py)
    #: The ``[users]`` user the caller authenticated as (digest), or "" (anyone else).
    caller_user: str = ""
    #: The caller's original target when the call was diverted (sip/provenance.py).
    divert: str = ""
    #: The STIR/SHAKEN attestation level the INVITE carries: A, B, C or "".
    attestation: str = ""


@dataclass(frozen=True, slots=True)
class CallProgress:
    """An outbound call got a provisional response (180 ringing, 183 progress); ``sdp``:
    its session description when it has one (early media, RFC 3960)."""

    call_id: str
    status: int
    sdp: bytes = b""


@dataclass(frozen=True, slots=True)
class CallAnswered:
    """An outbound call was answered (the ACK is sent): ``answer`` is the callee's SDP."""

    call_id: str
    answer: bytes


@dataclass(frozen=True, slots=True)
class CallConfirmed:
    """The ACK for our 2xx arrived: the inbound call is fully set up."""

    call_id: str


@dataclass(frozen=True, slots=True)
class Reoffer:
    """A re-INVITE or UPDATE with a new offer (hold, unhold, new media address)."""

    call_id: str
    offer: bytes


@dataclass(frozen=True, slots=True)
class InfoReceived:
    """An INFO in the call's dialog (DTMF relay): already answered 200."""

    call_id: str
    content_type: str
    body: bytes


@dataclass(frozen=True, slots=True)
class CallTerminated:
    """The call is over. ``cause`` is a final page ``call_cause``, ``raw_cause`` the SIP status."""

    call_id: str
    cause: str
    raw_cause: str
    by_remote: bool


@dataclass(frozen=True, slots=True)
class ReferResponse:
    """The final response to our REFER (sip/referral.py): 202 accepted; 408 when none came."""

    call_id: str
    status: int


@dataclass(frozen=True, slots=True)
class ReferProgress:
    """A NOTIFY of our REFER's outcome (already answered 200): its sipfrag's status (0:
    none readable); ``final`` when the subscription ended or the status is final."""

    call_id: str
    status: int
    final: bool


CallEvent = (
    IncomingCall
    | CallProgress
    | CallAnswered
    | CallConfirmed
    | Reoffer
    | InfoReceived
    | CallTerminated
    | ReferResponse
    | ReferProgress
)


@dataclass(frozen=True)
class Credentials:
    """What a trunk that challenges (401/407) wants to hear."""

    username: str
    password: str = field(repr=False)
