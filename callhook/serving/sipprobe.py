"""Whether a SIP address answers: an OPTIONS over UDP, asked again until it is answered.

The supervisor of ``serve --workers`` asks it of the SIP address (Kamailio passes it to a
worker) before it prints its banner, and a worker's readiness
(:mod:`callhook.serving.readiness`) of Kamailio in front of it. Apart from both so that
the supervisor needs no more than this.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from callhook.sip.transport import Target


def answers_options(
    target: Target, seconds: float, stop: Callable[[], bool] = lambda: False
) -> bool:
    """Whether ``target`` answers a SIP OPTIONS over UDP within ``seconds`` (asked again
    every 300 ms: UDP), from its own address (an address ``[security] allow`` lets in
    when the target does); False at once when ``stop()`` says so. Blocking: run it on a
    thread."""
    host = target.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    deadline = time.monotonic() + seconds
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.bind((host, 0))
        probe.settimeout(0.3)
        local = probe.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        n = 0
        while time.monotonic() < deadline and not stop():
            n += 1
            options = (
                f"OPTIONS sip:{shown}:{target.port} SIP/2.0\r\n"
                f"Via: SIP/2.0/UDP {shown}:{local};branch=z9hG4bKready{local}x{n}\r\n"
                f"From: <sip:readiness@{shown}>;tag=r{n}\r\nTo: <sip:{shown}>\r\n"
                f"Call-ID: readiness-{local}-{n}\r\nCSeq: {n} OPTIONS\r\n"
                "Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
            )
            try:
                probe.sendto(options.encode(), (host, target.port))
                if probe.recv(4096).startswith(b"SIP/2.0 "):
                    return True
            except OSError:  # a timeout, or nobody there (ICMP)
                time.sleep(0.1)
    return False
