"""Who may talk SIP to callhook, and how fast: access list, per-source rate limit, bans. Sans-IO.

Theory of operation
-------------------
Every datagram (and every message framed off a connection) is put to
:meth:`Guard.admit` with its source address and ``now`` before anything
parses it, so that what a scanner or a flood sends costs a dictionary lookup
and a few arithmetic operations (docs/security.md; Kamailio's ``pike`` decides
the same way: a per-source counter in a bounded table, a ban when it
overflows).

* **Bans first**: a banned source is ignored until its ban ends.
* **Rate**: each source has a token bucket of ``rate`` requests per second
  and a burst of twice that. A source that empties it is banned for
  ``ban_seconds``: a flood is cut off whole, not thinned. Trunks (their
  addresses) and the peers of our own outbound calls are trusted: a provider's
  proxy sends every call from one address, so they have no bucket.
* **Access**: a *request* from a source outside ``allow`` (and outside the
  extra networks the service adds: its trunks' addresses, the peers of its
  own outbound calls) gets ``unknown``: ``drop`` (no answer at all) or
  ``reject`` (a 403, the same for every user it names, so enumeration learns
  nothing). Responses are not refused: they match a transaction of ours or are
  dropped by the agent; but from a source that is not allowed they spend
  tokens like requests, so a flood of fake responses is banned too.
* **Authentication failures** (:meth:`auth_failed`: a wrong REST API key, and
  digest failures once callhook challenges): five in a minute from one source
  ban it, like the rate. The machine's own loopback addresses (:data:`OPERATOR`)
  are never banned so: the operator's ``callhook bans`` on the server itself
  must always be able to lift a ban (fail2ban's ``ignoreip`` does the same).
  Several processes behind one address (workers, nodes) share their failures
  and bans: a failure another one counted is added with ``ban=False``, and the
  ban it decided is imposed (:meth:`impose`), so the source is counted and banned once
  for the installation, and the ban is logged once, where it was decided.

The table of sources is bounded (:data:`MAX_SOURCES`, least recently seen
dropped first), so a spray of spoofed addresses cannot grow it; bans are kept
in a bounded table of their own (the oldest, the first to end, dropped first),
so no spray of new sources can flush a ban out of it. What happened
is reported through :meth:`take_notes`, at most once per source and cause a
minute, for the adapter to log (no log flood).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Verdict = Literal["pass", "drop", "reject"]

#: Sources remembered at once (each a few dozen bytes).
MAX_SOURCES = 65536
#: Authentication failures in :data:`AUTH_WINDOW` seconds that ban a source.
AUTH_FAILURES = 5
AUTH_WINDOW = 60.0
#: Never banned for failed authentications: the operator's own CLI on the server.
OPERATOR = frozenset({"127.0.0.1", "::1"})
#: A note about one source and cause is given at most this often (seconds).
NOTE_EVERY = 60.0

#: Private, loopback and unique-local networks: the default ``[security] allow``, so a
#: softphone on the LAN reaches ``serve`` with no setup and the internet does not.
PRIVATE = (
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
)


def networks(texts: tuple[str, ...] | list[str]) -> tuple[Network, ...]:
    """CIDR blocks (or single addresses) as networks; ValueError names a bad one."""
    out = []
    for text in texts:
        try:
            out.append(ipaddress.ip_network(str(text).strip(), strict=False))
        except ValueError:
            raise ValueError(f"{text!r} is not an address or CIDR block") from None
    return tuple(out)


@dataclass
class _Source:
    tokens: float
    last: float
    failures: list[float] = field(default_factory=list)


@dataclass
class _Banned:
    until: float
    reason: str


@dataclass(frozen=True)
class Ban:
    """A banned source, why, and for how many more seconds."""

    address: str
    reason: str
    seconds_left: int


class Guard:
    """The access list, the rate limiter and the bans (see the module docstring)."""

    def __init__(
        self,
        allow: tuple[Network, ...] | None = None,
        *,
        unknown: Literal["drop", "reject"] = "drop",
        rate: float = 20.0,
        ban_seconds: float = 600.0,
        max_sources: int = MAX_SOURCES,
    ) -> None:
        self.allow = allow if allow is not None else networks(PRIVATE)
        self.unknown = unknown
        self.rate = rate
        self.burst = 2 * rate
        self.ban_seconds = ban_seconds
        self.max_sources = max_sources
        #: Networks admitted beside ``allow`` (trunks' addresses), set by the service.
        self.extra: tuple[Network, ...] = ()
        #: Hosts admitted while the service needs them (peers of its outbound calls).
        self.peers: dict[str, int] = {}
        #: Host names admitted (the trunks callhook opened a TLS connection to by name).
        self.names: frozenset[str] = frozenset()
        # Buckets of the sources seen, least recently seen first (the one forgotten when
        # full); bans in a table of their own, oldest first (all last ban_seconds, so the
        # first to end), so that no spray of new sources can flush a ban out.
        self._sources: OrderedDict[str, _Source] = OrderedDict()
        self._bans: OrderedDict[str, _Banned] = OrderedDict()
        self._noted: dict[tuple[str, str], float] = {}
        self._notes: list[tuple[str, str]] = []
        self.dropped = 0
        #: The messages dropped (or rejected), by cause: banned, rate_limited, not_allowed.
        self.dropped_by: dict[str, int] = {"banned": 0, "rate_limited": 0, "not_allowed": 0}

    # --- the hot path -------------------------------------------------------------------

    def admit(self, host: str, now: float, *, request: bool = True) -> Verdict:
        """What to do with a message from ``host``: ``pass`` it on, ``drop`` it, or
        ``reject`` it (answer 403). ``request``: it is a request (access applies)."""
        if self._bans:
            ban = self._bans.get(host)
            if ban is not None and ban.until > now:
                self.dropped += 1
                self.dropped_by["banned"] += 1
                return "drop"
            if ban is not None:
                del self._bans[host]  # over
        source = self._sources.get(host)
        if source is None:
            source = self._remember(host, now)
        else:
            self._sources.move_to_end(host)
        if self._trusted(host) or (not request and self.allowed(host)):
            # A trunk (or a call's peer) may send hundreds of calls a second; responses
            # from allowed sources match our transactions: no bucket for them. Responses
            # from anyone else spend tokens: a flood of fake ones is banned like any.
            return "pass"
        source.tokens = min(self.burst, source.tokens + (now - source.last) * self.rate)
        source.last = now
        if source.tokens < 1.0:
            self._ban(host, source, now, f"more than {self.rate:g} SIP messages a second")
            self.dropped += 1
            self.dropped_by["rate_limited"] += 1
            return "drop"
        source.tokens -= 1.0
        if request and not self.allowed(host):
            self._note(host, f"not in [security] allow ({self.unknown})", now)
            self.dropped += 1
            self.dropped_by["not_allowed"] += 1
            return self.unknown
        return "pass"

    def _trusted(self, host: str) -> bool:
        """A trunk's address, a named trunk host, or a peer of our own call."""
        if host in self.peers or host in self.names:
            return True
        if not self.extra:
            return False
        address = _address(host)
        return address is not None and any(address in n for n in self.extra)

    def allowed(self, host: str) -> bool:
        """Whether ``host`` may send requests (``allow``, trunks, our calls' peers)."""
        if host in self.peers or host in self.names:
            return True
        address = _address(host)
        if address is None:
            return False  # a name: a connection we opened to a trunk is admitted as a peer
        return any(address in n for n in self.allow) or any(address in n for n in self.extra)

    # --- what else the service tells it ---------------------------------------------------

    def auth_failed(
        self, host: str, now: float, what: str = "authentication", *, ban: bool = True
    ) -> str | None:
        """A failed authentication from ``host`` (digest, REST API key): five in a minute
        ban. The ban's reason when this one banned it; ``ban=False``: counted only (a
        failure another process saw, which decides the ban itself)."""
        if host in OPERATOR:
            return None
        source = self._sources.get(host) or self._remember(host, now)
        source.failures = [t for t in source.failures if now - t < AUTH_WINDOW] + [now]
        if ban and len(source.failures) >= AUTH_FAILURES and not self.banned(host, now):
            reason = f"{AUTH_FAILURES} failed {what}s in a minute"
            self._ban(host, source, now, reason)
            return reason
        return None

    def impose(self, host: str, now: float, reason: str) -> None:
        """Ban ``host`` for ``ban_seconds``, as another process decided (not logged here)."""
        if host in OPERATOR or self.banned(host, now):
            return
        self._bans[host] = _Banned(now + self.ban_seconds, reason)
        self._bans.move_to_end(host)
        if len(self._bans) > self.max_sources:
            self._bans.popitem(last=False)

    def banned(self, host: str, now: float) -> bool:
        """Whether ``host`` is banned now."""
        ban = self._bans.get(host)
        return ban is not None and ban.until > now

    def refuses_api(self, host: str, now: float) -> bool:
        """Whether the REST API refuses ``host`` now: banned, and not the server's own
        loopback (:data:`OPERATOR`: a local SIP load test that trips the rate must not lock
        the operator's ``callhook bans`` out of lifting that very ban)."""
        return host not in OPERATOR and self.banned(host, now)

    def add_peer(self, host: str) -> None:
        """Admit requests from ``host`` while an outbound call to it lasts."""
        self.peers[host] = self.peers.get(host, 0) + 1

    def remove_peer(self, host: str) -> None:
        count = self.peers.get(host, 0) - 1
        if count > 0:
            self.peers[host] = count
        else:
            self.peers.pop(host, None)

    def bans(self, now: float) -> list[Ban]:
        """The sources banned now, longest left first."""
        out = [
            Ban(host, b.reason, int(b.until - now + 0.999))
            for host, b in self._bans.items()
            if b.until > now
        ]
        return sorted(out, key=lambda b: -b.seconds_left)

    def lift(self, host: str, now: float) -> bool:
        """End ``host``'s ban (False: it was not banned)."""
        if not self.banned(host, now):
            return False
        del self._bans[host]
        source = self._sources.get(host)
        if source is not None:
            source.tokens = self.burst
            source.failures.clear()
        return True

    def take_notes(self) -> list[tuple[str, str]]:
        """``(source, cause)`` to log, each at most once a minute per source and cause."""
        out, self._notes = self._notes, []
        return out

    # --- inside -------------------------------------------------------------------------

    def _remember(self, host: str, now: float) -> _Source:
        if len(self._sources) >= self.max_sources:
            self._sources.popitem(last=False)  # the least recently seen (bans are apart)
        source = _Source(tokens=self.burst, last=now)
        self._sources[host] = source
        return source

    def _ban(self, host: str, source: _Source, now: float, reason: str) -> None:
        self._bans[host] = _Banned(now + self.ban_seconds, reason)
        self._bans.move_to_end(host)
        if len(self._bans) > self.max_sources:
            # Bounded too: the oldest ban goes (every ban lasts as long: it ends first).
            self._bans.popitem(last=False)
        self._note(host, f"banned for {self.ban_seconds:g} s: {reason}", now)

    def note(self, host: str, cause: str, now: float) -> None:
        """Something about ``host`` to log (once a minute per source and cause)."""
        self._note(host, cause, now)

    def _note(self, host: str, cause: str, now: float) -> None:
        key = (host, cause)
        if now - self._noted.get(key, -NOTE_EVERY) >= NOTE_EVERY:
            self._noted[key] = now
            self._notes.append(key)
            if len(self._noted) > self.max_sources:
                self._noted.clear()


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an address; an IPv4-mapped IPv6 one (a dual-stack socket's view of an
    IPv4 peer, ``::ffff:192.0.2.1``) as the IPv4 address it is. None for a name."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
