"""SIP over TCP and TLS for :class:`~callhook.telephony.service.SipService`: its listeners,
and what the connections (:mod:`callhook.edge.connections`) ask of the guard and the agent.

The connections decide nothing themselves: which source's connection is taken, whether
a request too big to frame gets its ``413``, and whether an idle connection is kept are
the guard's and the agent's calls, asked here with the loop's time (the rules:
:mod:`callhook.sip.intake`, docs/security.md). A connection that closes or cannot be
opened is the agent's news: its calls go to their next hop, a trunk registered over it
registers again (RFC 5626 §4.4)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from callhook.config.tables import SipSettings
from callhook.config.tls import server_context
from callhook.edge.connections import Connections
from callhook.sip.agent import Agent
from callhook.sip.guard import Guard
from callhook.sip.intake import Standing, standing
from callhook.sip.transport import Target, Transport

logger = logging.getLogger("callhook.sip")


class SipStreams:
    """The service's TCP and TLS side (see the module docstring)."""

    def __init__(
        self,
        *,
        guard: Guard,
        agent: Callable[[], Agent | None],
        deliver: Callable[[bytes, Target], None],
        flush: Callable[[], None],
        now: Callable[[], float],
        client_tls: ssl.SSLContext,
        max_message: int,
    ) -> None:
        self.guard = guard
        self.agent = agent
        self.flush = flush
        self.now = now
        self.connections = Connections(
            deliver,
            client_tls=client_tls,
            closed=self._closed,
            failed=self._failed,
            in_use=self._in_use,
            max_message=max_message,
            answer_oversized=self._too_large,
            banned=lambda host: guard.banned(host, now()),
            standing=self._standing,
        )

    async def listen(
        self, sip: SipSettings, host: str, udp_port: int, any_port: bool
    ) -> dict[Transport, int]:
        """The TCP and TLS listeners ``[sip]`` asks for (RFC 3261 §18: TCP beside UDP, on
        ``udp_port`` unless ``tcp_port`` says otherwise; ``any_port``: UDP's was the
        system's choice, so TCP takes one of its own); the ports bound."""
        wanted: list[tuple[Transport, int]] = []
        if sip.tcp_port is None:
            wanted.append(("tcp", 0 if any_port else udp_port))
        elif sip.tcp_port:
            wanted.append(("tcp", sip.tcp_port))
        if sip.tls_certificate is not None and sip.tls_port:
            wanted.append(("tls", sip.tls_port))
        ports: dict[Transport, int] = {}
        for transport, port in wanted:
            tls = None
            if transport == "tls":
                assert sip.tls_certificate is not None
                tls = server_context(sip.tls_certificate, sip.tls_key)
            ports[transport] = await self.connections.listen(transport, host, port, tls)
        return ports

    def _log_notes(self) -> None:
        for host, cause in self.guard.take_notes():
            logger.warning("SIP from %s: %s", host, cause)

    def _standing(self, host: str) -> Standing:
        """What the guard does with requests from ``host`` now: a connection from a source
        it would not answer is closed at once (it would otherwise hold one of the slots,
        and its pings' pongs would tell a scanner a SIP server is there)."""
        found = standing(self.guard, host, self.now())
        self._log_notes()
        return found

    def _too_large(self, head: bytes, source: Target) -> bytes | None:
        """The 413 for a request on a connection whose header announced too big a body: put
        to the guard like any message (counted; none for a source it drops), and with no
        ``Server`` header where its answer would be the 403 (``unknown = "reject"``)."""
        agent = self.agent()
        if agent is None:
            return None
        verdict = self.guard.admit(
            source.host, self.now(), request=not head.startswith(b"SIP/2.0 ")
        )
        self._log_notes()
        if verdict == "drop":
            return None
        return agent.too_large(head, anonymous=verdict == "reject")

    def _in_use(self, target: Target) -> bool:
        """Whether a call or a registration depends on the connection to ``target`` (an idle
        one is then kept: the peer may have no other way to reach us)."""
        agent = self.agent()
        if agent is None:
            return False
        if any(call.peer == target and call.flow_open for call in agent.calls.values()):
            return True
        return target in agent.registrations.targets()

    def _closed(self, target: Target) -> None:
        """A connection closed: its calls go to their next hop, a trunk registered over it
        registers again now."""
        agent = self.agent()
        if agent is not None:
            agent.flow_closed(target, self.now())
            self.flush()

    def _failed(self, target: Target) -> None:
        """A connection could not be opened: what was to go over it fails now."""
        agent = self.agent()
        if agent is not None:
            agent.transport_failed(target, self.now())
            self.flush()
