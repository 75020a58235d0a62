"""Offer/answer (RFC 3264) for a call's one G.711 audio stream, plain or SRTP. Sans-IO.

Values in (:mod:`callhook.sip.sdp`'s parsed descriptions), values and SDP text out.

* :func:`answer` accepts the first RTP/AVP audio stream that offers a codec we
  support and rejects every other ``m=`` line with port 0 (§6); :func:`offer`
  and :func:`negotiate_answer` are the outbound side (§5, §7). RFC 4733
  ``telephone-event/8000`` is offered and accepted for DTMF.
* The ``srtp`` mode (:data:`SrtpMode`) of :func:`answer`, :func:`offer` and
  :func:`negotiate_answer` says what we accept and offer:

  ``"off"`` (the default: the behaviour before SRTP)
      inbound, RTP/AVP streams only; an offer whose only audio is RTP/SAVP is
      refused with :class:`SrtpMismatch` (488); a=crypto lines in an RTP/AVP
      offer are ignored, so the answer is plain RTP. Outbound, plain RTP/AVP.
  ``"offer"`` (best effort)
      inbound, SRTP when the offer carries a usable a=crypto (RTP/SAVP, or the
      "best-effort" a=crypto in RTP/AVP that many PBXs and providers send),
      else plain RTP. Outbound, RTP/AVP *with* a=crypto lines: a peer that
      understands them answers with one and the call is SRTP, any other peer
      ignores them (RFC 4568 §7.1.x describes SDES offer/answer only for
      RTP/SAVP; RFC 5939 capability negotiation, the standard way to offer
      both, is not implemented).
  ``"require"``
      inbound, SRTP or 488 (:class:`SrtpMismatch`); outbound, RTP/SAVP with
      a=crypto, and an answer without a usable a=crypto is an error.

  The answerer picks the first usable crypto line of the offer (the
  offerer's order is its preference), answers it with the same tag and suite
  and its *own* fresh key (RFC 4568 §5.1.2, §7.1.2); each side protects with
  its own key and unprotects with the other's. :class:`Negotiated` carries
  both keys (``local_crypto``, ``remote_crypto``; None for plain RTP).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from callhook.media.srtp import Crypto, new_key
from callhook.sip import sdes
from callhook.sip.sdp import (
    ANY_RTP_PROTOS,
    CLOCK_RATE,
    HOLD_ADDRESSES,
    RTP_PROTOS,
    Codec,
    Direction,
    MediaDescription,
    SdpError,
    SessionDescription,
)

#: What SRTP an offer or answer may use: see the module docstring.
SrtpMode = sdes.SrtpMode

#: The codecs callhook speaks, with their RFC 3551 static payload types.
STATIC_PAYLOAD_TYPES: dict[str, int] = {"PCMU": 0, "PCMA": 8}
#: The payload type and events we offer for RFC 4733 telephone-event.
TELEPHONE_EVENT_PT = 101
TELEPHONE_EVENTS = "0-16"
#: Packetisation time we send and ask for, in milliseconds.
PTIME = 20
#: RFC 3264 §6.1: the answerer's direction for each direction of the offer.
_MIRROR: dict[str, Direction] = {
    "sendrecv": "sendrecv",
    "sendonly": "recvonly",
    "recvonly": "sendonly",
    "inactive": "inactive",
}


class NoCommonCodec(SdpError):
    """No active audio stream offers a codec we support (the agent answers 488)."""


class SrtpMismatch(NoCommonCodec):
    """The streams' security does not fit the SRTP mode (488, RFC 4568 §7.1.2): SRTP
    offered but off, required but not offered, or an answer's a=crypto that does not
    match the offer. A subclass of :class:`NoCommonCodec`, which this case raised
    before SRTP existed. The reason never contains key material.
    """


@dataclass(frozen=True)
class Negotiated:
    """The outcome of offer/answer for the call's audio stream.

    ``direction`` is OUR direction (``sendrecv``: we send and receive).
    ``on_hold`` is true when the remote put the call on hold: its address is
    all zeros or its direction is ``sendonly`` / ``inactive`` (RFC 3264 §8.4).
    ``local_crypto`` / ``remote_crypto`` are the SRTP keys (None: plain RTP).
    """

    remote_address: tuple[str, int]
    codec: Codec
    payload_type: int
    telephone_event_pt: int | None
    telephone_event_fmtp: str | None
    ptime: int
    remote_ptime: int | None
    direction: Direction
    on_hold: bool
    media_index: int
    #: Our SRTP key (we protect with it) and the peer's (we unprotect with it);
    #: None for plain RTP. Both are set or neither.
    local_crypto: Crypto | None = None
    remote_crypto: Crypto | None = None

    @property
    def srtp(self) -> bool:
        """Whether the stream is SRTP (RFC 3711)."""
        return self.local_crypto is not None and self.remote_crypto is not None

    @property
    def sends(self) -> bool:
        """Whether we should send RTP: our direction allows it and the address is real."""
        return self.direction in ("sendrecv", "sendonly") and (
            self.remote_address[0] not in HOLD_ADDRESSES
        )

    @property
    def receives(self) -> bool:
        """Whether the remote will send us RTP."""
        return self.direction in ("sendrecv", "recvonly")


@dataclass(frozen=True)
class _Choice:
    codec: Codec
    payload_type: int
    te_pt: int | None
    te_fmtp: str | None


def _choose(media: MediaDescription, supported: Sequence[str]) -> _Choice | None:
    """The first format in the sender's order that we support, and telephone-event.

    RFC 3264 §6.1: the answerer should use the offerer's payload type numbers;
    the offerer's list is in its order of preference.
    """
    wanted = {name.upper() for name in supported}
    codec: _Choice | None = None
    te_pt: int | None = None
    for fmt in media.formats:
        try:
            pt = int(fmt)
        except ValueError:
            continue
        mapped = media.encoding_of(pt)
        if mapped is None or mapped.clock_rate != CLOCK_RATE or mapped.channels != 1:
            continue
        name = mapped.encoding.upper()
        if codec is None and name in wanted:
            codec = _Choice(cast(Codec, name), pt, None, None)
        elif te_pt is None and name == "TELEPHONE-EVENT":
            te_pt = pt
    if codec is None:
        return None
    fmtp = media.fmtp.get(str(te_pt)) if te_pt is not None else None
    return _Choice(codec.codec, codec.payload_type, te_pt, fmtp)


def _usable_audio(media: MediaDescription, protos: frozenset[str] = RTP_PROTOS) -> bool:
    return media.media == "audio" and media.port != 0 and media.proto.upper() in protos


def _negotiated(
    session: SessionDescription,
    index: int,
    choice: _Choice,
    ours: Direction,
    keys: tuple[Crypto, Crypto] | None = None,
) -> Negotiated:
    media = session.media[index]
    conn = session.connection_for(media)
    if conn is None:  # parse() guarantees one for active streams
        raise SdpError(f"m= line {index} has no connection address")
    theirs = session.direction_for(media)
    return Negotiated(
        remote_address=(conn.address, media.port),
        codec=choice.codec,
        payload_type=choice.payload_type,
        telephone_event_pt=choice.te_pt,
        telephone_event_fmtp=choice.te_fmtp,
        ptime=PTIME,
        remote_ptime=media.ptime,
        direction=ours,
        on_hold=conn.is_hold or theirs in ("sendonly", "inactive"),
        media_index=index,
        local_crypto=keys[0] if keys else None,
        remote_crypto=keys[1] if keys else None,
    )


def answer(
    offer: SessionDescription,
    local_ip: str,
    local_port: int,
    session_id: int,
    version: int,
    *,
    srtp: SrtpMode = "off",
    local_crypto: Crypto | None = None,
) -> tuple[str, Negotiated]:
    """Answer an offer (RFC 3264 §6): one audio stream accepted, every other m= line rejected.

    The accepted stream is the first active audio stream with a codec we
    support whose profile and security fit ``srtp`` (module docstring); its
    codec is the FIRST of PCMU/PCMA in the offerer's order, with the
    offerer's payload type (dynamic ones included), plus
    ``telephone-event/8000`` with the offerer's payload type and fmtp when
    offered. Our direction mirrors the offer's (§6.1). Rejected streams keep
    their media type, proto and formats with port 0 (§6).

    An SRTP stream is answered with the offer's first usable crypto line's tag
    and suite and our key: ``local_crypto`` when its suite matches (a re-offer:
    keeping our key keeps the running SRTP context, RFC 4568 §7.1.4), else a
    fresh one. Raises :class:`SrtpMismatch` when a stream had a common codec
    but its security did not fit ``srtp``, else :class:`NoCommonCodec` when no
    stream qualifies.
    """
    sdes.check_mode(srtp)
    chosen: tuple[int, _Choice, Crypto | None] | None = None
    refusals: list[str] = []
    for index, media in enumerate(offer.media):
        if not _usable_audio(media, ANY_RTP_PROTOS):
            continue
        choice = _choose(media, tuple(STATIC_PAYLOAD_TYPES))
        if choice is None:
            continue
        where = f"m= line {index} ({media.proto})"
        theirs = sdes.offered_crypto(media.savp, media.crypto, media.crypto_refused, where, srtp)
        if isinstance(theirs, str):
            refusals.append(theirs)
            continue
        chosen = (index, choice, theirs)
        break
    if chosen is None:
        if refusals:
            raise SrtpMismatch("; ".join(refusals))
        raise NoCommonCodec("no audio stream offers PCMU or PCMA over RTP/AVP or RTP/SAVP")
    index, choice, theirs = chosen
    keys: tuple[Crypto, Crypto] | None = None
    if theirs is not None:
        if local_crypto is not None and local_crypto.suite == theirs.suite:
            ours = local_crypto.with_tag(theirs.tag)
        else:
            ours = new_key(theirs.suite, theirs.tag)
        keys = (ours, theirs)
    direction = _MIRROR[offer.direction_for(offer.media[index])]
    lines = _session_lines(local_ip, session_id, version, offer.timing)
    for i, media in enumerate(offer.media):
        if i == index:
            crypto = [keys[0]] if keys else []
            lines += _audio_lines(local_port, media.proto, [choice], direction, crypto)
        else:
            lines.append(f"m={media.media} 0 {media.proto} {' '.join(media.formats)}")
    return _text(lines), _negotiated(offer, index, choice, direction, keys)


def offer(
    local_ip: str,
    local_port: int,
    session_id: int,
    version: int,
    codecs: Sequence[str] = ("PCMU", "PCMA"),
    direction: Direction = "sendrecv",
    *,
    srtp: SrtpMode = "off",
    crypto: Sequence[Crypto] = (),
) -> str:
    """An offer for an outbound call (RFC 3264 §5): one audio stream, ``codecs`` in order.

    PCMU and PCMA by static payload type (RFC 3551), telephone-event 101 with
    events 0-16 (RFC 4733 §7), ptime 20. ``direction`` other than sendrecv puts
    the remote on hold in a re-offer (RFC 3264 §8.4).

    With ``srtp`` "offer" or "require", ``crypto`` are the keys to offer, one
    a=crypto line each in that order (:func:`callhook.media.srtp.offer_keys`:
    AES_CM_128_HMAC_SHA1_80 then _32); keep them for :func:`negotiate_answer`.
    "require" offers RTP/SAVP, "offer" RTP/AVP with the same lines (module
    docstring). Raises ValueError for keys without SRTP or SRTP without keys.
    """
    sdes.check_mode(srtp)
    if srtp == "off" and crypto:
        raise ValueError("crypto keys given but srtp is 'off'")
    if srtp != "off" and not crypto:
        raise ValueError(f"srtp={srtp!r} needs the keys to offer (crypto=srtp.offer_keys())")
    if len({c.tag for c in crypto}) != len(crypto):
        raise ValueError("the offered crypto tags must be unique (RFC 4568 §9.1)")
    choices: list[_Choice] = []
    for name in codecs:
        key = name.upper()
        if key not in STATIC_PAYLOAD_TYPES:
            raise ValueError(f"unsupported codec {name!r}; callhook speaks PCMU and PCMA")
        choices.append(_Choice(cast(Codec, key), STATIC_PAYLOAD_TYPES[key], None, None))
    if not choices:
        raise ValueError("offer() needs at least one codec")
    last = choices[-1]
    choices[-1] = _Choice(last.codec, last.payload_type, TELEPHONE_EVENT_PT, TELEPHONE_EVENTS)
    proto = "RTP/SAVP" if srtp == "require" else "RTP/AVP"
    lines = _session_lines(local_ip, session_id, version, "0 0")
    lines += _audio_lines(local_port, proto, choices, direction, list(crypto))
    return _text(lines)


def negotiate_answer(
    our_offer_codecs: Sequence[str],
    answer: SessionDescription,
    *,
    srtp: SrtpMode = "off",
    offered_crypto: Sequence[Crypto] = (),
) -> Negotiated:
    """Read the callee's answer to our :func:`offer` (RFC 3264 §7).

    Uses the answer's first active audio stream and the first codec in it that
    we offered. Raises :class:`NoCommonCodec` when the audio stream was
    rejected (port 0) or names none of our codecs.

    ``srtp`` and ``offered_crypto`` are what was passed to :func:`offer`. The
    answer's a=crypto must carry the tag and suite of one of ours (RFC 4568
    §7.1.3); that one of our keys protects, the answer's unprotects. An answer
    without a=crypto is plain RTP under "offer", and :class:`SrtpMismatch`
    under "require" (or when it chose RTP/SAVP).
    """
    sdes.check_mode(srtp)
    secure = srtp != "off" and bool(offered_crypto)
    protos = ANY_RTP_PROTOS if secure else RTP_PROTOS
    for index, media in enumerate(answer.media):
        if media.media != "audio":
            continue
        if not _usable_audio(media, protos):
            raise NoCommonCodec(f"the answer rejected the audio stream (m= line {index})")
        choice = _choose(media, our_offer_codecs)
        if choice is None:
            raise NoCommonCodec("the answer names none of the codecs we offered")
        keys = None
        if secure:
            answered = sdes.answered_crypto(
                media.savp, media.proto, media.crypto, media.crypto_refused, srtp, offered_crypto
            )
            if isinstance(answered, str):
                raise SrtpMismatch(answered)
            keys = answered
        return _negotiated(answer, index, choice, _MIRROR[answer.direction_for(media)], keys)
    raise NoCommonCodec("the answer has no audio stream")


def _addrtype(local_ip: str) -> str:
    try:
        return f"IP{ipaddress.ip_address(local_ip).version}"
    except ValueError:
        raise ValueError(f"local_ip must be an IP address, got {local_ip!r}") from None


def _session_lines(local_ip: str, session_id: int, version: int, timing: str) -> list[str]:
    addr = f"IN {_addrtype(local_ip)} {local_ip}"
    return ["v=0", f"o=- {session_id} {version} {addr}", "s=callhook", f"c={addr}", f"t={timing}"]


def _audio_lines(
    port: int,
    proto: str,
    choices: list[_Choice],
    direction: Direction,
    crypto: Sequence[Crypto] = (),
) -> list[str]:
    """``m=audio`` with rtpmap for every format, telephone-event last (RFC 4733 §7.1),
    then one ``a=crypto`` per key (RFC 4568 §9.1)."""
    te = next((c for c in choices if c.te_pt is not None), None)
    pts = [c.payload_type for c in choices]
    if te is not None and te.te_pt is not None:
        pts.append(te.te_pt)
    lines = [f"m=audio {port} {proto} {' '.join(map(str, pts))}"]
    lines += [f"a=rtpmap:{c.payload_type} {c.codec}/{CLOCK_RATE}" for c in choices]
    if te is not None:
        lines.append(f"a=rtpmap:{te.te_pt} telephone-event/{CLOCK_RATE}")
        if te.te_fmtp:
            lines.append(f"a=fmtp:{te.te_pt} {te.te_fmtp}")
    lines += [f"a=crypto:{c.format()}" for c in crypto]
    lines += [f"a=ptime:{PTIME}", f"a={direction}"]
    return lines


def _text(lines: list[str]) -> str:
    return "\r\n".join(lines) + "\r\n"
