"""Registration with a trunk's registrar: the UAC side of RFC 3261 §10, sans-IO.

Theory of operation
-------------------
A trunk that sends calls to callhook only after it knows where callhook is wants a
*binding* at its registrar: "requests for ``sip:user@registrar`` go to this Contact"
(RFC 3261 §10.1). A binding lapses unless it is refreshed. :class:`Registration`
keeps one binding alive for one trunk. Like the rest of ``sip/`` it does no IO and
reads no clock: every method takes ``now``. The agent drives it:

* ``start(now)`` once, ``stop(now)`` at shutdown (unregister), ``leave(now, reason)`` when
  another process registers instead;
* after every call, ``take_requests()``: REGISTER requests *without* a Via; the agent
  puts its own top Via (new ``branch``) on each (:func:`with_via` does that), runs a
  non-INVITE client transaction (``transaction.py``) to :attr:`Registration.destination`
  and reports the outcome: ``on_response`` with each final response (1xx are ignored),
  ``on_timeout`` when Timer F fires or the request could not be sent;
* ``handle_timer(now)`` when ``deadline`` has come;
* ``take_changes()``: ``(state, reason)`` after each change, to log.

At most one REGISTER is in flight at any time (§10.2: a UA must not send a new
registration until it has a final response to the previous one, or it timed out);
responses to anything but the one in flight are ignored. Every REGISTER is sent
either at once in answer to a response (a challenge or a 423, both bounded) or at a
scheduled time (refresh, retry); nothing ever sends in a tight loop.

Requests (§10.2)
    ``REGISTER sip:registrar[:port]``; To and From the address of record
    ``<sip:username@registrar-host>`` (From with a tag fixed for the Registration);
    one Call-ID for all its REGISTERs (§10.2.4) and a CSeq one higher each time
    (§10.2); our Contact, with ``;transport=tcp`` over TCP; ``Expires``
    (§10.2.1.1), Max-Forwards 70, User-Agent, optionally Allow. Over TLS every one
    of these URIs is ``sips:`` and the Contact has no ``;transport=tls`` (RFC 5630;
    deprecated by RFC 3261 §26.2.2), as ``transport.Local.uri`` writes it.

Authentication (§22.2, §22.3; RFC 8760)
    A 401 / 407 is answered at once with ``Authorization`` / ``Proxy-Authorization``
    for the strongest digest challenge offered (``digest.best_challenge``); the digest
    uri is the Request-URI. The challenge is kept and answered again in later
    REGISTERs (refreshes, the unregister) with the nonce count incremented (RFC 7616
    §3.4), which saves a round trip while the registrar accepts the nonce. A 401/407
    right after credentials that answered a challenge we *had just received* means
    they were refused, unless it says ``stale=true`` (the nonce was old, the password
    fine): then the registration fails ("401 again: the password was refused").
    Refused credentials from a *kept* challenge are not conclusive (the nonce may
    simply have expired), so the new challenge is answered once. A configured
    ``realm`` restricts which challenges are answered. At most
    :data:`MAX_CHALLENGES` challenges in a row are answered.

Lifetime and refresh (§10.2.1, §10.2.4)
    The 2xx lists every binding of the address of record. The granted lifetime is the
    ``expires`` parameter of *our* Contact there (same user, host and port), else the
    response's ``Expires``, else what we asked for. It counts from when the REGISTER
    was sent (the conservative end). The refresh is sent :func:`refresh_after`
    seconds after that: 90 % of the lifetime or 5 s before it ends, whichever is
    earlier (baresip refreshes at 90 %, pjsip 5 s before), but never before half of
    it and never sooner than 1 s. A refresh that is refused leaves the binding in
    place until it lapses: the state is ``failing`` and the reason says how long the
    binding still holds, then that it has lapsed.

423 Interval Too Brief (§10.2.8, §10.3 step 7, §20.23)
    The registrar names the shortest lifetime it accepts in ``Min-Expires``: we ask
    for that from then on and register again at once. A 423 without a usable
    ``Min-Expires`` larger than what we asked is a failure (no loop).

Failures and back-off (RFC 5626 §4.5; RFC 3261 §20.33)
    Any other final response, a transaction timeout, a challenge we cannot or may not
    answer: state ``failing``, and the next try after ``Retry-After`` if the response
    has one, else after :func:`backoff` of the number of consecutive failures:
    RFC 5626's ``min(max-time, base-time * 2**n)`` with base 30 s and max 1800 s,
    without its random factor (30, 60, 120, ... 1800 s; deterministic, and the lower
    end of the RFC's range). A 2xx resets the count.

Behind a NAT (RFC 3581 §4, from the client's side)
    Our Via asks for ``rport``; the registrar's 2xx says in ``received`` and ``rport``
    where the REGISTER came from. Over UDP, when that is not our Contact (a NAT moved
    us), we register again at once with that address as the Contact, removing the old
    one in the same request (``;expires=0``), so calls reach us through the NAT
    binding our keep-alives hold open. Not more often than every
    :data:`REWRITE_AFTER` s. Over TCP and TLS the registrar reaches us on our
    connection, whatever its address: the Contact stays.

Unregistering (§10.2.2)
    ``stop`` removes our binding with ``Expires: 0`` and ``;expires=0`` on the Contact,
    once (a challenge to it is answered like any other), after the REGISTER in flight,
    if any, has its answer. Without a binding that may still hold nothing is sent.
    The state becomes ``unregistered`` on the final answer (other than a challenge
    being answered) or the timeout; nothing is sent after that. ``start`` may be
    called again later.

Leaving (another process registers now)
    ``leave`` stops refreshing without removing the binding: an ``Expires: 0`` naming
    the same Contact as the new holder's binding would remove that one too (§10.3 step
    6). The REGISTER in flight, if any, has its answer taken, and nothing is sent
    after it; the binding lapses at the registrar by itself. State ``unregistered``,
    with ``leave``'s reason.

States and transitions (``reason`` is ``""`` where not said otherwise):

=============  ======================================  ============  ======================
state          input                                   next state    then
=============  ======================================  ============  ======================
unregistered   ``start()``                             registering   REGISTER now
any            401/407 we may answer                   (same)        REGISTER with
                                                                     credentials now
any            423 with a larger Min-Expires           registering   REGISTER now asking
                                                       "423: ..."    Min-Expires
registering,   2xx granting a lifetime L               registered    refresh at
failing                                                              sent + refresh_after(L)
registered     2xx to the refresh                      registered    next refresh
any            other final response, timeout, 401      failing       retry after
               again, wrong realm                      "403 ..."     Retry-After or back-off
failing        the binding lapses                      failing       (reason updated)
any            ``stop()``, a binding may hold          (same)        Expires: 0 once the
                                                                     one in flight is done
any            ``stop()``, no binding                  unregistered  nothing
stopping       final answer to Expires: 0, timeout     unregistered  nothing
any            ``leave()`` (once the one in flight is  unregistered  nothing: the binding
               done)                                   (the reason)  lapses by itself
=============  ======================================  ============  ======================

While a refresh is in flight the state stays ``registered``, and while a retry is in
flight it stays ``failing``: ``take_changes`` reports changes, not attempts, so a
trunk that keeps failing for the same cause is logged once.

(This module is past 600 lines for this description and its table; its code is one
state machine, kept whole.)
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import Literal

from callhook.sip import digest
from callhook.sip.grammar import parse_hostport, show
from callhook.sip.message import (
    Headers,
    Request,
    Response,
    SipMessageError,
    SipUri,
    parse_name_addr,
)

__all__ = [
    "BASE_BACKOFF",
    "MAX_BACKOFF",
    "MAX_CHALLENGES",
    "REFRESH_MARGIN",
    "Registration",
    "RegistrationSpec",
    "State",
    "backoff",
    "refresh_after",
    "with_via",
]

State = Literal["unregistered", "registering", "registered", "failing"]

#: RFC 5626 §4.5 ``base-time`` when no flow works, and ``max-time`` (seconds).
BASE_BACKOFF = 30
MAX_BACKOFF = 1800
#: A refresh goes at least this long before the binding lapses (pjsip's margin, s).
REFRESH_MARGIN = 5
#: Challenges answered in a row before giving up (a registrar and a proxy, each with a
#: stale nonce once, fit in four).
MAX_CHALLENGES = 4
#: Seconds a connection must have carried the binding for its loss to be re-registered at
#: once (RFC 5626 §4.5: a flow that keeps failing backs off).
FLOW_STABLE = 120.0
#: Seconds before the Contact may move again to the address a registrar saw (RFC 3581).
REWRITE_AFTER = 30.0
TRANSPORTS = ("udp", "tcp", "tls")


def refresh_after(lifetime: int) -> float:
    """When to refresh a binding of ``lifetime`` seconds, counted from its REGISTER.

    ``min(0.9 * L, L - 5)`` (baresip's 90 %, pjsip's 5 s margin: whichever is earlier),
    but not before ``L / 2`` (short lifetimes) and not before 1 s.
    """
    earlier = min(lifetime * 9 / 10, lifetime - REFRESH_MARGIN)
    return max(1.0, lifetime / 2, earlier)


def backoff(failures: int) -> int:
    """Seconds to wait after ``failures`` consecutive failures (RFC 5626 §4.5, no jitter)."""
    if failures < 1:
        return 0
    doubled: int = BASE_BACKOFF << min(failures - 1, 16)
    return min(MAX_BACKOFF, doubled)


def with_via(request: Request, via: str) -> Request:
    """``request`` with ``via`` as its first header field (the UAC's top Via, §8.1.1.7)."""
    headers = Headers([("Via", via), *request.headers.items()])
    return Request(request.method, request.uri, headers, request.body, request.version)


@dataclass(frozen=True)
class RegistrationSpec:
    """What to register, for one trunk."""

    name: str  # the trunk's name, for logs
    registrar: str  # "host[:port]"; also the Request-URI (sip:host[:port], sips: over TLS)
    username: str
    password: str = field(repr=False)
    realm: str = ""  # when set, only challenges of this realm are answered
    expires: int = 300  # asked-for lifetime (s)
    transport: str = "udp"  # udp | tcp | tls


@dataclass
class _Auth:
    """A challenge we answer in each REGISTER, and the nonce count used with it."""

    challenge: digest.Challenge
    nonce_count: int = 0


@dataclass(frozen=True)
class _Sent:
    """The REGISTER in flight."""

    cseq: int
    expires: int
    sent_at: float
    unregister: bool
    fresh: frozenset[str]  # credential headers answering the challenge just received
    stale_removed: bool = False  # it removes the Contact of before a NAT was seen


class Registration:
    """One trunk's registration (see the module docstring)."""

    def __init__(
        self,
        spec: RegistrationSpec,
        contact_host: str,
        contact_port: int,
        *,
        user_agent: str = "callhook",
        allow: str = "",
        follow_nat: bool = True,
    ) -> None:
        """``follow_nat``: move the Contact to where the registrar saw us (RFC 3581); not
        behind the proxy of ``serve --workers``, whose public address the Contact is."""
        if spec.transport not in TRANSPORTS:
            raise ValueError(f"trunk {spec.name}: transport {spec.transport!r} is not udp|tcp|tls")
        if not spec.username:
            raise ValueError(f"trunk {spec.name}: registration needs a username")
        if spec.expires < 1:
            raise ValueError(f"trunk {spec.name}: expires must be at least 1 s")
        try:
            host, port = parse_hostport(spec.registrar, "registrar")
        except SipMessageError as exc:
            raise ValueError(f"trunk {spec.name}: {exc.reason}") from None
        self.spec = spec
        self.user_agent = user_agent
        self.allow = allow
        self.follow_nat = follow_nat
        tls = spec.transport == "tls"
        scheme = "sips" if tls else "sip"
        if ":" in contact_host and not contact_host.startswith("["):
            contact_host = f"[{contact_host}]"  # an IPv6 reference (§19.1.1)
        self.contact_host = contact_host
        self.contact_port = contact_port
        #: The Request-URI and the digest ``uri`` (§10.2: no user part).
        self.request_uri = f"{scheme}:{host}" + ("" if port is None else f":{port}")
        #: The address of record, in To and From (§10.2).
        self.aor = f"{scheme}:{spec.username}@{host}"
        # RFC 5630 (as transport.Local.uri): TLS is said by sips:, and
        # ";transport=tls" is deprecated (§26.2.2); TCP needs the parameter.
        param = ";transport=tcp" if spec.transport == "tcp" else ""
        self.contact_uri = f"{scheme}:{spec.username}@{contact_host}:{contact_port}{param}"
        #: Where the agent sends the REGISTERs (host unresolved, brackets removed).
        self.destination = (host.strip("[]"), port or (5061 if tls else 5060))
        self._target = f"{host}:{port or (5061 if tls else 5060)}"  # for reasons
        self.call_id = f"{secrets.token_hex(8)}@{contact_host}"
        self.from_tag = secrets.token_hex(8)
        self.state: State = "unregistered"
        self.reason = ""
        #: The lifetime the registrar granted last (s), None before any 2xx.
        self.granted: int | None = None
        self._changes: list[tuple[str, str]] = []
        self._out: list[Request] = []
        self._cseq = 0
        self._expires = spec.expires  # raised for good by a 423 (§10.2.8)
        self._wanted = False  # between start() and stop()
        self._in_flight: _Sent | None = None
        self._next_at: float | None = None  # when to send the next REGISTER
        self._binding_until: float | None = None
        self._lapsed = False  # a binding of ours lapsed while failing
        self._failures = 0
        self._challenges = 0
        self._auth: dict[str, _Auth] = {}  # credential header -> challenge it answers
        self._fresh: set[str] = set()  # of those, the ones challenged just now
        self._cause = ""  # the failure, without the note about the binding
        self._stale_contact: str | None = None  # to remove with the next REGISTER
        self._rewritten_at = -math.inf  # when the Contact last moved to a NAT's address
        self._registered_at = -math.inf  # the last 2xx
        self._flow_losses = 0  # connections lost in a row, each soon after registering
        self._leaving: str | None = None  # leave()'s reason: stopping, binding left alone

    # --- the agent's side -----------------------------------------------------------------

    def start(self, now: float) -> None:
        """Begin registering (the first REGISTER is sent at once)."""
        self._lapse(now)
        if self._wanted:
            return
        self._wanted = True
        self._leaving = None
        if self._in_flight is not None and not self._in_flight.unregister:
            return  # stop() had not taken effect yet: carry on as if it never came
        self._failures = 0
        self._set("registering", "")
        self._next_at = now
        self._pump(now)

    def stop(self, now: float) -> None:
        """Unregister: ``Expires: 0`` if a binding may hold, else just stop."""
        self._lapse(now)
        if not self._wanted:
            return
        self._wanted = False
        self._next_at = None
        if self._in_flight is None:
            self._finish_stop(now)
        # Otherwise the answer to the one in flight decides.
        self._pump(now)

    def leave(self, now: float, reason: str) -> None:
        """Stop refreshing, but leave the binding to lapse at the registrar by itself: another
        process registers for the installation now, and an ``Expires: 0`` naming the same
        Contact would remove its binding too (§10.3 step 6)."""
        self._lapse(now)
        if not self._wanted:
            return
        self._wanted = False
        self._leaving = reason
        self._next_at = None
        if self._in_flight is None:
            self._finish_stop(now)

    def flow_lost(self, now: float) -> None:
        """The connection the binding was made over closed (RFC 5626 §4.4: the flow failed):
        register again before the refresh, so the registrar can reach us. At once when
        the flow had lived :data:`FLOW_STABLE` s; else after :func:`backoff` of the
        losses in a row (RFC 5626 §4.5), so a registrar that drops every connection
        does not make us register in a loop."""
        if not (self._wanted and self.state == "registered" and self._in_flight is None):
            return
        if now - self._registered_at >= FLOW_STABLE:
            self._flow_losses = 0
        self._flow_losses += 1
        self._next_at = now if self._flow_losses == 1 else now + backoff(self._flow_losses - 1)
        self._pump(now)

    def take_requests(self) -> list[Request]:
        """REGISTER requests to send now, without a Via (see :func:`with_via`)."""
        out, self._out = self._out, []
        return out

    def take_changes(self) -> list[tuple[str, str]]:
        """``(state, reason)`` after each change of either, oldest first."""
        out, self._changes = self._changes, []
        return out

    @property
    def deadline(self) -> float | None:
        """When :meth:`handle_timer` should be called next (None: not needed)."""
        times = []
        if self._in_flight is None and self._next_at is not None:
            times.append(self._next_at)
        if self.state == "failing" and self._binding_until is not None:
            times.append(self._binding_until)  # to say in the reason that it lapsed
        return min(times, default=None)

    def handle_timer(self, now: float) -> None:
        """Send the refresh or retry that is due; notice a binding that lapsed."""
        self._lapse(now)
        self._pump(now)

    def expires_in(self, now: float) -> int | None:
        """Seconds until our binding lapses (None: no binding believed to hold).

        Also while ``failing`` after a refused refresh: the binding still holds then.
        """
        if self._binding_until is None or now >= self._binding_until:
            return None
        return math.ceil(self._binding_until - now)

    def next_try_in(self, now: float) -> int | None:
        """Seconds until the next attempt while failing or waiting (None otherwise)."""
        if self.state == "registered" or self._next_at is None or self._in_flight is not None:
            return None
        return max(0, math.ceil(self._next_at - now))

    def on_response(self, request: Request, response: Response, now: float) -> None:
        """A final response to ``request``, a REGISTER we produced (1xx are ignored)."""
        if response.status < 200:
            return
        self._lapse(now)
        sent = self._take_in_flight(request)
        if sent is None:
            return  # an answer to an older REGISTER, or not ours
        if sent.unregister:
            self._unregister_answered(sent, response, now)
        elif self._wanted:
            self._register_answered(sent, response, now)
        else:
            self._answered_after_stop(sent, response, now)
        self._pump(now)

    def on_timeout(self, request: Request, now: float, cause: str = "") -> None:
        """The transaction of ``request`` timed out (Timer F) or it could not be sent.

        ``cause`` replaces the default reason "no answer from host:port" (e.g. "cannot
        resolve sip.example").
        """
        self._lapse(now)
        sent = self._take_in_flight(request)
        if sent is None:
            return
        cause = cause or f"no answer from {self._target}"
        self._challenges = 0
        if sent.unregister:
            self._unregistered(now, f"unregister: {cause}")
        elif self._wanted:
            self._fail(now, cause)
        else:
            self._finish_stop(now)
        self._pump(now)

    # --- answers --------------------------------------------------------------------------

    def _take_in_flight(self, request: Request) -> _Sent | None:
        sent = self._in_flight
        if sent is None or request.method != "REGISTER":
            return None
        try:
            if request.call_id != self.call_id or request.cseq[0] != sent.cseq:
                return None
        except SipMessageError:
            return None
        self._in_flight = None
        return sent

    def _register_answered(self, sent: _Sent, response: Response, now: float) -> None:
        status = response.status
        if 200 <= status < 300:
            self._challenges = 0
            granted = self._granted(response, sent.expires)
            if granted <= 0:
                self._fail(now, f"{_status(response)} but no lifetime granted to our Contact")
                return
            self.granted = granted
            self._failures = 0
            self._lapsed = False
            self._binding_until = sent.sent_at + granted
            self._next_at = sent.sent_at + refresh_after(granted)
            self._registered_at = now
            if sent.stale_removed:
                self._stale_contact = None  # the old Contact is gone with this 2xx
            public = self._public_address(response, now)
            if public is not None:
                # Behind a NAT: the registrar must send calls to where it saw us.
                self._stale_contact = self.contact_uri
                self._set_contact(*public)
                self._rewritten_at = now
                self._next_at = now
                self._set("registered", f"behind NAT: registering {public[0]}:{public[1]}")
                return
            self._set("registered", "")
            return
        if status in (401, 407):
            problem = self._challenge(sent, response)
            if problem is None:
                self._next_at = now
            else:
                self._fail(now, problem)
            return
        self._challenges = 0
        if status == 423:
            minimum = _seconds(response.headers.get("Min-Expires"))
            if minimum is None or minimum <= sent.expires:
                self._fail(now, f"{_status(response)} without a usable Min-Expires")
                return
            self._expires = minimum  # and keep asking for it (§10.2.8)
            self._set("registering", f"423: registrar asks for at least {minimum} s")
            self._next_at = now
            return
        retry_after = _seconds(response.headers.get("Retry-After"))  # §20.33
        self._fail(now, _status(response), retry_after)

    def _public_address(self, response: Response, now: float) -> tuple[str, int] | None:
        """Where the registrar saw our REGISTER come from, if not our Contact (RFC 3581 §4:
        ``received`` and ``rport`` in the top Via of its answer), over UDP, where a NAT
        gives us another address and port. None when it is our Contact, or when the last
        change was under :data:`REWRITE_AFTER` s ago (a NAT that moves us at every
        REGISTER must not make us register in a loop)."""
        if not self.follow_nat or self.spec.transport != "udp":
            return None
        if now - self._rewritten_at < REWRITE_AFTER:
            return None
        try:
            via = response.top_via
        except (ValueError, IndexError):
            return None
        rport = via.params.get("rport") or ""
        if not rport.isdigit() or not 0 < int(rport) < 65536:
            return None
        host = via.params.get("received") or self.contact_host.strip("[]")
        if (host, int(rport)) == (self.contact_host.strip("[]"), self.contact_port):
            return None
        return host, int(rport)

    def _set_contact(self, host: str, port: int) -> None:
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        self.contact_host, self.contact_port = host, port
        self.contact_uri = f"sip:{self.spec.username}@{host}:{port}"

    def _answered_after_stop(self, sent: _Sent, response: Response, now: float) -> None:
        """A REGISTER answered after stop(): note what it did, then unregister if needed."""
        if 200 <= response.status < 300:
            granted = self._granted(response, sent.expires)
            if granted > 0:
                self._binding_until = max(self._binding_until or 0.0, sent.sent_at + granted)
        elif response.status in (401, 407):
            self._challenge(sent, response)  # kept for the unregister, when answerable
        self._finish_stop(now)

    def _unregister_answered(self, sent: _Sent, response: Response, now: float) -> None:
        status = response.status
        if status in (401, 407):
            problem = self._challenge(sent, response)
            if problem is None and not self._wanted:
                self._next_at = now  # the same unregister, with credentials
                return
            self._unregistered(now, "" if problem is None else f"unregister: {problem}")
            return
        self._unregistered(now, "" if status < 300 else f"unregister: {_status(response)}")

    def _challenge(self, sent: _Sent, response: Response) -> str | None:
        """Keep the challenge for the next REGISTER; or why it must not be answered."""
        status = response.status
        header = "WWW-Authenticate" if status == 401 else "Proxy-Authenticate"
        answer = "Authorization" if status == 401 else "Proxy-Authorization"
        what = _status(response)
        values = response.headers.get_all(header)
        if not values:
            return f"{what} without {header}"
        if self.spec.realm:
            realms = [_realm(value) for value in values]
            ours = [v for v, realm in zip(values, realms, strict=True) if realm == self.spec.realm]
            if not ours:
                self._auth.pop(answer, None)
                offered = ", ".join(sorted({r for r in realms if r is not None})) or "none"
                return f"{what}: challenge for realm {offered}, not {self.spec.realm}"
            values = ours
        try:
            challenge = digest.best_challenge(values)
        except digest.DigestError as exc:
            return f"{what}: {exc}"
        if answer in sent.fresh and not challenge.stale:
            # §22.2: the credentials we just computed were refused; a stale nonce
            # (RFC 7616 §3.3) would mean only the nonce was old.
            self._auth.pop(answer, None)
            return f"{status} again: the password was refused"
        self._challenges += 1
        if self._challenges > MAX_CHALLENGES:
            return f"{what}: still challenged after {MAX_CHALLENGES} answers"
        self._auth[answer] = _Auth(challenge)
        self._fresh.add(answer)
        return None

    def _granted(self, response: Response, asked: int) -> int:
        """The lifetime of our binding in a 2xx (§10.2.4)."""
        for value in response.headers.get_all("Contact"):
            try:
                contact = parse_name_addr(value)
            except SipMessageError:
                continue  # "*" or junk: not ours
            if self._is_ours(contact.uri):
                seconds = _seconds(contact.params.get("expires"))
                if seconds is not None:
                    return seconds
        seconds = _seconds(response.headers.get("Expires"))
        return asked if seconds is None else seconds

    def _is_ours(self, uri: SipUri) -> bool:
        if uri.scheme not in ("sip", "sips"):
            return False
        default = 5061 if uri.scheme == "sips" else 5060
        return (
            uri.user == self.spec.username
            and uri.host.lower() == self.contact_host.lower()
            and (uri.port or default) == self.contact_port
        )

    # --- outcomes -------------------------------------------------------------------------

    def _fail(self, now: float, cause: str, retry_after: int | None = None) -> None:
        self._challenges = 0
        self._failures += 1
        wait = backoff(self._failures) if retry_after is None else retry_after
        self._next_at = now + max(1, wait)
        self._cause = cause
        self._set("failing", self._failing_reason(now))

    def _failing_reason(self, now: float) -> str:
        left = self.expires_in(now)
        if left is not None:
            return f"{self._cause}; the current binding holds for {left} s more"
        if self._lapsed:
            return f"{self._cause}; the binding has lapsed"
        return self._cause

    def _lapse(self, now: float) -> None:
        """Forget a binding whose lifetime is over."""
        if self._binding_until is None or now < self._binding_until:
            return
        self._binding_until = None
        self._lapsed = True
        if self.state == "failing":
            self._set("failing", self._failing_reason(now))

    def _finish_stop(self, now: float) -> None:
        """After stop() and the REGISTER in flight: unregister if a binding may hold (not
        after leave())."""
        if self._leaving is not None:
            self._binding_until = None
            self._next_at = None
            self._set("unregistered", self._leaving)
            return
        if self._binding_until is not None and self._binding_until > now:
            self._next_at = now
        else:
            self._unregistered(now, "")

    def _unregistered(self, now: float, reason: str) -> None:
        self._binding_until = None
        self._lapsed = False
        self._challenges = 0
        if self._wanted:  # start() came again while we were unregistering
            self._failures = 0
            self._set("registering", "")
            self._next_at = now
            return
        self._next_at = None
        self._set("unregistered", reason)

    def _set(self, state: State, reason: str) -> None:
        if (state, reason) != (self.state, self.reason):
            self.state, self.reason = state, reason
            self._changes.append((state, reason))

    # --- requests -------------------------------------------------------------------------

    def _pump(self, now: float) -> None:
        if self._in_flight is None and self._next_at is not None and now >= self._next_at:
            self._send(now)

    def _send(self, now: float) -> None:
        unregister = not self._wanted
        expires = 0 if unregister else self._expires
        self._cseq += 1
        headers = Headers()
        headers.add("Max-Forwards", "70")
        headers.add("From", f"<{self.aor}>;tag={self.from_tag}")
        headers.add("To", f"<{self.aor}>")
        headers.add("Call-ID", self.call_id)
        headers.add("CSeq", f"{self._cseq} REGISTER")
        # §10.2.2: removing a binding says so in the Contact's expires as well.
        headers.add("Contact", f"<{self.contact_uri}>" + (";expires=0" if unregister else ""))
        if self._stale_contact is not None:
            # The Contact we registered before a NAT was seen: removed in the same request
            # (and in the next, until one of them is accepted).
            headers.add("Contact", f"<{self._stale_contact}>;expires=0")
        headers.add("Expires", str(expires))
        for name, auth in self._auth.items():
            auth.nonce_count += 1  # the same nonce again: the next count (RFC 7616 §3.4)
            value = digest.authorization(
                auth.challenge,
                "REGISTER",
                self.request_uri,
                self.spec.username,
                self.spec.password,
                nonce_count=auth.nonce_count,
            )
            headers.add(name, value)
        if self.allow:
            headers.add("Allow", self.allow)
        headers.add("User-Agent", self.user_agent)
        headers.add("Content-Length", "0")
        self._out.append(Request("REGISTER", self.request_uri, headers))
        self._in_flight = _Sent(
            self._cseq,
            expires,
            now,
            unregister,
            frozenset(self._fresh),
            stale_removed=self._stale_contact is not None,
        )
        self._fresh.clear()
        self._next_at = None


def _status(response: Response) -> str:
    """``"403 Forbidden"``, the reason phrase made safe for a log line."""
    return f"{response.status} {show(response.reason, 60)}".rstrip()


def _seconds(value: str | None) -> int | None:
    """The delta-seconds at the start of Expires, Min-Expires, Retry-After or ``expires``."""
    if value is None:
        return None
    text = value.split(";", 1)[0].split("(", 1)[0].strip().strip('"')
    if not text or text.strip("0123456789") or len(text) > 10:
        return None
    return int(text)


def _realm(value: str) -> str | None:
    try:
        return digest.parse_challenge(value).realm
    except digest.DigestError:
        return None
