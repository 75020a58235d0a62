"""SIP trunks: the providers and PBXs callhook exchanges calls with (``[trunks.NAME]``).

A trunk is a peer with a few facts: where its registrar is (absent: an
IP-authenticated trunk that needs no registration), the transport, the
credentials for registration and for challenged outbound calls, the caller
id to send, whether media is encrypted, and the addresses its calls come from.

``[trunk]`` (credentials for challenged outbound calls, the first form
callhook had) keeps working: it is the trunk named ``trunk``, used by
outbound calls that name no trunk.

This module only reads and checks the configuration; the SIP service acts on
it (registration, routing, outbound calls) and reports each trunk's state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from callhook.sip.grammar import parse_hostport
from callhook.sip.guard import Network, networks
from callhook.sip.message import SipMessageError
from callhook.sip.registration import RegistrationSpec
from callhook.sip.sdes import SRTP_MODES, SrtpMode
from callhook.sip.transport import TRANSPORTS, Transport

#: The name ``[trunk]`` goes by.
LEGACY = "trunk"

KEYS = {
    "registrar",
    "transport",
    "username",
    "password",
    "realm",
    "expires",
    "outbound_proxy",
    "caller_id",
    "srtp",
    "addresses",
}


#: A SIP user part as it may be written in a header (RFC 3261 §25.1 unreserved and
#: user-unreserved characters, and escapes).
_USER = re.compile(r"[A-Za-z0-9\-_.!~*'()&=+$,?/%]+")


#: Marks a ``GET /api/trunks`` entry whose registration another worker holds.
ELSEWHERE = "registered_elsewhere"


class RouteError(ValueError):
    """An outbound call that cannot be placed as asked, and why (for a 400 / 404)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class TrunkError(ValueError):
    """A ``[trunks.X]`` table that cannot be used, and why."""


@dataclass(frozen=True)
class Trunk:
    """One trunk's configuration (the password is kept out of the repr)."""

    name: str
    registrar: str | None = None  # host[:port]; None: no registration
    transport: Transport = "udp"
    username: str | None = None
    password: str = field(default="", repr=False)
    realm: str = ""
    expires: int = 300
    outbound_proxy: str | None = None  # host[:port]
    caller_id: str | None = None
    srtp: SrtpMode = "off"
    addresses: tuple[Network, ...] = ()

    @property
    def registers(self) -> bool:
        return self.registrar is not None

    @property
    def domain(self) -> str | None:
        """The provider's domain, for request-URIs and From: the registrar's host."""
        host = self.registrar or self.outbound_proxy
        return None if host is None else parse_hostport(host, "registrar")[0]

    @property
    def next_hop(self) -> str | None:
        """``host[:port]`` requests to this trunk are sent to: the outbound proxy, else the
        registrar (None: the request-URI's own host)."""
        return self.outbound_proxy or self.registrar

    def registration(self) -> RegistrationSpec | None:
        """What to register, or None for a trunk without a registrar."""
        if self.registrar is None or self.username is None:
            return None
        return RegistrationSpec(
            self.name,
            self.registrar,
            self.username,
            self.password,
            realm=self.realm,
            expires=self.expires,
            transport=self.transport,
        )

    def target_uri(self, number_or_uri: str) -> str:
        """The request-URI for a call to ``number_or_uri`` through this trunk: a ``sip:`` or
        ``sips:`` URI as given; a number at the trunk's domain (``sips:`` over TLS)."""
        if number_or_uri.lower().startswith(("sip:", "sips:")):
            return number_or_uri
        domain = self.domain
        if domain is None:
            raise TrunkError(
                f"trunk {self.name} has no registrar or outbound_proxy: call a sip: URI, "
                "not a number"
            )
        scheme = "sips" if self.transport == "tls" else "sip"
        # '#' is not allowed in a URI's user part (RFC 3261 §25.1): escaped.
        return f"{scheme}:{number_or_uri.replace('#', '%23')}@{domain}"


def _host_port(path: Path, table: str, key: str, value: object) -> str:
    text = str(value).strip()
    try:
        parse_hostport(text, key)
    except SipMessageError as exc:
        raise TrunkError(f"{path}: [{table}] {key}: {exc.reason}") from None
    return text


def parse(path: Path, name: str, values: dict[str, Any]) -> Trunk:
    """One ``[trunks.NAME]`` table, checked; TrunkError names what is wrong."""
    table = f"trunks.{name}"
    unknown = set(values) - KEYS
    if unknown:
        raise TrunkError(f"{path}: [{table}] unknown keys: {', '.join(sorted(unknown))}")
    transport = str(values.get("transport", "udp")).lower()
    if transport not in TRANSPORTS:
        raise TrunkError(f"{path}: [{table}] transport must be udp, tcp or tls")
    srtp = str(values.get("srtp", "off")).lower()
    if srtp not in SRTP_MODES:
        raise TrunkError(f"{path}: [{table}] srtp must be off, offer or require")
    registrar = values.get("registrar")
    username = values.get("username")
    if registrar is not None:
        registrar = _host_port(path, table, "registrar", registrar)
        if not username:
            raise TrunkError(f"{path}: [{table}] a registrar needs a username (and password)")
    proxy = values.get("outbound_proxy") or None
    if proxy is not None:
        proxy = _host_port(path, table, "outbound_proxy", proxy)
    try:
        expires = int(values.get("expires", 300))
    except (TypeError, ValueError):
        expires = 0
    if not 1 <= expires <= 86400:
        raise TrunkError(f"{path}: [{table}] expires must be 1 to 86400 seconds")
    addresses = values.get("addresses", [])
    if not isinstance(addresses, list):
        raise TrunkError(f"{path}: [{table}] addresses must be a list of CIDR blocks")
    try:
        blocks = networks(addresses)
    except ValueError as exc:
        raise TrunkError(f"{path}: [{table}] addresses: {exc}") from None
    for key in ("username", "caller_id"):
        value = values.get(key)
        if value is not None and not _USER.fullmatch(str(value)):
            raise TrunkError(
                f"{path}: [{table}] {key} must be a SIP user part (letters, digits, + - . _ "
                "and the like; no spaces, quotes, ';', '@', '<' or '>')"
            )
    return Trunk(
        name=name,
        registrar=registrar,
        transport=transport,
        username=str(username) if username else None,
        password=str(values.get("password", "")),
        realm=str(values.get("realm", "")),
        expires=expires,
        outbound_proxy=proxy,
        caller_id=str(values["caller_id"]) if values.get("caller_id") else None,
        srtp=srtp,
        addresses=blocks,
    )


def load(path: Path, raw: dict[str, Any]) -> dict[str, Trunk]:
    """The trunks of a config file: ``[trunks.NAME]`` tables, and ``[trunk]`` as ``trunk``."""
    trunks: dict[str, Trunk] = {}
    tables = raw.get("trunks", {})
    if not isinstance(tables, dict):
        raise TrunkError(f"{path}: trunks must be tables, [trunks.NAME]")
    for name, values in tables.items():
        if not isinstance(values, dict):
            raise TrunkError(f"{path}: trunks.{name} must be a table, [trunks.{name}]")
        trunks[name] = parse(path, name, values)
    legacy = raw.get("trunk")
    if legacy:
        if LEGACY in trunks:
            raise TrunkError(f"{path}: [trunk] and [trunks.trunk] are the same trunk: keep one")
        unknown = set(legacy) - {"username", "password"}
        if unknown:
            raise TrunkError(f"{path}: [trunk] unknown keys: {', '.join(sorted(unknown))}")
        trunks[LEGACY] = Trunk(
            LEGACY,
            username=legacy.get("username"),
            password=str(legacy.get("password", "")),
        )
    return trunks
