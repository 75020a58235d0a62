"""Fuzz campaign: every parser of untrusted input, fed arbitrary and mutated bytes.

    .venv/bin/python -m bench.fuzz --target sip --seconds 60
    .venv/bin/python -m bench.fuzz --all --seconds 180 [--jobs 2] [--out data/fuzz]

Coverage-guided with atheris (libFuzzer) when it is importable (the ``fuzz``
extra), else hypothesis with a large budget (``--engine`` forces one). Each
target runs in its own process (``atheris.Fuzz()`` ends with ``sys.exit``), for
``--seconds``. The property of every target is the same: an input either
parses or raises the module's own error type; any other exception, a failed
round trip, or a hang (``--timeout`` seconds on one input) is a crash. Each
distinct crash (exception type and the innermost callhook frame) is saved once,
the shortest input seen, as ``<out>/<target>/exc-<signature>.bin`` with its
traceback in ``.txt``; libFuzzer's own ``timeout-*`` / ``oom-*`` artifacts land
there too. The table at the end gives, per target, the inputs tried, the
coverage (libFuzzer ``cov``/``ft``) and corpus size (atheris only), and the
crashes; the exit status is 1 if there were any.

The same checks are the properties of the unit tests ``tests/unit/test_fuzz_*.py``
(a bounded hypothesis budget there, this script for the long runs): a crash
found here becomes a regression test there, with its fix in the parser.

Targets (``--list``): the SIP parser and the whole sans-IO agent, stream
framing, digest challenges, SDP offer/answer with SDES, RTP, the RTP receive
path of a media session, RTCP, SRTP unprotect, RFC 4733 events and SIP INFO
DTMF bodies, WAV reading and crash recovery, the page response (action JSON),
and the config file.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal
from unittest import mock

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

ROOT = Path(__file__).resolve().parent.parent
TORTURE = ROOT / "tests" / "data" / "sip" / "rfc4475"
REGRESSIONS = ROOT / "tests" / "data" / "fuzz"

Check = Callable[[bytes], None]


@dataclass(frozen=True)
class Target:
    """One fuzz target. ``load`` imports the code under test (so that atheris can
    instrument the imports) and returns the check; ``seeds`` are valid inputs
    for the corpus and for the structured mutations."""

    name: str
    load: Callable[[], Check]
    seeds: Callable[[], list[bytes]]
    max_len: int = 4096


TARGETS: dict[str, Target] = {}


Loader = Callable[[], Check]


def target(
    name: str, seeds: Callable[[], list[bytes]], max_len: int = 4096
) -> Callable[[Loader], Loader]:
    def register(load: Loader) -> Loader:
        TARGETS[name] = Target(name, load, seeds, max_len)
        return load

    return register


@functools.cache
def check_of(name: str) -> Check:
    """The check of target ``name``, loaded once per process (for the unit tests)."""
    return TARGETS[name].load()


def chunks(data: bytes) -> Iterator[bytes]:
    """Several packets out of one input: each is a length byte, then that many bytes."""
    pos = 0
    while pos < len(data):
        size = data[pos]
        yield data[pos + 1 : pos + 1 + size]
        pos += 1 + size


def packed(packets: list[bytes]) -> bytes:
    """The inverse of :func:`chunks` (for seeds; packets over 255 bytes are cut)."""
    return b"".join(bytes([min(len(p), 255)]) + p[:255] for p in packets)


def regression_seeds(name: str) -> list[bytes]:
    """The crashing inputs kept as regression tests are corpus seeds too."""
    folder = REGRESSIONS / name
    return [p.read_bytes() for p in sorted(folder.glob("*.bin"))] if folder.is_dir() else []


# --- SIP -------------------------------------------------------------------------------


def _sip_seeds() -> list[bytes]:
    seeds = [p.read_bytes() for p in sorted(TORTURE.glob("*.dat"))]
    return seeds + regression_seeds("sip")


@target("sip", _sip_seeds, max_len=16384)
def _sip() -> Check:
    from callhook.sip.checks import check_request, check_response
    from callhook.sip.grammar import parse_cseq
    from callhook.sip.message import (
        Request,
        SipMessageError,
        parse,
        parse_name_addr,
        parse_uri,
        parse_via,
        serialize,
    )

    def check(data: bytes) -> None:
        """``parse`` returns a message or raises SipMessageError (with a status to
        answer); a parsed message serialises, and that parses back to the same
        bytes; the accessors and header parsers the agent uses raise nothing else."""
        try:
            msg = parse(data)
        except SipMessageError as exc:
            assert exc.reason and 100 <= exc.status <= 699, (exc.reason, exc.status)
            return
        wire = serialize(msg)
        assert serialize(parse(wire)) == wire
        if isinstance(msg, Request):
            check_request(msg, frozenset({"timer"}), methods=frozenset({"INVITE", "BYE"}))
        else:
            check_response(msg)
        for prop in ("call_id", "cseq", "top_via", "branch", "from_tag", "to_tag", "parsed_uri"):
            with contextlib.suppress(SipMessageError):
                getattr(msg, prop, None)
        for name in ("Via", "Contact", "From", "To", "Route", "Record-Route", "CSeq"):
            for value in msg.headers.get_all(name):
                for parser in (parse_via, parse_name_addr, parse_uri, parse_cseq):
                    with contextlib.suppress(SipMessageError):
                        parser(value)

    return check


class _Errors(logging.Handler):
    """ERROR records with a traceback: the agent logs (and swallows) its own bugs that way."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.caught: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.caught.append(record.exc_info[1])


@target("agent", _sip_seeds, max_len=16384)
def _agent() -> Check:
    from callhook.sip.agent import Agent, IncomingCall
    from callhook.sip.transport import Target as SipTarget

    errors = _Errors()
    logger = logging.getLogger("callhook")
    peer = SipTarget("192.0.2.10", 5062)
    answer = b"v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n"

    def check(data: bytes) -> None:
        """The whole sans-IO SIP agent (what ``serve`` runs for every datagram): it never
        raises, and never logs an exception it caught (that is a bug of ours)."""
        errors.caught.clear()
        logger.addHandler(errors)
        try:
            agent = Agent("192.0.2.1", 5060)
            agent.receive(data, peer, 1000.0)
            agent.take_datagrams()
            for event in agent.take_events():
                if isinstance(event, IncomingCall):
                    agent.answer(event.call_id, answer, 1000.1)
            agent.receive(data, peer, 1000.2)  # as a retransmission
            agent.refuse(data, peer, 1000.3)
            agent.handle_timer(1100.0)
            agent.take_datagrams()
            agent.take_events()
        finally:
            logger.removeHandler(errors)
        if errors.caught:
            raise errors.caught[0]

    return check


def _framing_seeds() -> list[bytes]:
    return [b"\r\n\r\n" + s for s in _sip_seeds()[:20]]


@target("framing", _framing_seeds, max_len=16384)
def _framing() -> Check:
    from callhook.sip.framing import FramingError, Ping, StreamFramer

    def check(data: bytes) -> None:
        """A stream cut in three (at places the first bytes choose) frames into messages
        and pings, or raises FramingError; what comes out is never more than went in."""
        if len(data) < 2:
            return
        a, b = sorted((data[0] * len(data) // 256, data[1] * len(data) // 256))
        framer = StreamFramer()
        out: list[bytes | Ping] = []
        try:
            for piece in (data[2:a], data[a:b], data[b:]):
                out += framer.feed(piece)
        except FramingError as exc:
            assert 400 <= exc.status <= 599 and str(exc), (exc.status, str(exc))
            return
        size = sum(len(m) for m in out if isinstance(m, bytes))
        assert size + framer.pending <= len(data), (size, framer.pending, len(data))

    return check


def _digest_seeds() -> list[bytes]:
    return [
        b'Digest realm="atlanta.com", nonce="84a4cc6f3082121f32b42a2187831a9e", qop="auth"',
        b'Digest realm="b", nonce="n", algorithm=SHA-256, opaque="o", stale=TRUE',
        b'digest realm="\\"q\\"", nonce="n", algorithm=MD5-sess, qop="auth,auth-int"',
        *regression_seeds("digest"),
    ]


@target("digest", _digest_seeds)
def _digest() -> Check:
    from callhook.sip.digest import DigestError, authorization, best_challenge, parse_challenge
    from callhook.sip.message import SipMessageError, parse

    def check(data: bytes) -> None:
        """A challenge (as the SIP parser decodes header values) parses or raises
        DigestError; the Authorization computed for it goes into a REGISTER that parses
        back, the challenge's realm and nonce intact."""
        text = data.decode("utf-8", "surrogateescape")
        with contextlib.suppress(DigestError):
            best_challenge(text.split("\n"))
        try:
            challenge = parse_challenge(text)
        except DigestError as exc:
            assert str(exc)
            return
        value = authorization(challenge, "REGISTER", "sip:example.com", "alice", "secret")
        request = (
            "REGISTER sip:example.com SIP/2.0\r\nAuthorization: " + value + "\r\n\r\n"
        ).encode("utf-8", "surrogateescape")
        try:
            parsed = parse(request)
        except SipMessageError as exc:
            raise AssertionError(f"our Authorization does not parse: {exc.reason}") from None
        assert parsed.headers.get("Authorization") == value

    return check


# --- SDP and SDES ------------------------------------------------------------------------


def _sdp_seeds() -> list[bytes]:
    from callhook.media.srtp import Crypto
    from callhook.sip import offeranswer

    keys = (
        Crypto(1, "AES_CM_128_HMAC_SHA1_80", bytes(range(30))),
        Crypto(2, "AES_CM_128_HMAC_SHA1_32", bytes(range(30, 60))),
    )
    seeds = [
        offeranswer.offer("192.0.2.1", 4000, 1, 1).encode(),
        offeranswer.offer("2001:db8::1", 4000, 1, 1, ("PCMA",), "sendonly").encode(),
        offeranswer.offer("192.0.2.1", 4000, 1, 1, srtp="offer", crypto=keys).encode(),
        offeranswer.offer("192.0.2.1", 4000, 1, 1, srtp="require", crypto=keys).encode(),
        (
            b"v=0\r\no=alice 2890844526 2890844526 IN IP4 host.atlanta.example.com\r\ns=\r\n"
            b"c=IN IP4 host.atlanta.example.com\r\nt=0 0\r\nm=audio 49170 RTP/AVP 0 8 97 101\r\n"
            b"a=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:97 iLBC/8000\r\n"
            b"a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=ptime:20\r\n"
            b"m=video 51372 RTP/AVP 31 32\r\na=rtpmap:31 H261/90000\r\na=inactive\r\n"
        ),
    ]
    for path in sorted(TORTURE.glob("*.dat")):
        _head, sep, body = path.read_bytes().partition(b"\r\n\r\n")
        if sep and body.startswith(b"v=0"):
            seeds.append(body)
    return seeds + regression_seeds("sdp")


@target("sdp", _sdp_seeds)
def _sdp() -> Check:
    from callhook.media.srtp import Crypto, SrtpError
    from callhook.sip import offeranswer, sdp

    ours = Crypto(7, "AES_CM_128_HMAC_SHA1_80", bytes(range(30)))

    def check(data: bytes) -> None:
        """An offer (decoded as the SIP adapter does) parses or raises SdpError; the
        answer to it under each SRTP mode is made or refused with SdpError, parses,
        and (for a one-stream offer, like ours) reads back to the same codec and keys; each
        a=crypto line parses or raises SrtpError and round-trips."""
        text = data.decode("utf-8", "replace")
        for line in text.splitlines():
            if line.startswith("a=crypto:"):
                try:
                    crypto = Crypto.parse(line[9:])
                except SrtpError as exc:
                    assert str(exc)
                    continue
                assert Crypto.parse(crypto.format()) == crypto
        try:
            offer = sdp.parse(text)
        except sdp.SdpError as exc:
            assert str(exc)
            return
        for mode in ("off", "offer", "require"):
            for local in (None, ours):
                try:
                    answer, negotiated = offeranswer.answer(
                        offer, "192.0.2.1", 4000, 1, 2, srtp=mode, local_crypto=local
                    )
                except sdp.SdpError as exc:
                    assert str(exc)
                    continue
                if len(offer.media) != 1:
                    # negotiate_answer reads answers to our offers, which have one stream.
                    continue
                theirs = negotiated.remote_crypto
                back = offeranswer.negotiate_answer(
                    ("PCMU", "PCMA"),
                    sdp.parse(answer),
                    srtp=mode if theirs is not None else "off",
                    offered_crypto=(theirs,) if theirs is not None else (),
                )
                assert back.codec == negotiated.codec, (back.codec, negotiated.codec)
                assert back.remote_crypto == negotiated.local_crypto

    return check


# --- RTP, RTCP, SRTP, DTMF ---------------------------------------------------------------


def _rtp_packets() -> list[bytes]:
    from callhook.media.rtp import RtpPacket

    plain = RtpPacket(0, True, 1, 160, 0x1234, b"\xff" * 160).serialize()
    event = RtpPacket(101, False, 2, 160, 0x1234, b"\x05\x0a\x00\xa0").serialize()
    full = RtpPacket(8, False, 3, 320, 5, b"\xd5" * 20, (1, 2), (0xBEDE, b"\x10\x01\x00\x00"))
    padded = bytearray(RtpPacket(0, False, 4, 480, 5, b"\x00" * 8).serialize() + b"\x00\x00\x03")
    padded[0] |= 0x20
    return [plain, event, full.serialize(), bytes(padded)]


def _rtp_seeds() -> list[bytes]:
    return _rtp_packets() + regression_seeds("rtp")


@target("rtp", _rtp_seeds)
def _rtp() -> Check:
    from callhook.media.rtp import RtpError, RtpPacket

    def check(data: bytes) -> None:
        """A datagram parses or raises RtpError; a parsed packet serialises to one that
        parses back equal."""
        try:
            packet = RtpPacket.parse(data)
        except RtpError as exc:
            assert str(exc)
            return
        assert RtpPacket.parse(packet.serialize()) == packet

    return check


def _media_seeds() -> list[bytes]:
    from callhook.media import rtcp

    report = rtcp.report(rtcp.ReceiverReport(9, ()), "fuzz@example.com")
    return [packed(_rtp_packets()), packed([*_rtp_packets(), report]), *regression_seeds("media")]


@target("media", _media_seeds)
def _media() -> Check:
    from callhook.media.session import MediaSession

    peer = ("192.0.2.10", 4000)

    def check(data: bytes) -> None:
        """The RTP receive path of a call (what the media tick runs for every datagram:
        the latch, the reorder buffer, RFC 4733, G.711 decode, the in-band DTMF and
        voice detectors) and its RTCP path never raise, for two sessions: with
        telephone-event (PCMU, the voice detector's model awake) and without (PCMA,
        in-band DTMF)."""
        kinds: list[tuple[Literal["PCMU", "PCMA"], int, int | None]] = [
            ("PCMU", 0, 101),
            ("PCMA", 8, None),
        ]
        for codec, pt, event in kinds:
            session = MediaSession(codec, pt, event, peer, label="fuzz")
            # The speech model runs too (as while a recording or a recognition listens).
            session.vad.paused = event is None
            now = 1.0
            for i, packet in enumerate(chunks(data)):
                now += 0.02
                if i % 5 == 4:
                    session.rtcp_received(packet, (peer[0], peer[1] + 1), now)
                else:
                    session.receive(packet, peer, now)
                session.tick(now)
            session.tick(now + 1.0)

    return check


def _rtcp_seeds() -> list[bytes]:
    from callhook.media import rtcp

    block = rtcp.ReportBlock(0x1234, 3, 5, 70000, 12, 1 << 16, 99)
    sr = rtcp.SenderReport(9, rtcp.ntp_timestamp(1.7e9), 160, 10, 1600, (block,))
    return [
        rtcp.report(sr, "fuzz@example.com"),
        rtcp.report(rtcp.ReceiverReport(9, (block,)), "c", rtcp.Bye((9,), "gone")),
        *regression_seeds("rtcp"),
    ]


@target("rtcp", _rtcp_seeds)
def _rtcp() -> Check:
    from callhook.media import rtcp

    def check(data: bytes) -> None:
        """A compound packet parses or raises RtcpError; SR, RR and SDES packets parsed
        serialise to bytes that parse back equal."""
        try:
            packets = rtcp.parse(data)
        except rtcp.RtcpError as exc:
            assert str(exc)
            return
        for packet in packets:
            if isinstance(packet, rtcp.SenderReport | rtcp.ReceiverReport):
                assert rtcp.parse(packet.to_bytes()) == [packet]

    return check


def _srtp_keys() -> tuple[Any, Any]:
    from callhook.media.srtp import Crypto

    return (
        Crypto(1, "AES_CM_128_HMAC_SHA1_80", bytes(range(30))),
        Crypto(1, "AES_CM_128_HMAC_SHA1_80", bytes(range(30, 60))),
    )


def _srtp_seeds() -> list[bytes]:
    from callhook.media import rtcp
    from callhook.media.srtp import SrtpContext

    theirs, ours = _srtp_keys()
    sender = SrtpContext(theirs, ours)
    report = rtcp.report(rtcp.ReceiverReport(9, ()), "c")
    packets = [sender.protect(p) for p in _rtp_packets()[:3]]
    return [packed([*packets, sender.protect_rtcp(report)]), *regression_seeds("srtp")]


@target("srtp", _srtp_seeds)
def _srtp() -> Check:
    from callhook.media.srtp import SrtpContext

    theirs, ours = _srtp_keys()

    def check(data: bytes) -> None:
        """Unprotecting anything (forged, truncated, replayed, every fifth as SRTCP)
        gives the packet or None (counted as dropped); never an exception."""
        context = SrtpContext(ours, theirs)
        dropped = 0
        for i, packet in enumerate(chunks(data)):
            unprotect = context.unprotect_rtcp if i % 5 == 4 else context.unprotect
            out = unprotect(packet)
            if out is None:
                dropped += 1
            else:
                assert isinstance(out, bytes)
        assert context.dropped == dropped, (context.dropped, dropped)

    return check


def _dtmf_seeds() -> list[bytes]:
    records = [
        struct.pack("!4sI", bytes([5, 10, 0, 160]), 1000),
        struct.pack("!4sI", bytes([5, 0x8A, 1, 64]), 1000),
        struct.pack("!4sI", bytes([11, 10, 0, 160]), 2000),
    ]
    relays = [
        b"\x00application/dtmf-relay\nSignal=5\r\nDuration=160\r\n",
        b"\x01application/dtmf\n#",
    ]
    return [b"".join(records), *relays, *regression_seeds("dtmf")]


@target("dtmf", _dtmf_seeds)
def _dtmf() -> Check:
    from callhook.media.dtmf import EVENT_DIGITS, Rfc4733Receiver, parse_dtmf_relay

    def check(data: bytes) -> None:
        """RFC 4733 payloads (8-byte records: payload, timestamp) give a digit or None;
        a SIP INFO body (content type, newline, body) gives a digit or None."""
        receiver = Rfc4733Receiver()
        for i in range(0, len(data) - 7, 8):
            (timestamp,) = struct.unpack_from("!I", data, i + 4)
            digit = receiver.feed(data[i : i + 4], timestamp, i * 0.01)
            assert digit is None or digit in EVENT_DIGITS
        content_type, _, body = data[1:].partition(b"\n")
        for kind in (content_type.decode("latin-1"), "application/dtmf-relay", "application/dtmf"):
            digit = parse_dtmf_relay(kind, body)
            assert digit is None or digit in EVENT_DIGITS, digit

    return check


# --- WAV -----------------------------------------------------------------------------------


def _wav_seeds() -> list[bytes]:
    from callhook.media import wav

    pcm = bytearray(wav.g711_header("ulaw", 8, 16000))
    struct.pack_into("<HHIIHH", pcm, 20, wav.FORMAT_PCM, 2, 16000, 64000, 4, 16)
    ima = bytearray(wav.g711_header("alaw", 16))
    struct.pack_into("<HHIIHH", ima, 20, wav.FORMAT_IMA_ADPCM, 1, 8000, 4055, 256, 4)
    return [
        wav.g711_file("ulaw", bytes(range(256)) * 2),
        wav.g711_file("alaw", b"\xd5" * 100, 11025),
        bytes(pcm) + bytes(range(8)) * 4,
        bytes(ima) + bytes(16),
        *regression_seeds("wav"),
    ]


@target("wav", _wav_seeds, max_len=8192)
def _wav() -> Check:
    from callhook.media import wav
    from callhook.store import wavfile

    scratch = _scratch("fuzz-wav-")
    path = scratch / "recording.wav"

    def check(data: bytes) -> None:
        """A file (a prompt to play, a recording left by a crash) reads, decodes to
        8 kHz samples, or raises WavError; fixing its sizes and recovering it (plain
        and encrypted) raise nothing but WavError (or OSError)."""
        with contextlib.suppress(wav.WavError):
            info = wav.read_info(data)
            assert 0 <= info.data_length <= len(data)
        with contextlib.suppress(wav.WavError):
            samples = wav.decode_to_8k(data)
            assert samples.dtype.name == "int16" and samples.ndim == 1
        with contextlib.suppress(wav.WavError):
            fixed = wav.fix_sizes(data, force=True)
            assert wav.read_info(fixed).data_offset == wav.read_info(data).data_offset
        for encrypted in (False, True):
            path.write_bytes(data)
            with contextlib.suppress(wav.WavError):
                assert wavfile.recover(path, encrypted) >= 0

    return check


def _scratch(prefix: str) -> Path:
    """A scratch directory removed when the process exits (the suite's runs leave none)."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=_scratch_root()))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return scratch


def _scratch_root() -> str | None:
    """tmpfs when there is one: the wav and config targets write a file per input."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


# --- action JSON, config ---------------------------------------------------------------------


def _actions_seeds() -> list[bytes]:
    documents: list[Any] = [
        {"actions": [{"play": {"play_list": [{"text_to_say": "Hello"}]}}], "token": "t"},
        {
            "actions": [
                {
                    "get_number": {
                        "prompt": {"play": {"play_list": [{"file_to_play": "a.wav"}]}},
                        "digit_count": 4,
                        "next_page": {"url": "https://example.com/n"},
                    }
                },
                {"record": {"seconds_timeout": 30, "next_page": {"url": "/r"}}},
                {"sleep": {"seconds": 1}},
                {"redirect": {"next_page": {"url": "/x"}}},
                {"hang_up": {}},
            ],
            "api_version": "2.0",
        },
        {"actions": [{"run_menu": {"menu_options": [{"digit": "1", "next_page": "/a"}]}}]},
        {"actions": []},
    ]
    return [json.dumps(d).encode() for d in documents] + regression_seeds("actions")


@target("actions", _actions_seeds)
def _actions() -> Check:
    from callhook.actions.response import InvalidResponse, Response, parse_response

    def check(data: bytes) -> None:
        """A page's body is a valid action list or raises InvalidResponse with at least
        one problem, each a JSON path and a message."""
        try:
            result = parse_response(data)
        except InvalidResponse as exc:
            assert exc.problems and all(p.path.startswith("$") for p in exc.problems)
            assert all(p.message for p in exc.problems)
            return
        assert isinstance(result, Response)

    return check


def _config_seeds() -> list[bytes]:
    text = """
page_timeout = 5.0
default_app = "demo"
[http]
host = "127.0.0.1"
port = 8080
max_upload_mb = 5
[sip]
host = "0.0.0.0"
port = 5060
rtp_ports = [20000, 20100]
rtp_timeout = 60
max_calls = 10
external_address = "203.0.113.7"
[recordings]
max_mb = 10
[media]
remote_max_mb = 2
remote_timeout = 3.5
[notifications]
first_retry = 1
max_retry = 60
give_up_after = 3600
[security]
allow = ["127.0.0.0/8", "10.0.0.0/8"]
unknown = "reject"
rate = 20
ban_seconds = 600
max_message_bytes = 8192
[speech]
voice = "en"
recogniser = "none"
workers = 1
[apps.demo]
first_page = "http://127.0.0.1:8000/first"
secret = "0123456789abcdef0123"
api_key = "0123456789abcdef0123456789"
numbers = ["+441234567890"]
"""
    return [text.encode(), *regression_seeds("config")]


@target("config", _config_seeds)
def _config() -> Check:
    from callhook.config import settings as config

    scratch = _scratch("fuzz-config-")
    path = scratch / "callhook.toml"

    def no_secret_file(data_dir: Path) -> str:
        return "fuzz-secret-fuzz-secret"

    def check(data: bytes) -> None:
        """Any file loads or raises ConfigError naming the problem."""
        path.write_bytes(data)
        # An app without a secret makes load() create one in data_dir, which the input
        # names: a fuzzer must not write wherever it likes.
        with mock.patch.object(config, "data_secret", no_secret_file):
            try:
                config.load(path)
            except config.ConfigError as exc:
                assert str(exc)

    return check


# --- the worker: one target in this process ----------------------------------------------------


class Hang(Exception):
    """An input ran longer than ``--timeout`` (the hypothesis engine's own alarm)."""


@dataclass
class Recorder:
    """Runs the check on each input; counts inputs; saves each distinct crash once
    (the shortest input seen for it) instead of stopping, so one run finds several."""

    check: Check
    out: Path
    inputs: int = 0
    crashes: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    _saved_at: float = 0.0

    def __call__(self, data: bytes) -> None:
        self.inputs += 1
        try:
            self.check(data)
        except Exception as exc:
            self._crash(data, exc)
        if self.inputs & 1023 == 0 and time.monotonic() - self._saved_at > 1.0:
            self.save()

    def _crash(self, data: bytes, exc: Exception) -> None:
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if "/callhook/" in f.filename] or frames
        where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
        signature = f"{type(exc).__name__} at {where}"
        key = hashlib.sha1(signature.encode()).hexdigest()[:10]
        self.crashes[signature] = self.crashes.get(signature, 0) + 1
        if key in self.sizes and self.sizes[key] <= len(data):
            return
        self.sizes[key] = len(data)
        (self.out / f"exc-{key}.bin").write_bytes(data)
        text = "".join(traceback.format_exception(exc))
        (self.out / f"exc-{key}.txt").write_text(f"{signature}\n\n{text}")
        self.save()

    def save(self) -> None:
        self._saved_at = time.monotonic()
        stats = {"inputs": self.inputs, "crashes": self.crashes}
        tmp = self.out / "stats.json.tmp"
        tmp.write_text(json.dumps(stats))
        tmp.replace(self.out / "stats.json")


def mutate(seed: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """A seed with byte ranges cut and replaced (positions wrap around its length)."""
    data = bytearray(seed)
    for pos, cut, insert in edits:
        at = pos % (len(data) + 1)
        data[at : at + cut] = insert
    return bytes(data)


#: Bytes that matter to the text formats (separators, quotes, line ends) and to the
#: binary ones (zero, all ones, the top bit), for structured mutations.
SPECIAL = [b"", b"\r\n", b"\n", b" ", b",", b";", b":", b"=", b'"', b"<", b">", b"\x00", b"\xff"]


def strategy(spec: Target, max_size: int | None = None) -> SearchStrategy[bytes]:
    """Hypothesis inputs for a target: arbitrary bytes, and its seeds with byte ranges
    replaced by separators (SPECIAL) or by arbitrary bytes."""
    from hypothesis import strategies as st

    size = spec.max_len if max_size is None else max_size
    seeds = spec.seeds()
    position = st.integers(0, 1 << 16)
    special = st.lists(
        st.tuples(position, st.integers(0, 16), st.sampled_from(SPECIAL)), max_size=8
    )
    noise = st.lists(st.tuples(position, st.integers(0, 4), st.binary(max_size=8)), max_size=8)
    return st.one_of(
        st.binary(max_size=size),
        st.builds(mutate, st.sampled_from(seeds), special),
        st.builds(mutate, st.sampled_from(seeds), noise),
    )


def run_worker(name: str, seconds: float, out: Path, engine: str, timeout: float) -> None:
    spec = TARGETS[name]
    out.mkdir(parents=True, exist_ok=True)
    # The parsers' warnings about bad input are expected by the thousand: not shown.
    logging.getLogger("callhook").setLevel(logging.ERROR)
    if engine == "atheris":
        import atheris  # type: ignore[import-untyped]  # no stubs

        with atheris.instrument_imports(include=["callhook"]):
            check = spec.load()
        recorder = Recorder(check, out)
        seed_dir = out / "seeds"
        corpus = out / "corpus"
        for folder in (seed_dir, corpus):
            folder.mkdir(exist_ok=True)
        for seed in spec.seeds():
            (seed_dir / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
        args = [
            sys.argv[0],
            f"-max_total_time={max(1, int(seconds))}",
            f"-timeout={max(1, int(timeout))}",
            f"-max_len={spec.max_len}",
            f"-artifact_prefix={out}/",
            "-rss_limit_mb=3072",
            "-print_final_stats=1",
            str(corpus),
            str(seed_dir),
        ]
        atheris.Setup(args, recorder)
        atheris.Fuzz()  # exits the process when the time is up
        return
    from hypothesis import HealthCheck, given, settings

    check = spec.load()
    recorder = Recorder(check, out)
    inputs = strategy(spec)

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"one input ran over {timeout} s")

    signal.signal(signal.SIGALRM, on_alarm)

    @settings(
        max_examples=5000,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(inputs)
    def one(data: bytes) -> None:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            recorder(data)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        one()
    recorder.save()


# --- the campaign: a worker process per target, then the table ---------------------------------


@dataclass
class Result:
    name: str
    engine: str
    seconds: float = 0.0
    inputs: int = 0
    coverage: str = "-"
    corpus: str = "-"
    crashes: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    returncode: int = 0


_STATUS = re.compile(r"^#(\d+)\s+\S+\s+cov: (\d+) ft: (\d+) corp: (\d+)", re.M)
_DONE = re.compile(r"^Done (\d+) runs", re.M)


def collect(result: Result, out: Path, log: str) -> None:
    stats_file = out / "stats.json"
    if stats_file.exists():
        stats = json.loads(stats_file.read_text())
        result.inputs = int(stats["inputs"])
    statuses = _STATUS.findall(log)
    if statuses:
        count, cov, ft, corp = statuses[-1]
        result.coverage, result.corpus = f"{cov}/{ft}", corp
        result.inputs = max(result.inputs, int(count))
    done = _DONE.findall(log)
    if done:
        result.inputs = max(result.inputs, int(done[-1]))
    for txt in sorted(out.glob("exc-*.txt")):
        result.crashes.append(f"{txt.with_suffix('.bin')}: {txt.read_text().splitlines()[0]}")
    for prefix in ("crash-", "timeout-", "oom-", "slow-unit-", "leak-"):
        result.artifacts += [str(p) for p in sorted(out.glob(prefix + "*"))]


def run_target(name: str, seconds: float, out_root: Path, engine: str, timeout: float) -> Result:
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("exc-*"), *out.glob("stats.json"), *out.glob("timeout-*")]:
        old.unlink()
    log_path = out / "fuzzer.log"
    command = [
        sys.executable,
        "-m",
        "bench.fuzz",
        "--worker",
        name,
        "--seconds",
        str(seconds),
        "--out",
        str(out_root),
        "--engine",
        engine,
        "--timeout",
        str(timeout),
    ]
    start = time.monotonic()
    with log_path.open("w") as log:
        # A hang or an out-of-memory stops libFuzzer: its artifact is kept, and the
        # fuzzing of this target does not go on (the table shows it as a crash).
        proc = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    result = Result(name, engine, time.monotonic() - start, returncode=proc.returncode)
    collect(result, out, log_path.read_text(errors="replace"))
    return result


def table(results: list[Result]) -> str:
    head = ("target", "engine", "seconds", "inputs", "inputs/s", "cov/ft", "corpus", "crashes")
    rows = [head]
    for r in results:
        found = len(r.crashes) + len(r.artifacts)
        rate = f"{r.inputs / r.seconds:.0f}" if r.seconds else "-"
        rows.append(
            (
                r.name,
                r.engine,
                f"{r.seconds:.0f}",
                str(r.inputs),
                rate,
                r.coverage,
                r.corpus,
                str(found),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def default_engine() -> str:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return "hypothesis"
    return "atheris"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), default=[])
    parser.add_argument("--all", action="store_true", help="every target, one after the other")
    parser.add_argument("--list", action="store_true", help="name the targets and stop")
    parser.add_argument("--seconds", type=float, default=60.0, help="per target")
    parser.add_argument("--jobs", type=int, default=1, help="targets fuzzed at once")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one input may take")
    parser.add_argument("--engine", choices=("auto", "atheris", "hypothesis"), default="auto")
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "fuzz")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    engine = default_engine() if args.engine == "auto" else args.engine
    if args.worker:
        run_worker(args.worker, args.seconds, args.out / args.worker, engine, args.timeout)
        return 0
    if args.list:
        for name, spec in TARGETS.items():
            doc = (spec.load().__doc__ or "").split(". ")[0].split("\n")[0]
            print(f"{name:8} {doc}")
        return 0
    names = sorted(TARGETS) if args.all else args.target
    if not names:
        parser.error("--target NAME or --all")
    print(f"engine {engine}, {args.seconds:g} s per target, output in {args.out}", flush=True)
    results: list[Result] = []
    pending = list(names)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(run_target, name, args.seconds, args.out, engine, args.timeout)
            for name in pending
        ]
        for future in futures:
            result = future.result()
            results.append(result)
            print(
                f"{result.name}: {result.inputs} inputs, {len(result.crashes)} crashes, "
                f"{len(result.artifacts)} libFuzzer artifacts",
                flush=True,
            )
            for line in result.crashes + result.artifacts:
                print(f"  {line}", flush=True)
    print()
    print(table(results))
    return 1 if any(r.crashes or r.artifacts for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
