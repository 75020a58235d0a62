"""The registrar's side of ``callhook serve``: its users' bindings kept, its failures counted.

:class:`Users` is the part of :class:`~callhook.telephony.service.SipService` that
runs the sans-IO :class:`~callhook.sip.registrar.Registrar` of ``[users.NAME]``
(the phones of the people callers are put through to): it builds it from the
settings, hands it to the agent (REGISTER, challenged calls), loads the stored
bindings back at start (:mod:`callhook.store.bindings`: they survive a
restart), stores each change, and puts every failed digest authentication to
the guard, where five in a minute from one source ban it (``[security]``).
It tells the registrar callhook's own hosts (its addresses and ``[sip]
domains``: an INVITE from one is challenged as a user's) and which hosts are
the trunks' (a phone's Contact must not be one).

The registrar runs on the agent's clock (the event loop's, monotonic); the
database keeps wall clock times. The two are converted at the edge here.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from callhook.cluster.sharedbans import SharedBans
from callhook.config.settings import UserConfig
from callhook.sip.agent import Agent
from callhook.sip.grammar import parse_hostport
from callhook.sip.guard import OPERATOR, Guard
from callhook.sip.message import SipMessageError, parse_uri
from callhook.sip.registrar import Binding, Registrar, host_key
from callhook.sip.transport import Target, reliable, target_of, transport_of
from callhook.store.bindings import Bindings, StoredBinding
from callhook.store.database import Database
from callhook.telephony.trunking import Trunks

logger = logging.getLogger("callhook.sip")

#: How often a worker other than worker 0 reads the phones' bindings again (seconds).
FOLLOW_SECONDS = 1.0


class Users:
    """The registrar's bindings and failures (see the module docstring).

    ``users`` is ``[users]``: each user's password. ``secret`` is the installation's
    (the nonces' key derives from it); ``algorithms`` is ``[sip] digest_algorithms``;
    ``behind_front``: a worker of ``serve --workers`` (requests come through Kamailio),
    ``lead``: worker 0, which takes the REGISTERs. The bindings are stored in ``db``;
    failures go to ``guard`` and, through ``shared_bans`` (None: alone), to the others;
    ``trunks`` say which hosts are a trunk's.
    """

    def __init__(
        self,
        users: Mapping[str, UserConfig],
        *,
        secret: str,
        algorithms: tuple[str, ...],
        behind_front: bool,
        lead: bool,
        db: Database,
        guard: Guard,
        trunks: Trunks,
        shared_bans: Callable[[], SharedBans | None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.users = users
        self._secret = secret
        self._algorithms = algorithms
        self._behind_front = behind_front
        self._lead = lead
        self._db = db
        self.guard = guard
        self.trunks = trunks
        self._shared_bans = shared_bans
        self.loop = loop
        #: The registrar of ``[users]`` (None: no users configured, or not started).
        self.registrar: Registrar | None = None
        #: A worker's task following the stored bindings (``serve --workers``; None: none).
        self.following: asyncio.Task[None] | None = None
        #: How many times this process stored changed bindings.
        self.stored_changes = 0

    def start(self, agent: Agent, own: set[str]) -> None:
        """Be the registrar of ``[users]`` on ``agent``, with the bindings stored before (if
        any users); ``own``: callhook's own hosts (its addresses and ``[sip] domains``)."""
        users = self.users
        if not users:
            return
        # The nonces' key, derived from the installation's secret: a nonce issued before
        # a restart is still recognised after it, as stale (a phone mid-registration
        # answers again without asking its user), never as valid.
        key = hmac.new(self._secret.encode(), b"digest nonces", hashlib.sha256).digest()
        registrar = Registrar(
            {n: u.password for n, u in users.items()},
            key,
            algorithms=self._algorithms,
            domains=own,
            is_trunk=self._is_trunk,
        )
        self.registrar = registrar
        agent.use_registrar(registrar)
        store = Bindings(self._db)
        now, wall = self.loop.time(), time.time()
        loaded = [_binding(stored, now - wall, self._behind_front) for stored in store.load(wall)]
        taken = registrar.load([b for b in loaded if b is not None], now)
        logger.info("registrar for %d user(s): %d registered phone(s) loaded", len(users), taken)
        if self.follows_bindings():
            # serve --workers: worker 0 takes the REGISTERs (Kamailio sends it every
            # one); the others call the phones it stored, read before each call to a
            # user (connecting.py) and every second.
            self.following = self.loop.create_task(self._follow_bindings(store))

    def stop(self) -> None:
        """Stop following the stored bindings (a worker's, at shutdown)."""
        if self.following is not None:
            self.following.cancel()

    def follows_bindings(self) -> bool:
        """Whether this process reads the phones' bindings from the database (a worker of
        ``serve --workers`` other than worker 0) rather than keeping them itself."""
        return self.registrar is not None and self._behind_front and not self._lead

    async def read_bindings(self, store: Bindings | None = None) -> list[Binding] | None:
        """Make the registrar's bindings those stored now; the bindings, or None when the
        read failed or may predate a REGISTER this worker stored meanwhile (worker 0 gone:
        the next read has it)."""
        registrar = self.registrar
        assert registrar is not None
        writes = self.stored_changes
        try:
            stored = await (store or Bindings(self._db)).fetch(time.time())
        except Exception as exc:  # the database is away: the phones known stay
            logger.warning("the registered phones could not be read: %s", exc)
            return None
        if self.stored_changes != writes:
            return None
        now = self.loop.time()
        offset = now - time.time()
        found = [b for b in (_binding(s, offset, front=True) for s in stored) if b is not None]
        registrar.replace_all(found, now)
        return found

    async def _follow_bindings(self, store: Bindings) -> None:
        """Keep the registrar's bindings those stored, every :data:`FOLLOW_SECONDS`."""
        counts: dict[str, int] = {}
        while True:
            await asyncio.sleep(FOLLOW_SECONDS)
            found = await self.read_bindings(store)
            if found is None:
                continue
            was, counts = counts, {}
            for binding in found:
                counts[binding.user] = counts.get(binding.user, 0) + 1
            for user in sorted(set(was) | set(counts)):
                if was.get(user, 0) != counts.get(user, 0):
                    logger.info(
                        "user %s: %d phone(s) registered (read from the database)",
                        user,
                        counts.get(user, 0),
                    )

    def _is_trunk(self, host: str) -> bool:
        """Whether ``host`` is a trunk's: its registrar's or outbound proxy's name, an
        address those resolved to, or in its ``addresses``."""
        key = host_key(host)
        for trunk in self.trunks.config.values():
            for hostport in (trunk.registrar, trunk.outbound_proxy):
                if hostport is None:
                    continue
                try:
                    if host_key(parse_hostport(hostport, "trunk")[0]) == key:
                        return True
                except SipMessageError:
                    continue
        resolved = [t.host for t in self.trunks.targets.values()]
        resolved += [a for addresses in self.trunks.addresses.values() for a in addresses]
        if any(host_key(a) == key for a in resolved):
            return True
        try:
            address = ipaddress.ip_address(key)
        except ValueError:
            return False
        return any(address in n for t in self.trunks.config.values() for n in t.addresses)

    def flush(self) -> None:
        """Store the bindings that changed; count the failed authentications (after each
        of the agent's steps)."""
        registrar = self.registrar
        if registrar is None:
            return
        now = self.loop.time()
        for host, what in registrar.take_failures():
            banned = self.guard.auth_failed(host, now, "digest authentication")
            shared = self._shared_bans()
            if shared is not None and host not in OPERATOR:
                shared.counted(host, "digest authentication", banned)
            self.guard.note(host, f"failed digest authentication ({what})", now)
        for host, cause in self.guard.take_notes():
            logger.warning("SIP from %s: %s", host, cause)
        changed = registrar.take_changes()
        if not changed:
            return
        store = Bindings(self._db)
        offset = time.time() - now
        self.stored_changes += 1
        for user in changed:
            stored = [_stored(b, offset) for b in registrar.bindings(user, now)]
            store.replace(user, stored)


def _stored(binding: Binding, offset: float) -> StoredBinding:
    """``binding`` as stored: its expiry on the wall clock (``offset``: wall - agent)."""
    source, target = binding.source, binding.target
    return StoredBinding(
        binding.user,
        binding.contact,
        binding.call_id,
        binding.cseq,
        binding.expires_at + offset,
        (source.transport, source.host, source.port),
        (target.transport, target.host, target.port),
    )


def _binding(stored: StoredBinding, offset: float, front: bool = False) -> Binding | None:
    """A stored binding on the agent's clock (``offset``: agent - wall); None if unusable.

    A phone that registered over TCP or TLS was reached on its connection, which a
    restart closed: it is now reached at its Contact (callhook opens a connection).
    Not behind the proxy of ``serve --workers`` (``front``): the connection is the
    proxy's, open still, and requests to the phone go through it.
    """
    try:
        source = Target(stored.source[1], stored.source[2], transport_of(stored.source[0]))
        target = Target(stored.target[1], stored.target[2], transport_of(stored.target[0]))
        if reliable(target.transport) and not front:
            target = target_of(parse_uri(stored.contact), target.transport)
    except ValueError as exc:
        logger.warning("user %s: stored registration %s unusable: %s", stored.user, stored, exc)
        return None
    return Binding(
        stored.user,
        stored.contact,
        stored.call_id,
        stored.cseq,
        stored.expires + offset,
        source,
        target,
    )


async def registered_phones(db: Database) -> list[dict[str, Any]]:
    """``GET /api/users``: every phone registered now, as the state database has it (the
    registrar stores each change there: one answer from any worker or node)."""
    now = time.time()
    return [
        {
            "user": b.user,
            "contact": b.contact,
            "transport": b.source[0],
            "source": f"{b.source[1]}:{b.source[2]}",
            "expires_in": max(0, round(b.expires - now)),
        }
        for b in await Bindings(db).fetch(now)
    ]
