"""One call of the SIP service as the telephony service holds it: its leg, its media, its policy.

Shared by :mod:`callhook.telephony.service` (inbound calls, the service) and
:mod:`callhook.telephony.dialling` (outbound calls).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from callhook.calls.runner import CallSummary
from callhook.config.settings import AppConfig
from callhook.media.session import MediaSession
from callhook.media.srtp import SrtpContext
from callhook.sip import offeranswer, sdp
from callhook.sip.sdes import SrtpMode
from callhook.telephony.leg import SipLeg


@dataclass
class CallMedia:
    """A call's RTP port, its media session, and its SDP's session id and version."""

    session: MediaSession
    port: int
    session_id: int
    version: int = 1


@dataclass
class SipCall:
    """A call the service runs: its application, leg, media and SRTP policy."""

    call_id: str
    app: AppConfig
    leg: SipLeg
    media: CallMedia
    answer_sdp: bytes = b""
    answered: asyncio.Future[bytes] | None = None  # outbound: the callee's SDP
    task: asyncio.Task[CallSummary] | None = None
    started: float = field(default_factory=time.time)  # wall clock, for the REST API
    srtp: SrtpMode = "off"  # the call's SRTP policy, for re-offers too
    #: Far legs of its connect that callhook hung up because another won (Aculab's
    #: ``dropped_calls``, for the winner's ``secondary_call.final_page``).
    dropped_calls: list[dict[str, Any]] = field(default_factory=list)
    #: The application instance running on it (its call log), once it runs; an
    #: outbound service's, from the start (its reference).
    instance_id: str | None = None
    #: An outbound service's ``token``, for its first page (None: null).
    token: str | None = None
    #: What runs on the call instead of its application (``callhook test --sip``'s caller).
    script: Callable[[SipLeg], Awaitable[CallSummary]] | None = None


def media_session(
    negotiated: offeranswer.Negotiated, call_id: str, rtp_timeout: float = 0.0
) -> MediaSession:
    """The media session the SDP offer/answer agreed on."""
    session = MediaSession(
        negotiated.codec,
        negotiated.payload_type,
        negotiated.telephone_event_pt,
        negotiated.remote_address,
        label=f"call {call_id}",
        sending=negotiated.sends,
    )
    session.rtp_timeout = rtp_timeout
    session.expects_rtp = negotiated.receives
    if negotiated.srtp:
        session.srtp = srtp_context(negotiated)
    return session


def srtp_context(negotiated: offeranswer.Negotiated) -> SrtpContext:
    """The SRTP keys the offer/answer agreed on, as a context (``negotiated.srtp``)."""
    assert negotiated.local_crypto is not None and negotiated.remote_crypto is not None
    return SrtpContext(negotiated.local_crypto, negotiated.remote_crypto)


class Unanswered(Exception):
    """An outbound call ended before it was answered, with its cause."""

    def __init__(self, cause: str, raw: str) -> None:
        super().__init__(cause)
        self.cause = cause
        self.raw = raw


async def nothing() -> None:
    """The answer action of an outbound call: it is answered already."""
    return None


def reoffer(call: SipCall, body: bytes, address: str, now: float) -> tuple[bytes, bool]:
    """A re-INVITE's offer (RFC 3264 §8) applied to ``call``'s media: its answer's SDP,
    and whether the far end put the call on hold. :class:`~callhook.sip.sdp.SdpError`
    when the offer is unusable (the caller answers 488); the media is left as it was."""
    media = call.media
    session = media.session
    session.reclaim()  # (its receive may change: the media thread must not hold it)
    offer = sdp.parse(body.decode("utf-8", "replace"))
    answer, negotiated = offeranswer.answer(
        offer,
        address,
        media.port,
        media.session_id,
        media.version + 1,
        srtp=call.srtp,
        local_crypto=session.srtp.local if session.srtp is not None else None,
    )
    media.version += 1
    if session.srtp is not None and negotiated.srtp:
        assert negotiated.local_crypto is not None and negotiated.remote_crypto is not None
        session.srtp.update(negotiated.local_crypto, negotiated.remote_crypto)
    elif negotiated.srtp:
        session.srtp = srtp_context(negotiated)
    if negotiated.remote_address != session.offered and not negotiated.on_hold:
        session.remote = session.offered = negotiated.remote_address
        session.latched = False
    session.sending = negotiated.sends
    # On hold the peer sends nothing by agreement: no dead-call clock until it resumes.
    session.expect_rtp(now, negotiated.receives and not negotiated.on_hold)
    return answer.encode(), negotiated.on_hold
