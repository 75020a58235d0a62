"""The egress policy (:mod:`callhook.egress`) in the HTTP client: every connection checked.

aiohttp resolves a URL's host and hands each address it will try to a socket
factory (``TCPConnector(socket_factory=...)``); :class:`Egress` is that factory.
So the address judged is exactly the address connected to, for the first
request and for every redirect, whatever the name said before (no DNS-rebinding
bypass). A refusal raises :class:`~callhook.egress.EgressRefused`, which aiohttp
reports as a connection error whose message names the rule; it is logged here
once a minute per address.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from aiohappyeyeballs import AddrInfoType

from callhook.egress import EgressPolicy, EgressRefused

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

    def __call__(self, addr_info: AddrInfoType) -> socket.socket:
        family, type_, proto, _, address = addr_info
        host = str(address[0])
        why = self.policy.refusal(host)
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


def url_hosts(urls: Iterable[str | None]) -> set[str]:
    """The host names of ``urls`` (None and URLs without a host are skipped)."""
    hosts = set()
    for url in urls:
        if url:
            host = urlsplit(url).hostname
            if host:
                hosts.add(host)
    return hosts


def resolve(hosts: Iterable[str]) -> set[str]:
    """Every address ``hosts`` resolve to (blocking: for start-up, or a worker thread).

    A host that does not resolve now is left out (its fetches will fail anyway, and
    the application's own page errors say so).
    """
    out: set[str] = set()
    for host in hosts:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            logger.warning("egress: application host %s does not resolve now: %s", host, exc)
            continue
        out.update(str(info[4][0]) for info in infos)
    return out
