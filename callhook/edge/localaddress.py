"""The address this machine is reached at when it listens on ``host``: what goes in
Contact headers and SDP (a wildcard address cannot). Its own module so that ``serve``'s
supervisor, which lays the workers out, needs none of the SIP service."""

from __future__ import annotations

import socket


def local_address(host: str) -> str:
    """The address to put in Contact and SDP when bound to ``host`` (a wildcard needs one)."""
    if host not in ("0.0.0.0", "::", ""):
        return host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent
            address: str = probe.getsockname()[0]
            return address
        except OSError:
            return "127.0.0.1"
