"""The proxy in front of a worker (``serve --workers N``: Kamailio), as the agent sees it; sans-IO.

Theory of operation
-------------------
A worker of ``serve --workers N`` is reached only through Kamailio, which owns
the SIP address the outside world knows (``callhook/cluster/workers.py``). Two things
then cross the proxy that a plain SIP hop would lose, so they travel in two
private headers, each trusted from one side only:

* :data:`SOURCE` (proxy → worker): where a request from outside really came
  from, ``sip:HOST:PORT;transport=T``. Kamailio writes it on every request it
  passes on from outside (removing any copy the sender put there); the worker
  believes it only when the request's own source is the front (:meth:`Front.origin`),
  and uses it where the sender's address matters: which trunk a call came
  through, and (later) who registered. Responses still go to the proxy.
* :data:`DESTINATION` (worker → proxy): where a request that starts a
  transaction outside a dialog (an INVITE to a callee or a trunk, a trunk's
  REGISTER) is to go, the next hop the worker resolved. Kamailio follows it only
  from a worker, and removes it.

Every request a worker sends goes to the front, over UDP (:attr:`Front.target`), but
those over TLS to a peer the worker resolved (below):
outside a dialog with :data:`DESTINATION`; inside one, Kamailio is in the route
set (it Record-Routes every dialog), so the request's Route names it anyway,
by its public address, which may not be reachable from the worker (behind a NAT,
``[sip] external_address``). So calls and registrations leave from Kamailio's
address: the one a provider registered, and the one a NAT forwards.

A trunk's registration names the front as its Contact (:meth:`Front.contact_port`):
the provider's calls come to Kamailio, which hands each to a worker.

Except over TLS (:meth:`Front.carries`): a trunk over TLS is reached on the worker's
own connection, whose certificate the worker checks against the trunk's name, which
Kamailio's TLS client does not. Its calls and registration leave from the worker
directly, and the registration's Contact is the worker's own address: the provider's
calls come on worker 0's connection (as to one process without a TLS listener), and
every call's requests stay on the connection it went out or came in on. (Not through
Kamailio's TLS listener, even when it has one: Kamailio would send the calls'
requests to the provider on a connection of its own, unchecked.) A registered phone's
flow over TLS is Kamailio's own connection: calls to it go through Kamailio.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from callhook.sip.grammar import parse_uri
from callhook.sip.message import Request
from callhook.sip.transport import Target, Transport, target_of

#: Proxy → worker: the request's real source (a SIP URI of its address and transport).
SOURCE = "X-Callhook-Source"
#: Worker → proxy: where a request outside a dialog goes next (a SIP URI).
DESTINATION = "X-Callhook-Destination"


@dataclass(frozen=True)
class Front:
    """The proxy in front of this worker: where to send requests, what to believe from it,
    and what to name as our address to the outside world."""

    #: Where the worker reaches the proxy (its SIP port, over UDP).
    target: Target
    #: The addresses the proxy's requests come from.
    sources: frozenset[str]
    #: The address the outside world reaches the proxy at (Record-Route's, the Contact of
    #: a trunk's registration), and its port for each transport it listens on.
    public_host: str
    public_ports: dict[Transport, int] = field(default_factory=dict)

    def carries(self, transport: Transport) -> bool:
        """Whether a worker's requests to a peer it resolved over ``transport`` go through
        the proxy. Not over TLS: Kamailio's TLS client (5.6) checks a certificate's chain
        but not that it names the host called, so a worker holds its own TLS connection to
        a trunk (callhook/config/tls.py checks both), past the proxy, and so do the trunk's
        requests back. (A registered phone's flow over TLS is the proxy's own connection:
        the worker reaches it through the proxy whatever its transport.)"""
        return transport != "tls"

    def contact_port(self, transport: Transport) -> int:
        """The proxy's public port for ``transport`` (its UDP port when it has no such one)."""
        return self.public_ports.get(transport) or self.public_ports.get("udp") or 5060

    def origin(self, request: Request, source: Target) -> Target:
        """Where ``request`` (from ``source``) really came from: :data:`SOURCE`'s address
        when the proxy sent it, else ``source``. A malformed value counts as none."""
        if source.host not in self.sources:
            return source
        value = request.headers.get(SOURCE)
        if not value:
            return source
        try:
            return target_of(parse_uri(value.strip()))
        except ValueError:
            return source


def destination_uri(target: Target) -> str:
    """``target`` as the SIP URI of :data:`DESTINATION` (and of :data:`SOURCE`)."""
    host = f"[{target.host}]" if ":" in target.host else target.host
    suffix = f";transport={target.transport}" if target.transport != "udp" else ""
    return f"sip:{host}:{target.port}{suffix}"
