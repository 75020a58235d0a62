"""Open files for every call the RTP port range allows, the descriptor table sized once.

A call holds two sockets (RTP and RTCP) and, while it records, a file; the SIP and web
servers hold their connections. Debian's default soft limit on open files is 1024, which
would fail calls (503, "no media port") long before the port range is used up, so
``serve`` raises its soft limit as far as the range needs, up to the hard limit, as
Asterisk's ``maxfiles`` and nginx's ``worker_rlimit_nofile`` do.

The kernel grows a process's descriptor table by doubling it, and a multi-threaded process
waits for an RCU grace period each time (``expand_fdtable`` in ``fs/file.c``): under load that
wait held the event loop, and every call's page and digit, for milliseconds to seconds
while calls were coming in. Taking one high descriptor at the start grows the table once,
before any call; the kernel never shrinks it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import resource

logger = logging.getLogger("callhook.serve")

#: Descriptors kept beside the media sockets: SIP over TCP and TLS, the web server's
#: connections, recordings being written, the database, the speech engines' files.
BESIDE_MEDIA = 1024


def needed(rtp_ports: tuple[int, int]) -> int:
    """The descriptors a process serving the even ports of ``rtp_ports`` may hold."""
    first, last = rtp_ports
    return (last - first + 1) + BESIDE_MEDIA


def provide(wanted: int) -> int:
    """Raise the soft limit on open files to ``wanted`` (no further than the hard limit;
    never lowered), and grow the descriptor table to it once. Returns the soft limit.

    Where the hard limit is below ``wanted``, says so once: the calls beyond it get 503."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as exc:
            logger.warning("cannot raise the open files limit from %d: %s", soft, exc)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        logger.warning(
            "open files are limited to %d (the hard limit is %d): the RTP port range needs "
            "%d; calls beyond about %d at once get 503 (raise LimitNOFILE or ulimit -Hn)",
            soft,
            hard,
            wanted,
            max(soft - BESIDE_MEDIA, 0) // 2,
        )
    grow_table(wanted if soft == resource.RLIM_INFINITY else min(wanted, soft))
    return soft


def grow_table(size: int) -> None:
    """Make the descriptor table hold ``size`` descriptors now, not while calls come in."""
    if size <= 3:
        return
    source = os.open(os.devnull, os.O_RDONLY)
    try:
        high = fcntl.fcntl(source, fcntl.F_DUPFD, size - 1)
    except OSError:  # (no descriptor that high: the table grows as it would have)
        return
    finally:
        os.close(source)
    os.close(high)
