"""Where SIP messages go and come from: transports, targets and our own addresses, sans-IO.

Theory of operation
-------------------
The agent never touches a socket, but it must know three things about the
transport of each message (RFC 3261 §18):

* whether it is reliable (TCP, TLS) or not (UDP): a reliable transport makes
  the transactions stop retransmitting (§17.1.1.2, §17.1.2.2, §17.2.1) and
  zeroes their wait-for-retransmissions timers (D, I, J, K);
* what to write in the top Via (``SIP/2.0/TCP``) and in Contact
  (``;transport=tcp``, ``sips:`` for TLS: RFC 5630);
* where a response goes: over UDP to the Via's address (§18.2.2 with RFC 3581
  ``rport``), over TCP or TLS back on the connection the request came on.

A :class:`Target` names a peer the way the adapters can reach it: transport,
host, port. For a stream, the adapter keeps one connection per target: a
request that came on a connection has that connection's far end as its
source, so answering the source answers on the same connection; a request
sent to a target with no connection opens one (§18.1.1).

:class:`Local` is callhook's own side: the address it advertises (behind
NAT, ``[sip] external_address``) and the port of each listener; it writes
the Via and Contact values for a transport.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from callhook.sip.grammar import SipUri

Transport = Literal["udp", "tcp", "tls"]
TRANSPORTS: tuple[Transport, ...] = ("udp", "tcp", "tls")

# §18.1.1: a request larger than this, with no known path MTU, goes over TCP.
UDP_REQUEST_LIMIT = 1300


class Target(NamedTuple):
    """A peer as the adapters reach it: ``host``, ``port`` and ``transport``.

    A plain ``(host, port)`` tuple is a UDP target (``Target(*address)``).
    """

    host: str
    port: int
    transport: Transport = "udp"

    def __str__(self) -> str:
        return f"{self.transport} {self.host}:{self.port}"


def reliable(transport: str) -> bool:
    """Whether ``transport`` delivers in order without loss (no retransmissions needed)."""
    return transport in ("tcp", "tls")


def transport_of(value: str) -> Transport:
    """A transport name (``UDP``, ``tcp``, ``TLS``) as a :data:`Transport`; ValueError else."""
    lowered = value.lower()
    if lowered not in TRANSPORTS:
        raise ValueError(f"unsupported SIP transport {value!r} (udp, tcp or tls)")
    return lowered  # type: ignore[return-value,unused-ignore]  # checked just above


def target_of(uri: SipUri, default: Transport = "udp") -> Target:
    """Where a request to ``uri`` goes (RFC 3263 §4.1 without DNS: the URI's own host).

    ``sips:`` means TLS (port 5061 by default); else ``;transport=`` if given, else
    ``default``. Raises ValueError for a URI that names no host.
    """
    if uri.scheme not in ("sip", "sips") or not uri.host:
        raise ValueError(f"cannot send to {uri}")
    transport: Transport
    if uri.scheme == "sips":
        transport = "tls"
    else:
        given = uri.params.get("transport")
        transport = transport_of(given) if given else default
    port = uri.port or (5061 if transport == "tls" else 5060)
    return Target(uri.host.strip("[]"), port, transport)


def branch() -> str:
    """A new Via branch with RFC 3261's magic cookie (§8.1.1.7)."""
    return "z9hG4bK" + secrets.token_hex(10)


@dataclass
class Local:
    """callhook's own SIP address: what it advertises, and a port per listening transport."""

    host: str
    ports: dict[Transport, int] = field(default_factory=dict)

    def port(self, transport: Transport) -> int:
        """The listening port of ``transport`` (the UDP one when it has no listener)."""
        return self.ports.get(transport) or self.ports.get("udp") or 5060

    def listens(self, transport: Transport) -> bool:
        return bool(self.ports.get(transport))

    def via(self, transport: Transport = "udp", *, branch_id: str | None = None) -> str:
        """A top Via for a request we send over ``transport`` (with ``rport``: RFC 3581 §3)."""
        return (
            f"SIP/2.0/{transport.upper()} {self.host}:{self.port(transport)}"
            f";branch={branch_id or branch()};rport"
        )

    def uri(
        self,
        user: str,
        transport: Transport = "udp",
        *,
        sips: bool = False,
        at: tuple[str, int] | None = None,
    ) -> str:
        """Our SIP URI for ``transport``: ``;transport=tcp`` over TCP; over TLS ``sips:`` when
        the dialog is a SIPS one (``sips``: its request-URI was ``sips:``, §12.1.1), else
        ``sip:...;transport=tls`` (a peer that called a ``sip:`` URI may not route ``sips:``).
        ``at`` is another host and port to name (a NAT's, that a registrar saw)."""
        host, port = at or (self.host, self.port(transport))
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        if transport == "tls" and sips:
            return f"sips:{user}@{host}:{port}"
        suffix = f";transport={transport}" if transport != "udp" else ""
        return f"sip:{user}@{host}:{port}{suffix}"

    def contact(
        self,
        user: str,
        transport: Transport = "udp",
        *,
        sips: bool = False,
        at: tuple[str, int] | None = None,
    ) -> str:
        """A Contact header value reaching us over ``transport`` (§8.1.1.8)."""
        return f"<{self.uri(user, transport, sips=sips, at=at)}>"
