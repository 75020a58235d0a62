"""The ports ``serve --workers`` takes, found free or refused before anything starts.

Without ``[workers] first_port`` the workers' SIP ports (and their private ports, the same
numbers over TCP) are the first free run from the SIP port + 40 (workers.py
``first_port_candidates``): a second ``serve`` on the machine takes the next free ones.
Kamailio's own SIP address is tried before it starts, so a taken one is one line naming
the setting, not Kamailio's log and a stop.
"""

from __future__ import annotations

import errno
import socket

from callhook.cluster.workers import (
    FIRST_PORT_OFFSET,
    clear_of,
    default_first_port,
    first_port_candidates,
    host_of_workers,
)
from callhook.config.settings import ConfigError, Settings


def choose_first_port(settings: Settings, count: int) -> int:
    """``[workers] first_port``; else the first run of ``count`` ports from the SIP port
    + 40 (workers.py ``first_port_candidates``) clear of the SIP port and the RTP range and
    free on the workers' host, for UDP (their SIP) and TCP (their private port): a
    second ``serve`` on the machine takes the next free ones. ConfigError if none is, or
    if the host cannot be bound at all (its cause named: e.g. no loopback interface up)."""
    if settings.workers.first_port is not None:
        return settings.workers.first_port
    host = host_of_workers(settings.sip.host)
    start = default_first_port(settings.sip.port, count, settings.sip.rtp_ports)
    for first in first_port_candidates(start - FIRST_PORT_OFFSET, count):
        if clear_of(first, count, settings.sip.port, settings.sip.rtp_ports) and all(
            _free(host, port) for port in range(first, first + count)
        ):
            return first
    raise ConfigError(
        f"no {count} free ports for the workers' SIP on {host}: set [workers] first_port"
    )


def _free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` for UDP and for TCP now: False when it is
    in use, ConfigError naming the cause when binding fails for any other reason (no
    other port would do better)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(family, kind) as probe:
            try:
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    return False
                loopback = host.startswith("127.") or host == "::1"
                hint = " (is the loopback interface up?)" if loopback else ""
                raise ConfigError(
                    f"the workers cannot listen on {host}: {exc.strerror}{hint}"
                ) from None
    return True


def front_ports_free(settings: Settings) -> None:
    """ConfigError, in one line naming the setting, when Kamailio could not listen on the
    SIP address (another serve, or any SIP server, has it): found before anything starts."""
    host, port = settings.sip.host, settings.sip.port
    wanted = [("udp", port)]
    if settings.sip.tcp_port != 0:
        wanted.append(("tcp", settings.sip.tcp_port or port))
    if settings.sip.tls_certificate is not None and settings.sip.tls_port:
        wanted.append(("tls", settings.sip.tls_port))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for transport, number in wanted:
        kind = socket.SOCK_DGRAM if transport == "udp" else socket.SOCK_STREAM
        with socket.socket(family, kind) as probe:
            if kind == socket.SOCK_STREAM:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Kamailio
            try:
                probe.bind((host, number))
            except OSError as exc:
                key = {"udp": "--sip, or [sip] host and port", "tcp": "[sip] tcp_port"}.get(
                    transport, "[sip] tls_port"
                )
                raise ConfigError(
                    f"SIP cannot listen on {transport} {host}:{number}: {exc.strerror} "
                    f"(set by {key})"
                ) from None
