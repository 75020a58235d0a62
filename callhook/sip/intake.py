"""Which TCP and TLS connections callhook takes, and how long it keeps them. Sans-IO.

Theory of operation
-------------------
A connection a peer opens to callhook holds one of a bounded number of slots
(``edge/connections.py``) until it closes, so what may hold one is decided here, on
the time the caller passes (``now``), from the guard's own rules (:mod:`callhook.sip.guard`,
``[security]``): nothing here repeats them.

* **Standing** (:func:`standing`): what the guard does with requests from a source, now.
  ``served``: they pass (``allow``, a trunk's address, ``[sip] proxies``, a peer of our
  own calls). ``answered``: they get the stateless 403 (``unknown = "reject"``).
  ``ignored``: they are dropped unanswered (banned, or ``unknown = "drop"``). A
  connection from an ignored source is closed as soon as it is accepted, before a TLS
  handshake, and never gets a pong or a ``413``: nothing tells it a SIP server is there.
* **Lifetime** (:class:`Lifetime`): an accepted connection has
  :data:`FIRST_MESSAGE_TIMEOUT` seconds from its opening until its first whole message
  from a served source, and nothing else moves that deadline (keep-alive pings, a
  message in pieces, our pongs and 403s): else a peer that pings every 29 s, or is
  answered 403 now and then, would hold its slot for ever. From that message on, the
  idle limit applies, renewed by traffic either way, and an idle connection that a call
  or a registration depends on is kept. A connection callhook opened itself has the idle
  limit from the start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from callhook.sip.guard import Guard

#: Seconds an accepted connection has, from its opening, for its first whole message.
FIRST_MESSAGE_TIMEOUT = 30.0

Standing = Literal["served", "answered", "ignored"]

#: The guard's note for a connection from a source whose requests it drops unanswered.
NOT_ALLOWED = "a TCP/TLS connection, not in [security] allow (drop)"


def standing(guard: Guard, host: str, now: float) -> Standing:
    """What ``guard`` does with requests from ``host`` at ``now`` (see the module
    docstring). An ``ignored`` source that is not banned is noted (:data:`NOT_ALLOWED`,
    once a minute: :meth:`Guard.take_notes`); a ban was logged when it was decided."""
    if guard.banned(host, now):
        return "ignored"
    if guard.allowed(host):
        return "served"
    if guard.unknown == "reject":
        return "answered"
    guard.note(host, NOT_ALLOWED, now)
    return "ignored"


class Lifetime:
    """When one connection is closed for want of traffic (see the module docstring)."""

    __slots__ = ("deadline", "idle_timeout", "open_ended", "proven")

    def __init__(
        self,
        now: float,
        idle_timeout: float,
        *,
        accepted: bool,
        first_message_timeout: float = FIRST_MESSAGE_TIMEOUT,
    ) -> None:
        """``now``: when it opened; ``accepted``: a peer opened it (else callhook did)."""
        self.idle_timeout = idle_timeout
        #: Traffic moves the deadline: callhook's own connection, or a served message came.
        self.open_ended = not accepted
        #: A whole message came that counts (from a served source): a call or a
        #: registration may depend on the connection from now on.
        self.proven = False
        limit = idle_timeout if self.open_ended else min(idle_timeout, first_message_timeout)
        #: When it is closed, unless something moves this (it never moves earlier).
        self.deadline = now + limit

    def traffic(self, now: float) -> None:
        """Something went either way (data in, a ping, a pong, a message out)."""
        if self.open_ended:
            self.deadline = max(self.deadline, now + self.idle_timeout)

    def message(self, now: float, *, served: bool) -> None:
        """A whole message came; ``served``: from a source the guard serves (on callhook's
        own connection, always)."""
        if served:
            self.proven = self.open_ended = True
            self.deadline = max(self.deadline, now + self.idle_timeout)

    def expired(self, now: float, in_use: Callable[[], bool]) -> bool:
        """Whether to close it at ``now``. ``in_use()``: whether a call or a registration
        depends on it (asked only when it is due); such a one is kept another idle limit."""
        if now < self.deadline:
            return False
        if self.proven and in_use():
            self.deadline = now + self.idle_timeout
            return False
        return True
