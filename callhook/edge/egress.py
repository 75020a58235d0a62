"""The egress policy (:mod:`callhook.edge.egresspolicy`) in the HTTP client: every connection
checked.

aiohttp resolves a URL's host and hands each address it will try to a socket
factory (``TCPConnector(socket_factory=...)``); :class:`Egress` is that factory.
So the address judged is exactly the address connected to, for the first
request and for every redirect, whatever the name said before (no DNS-rebinding
bypass). A refusal raises :class:`~callhook.edge.egresspolicy.EgressRefused`, which aiohttp
reports as a connection error whose message names the rule; it is logged here
once a minute per address.

The configured applications' endpoints are trusted by what their URLs say: a
literal address and port at once; a host name through :class:`AppResolver`,
the client's resolver, which marks the addresses a configured application's
host name resolves to, for its port, each time it is resolved (so a name that
did not resolve at start-up, or whose address changed, is trusted once it does).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohappyeyeballs import AddrInfoType
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from callhook.edge.egresspolicy import EgressPolicy, EgressRefused, address_of

logger = logging.getLogger("callhook.egress")

#: A refusal of one address is logged at most this often (seconds).
LOG_EVERY = 60.0


class Egress:
    """The socket factory that enforces ``policy`` (see the module docstring)."""

    def __init__(self, policy: EgressPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self.refused = 0
        self._logged: dict[str, float] = {}
        #: (host name, port) of the configured applications' URLs, lower case.
        self.app_names: set[tuple[str, int]] = set()

    def __call__(self, addr_info: AddrInfoType) -> socket.socket:
        family, type_, proto, _, address = addr_info
        host, port = str(address[0]), int(address[1])
        why = self.policy.refusal(host, port)
        if why is not None:
            self.refused += 1
            now = self.clock()
            if now - self._logged.get(host, -LOG_EVERY) >= LOG_EVERY:
                if len(self._logged) > 4096:
                    self._logged.clear()
                self._logged[host] = now
                logger.warning("%s", why)
            raise EgressRefused(why)
        return socket.socket(family=family, type=type_, proto=proto)

    def trust_url(self, url: str | None) -> None:
        """Trust the endpoint of a configured application's URL (see the module docstring)."""
        if not url:
            return
        parts = urlsplit(url)
        if not parts.hostname:
            return
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return  # not a port: the fetch fails on its own, with that cause
        if address_of(parts.hostname) is not None:
            self.policy.trust(parts.hostname, port)
        else:
            self.app_names.add((parts.hostname.lower(), port))

    def resolver(self) -> AppResolver:
        """The resolver for an HTTP client whose connections this factory makes."""
        return AppResolver(self)


class AppResolver(AbstractResolver):
    """aiohttp's resolver, marking what a configured application's host resolves to."""

    def __init__(self, egress: Egress) -> None:
        self.egress = egress
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if (host.lower(), port) in self.egress.app_names:
            for result in results:
                self.egress.policy.trust(result["host"], port)
        return results

    async def close(self) -> None:
        await self._inner.close()
