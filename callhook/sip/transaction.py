"""SIP transactions: RFC 3261 §17 (with RFC 6026's Accepted states), sans-IO.

Theory of operation
-------------------
A transaction is a request and the responses to it, made reliable over UDP
by retransmission timers (over TCP and TLS the transport is reliable: timers
A, E and G never start and D, I, J and K are zero, §17.1.1.2, §17.1.2.2,
§17.2.1, §17.2.2). There are four kinds:

=====  =======================  ======================================
kind   who                      states
=====  =======================  ======================================
ICT    INVITE client            calling proceeding completed accepted
NICT   non-INVITE client        trying proceeding completed
IST    INVITE server            proceeding completed confirmed accepted
NIST   non-INVITE server        trying proceeding completed
=====  =======================  ======================================

Each transaction is a small state machine. Its transitions are the tables
below: ``(state, input) -> (new state, what to do)``. Inputs are messages from
the network, messages from the transaction user (the UA core in
``agent.py``: "send this response") and timer expiries. What to do is a short
list of named steps (transmit, pass to the user, start a timer, ...). Nothing
here touches a socket or a clock: the caller passes ``now`` in and gets
:class:`Transmit` / :class:`Deliver` / :class:`Timeout` outputs back, and asks
``deadline`` when to call :meth:`Transaction.on_timer` next.

Timers (RFC 3261 Table 4; T1 = 500 ms, T2 = 4 s, T4 = 5 s):

=====  ============================================  =====================
timer  meaning                                       value
=====  ============================================  =====================
A      ICT request retransmit                        T1, doubling
B      ICT timeout                                   64*T1
D      ICT wait for response retransmits             32 s
E      NICT request retransmit                       T1, doubling to T2
F      NICT timeout                                  64*T1
G      IST response retransmit                       T1, doubling to T2
H      IST wait for ACK                              64*T1
I      IST wait for ACK retransmits                  T4
J      NIST wait for request retransmits             64*T1
K      NICT wait for response retransmits            T4
L      IST accepted: absorb INVITE retransmits       64*T1 (RFC 6026)
M      ICT accepted: pass on 2xx retransmits         64*T1 (RFC 6026)
Z      ICT after our CANCEL: give up on a final       64*T1 (§9.1)
=====  ============================================  =====================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from callhook.sip.message import Request, Response, serialize
from callhook.sip.transport import Target, reliable

T1 = 0.5
T2 = 4.0
T4 = 5.0

Address = tuple[str, int]  # host, port; a UDP target (see transport.Target)


class Kind(enum.Enum):
    ICT = "INVITE client"
    NICT = "non-INVITE client"
    IST = "INVITE server"
    NIST = "non-INVITE server"


class State(enum.Enum):
    CALLING = "calling"
    TRYING = "trying"
    PROCEEDING = "proceeding"
    COMPLETED = "completed"
    CONFIRMED = "confirmed"
    ACCEPTED = "accepted"
    TERMINATED = "terminated"


# --- outputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transmit:
    """Send these bytes to ``address``."""

    data: bytes
    address: Target


@dataclass(frozen=True, slots=True)
class Deliver:
    """Pass this message to the transaction user (a response to a client, a request retransmit
    the user must see: the ACK of a 2xx goes to the dialog, not here)."""

    message: Request | Response


@dataclass(frozen=True, slots=True)
class Timeout:
    """The transaction gave up (Timer B, F or H): the peer is unreachable or silent."""

    timer: str


Output = Transmit | Deliver | Timeout


# --- inputs -------------------------------------------------------------------------------
# Names of the inputs the tables react to. Responses are classified by class.

R1XX = "1xx"  # provisional response (from the network for clients, from the user for servers)
R2XX = "2xx"
R3456 = "3xx-6xx"
REQUEST = "request"  # a retransmission of the request (servers)
ACK = "ACK"  # an ACK (INVITE servers, for a non-2xx final response)


def _response_class(status: int) -> str:
    if status < 200:
        return R1XX
    if status < 300:
        return R2XX
    return R3456


# --- the tables -------------------------------------------------------------------------
# Steps: "send" transmit the last message the user gave (servers: the response),
# "resend" retransmit the request (clients) or the last response (servers),
# "deliver" pass the received message to the user, "ack" send the ACK for a
# non-2xx final response (ICT), "stop" cancel the retransmit timer, "timer X"
# start timer X. Timer expiries are inputs named "timer X".

_Table = dict[tuple[State, str], tuple[State, tuple[str, ...]]]

S = State
ICT_TABLE: _Table = {
    (S.CALLING, "timer A"): (S.CALLING, ("resend", "timer A")),
    (S.CALLING, "timer B"): (S.TERMINATED, ("timeout",)),
    (S.CALLING, R1XX): (S.PROCEEDING, ("stop", "deliver")),
    (S.CALLING, R2XX): (S.ACCEPTED, ("stop", "deliver", "timer M")),
    (S.CALLING, R3456): (S.COMPLETED, ("stop", "ack", "deliver", "timer D")),
    (S.CALLING, "timer Z"): (S.TERMINATED, ("timeout",)),
    (S.PROCEEDING, "timer Z"): (S.TERMINATED, ("timeout",)),
    (S.PROCEEDING, R1XX): (S.PROCEEDING, ("deliver",)),
    (S.PROCEEDING, R2XX): (S.ACCEPTED, ("deliver", "timer M")),
    (S.PROCEEDING, R3456): (S.COMPLETED, ("ack", "deliver", "timer D")),
    # Timer B still bounds Proceeding: a peer that rings forever is a UA matter
    # (the call's own no-answer timeout), so B is stopped on the first 1xx.
    (S.COMPLETED, R3456): (S.COMPLETED, ("ack",)),
    (S.COMPLETED, "timer D"): (S.TERMINATED, ()),
    (S.ACCEPTED, R2XX): (S.ACCEPTED, ("deliver",)),
    (S.ACCEPTED, "timer M"): (S.TERMINATED, ()),
}

NICT_TABLE: _Table = {
    (S.TRYING, "timer E"): (S.TRYING, ("resend", "timer E")),
    (S.TRYING, "timer F"): (S.TERMINATED, ("timeout",)),
    (S.TRYING, R1XX): (S.PROCEEDING, ("deliver",)),
    (S.TRYING, R2XX): (S.COMPLETED, ("stop", "deliver", "timer K")),
    (S.TRYING, R3456): (S.COMPLETED, ("stop", "deliver", "timer K")),
    (S.PROCEEDING, "timer E"): (S.PROCEEDING, ("resend", "timer E")),
    (S.PROCEEDING, "timer F"): (S.TERMINATED, ("timeout",)),
    (S.PROCEEDING, R1XX): (S.PROCEEDING, ("deliver",)),
    (S.PROCEEDING, R2XX): (S.COMPLETED, ("stop", "deliver", "timer K")),
    (S.PROCEEDING, R3456): (S.COMPLETED, ("stop", "deliver", "timer K")),
    (S.COMPLETED, "timer K"): (S.TERMINATED, ()),
}

# Server tables: R1XX/R2XX/R3456 are responses the *user* sends.
IST_TABLE: _Table = {
    (S.PROCEEDING, REQUEST): (S.PROCEEDING, ("resend",)),
    (S.PROCEEDING, R1XX): (S.PROCEEDING, ("send",)),
    (S.PROCEEDING, R2XX): (S.ACCEPTED, ("send", "timer L")),
    (S.PROCEEDING, R3456): (S.COMPLETED, ("send", "timer G", "timer H")),
    (S.COMPLETED, REQUEST): (S.COMPLETED, ("resend",)),
    (S.COMPLETED, "timer G"): (S.COMPLETED, ("resend", "timer G")),
    (S.COMPLETED, "timer H"): (S.TERMINATED, ("timeout",)),
    (S.COMPLETED, ACK): (S.CONFIRMED, ("stop", "timer I")),
    (S.CONFIRMED, ACK): (S.CONFIRMED, ()),
    (S.CONFIRMED, REQUEST): (S.CONFIRMED, ()),
    (S.CONFIRMED, "timer I"): (S.TERMINATED, ()),
    # RFC 6026: after a 2xx the TU retransmits it; INVITE retransmits are absorbed.
    (S.ACCEPTED, REQUEST): (S.ACCEPTED, ()),
    # RFC 6026 §8: an ACK matching the INVITE (an RFC 2543 peer's ACK for our 2xx)
    # goes to the user, which is waiting for it.
    (S.ACCEPTED, ACK): (S.ACCEPTED, ("deliver",)),
    (S.ACCEPTED, R2XX): (S.ACCEPTED, ("send",)),
    (S.ACCEPTED, "timer L"): (S.TERMINATED, ()),
}

NIST_TABLE: _Table = {
    (S.TRYING, R1XX): (S.PROCEEDING, ("send",)),
    (S.TRYING, R2XX): (S.COMPLETED, ("send", "timer J")),
    (S.TRYING, R3456): (S.COMPLETED, ("send", "timer J")),
    (S.TRYING, REQUEST): (S.TRYING, ()),
    (S.PROCEEDING, REQUEST): (S.PROCEEDING, ("resend",)),
    (S.PROCEEDING, R1XX): (S.PROCEEDING, ("send",)),
    (S.PROCEEDING, R2XX): (S.COMPLETED, ("send", "timer J")),
    (S.PROCEEDING, R3456): (S.COMPLETED, ("send", "timer J")),
    (S.COMPLETED, REQUEST): (S.COMPLETED, ("resend",)),
    (S.COMPLETED, "timer J"): (S.TERMINATED, ()),
}

TABLES = {Kind.ICT: ICT_TABLE, Kind.NICT: NICT_TABLE, Kind.IST: IST_TABLE, Kind.NIST: NIST_TABLE}
INITIAL = {Kind.ICT: S.CALLING, Kind.NICT: S.TRYING, Kind.IST: S.PROCEEDING, Kind.NIST: S.TRYING}


def _timer_length(name: str, interval: float) -> float:
    return {
        "A": interval,
        "B": 64 * T1,
        "D": 32.0,
        "E": interval,
        "F": 64 * T1,
        "G": interval,
        "H": 64 * T1,
        "I": T4,
        "J": 64 * T1,
        "K": T4,
        "L": 64 * T1,
        "M": 64 * T1,
        "Z": 64 * T1,
    }[name]


# --- the transaction ------------------------------------------------------------------------


@dataclass
class Transaction:
    """One transaction (see the module docstring). Create with :func:`client` or :func:`server`."""

    kind: Kind
    request: Request
    address: Target  # where requests go (client) or responses go (server)
    state: State = State.TERMINATED
    timers: dict[str, float] = field(default_factory=dict)
    last_response: Response | None = None
    _request_bytes: bytes = b""
    _response_bytes: bytes = b""
    _interval: float = T1  # current retransmit interval of A / E / G
    _started: set[str] = field(default_factory=set)

    match: str = ""  # the branch (or RFC 2543 match key) the agent files it under

    @property
    def key(self) -> tuple[str, str]:
        """(branch, method) — ACK and CANCEL are matched by the agent (§17.2.3, §9.2)."""
        method = "INVITE" if self.kind in (Kind.ICT, Kind.IST) else self.request.method
        return (self.match or self.request.branch or "", method)

    @property
    def terminated(self) -> bool:
        return self.state is State.TERMINATED

    @property
    def deadline(self) -> float | None:
        return min(self.timers.values()) if self.timers else None

    # --- inputs ---------------------------------------------------------------------

    def receive(self, message: Request | Response, now: float) -> list[Output]:
        """A message from the network for this transaction."""
        if isinstance(message, Response):
            self.last_response = message
            return self._input(_response_class(message.status), now, message)
        if message.method == "ACK":
            return self._input(ACK, now, message)
        return self._input(REQUEST, now, message)

    def respond(self, response: Response, now: float) -> list[Output]:
        """Server transactions: the user sends ``response``."""
        self.last_response = response
        self._response_bytes = serialize(response)
        return self._input(_response_class(response.status), now, response)

    def transport_failed(self) -> list[Output]:
        """Client transactions: the transport could not deliver the request (a connection that
        could not be made or broke): the transaction ends as if it had timed out (§8.1.3.1,
        §17.1.4); the user treats it as a 503."""
        if self.kind not in (Kind.ICT, Kind.NICT) or self.state not in (
            State.CALLING,
            State.TRYING,
        ):
            return []  # a server, or answered already: not waiting on that connection
        self.state = State.TERMINATED
        self.timers.clear()
        return [Timeout("transport")]

    def cancelled(self, now: float) -> None:
        """ICT: our CANCEL went out; give up 64*T1 later if no final response comes (§9.1)."""
        if self.kind is Kind.ICT and self.state in (State.CALLING, State.PROCEEDING):
            self._start("Z", now)

    def on_timer(self, now: float) -> list[Output]:
        """Fire every timer that is due."""
        out: list[Output] = []
        for name, when in sorted(self.timers.items(), key=lambda kv: kv[1]):
            if when <= now and name in self.timers and not self.terminated:
                del self.timers[name]
                out += self._input(f"timer {name}", now, None)
        return out

    # --- the machine ----------------------------------------------------------------

    def _input(self, name: str, now: float, message: Request | Response | None) -> list[Output]:
        entry = TABLES[self.kind].get((self.state, name))
        if entry is None:
            return []  # not meaningful in this state (e.g. a stray retransmission): ignore
        self.state, steps = entry
        out: list[Output] = []
        for step in steps:
            if step == "send" or (step == "resend" and self.kind in (Kind.IST, Kind.NIST)):
                if self._response_bytes:
                    out.append(Transmit(self._response_bytes, self.address))
            elif step == "resend":
                out.append(Transmit(self._request_bytes, self.address))
            elif step == "deliver":
                assert message is not None
                out.append(Deliver(message))
            elif step == "ack":
                assert isinstance(message, Response)
                out.append(Transmit(serialize(ack_for(self.request, message)), self.address))
            elif step == "stop":
                for timer in ("A", "B", "E", "F", "G"):
                    self.timers.pop(timer, None)
            elif step == "timeout":
                out.append(Timeout(name.removeprefix("timer ")))
            elif step.startswith("timer "):
                self._start(step[-1], now)
        if self.terminated:
            self.timers.clear()
        return out

    @property
    def reliable(self) -> bool:
        """Whether the transaction runs over TCP or TLS (no retransmissions)."""
        return reliable(self.address.transport)

    def _start(self, timer: str, now: float) -> None:
        if self.reliable and timer in ("A", "E", "G"):
            return  # the transport retransmits (§17.1.1.2, §17.1.2.2, §17.2.1)
        if timer in ("A", "E", "G") and timer in self._started:
            # Retransmit intervals double: A without limit, E and G up to T2 (§17.1.1.2,
            # §17.1.2.2, §17.2.1); in Proceeding, E is T2 at once.
            self._interval = self._interval * 2 if timer == "A" else min(self._interval * 2, T2)
        if timer == "E" and self.state is State.PROCEEDING:
            self._interval = T2
        self._started.add(timer)
        length = _timer_length(timer, self._interval)
        if self.reliable and timer in ("D", "I", "J", "K"):
            length = 0.0  # nothing to absorb: no retransmissions come over a stream
        self.timers[timer] = now + length


def client(
    request: Request, address: Target | Address, now: float
) -> tuple[Transaction, list[Output]]:
    """Start a client transaction: send ``request`` to ``address`` (§17.1)."""
    kind = Kind.ICT if request.method == "INVITE" else Kind.NICT
    address = Target(*address)
    tx = Transaction(kind, request, address, state=INITIAL[kind])
    tx._request_bytes = serialize(request)
    if kind is Kind.ICT:
        tx._start("A", now)
        tx._start("B", now)
    else:
        tx._start("E", now)
        tx._start("F", now)
    return tx, [Transmit(tx._request_bytes, tx.address)]


def server(request: Request, address: Target | Address) -> Transaction:
    """A server transaction for a new ``request`` whose responses go to ``address`` (§17.2)."""
    kind = Kind.IST if request.method == "INVITE" else Kind.NIST
    return Transaction(kind, request, Target(*address), state=INITIAL[kind])


def ack_for(invite: Request, response: Response) -> Request:
    """The ACK of a non-2xx final response: same branch, To with the response's tag (§17.1.1.3)."""
    headers = invite.headers.copy()
    for name in list(dict.fromkeys(n for n, _ in headers.items())):
        if name not in ("Via", "From", "Call-ID", "Route", "Max-Forwards"):
            headers.remove(name)
    vias = invite.headers.get_all("Via")
    headers.remove("Via")
    headers.add("Via", vias[0])
    to = response.headers.get("To")
    if to is not None:
        headers.set("To", to)
    headers.set("CSeq", f"{invite.cseq[0]} ACK")
    return Request("ACK", invite.uri, headers)
