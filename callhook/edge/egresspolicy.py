"""Where callhook's own HTTP requests may go: the egress policy. Pure.

callhook fetches URLs an application names — its pages (``next_page``), prompts
(``file_to_play``), notifications (``recording_available_page``) — so a
hostile or compromised page could point them at the operator's private network
or at a cloud metadata service, which hands out credentials to whoever asks
from the machine (server-side request forgery). docs/security.md; ``[egress]``:

* **Never**: link-local addresses (``169.254.0.0/16``, ``fe80::/10``: the cloud
  metadata services live at 169.254.169.254 and ``fd00:ec2::254``), the
  unspecified address, multicast and reserved space, and the known metadata
  addresses outside link-local.
* **Private and loopback** (RFC 1918, ``127.0.0.0/8``, ``::1``, unique-local
  ``fc00::/7``, site-local ``fec0::/10``, shared ``100.64.0.0/10``): only the
  configured applications' own endpoints, address *and port* (their pages' hosts
  and ports, and ``serve``'s own HTTP server for the built-in demo), unless
  ``allow_private``: trusting an application's host must not open every other
  service on that host (a database, an admin page) to its pages.
* IPv6 forms that carry an IPv4 address (IPv4-mapped ``::ffff:0:0/96``, NAT64
  ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by that IPv4 address.
* Everything else (the public internet) is allowed.

The check is on the *address a connection is made to*, after DNS resolution,
on every connection and so on every redirect (the adapter,
:mod:`callhook.edge.egress`, puts it in the socket factory of the HTTP
client): a name that resolves to a private address, or that changes its answer
between two lookups (DNS rebinding), is judged by the address it is connected
to, not by its name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Metadata services outside link-local: AWS over IPv6, Alibaba Cloud, Azure's wire server.
METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200", "168.63.129.16")
)
#: Shared address space (RFC 6598): a carrier's or a cloud's internal network.
_SHARED = ipaddress.ip_network("100.64.0.0/10")


class EgressRefused(PermissionError):
    """A connection the egress policy refuses; the message names the address and the rule."""


#: NAT64's well-known prefix (RFC 6052): the last 32 bits are an IPv4 address.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: Site-local (deprecated by RFC 3879, still routed inside some networks): private.
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")


def address_of(host: str) -> Address | None:
    """``host`` as an address, an IPv6 one that carries an IPv4 address as that IPv4
    address (IPv4-mapped, NAT64, 6to4); None: a name."""
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


class EgressPolicy:
    """``[egress]``: which addresses fetches may connect to, and the limits they obey."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        app_endpoints: Iterable[tuple[str, int]] = (),
        max_response_bytes: int = 5 * 2**20,
        max_redirects: int = 3,
    ) -> None:
        self.allow_private = allow_private
        self.max_response_bytes = max_response_bytes
        self.max_redirects = max_redirects
        #: (address, port) of the configured applications (private ones allowed).
        self.app_endpoints: set[tuple[Address, int]] = set()
        for host, port in app_endpoints:
            self.trust(host, port)

    def trust(self, host: str, port: int) -> None:
        """An address and port a configured application's page URL leads to."""
        address = address_of(host)
        if address is not None:
            self.app_endpoints.add((address, port))

    def refusal(self, host: str, port: int) -> str | None:
        """Why a connection to ``host`` (an address) and ``port`` is refused; None: it may
        be made."""
        address = address_of(host)
        if address is None:
            return f"refused by [egress]: {host} is not an address"
        if address in METADATA or address.is_link_local:
            return (
                f"refused by [egress]: {address} is a link-local or cloud metadata address "
                "(never fetched)"
            )
        if address.is_unspecified or address.is_multicast:
            return f"refused by [egress]: {address} is not a unicast address"
        if address.is_reserved and not address.is_loopback:  # ::1 is in IPv6's reserved ::/8
            return f"refused by [egress]: {address} is in reserved address space"
        private = address.is_loopback or address.is_private or address in _SHARED
        if private or address in _SITE_LOCAL:
            if self.allow_private or (address, port) in self.app_endpoints:
                return None
            return (
                f"refused by [egress]: {address} port {port} is a private or loopback "
                "address and not a configured application's (allow_private is false)"
            )
        return None
