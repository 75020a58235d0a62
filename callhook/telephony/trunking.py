"""The trunks of ``callhook serve`` at run time: registering, where their calls come from,
how calls go out through them, and their state for ``GET /api/trunks``.

:class:`Trunks` resolves each trunk's registrar or outbound proxy (the agent
is sans-IO and takes addresses, not names), asks the agent to register, logs
every change of a registration's state with its cause, and answers which
trunk a call came from (its source address is one of the trunk's resolved
addresses or in its ``addresses``). A name that does not resolve is retried
every :data:`RESOLVE_RETRY` seconds, its trunk ``failing`` meanwhile.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from callhook.dialplan.trunks import ELSEWHERE, LEGACY, RouteError, Trunk, TrunkError
from callhook.sip.agent import Agent, Credentials
from callhook.sip.grammar import parse_hostport
from callhook.sip.guard import Network, networks
from callhook.sip.message import parse_uri
from callhook.sip.sdes import SrtpMode
from callhook.sip.transport import Target, target_of

logger = logging.getLogger("callhook.sip")

#: Seconds between attempts to resolve a trunk's host name that did not resolve.
RESOLVE_RETRY = 30.0


@dataclass(frozen=True)
class Route:
    """How an outbound call goes: its request-URI and everything the INVITE needs."""

    uri: str
    address: Target | None
    credentials: Credentials | None
    from_user: str
    from_host: str | None
    srtp: SrtpMode = "off"
    trunk: str | None = None
    pinned: bool = False  # every request of the call to ``address`` (a registered phone)


class Trunks:
    """The configured trunks and what is known of them now."""

    def __init__(self, trunks: dict[str, Trunk], agent: Callable[[], Agent | None]) -> None:
        self.config = trunks
        self._agent = agent
        self.addresses: dict[str, set[str]] = {}  # resolved source addresses, by trunk
        self.targets: dict[str, Target] = {}  # resolved next hop, by trunk
        self.errors: dict[str, str] = {}  # why a trunk could not start (resolution)
        self._retries: dict[str, asyncio.TimerHandle] = {}
        self.register = True
        #: Another process registers the trunks (worker 0 of ``serve --workers``, or the
        #: node that holds the role with PostgreSQL): this one's ``GET /api/trunks`` is
        #: completed with that one's (``siblings.py``).
        self.elsewhere = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, on_change: Callable[[], None], *, register: bool = True) -> None:
        """Resolve every trunk's hosts; register those with a registrar (if ``register``)."""
        self.register = register
        for trunk in self.config.values():
            await self._start(trunk, on_change)

    async def _start(self, trunk: Trunk, on_change: Callable[[], None]) -> None:
        self._retries.pop(trunk.name, None)
        try:
            await self._resolve(trunk)
        except OSError as exc:
            host = trunk.next_hop or ""
            self.errors[trunk.name] = f"cannot resolve {host}: {exc}"
            logger.warning(
                "trunk %s: failing: %s (next try in %g s)",
                trunk.name,
                self.errors[trunk.name],
                RESOLVE_RETRY,
            )
            loop = asyncio.get_running_loop()

            def retry() -> None:
                task = loop.create_task(self._start(trunk, on_change))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

            self._retries[trunk.name] = loop.call_later(RESOLVE_RETRY, retry)
            return
        self.errors.pop(trunk.name, None)
        spec = trunk.registration()
        agent = self._agent()
        if spec is not None and agent is not None and self.register:
            agent.register(spec, asyncio.get_running_loop().time(), self.targets[trunk.name])
            on_change()

    async def reload(self, trunks: dict[str, Trunk], on_change: Callable[[], None]) -> list[str]:
        """A reloaded config's trunks: each one gone or changed is unregistered and
        forgotten, each new or changed one resolved and registered (a call through one
        goes on); what changed, for the log."""
        agent = self._agent()
        now = asyncio.get_running_loop().time()
        old = dict(self.config)
        changed = []
        for name, trunk in old.items():
            if trunks.get(name) == trunk:
                continue
            changed.append(f"{name} {'changed' if name in trunks else 'removed'}")
            handle = self._retries.pop(name, None)
            if handle is not None:
                handle.cancel()
            self.errors.pop(name, None)
            self.addresses.pop(name, None)
            self.targets.pop(name, None)
            if agent is not None and self.register and trunk.registers:
                agent.unregister(name, now)
        # In place: the settings and the dialler hold this dict.
        self.config.clear()
        self.config.update(trunks)
        for name, trunk in trunks.items():
            if old.get(name) != trunk:
                if name not in old:
                    changed.append(f"{name} added")
                await self._start(trunk, on_change)
        on_change()
        return changed

    def lead(self, leading: bool, on_change: Callable[[], None]) -> None:
        """Register the trunks from now on (``leading``), or stop and leave them to the
        node that does: the role moved (``store/postgres.py``, ``leaders``)."""
        if leading == self.register:
            return
        self.register, self.elsewhere = leading, not leading
        agent = self._agent()
        if agent is None:
            return
        now = asyncio.get_running_loop().time()
        if leading:
            logger.warning("this node registers the trunks now (the role is its own)")
            for trunk in self.config.values():
                spec = trunk.registration()
                if spec is not None and trunk.name in self.targets:
                    agent.register(spec, now, self.targets[trunk.name])
        else:
            # Its bindings lapse by themselves; meanwhile a call through one still finds
            # a node that takes it (every node knows the trunk's calls by their source).
            logger.warning("another node registers the trunks now: this one stops refreshing")
            agent.leave_registrations(now, "another node registers the trunks")
        on_change()

    async def _resolve(self, trunk: Trunk) -> None:
        """The trunk's next hop and every address its calls may come from."""
        sources: set[str] = set()
        for hostport in {trunk.registrar, trunk.outbound_proxy} - {None}:
            assert hostport is not None
            host, _ = parse_hostport(hostport, "host")
            sources |= await _addresses(host.strip("[]"))
        self.addresses[trunk.name] = sources
        if trunk.next_hop is not None:
            host, port = parse_hostport(trunk.next_hop, "host")
            # IPv4 first: callhook's sockets are IPv4 unless bound to an IPv6 address.
            ips = sorted(await _addresses(host.strip("[]")), key=lambda ip: (":" in ip, ip))
            default_port = 5061 if trunk.transport == "tls" else 5060
            # TLS checks the certificate against the name, so it keeps the name.
            where = host.strip("[]") if trunk.transport == "tls" else ips[0]
            self.targets[trunk.name] = Target(where, port or default_port, trunk.transport)

    def warn_about_transports(self, listening: set[str] | None) -> None:
        """Log what the trunks' transports leave open: SRTP keys in clear SDP, a trunk on a
        transport callhook has no listener for (``listening``; None: it listens on none)."""
        for trunk in self.config.values():
            if trunk.srtp != "off" and trunk.transport != "tls":
                # RFC 4568 §8.3: SDES keys travel in the SDP; only TLS keeps them secret.
                logger.warning(
                    "trunk %s: srtp %s over %s: the SRTP keys cross the network in clear "
                    'in the SDP (use transport = "tls")',
                    trunk.name,
                    trunk.srtp,
                    trunk.transport,
                )
            if listening is not None and trunk.transport not in ("udp", *listening):
                logger.warning(
                    "trunk %s: transport %s, but callhook has no %s listener: its calls "
                    "can reach callhook only over the connection callhook opens",
                    trunk.name,
                    trunk.transport,
                    trunk.transport,
                )

    def cancel(self) -> None:
        """Shutting down: no more resolving or registering."""
        self.register = False
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        for task in self._tasks:
            task.cancel()

    def trusted(self) -> tuple[tuple[Network, ...], frozenset[str]]:
        """Every trunk's networks (its ``addresses`` and what its hosts resolved to) and the
        host names of the connections opened to trunks by name: whom ``[security]`` admits."""
        extra: list[Network] = [n for trunk in self.config.values() for n in trunk.addresses]
        for addresses in self.addresses.values():
            extra += networks(sorted(addresses))
        return tuple(extra), frozenset(target.host for target in self.targets.values())

    def of_source(self, source: Target) -> Trunk | None:
        """The trunk a call from ``source`` came through (None: from no trunk we know): on
        the connection we opened to it, or from one of its addresses."""
        for trunk in self.config.values():
            if self.targets.get(trunk.name) == source:
                return trunk
        try:
            address = ipaddress.ip_address(source.host)
        except ValueError:
            return None
        for trunk in self.config.values():
            if source.host in self.addresses.get(trunk.name, ()) or any(
                address in network for network in trunk.addresses
            ):
                return trunk
        return None

    def log_changes(self, now: float) -> None:
        """A log line for every registration that changed state or cause since the last call."""
        agent = self._agent()
        if agent is None:
            return
        for name, registration in agent.registrations.by_name.items():
            for state, reason in registration.take_changes():
                line = f"trunk {name}: {state}" + (f": {reason}" if reason else "")
                if state == "registered":
                    line += f" (expires in {registration.expires_in(now)} s)"
                    logger.info("%s", line)
                elif state == "failing":
                    wait = registration.next_try_in(now)
                    logger.warning("%s%s", line, "" if wait is None else f" (next try in {wait} s)")
                else:
                    logger.info("%s", line)

    def status(self, now: float) -> list[dict[str, Any]]:
        """``GET /api/trunks``: each trunk's name, state, reason and timers."""
        agent = self._agent()
        out = []
        for name, trunk in self.config.items():
            registration = agent.registrations.by_name.get(name) if agent else None
            entry: dict[str, Any]
            if self.elsewhere and trunk.registers:
                # The registering process's view is the news (a registration left here is
                # one this node stopped refreshing; a resolution error here is local).
                entry = {"state": "registering", "reason": "by another process", ELSEWHERE: True}
            elif name in self.errors:
                retry = _remaining(self._retries.get(name))
                entry = {"state": "failing", "reason": self.errors[name], "next_try_in": retry}
            elif registration is not None:
                entry = {
                    "state": registration.state,
                    "reason": registration.reason,
                    "expires_in": registration.expires_in(now),
                    "next_try_in": registration.next_try_in(now),
                }
            else:
                entry = {"state": "registering" if trunk.registers else "static", "reason": ""}
            entry = {"expires_in": None, "next_try_in": None} | entry
            out.append({"name": name, **entry})
        return out

    def route(self, to: str, trunk_name: str | None) -> Route:
        """How a call to ``to`` (a number or a ``sip:``/``sips:`` URI) goes; RouteError if not.

        With no trunk named: ``to`` must be a URI, and ``[trunk]``'s credentials (if any)
        answer a challenge, as before trunks had names.
        """
        if trunk_name is None:
            if not to.lower().startswith(("sip:", "sips:")):
                raise RouteError("'to' must be a sip: URI (or name a 'trunk' to call a number)")
            _check_uri(to)
            legacy = self.config.get(LEGACY)
            credentials = None
            if legacy is not None and legacy.username:
                credentials = Credentials(legacy.username, legacy.password)
            return Route(to, None, credentials, "callhook", None)
        trunk = self.config.get(trunk_name)
        if trunk is None:
            raise RouteError(f"no trunk named {trunk_name!r}", 404)
        if trunk_name in self.errors:
            raise RouteError(f"trunk {trunk_name} is failing: {self.errors[trunk_name]}", 503)
        number = to.strip()
        if not number.lower().startswith(("sip:", "sips:")) and not _is_number(number):
            raise RouteError("'to' must be a phone number (digits, optional +) or a sip: URI")
        try:
            uri = trunk.target_uri(number)
        except TrunkError as exc:
            raise RouteError(str(exc)) from None
        _check_uri(uri)
        credentials = None
        if trunk.username:
            credentials = Credentials(trunk.username, trunk.password)
        address = self.targets.get(trunk.name)
        if address is None and trunk.next_hop is not None:  # not resolved (yet): as written
            host, port = parse_hostport(trunk.next_hop, "host")
            default_port = 5061 if trunk.transport == "tls" else 5060
            address = Target(host.strip("[]"), port or default_port, trunk.transport)
        elif address is None:
            address = target_of(parse_uri(uri), trunk.transport)
        from_user = trunk.caller_id or trunk.username or "callhook"
        return Route(uri, address, credentials, from_user, trunk.domain, trunk.srtp, trunk.name)


async def _addresses(host: str) -> set[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    return {str(info[4][0]) for info in infos}


def _remaining(handle: asyncio.TimerHandle | None) -> int | None:
    if handle is None:
        return None
    return max(0, round(handle.when() - asyncio.get_running_loop().time()))


def _is_number(text: str) -> bool:
    digits = text.removeprefix("+")
    return bool(digits) and all(c.isdigit() or c in "*#" for c in digits)


def _check_uri(uri: str) -> None:
    """RouteError unless a request can be sent to ``uri`` (a transport callhook has)."""
    try:
        target_of(parse_uri(uri))
    except ValueError as exc:
        raise RouteError(f"'to' is not a valid SIP URI: {exc}") from None
