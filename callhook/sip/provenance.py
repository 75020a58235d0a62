"""Where an inbound call has been, and who vouches for its caller. Pure.

Aculab's call info gives an application two facts an INVITE may carry:

- ``call_divert``: when the call was diverted, the number or address the caller first
  dialled. It is read from the ``Diversion`` header (RFC 5806: each diverting hop adds
  its entry on top, so the caller's original target is the last entry), or else from
  ``History-Info`` (RFC 7044: the entry indexed ``1`` is the first target; a single
  entry means the call was never retargeted).
- ``call_attestation``: the STIR/SHAKEN attestation level, ``A``, ``B`` or ``C``. It is
  read from ``P-Attestation-Indicator`` (the header Aculab's page names), or else from
  the ``attest`` claim of the PASSporT in an ``Identity`` header (RFC 8224 §4, the
  SHAKEN extension of RFC 8588 §3). The PASSporT's signature is not verified: like the
  indicator header, it is as trustworthy as the peer that sent the INVITE.

Both are empty when the INVITE does not say, or says it in a form that cannot be read:
what a caller sends never makes them raise.
"""

from __future__ import annotations

import base64
import binascii
import json

from callhook.sip.grammar import parse_name_addr
from callhook.sip.headers import split_quoted
from callhook.sip.message import Headers

#: The attestation levels of ATIS-1000074 (SHAKEN) §5.2.3, the only values passed on.
LEVELS = frozenset({"A", "B", "C"})
#: A PASSporT's claims are a few hundred bytes (RFC 8588): a larger one is not read.
MAX_PAYLOAD = 4096


def _entries(headers: Headers, name: str) -> list[str]:
    # Diversion is a comma-separated list (RFC 5806 §4); so is History-Info.
    return [
        part.strip()
        for value in headers.get_all(name)
        for part in split_quoted(value, ",")
        if part.strip()
    ]


def _address(entry: str) -> str:
    """The URI of a name-addr entry, without its URI headers (``?Reason=...``)."""
    try:
        uri = parse_name_addr(entry).uri
    except ValueError:  # SipMessageError included
        return ""
    uri.headers = {}
    return str(uri)


def divert(headers: Headers) -> str:
    """The caller's original target, if the call was diverted; else ``""``."""
    try:
        return _divert(headers)
    except Exception:  # whatever the caller wrote, the call goes on without it
        return ""


def _divert(headers: Headers) -> str:
    diversions = _entries(headers, "Diversion")
    if diversions:
        return _address(diversions[-1])
    history = _entries(headers, "History-Info")
    # Retargeted: an entry names a cause (RFC 4458 "cause" URI parameter) or a "mp" tag
    # (RFC 7044 §10.2: a change of target). A proxy's routing of an address of record to a
    # registered contact ("rc") alone is no diversion.
    if len(history) < 2 or not any(_retargeted(entry) for entry in history[1:]):
        return ""
    for entry in history:
        try:
            index = parse_name_addr(entry).params.get("index")
        except ValueError:  # SipMessageError included
            continue
        if index == "1":
            return _address(entry)
    return _address(history[0])


def _retargeted(entry: str) -> bool:
    try:
        address = parse_name_addr(entry)
    except ValueError:
        return False
    return (
        "mp" in address.params
        or "cause" in address.uri.params
        or any(key.lower() == "reason" for key in address.uri.headers)
    )


def attestation(headers: Headers) -> str:
    """``A``, ``B`` or ``C`` when the INVITE carries an attestation level; else ``""``."""
    try:
        return _attestation(headers)
    except Exception:  # whatever the caller wrote, the call goes on without it
        return ""


def _attestation(headers: Headers) -> str:
    indicator = (headers.get("P-Attestation-Indicator") or "").strip().upper()
    if indicator in LEVELS:
        return indicator
    for value in headers.get_all("Identity"):
        level = _passport_attest(value)
        if level:
            return level
    return ""


def _passport_attest(value: str) -> str:
    """The ``attest`` claim of an Identity header's compact-form PASSporT (RFC 8225 §7)."""
    token = value.split(";", 1)[0].strip().strip("<>")
    parts = token.split(".")
    if len(parts) != 3:
        return ""
    payload = parts[1]
    if len(payload) > MAX_PAYLOAD:
        return ""
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        return ""
    level = claims.get("attest") if isinstance(claims, dict) else None
    return level if isinstance(level, str) and level in LEVELS else ""
