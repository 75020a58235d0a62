"""A call's destination as an Aculab application writes it. Pure.

Aculab's outbound-call pages ("Call prefixes") name six prefixes, and a rule for a
destination without one:

============  ==============================================  =========================
prefix        what it calls                                   example
============  ==============================================  =========================
``tel:``      a telephone number: the full international      ``tel:441908273800``
              number, no leading ``0``, the ``+`` optional
``sip:``      a SIP address (``sips:`` too)                   ``sip:contact@example.com``
``loc:``      an inbound application of this installation     ``loc:support``
``webrtc:``   a web client, by its client id                  ``webrtc:agent-7``
``wss:``      a WebSocket server (``wss://...``; ``ws://``)   ``wss://agent.example/v``
``con:``      a conference room                               ``con:weekly``
============  ==============================================  =========================

Without a prefix, "anything containing only digits, optionally separated by a
single '-'" is a telephone number (callhook also takes a leading ``+`` and the
``*`` and ``#`` of a PBX's extensions) and a ``user@host`` address is a SIP
address. callhook adds ``user:NAME``: the phones a ``[users.NAME]`` user has
registered. Anything else is refused, with what was expected, when the action list
is validated: before any call is placed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from callhook.sip.grammar import parse_uri

Kind = Literal["number", "sip", "local", "webrtc", "websocket", "conference", "user"]

#: ``tel:``: the full international number (no leading 0), '+' optional, '-' between.
_TEL = re.compile(r"\+?([1-9][0-9]*(?:-[0-9]+)*)")
#: A destination without a prefix that is a number (Aculab: digits and single '-').
_NUMBER = re.compile(r"\+?[0-9*#]+(?:-[0-9*#]+)*")
#: Aculab's WebRTC client id: "alphanumeric and +-._ characters" (not dots alone: "." and
#: ".." are no name in a URL path, where workers ask each other for a client).
CLIENT_ID = re.compile(r"(?!\.+$)[A-Za-z0-9+\-._]{1,256}")
#: An application's name (as ``[apps.NAME]`` allows it).
_APP_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")
#: A conference room's name (con:): printable, no space.
_ROOM = re.compile(r"[!-~]{1,128}")
_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")

PREFIXES = ("tel:", "sip:", "sips:", "loc:", "webrtc:", "wss://", "ws://", "con:", "user:")


def _ci(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" for c in word)


#: The same forms for the published JSON Schema.
SCHEMA_PATTERN = "|".join(
    f"^(?:{form})$"
    for form in (
        _ci("tel") + r":\+?[1-9][0-9]*(?:-[0-9]+)*",
        _ci("sip") + f"{_ci('s')}?" + r":[^\s]+@?[^\s]*",
        _ci("ws") + f"{_ci('s')}?" + r"://[^\s]+",
        _ci("loc") + r":[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}",
        _ci("webrtc") + r":(?!\.+$)[A-Za-z0-9+._-]{1,256}",
        _ci("con") + r":[!-~]{1,128}",
        _ci("user") + r":[^\s]+",
        r"\+?[0-9*#]+(?:-[0-9*#]+)*",
        r"[^:\s@]+@[^\s]+",
    )
)


class BadDestination(ValueError):
    """A destination that is none of the forms above; the message says what was expected."""


@dataclass(frozen=True)
class Destination:
    """What a destination calls: its ``kind`` and the ``value`` to call.

    ``value`` is a number as ``+`` and digits (``tel:``) or as written without its
    separators, a SIP URI, an application's name, a client id, a WebSocket URL, a room
    or a user's name.
    """

    kind: Kind
    value: str


def parse(text: str) -> Destination:
    """The destination ``text`` names; :class:`BadDestination` if it names none."""
    raw = text.strip()
    match = _PREFIX.match(raw)
    prefix = match.group(1).lower() if match else ""
    rest = raw[match.end() :] if match else raw
    if prefix == "tel":
        number = _TEL.fullmatch(rest)
        if number is None:
            raise BadDestination(
                f"{raw!r}: a tel: destination is the full international number: digits, "
                "'+' optional, no leading 0 (tel:441908273800)"
            )
        return Destination("number", "+" + number.group(1).replace("-", ""))
    if prefix in ("sip", "sips"):
        _check_uri(raw)
        return Destination("sip", raw)
    if prefix in ("ws", "wss"):
        if not rest.startswith("//") or len(rest) <= 2:
            raise BadDestination(f"{raw!r}: a WebSocket destination is a URL: wss://host/path")
        return Destination("websocket", raw)
    if prefix == "loc":
        if not _APP_NAME.fullmatch(rest):
            raise BadDestination(f"{raw!r}: loc: names an application (loc:support)")
        return Destination("local", rest)
    if prefix == "webrtc":
        if not CLIENT_ID.fullmatch(rest):
            raise BadDestination(
                f"{raw!r}: webrtc: names a client id of letters, digits and + - . _"
            )
        return Destination("webrtc", rest)
    if prefix == "con":
        if not _ROOM.fullmatch(rest):
            raise BadDestination(f"{raw!r}: con: names a conference room (con:weekly)")
        return Destination("conference", rest)
    if prefix == "user":
        if not rest:
            raise BadDestination(f"{raw!r}: user: names a [users] user (user:alice)")
        return Destination("user", rest)
    if _NUMBER.fullmatch(raw):
        return Destination("number", raw.replace("-", ""))
    if match is None and "@" in raw:
        uri = "sip:" + raw  # Aculab: anything that is not a number is a SIP address
        _check_uri(uri)
        return Destination("sip", uri)
    if match is not None:
        raise BadDestination(
            f"{raw!r}: unknown prefix {prefix + ':'!r}; expected a telephone number, a SIP "
            "address, or one of tel:, sip:, loc:, webrtc:, wss://, con:, user:"
        )
    raise BadDestination(
        f"{raw!r}: expected a telephone number (digits, '-' between), a SIP address "
        "(user@host), or one of tel:, sip:, loc:, webrtc:, wss://, con:, user:"
    )


def _check_uri(uri: str) -> None:
    try:
        parsed = parse_uri(uri)
    except ValueError as exc:
        raise BadDestination(f"{uri!r} is not a SIP address: {exc}") from None
    if not parsed.host:
        raise BadDestination(f"{uri!r} is not a SIP address: it has no host")
