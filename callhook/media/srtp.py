"""SRTP (RFC 3711) for one call, keyed by SDP security descriptions (RFC 4568). Sans-IO.

Theory of operation
-------------------
SDES keying is symmetric and simple: each side puts the master key it will
*send* with into its SDP as an ``a=crypto`` attribute, and uses the other
side's key to check and decrypt what it receives (RFC 4568 §5.1, §6.1). So a
call has exactly two keys: ours (outbound) and the peer's (inbound).

* :class:`Crypto` is one ``a=crypto`` value: ``<tag> <suite> inline:<key||salt>
  [|lifetime] [session params]`` (RFC 4568 §9.1, the SRTP key-info of §9.2).
  :meth:`Crypto.parse` accepts the two suites callhook speaks,
  ``AES_CM_128_HMAC_SHA1_80`` and ``AES_CM_128_HMAC_SHA1_32`` (§6.2.1, §6.2.2:
  16-byte AES key, 14-byte salt, 80- or 32-bit RTP tag; SRTCP always uses the
  80-bit tag), one inline key without MKI, an optional lifetime and the
  optional ``WSH`` window size hint (§6.3.6). Anything else — another suite,
  an MKI or several keys (§6.1: only needed to re-key in band), another key
  method, another session parameter (KDR, UNENCRYPTED_*, FEC_*: §6.3) — is
  refused with :class:`SrtpError`, so the offer/answer code can pick another
  line or answer 488. A lifetime is kept but not enforced here: it limits
  the *sender* (RFC 3711 §9.2), and libsrtp stops at the suite's hard limit.
* :func:`new_key` draws a fresh master key and salt from :mod:`secrets`
  (RFC 4568 §8.2: a reused key would reuse keystream).
* :class:`SrtpContext` wraps two libsrtp sessions (``pylibsrtp``): an
  outbound one with our key for :meth:`~SrtpContext.protect` and an inbound
  one with the peer's key for :meth:`~SrtpContext.unprotect`, each with a
  wildcard SSRC template (libsrtp's ``ssrc_any_outbound`` /
  ``ssrc_any_inbound``), so a restarted stream with a new SSRC (RFC 3550
  §8.2) keeps working; libsrtp creates a per-SSRC stream only after a packet
  authenticated. ``unprotect`` never raises: a packet that fails
  authentication, is a replay (RFC 3711 §3.3.2: 128-packet window) or is not
  SRTP at all returns None and is counted.

Keys are secrets (docs/security.md). ``repr``/``str`` of :class:`Crypto` and
:class:`SrtpContext` never show key material, and no :class:`SrtpError`
message quotes it; :func:`redact` hides the inline keys of an SDP body or a
whole SIP message before it is logged. The keys still travel in clear in the
SDP: SDES is only as private as the signalling (RFC 4568 §8.3), i.e. SIP
over TLS.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from dataclasses import dataclass, replace
from typing import Final, Literal, cast

import pylibsrtp

Suite = Literal["AES_CM_128_HMAC_SHA1_80", "AES_CM_128_HMAC_SHA1_32"]

#: The suites callhook speaks, in its order of preference (RFC 4568 §6.2).
SUITES: Final[tuple[Suite, ...]] = ("AES_CM_128_HMAC_SHA1_80", "AES_CM_128_HMAC_SHA1_32")
#: Master key and master salt lengths of both suites, in bytes (RFC 4568 §6.2.1).
KEY_LENGTH: Final = 16
SALT_LENGTH: Final = 14
MASTER_LENGTH: Final = KEY_LENGTH + SALT_LENGTH
#: Bytes an SRTP packet is longer than its RTP packet: the authentication tag (RFC 3711 §4.2).
TAG_LENGTH: Final[dict[str, int]] = {"AES_CM_128_HMAC_SHA1_80": 10, "AES_CM_128_HMAC_SHA1_32": 4}
#: The largest lifetime these suites allow: 2^48 SRTP packets (RFC 4568 §6.2.1).
MAX_LIFETIME: Final = 1 << 48
#: RFC 4568 §9.1: ``tag = 1*9DIGIT``.
MAX_TAG: Final = 999_999_999
#: libsrtp's replay window bounds (RFC 3711 §3.3.2 asks for at least 64).
_MIN_WINDOW = 64
_MAX_WINDOW = 0x7FFF

#: The libsrtp profile of each suite (``pylibsrtp.Policy.SRTP_PROFILE_*``).
PROFILES: Final[dict[str, int]] = {
    "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    "AES_CM_128_HMAC_SHA1_32": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
}
_DIGITS = re.compile(r"[0-9]{1,9}")
_METHOD = re.compile(r"[A-Za-z0-9_]{1,16}")  # key-method, §9.1 (bounded: a key is longer)
_LIFETIME = re.compile(r"(2\^)?([0-9]{1,15})")
_WSH = re.compile(r"WSH=([0-9]{2,5})")
_INLINE = re.compile(r"(inline:)[^\s;]+", re.IGNORECASE)
# libsrtp's messages (pylibsrtp.ERRORS) for the two reasons a packet is dropped on purpose.
_AUTH_FAIL = "authentication failure"
_REPLAY = ("replay check failed (bad index)", "replay check failed (index too old)")


class SrtpError(ValueError):
    """An ``a=crypto`` value or a packet callhook cannot use, and why (never the key)."""


def _quoted(token: str) -> str:
    """``token`` quoted for an error message, unless it could be a base64 key (RFC 4648 §4):
    suite names and session parameters are short and have ``_`` or an inner ``=``.
    """
    short = len(token) <= 32 and token.isascii() and token.isprintable()
    if short and (token.isdigit() or "_" in token or "=" in token.rstrip("=")):
        return repr(token)
    return f"<{len(token)} characters, not shown>"


def redact(text: str) -> str:
    """``text`` with every ``inline:<key>`` replaced by ``inline:<hidden>``, for logs."""
    return _INLINE.sub(r"\1<hidden>", text)


@dataclass(frozen=True, repr=False)
class Crypto:
    """One SDES crypto attribute (RFC 4568 §9.1): tag, suite and master key || salt.

    ``lifetime`` is in packets (None: the suite's maximum, §6.1); ``wsh`` is
    the replay window size hint (§6.3.6). ``repr`` and ``str`` hide the key.
    """

    tag: int
    suite: Suite
    key: bytes
    lifetime: int | None = None
    wsh: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.tag <= MAX_TAG:
            raise SrtpError(f"a crypto tag is 1 to 9 digits, got {self.tag}")
        if self.suite not in PROFILES:
            raise SrtpError(f"unsupported crypto suite {_quoted(self.suite)}")
        if len(self.key) != MASTER_LENGTH:
            raise SrtpError(
                f"{self.suite} needs {MASTER_LENGTH} bytes of key and salt, got {len(self.key)}"
            )
        if self.lifetime is not None and not 1 <= self.lifetime <= MAX_LIFETIME:
            raise SrtpError("a key lifetime is 1 to 2^48 packets")
        if self.wsh is not None and self.wsh < _MIN_WINDOW:
            raise SrtpError(f"a window size hint is at least {_MIN_WINDOW} (RFC 4568 §6.3.6)")

    def __repr__(self) -> str:
        extra = f", lifetime={self.lifetime}" if self.lifetime is not None else ""
        extra += f", wsh={self.wsh}" if self.wsh is not None else ""
        return f"Crypto(tag={self.tag}, suite={self.suite!r}, key=<hidden>{extra})"

    __str__ = __repr__

    @property
    def inline(self) -> str:
        """The key and salt in base64 (RFC 4568 §6.1 ``key-salt``): key material."""
        return base64.b64encode(self.key).decode("ascii")

    def with_tag(self, tag: int) -> Crypto:
        """The same key under another tag (an answer uses the offer's tag, RFC 4568 §7.1.2)."""
        return replace(self, tag=tag)

    def format(self) -> str:
        """The attribute's value, ``<tag> <suite> inline:<key>[|<lifetime>] [WSH=<n>]``."""
        text = f"{self.tag} {self.suite} inline:{self.inline}"
        if self.lifetime is not None:
            exponent = self.lifetime.bit_length() - 1
            power = self.lifetime == 1 << exponent
            text += f"|2^{exponent}" if power else f"|{self.lifetime}"
        if self.wsh is not None:
            text += f" WSH={self.wsh}"
        return text

    @classmethod
    def parse(cls, value: str) -> Crypto:
        """Parse an ``a=crypto`` value (after ``crypto:``); raise :class:`SrtpError`."""
        parts = value.split()
        if len(parts) < 3:
            raise SrtpError("a=crypto needs <tag> <crypto-suite> <key-params> (RFC 4568 §9.1)")
        tag_text, suite_text, key_params, *params = parts
        if not _DIGITS.fullmatch(tag_text):
            raise SrtpError(f"a=crypto tag is not 1 to 9 digits: {_quoted(tag_text)}")
        tag = int(tag_text)
        suite = suite_text.upper()
        if suite not in PROFILES:
            raise SrtpError(f"tag {tag}: unsupported crypto suite {_quoted(suite_text)}")
        if ";" in key_params:
            # §6.1: several master keys need an MKI to tell them apart
            raise SrtpError(f"tag {tag}: several master keys (MKI) are not supported")
        method, colon, info = key_params.partition(":")
        if not colon or not _METHOD.fullmatch(method):
            # no "<method>:": the text may be a bare key, so it is not quoted
            raise SrtpError(f"tag {tag}: key-params is not <key-method>:<key-info>")
        if method.lower() != "inline":
            raise SrtpError(f"tag {tag}: unsupported key method {method!r} (only inline)")
        key_text, *fields = info.split("|")
        lifetime: int | None = None
        for position, item in enumerate(fields):
            if ":" in item:  # mki-value ":" mki-length, §9.2
                raise SrtpError(f"tag {tag}: an MKI is not supported")
            match = _LIFETIME.fullmatch(item)
            if position > 0 or match is None:
                raise SrtpError(f"tag {tag}: malformed key lifetime")
            lifetime = int(match[2])
            if match[1]:  # "2^" and an exponent (§6.1), bounded before the shift
                lifetime = 1 << lifetime if lifetime <= 48 else MAX_LIFETIME + 1
            if not 1 <= lifetime <= MAX_LIFETIME:
                raise SrtpError(f"tag {tag}: a key lifetime is 1 to 2^48 packets")
        try:
            key = base64.b64decode(key_text, validate=True)
        except (binascii.Error, ValueError):
            raise SrtpError(f"tag {tag}: the inline key is not valid base64") from None
        if len(key) != MASTER_LENGTH:
            raise SrtpError(
                f"tag {tag}: {suite} needs {MASTER_LENGTH} bytes of key and salt, got {len(key)}"
            )
        wsh: int | None = None
        for param in params:
            match = _WSH.fullmatch(param)
            if match is None:
                raise SrtpError(f"tag {tag}: unsupported session parameter {_quoted(param)}")
            wsh = int(match[1])
        return cls(tag, cast(Suite, suite), key, lifetime, wsh)


def new_key(suite: Suite = "AES_CM_128_HMAC_SHA1_80", tag: int = 1) -> Crypto:
    """A fresh random master key and salt for ``suite`` (never reused: RFC 4568 §8.2)."""
    return Crypto(tag, suite, secrets.token_bytes(MASTER_LENGTH))


def offer_keys() -> tuple[Crypto, ...]:
    """Fresh keys for an offer: one per suite of :data:`SUITES`, tags 1, 2, ... in order."""
    return tuple(new_key(suite, tag) for tag, suite in enumerate(SUITES, 1))


def _session(crypto: Crypto, ssrc_type: int) -> pylibsrtp.Session:
    policy = pylibsrtp.Policy(
        key=crypto.key, ssrc_type=ssrc_type, srtp_profile=PROFILES[crypto.suite]
    )
    if crypto.wsh is not None and ssrc_type == pylibsrtp.Policy.SSRC_ANY_INBOUND:
        policy.window_size = min(max(crypto.wsh, 128), _MAX_WINDOW)
    return pylibsrtp.Session(policy)


class SrtpContext:
    """The SRTP state of one call: our key protects, the peer's key unprotects.

    Counters of dropped inbound packets (RTP and RTCP together):
    ``auth_failures`` (wrong key or tampered, RFC 3711 §4.2), ``replays``
    (§3.3.2) and ``malformed`` (too short, not SRTP); ``protected`` and
    ``unprotected`` count the RTP packets that went through. Not thread-safe
    (libsrtp state and one packet buffer per direction), like the media session.
    """

    __slots__ = (
        "_local",
        "_protect",
        "_protect_rtcp",
        "_remote",
        "_unprotect",
        "_unprotect_rtcp",
        "auth_failures",
        "malformed",
        "protected",
        "replays",
        "unprotected",
    )

    def __init__(self, local: Crypto, remote: Crypto) -> None:
        self.auth_failures = 0
        self.replays = 0
        self.malformed = 0
        self.protected = 0
        self.unprotected = 0
        self._set_local(local)
        self._set_remote(remote)

    def __repr__(self) -> str:
        return (
            f"SrtpContext(out={self._local.suite}, in={self._remote.suite}, "
            f"protected={self.protected}, unprotected={self.unprotected}, "
            f"dropped={self.dropped})"
        )

    @property
    def local(self) -> Crypto:
        """Our (outbound) key."""
        return self._local

    @property
    def remote(self) -> Crypto:
        """The peer's (inbound) key."""
        return self._remote

    @property
    def dropped(self) -> int:
        """Inbound packets refused, for every reason."""
        return self.auth_failures + self.replays + self.malformed

    def _set_local(self, crypto: Crypto) -> None:
        session = _session(crypto, pylibsrtp.Policy.SSRC_ANY_OUTBOUND)
        self._local = crypto
        self._protect = session.protect
        self._protect_rtcp = session.protect_rtcp

    def _set_remote(self, crypto: Crypto) -> None:
        session = _session(crypto, pylibsrtp.Policy.SSRC_ANY_INBOUND)
        self._remote = crypto
        self._unprotect = session.unprotect
        self._unprotect_rtcp = session.unprotect_rtcp

    def update(self, local: Crypto, remote: Crypto) -> None:
        """New keys after a re-offer (RFC 4568 §7.1.4): only a side whose key or
        suite changed is re-created, so an unchanged side keeps its rollover
        counter and replay window (RFC 3711 §3.3.1).
        """
        if (local.suite, local.key) != (self._local.suite, self._local.key):
            self._set_local(local)
        else:
            self._local = local  # a new tag only
        if (remote.suite, remote.key, remote.wsh) != (
            self._remote.suite,
            self._remote.key,
            self._remote.wsh,
        ):
            self._set_remote(remote)
        else:
            self._remote = remote

    def protect(self, rtp: bytes) -> bytes:
        """The SRTP packet for an RTP packet of ours (RFC 3711 §3.3).

        Raises :class:`SrtpError` for input that is not an RTP packet, or for
        a sequence number protected before (libsrtp refuses to reuse a
        keystream): both are bugs of the caller, not of the network.
        """
        try:
            out = self._protect(rtp if type(rtp) is bytes else bytes(rtp))
        except (pylibsrtp.Error, ValueError, TypeError) as exc:
            raise SrtpError(f"cannot protect this RTP packet: {exc}") from None
        self.protected += 1
        return out

    def unprotect(self, srtp: bytes) -> bytes | None:
        """The RTP packet inside an SRTP packet from the peer, or None (counted)."""
        try:
            out = self._unprotect(srtp if type(srtp) is bytes else bytes(srtp))
        except (pylibsrtp.Error, ValueError, TypeError) as exc:
            self._drop(exc)
            return None
        self.unprotected += 1
        return out

    def protect_rtcp(self, rtcp: bytes) -> bytes:
        """The SRTCP packet for a compound RTCP packet of ours (RFC 3711 §3.4)."""
        try:
            return self._protect_rtcp(rtcp if type(rtcp) is bytes else bytes(rtcp))
        except (pylibsrtp.Error, ValueError, TypeError) as exc:
            raise SrtpError(f"cannot protect this RTCP packet: {exc}") from None

    def unprotect_rtcp(self, srtcp: bytes) -> bytes | None:
        """The compound RTCP packet inside an SRTCP packet from the peer, or None (counted)."""
        try:
            return self._unprotect_rtcp(srtcp if type(srtcp) is bytes else bytes(srtcp))
        except (pylibsrtp.Error, ValueError, TypeError) as exc:
            self._drop(exc)
            return None

    def _drop(self, exc: Exception) -> None:
        reason = str(exc)
        if reason == _AUTH_FAIL:
            self.auth_failures += 1
        elif reason in _REPLAY:
            self.replays += 1
        else:
            self.malformed += 1
