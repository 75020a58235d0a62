"""callhook's registrar for its users' phones (RFC 3261 §10.3). Sans-IO.

Theory of operation
-------------------
The phones of the people callers are put through to (``[users.NAME]``)
REGISTER with callhook; ``connect`` to ``user:NAME`` calls every phone NAME has
registered (``telephony/connecting.py``). :meth:`Registrar.register` processes
one REGISTER the agent received (``uas.py``) and says what to answer; it does no
IO and takes ``now`` (the agent's clock). Following §10.3's steps:

1. The Request-URI's domain is not checked: callhook is the registrar of
   whatever name or address the phones were given for it.
2. ``Require`` was checked by the agent already (420).
3. Authentication (``authentication.py``): a REGISTER without right
   credentials gets 401 with fresh digest challenges (MD5, and SHA-256 if
   configured; ``stale=true`` when only the nonce expired); wrong credentials get 403 and
   count towards the source's ban (:meth:`take_failures`, fed to the guard by
   the adapter).
4. Authorization: a user may register only their own address of record; the
   digest's username must be the To user (else 403, not counted: the password
   was right).
5. The address of record is the To URI's user: one of ``[users]`` (an unknown
   one never gets this far: its digest cannot be right, so the answer is the
   same 403 as a wrong password's and reveals no user names, docs/security.md,
   where §10.3 would have said 404).
6. Contacts: ``*`` only with ``Expires: 0`` and alone (else 400), and it
   removes every binding. Each Contact's expiry is its ``expires`` parameter,
   else the ``Expires`` header, else :data:`DEFAULT_EXPIRES`; above
   :data:`MAX_EXPIRES` it is lowered to it (the 200 says so); above 0 and below
   :data:`MIN_EXPIRES` the whole request gets 423 with ``Min-Expires``.
7. Per Contact: a new one is added; an existing one (same URI, compared as
   §19.1.4 says, roughly: scheme, user, host, port, transport) is refreshed or,
   with expiry 0, removed; but when its Call-ID is the same as the binding's and
   the CSeq not higher, the REGISTER is out of order and the whole request
   fails with 500 (atomic: nothing of it is applied). At most
   :data:`MAX_BINDINGS` phones per user: a right REGISTER is never refused for
   being one too many (a phone whose Contact port changed, after a reboot or a
   NAT's rebinding, would lock itself out behind its own stale bindings);
   instead the user's other bindings go, first those registered from the same
   address, then those that expire soonest. Only a REGISTER that itself lists
   more Contacts than that is refused (403).
8. The 200 lists every binding the user has now, each with its ``expires``.

Never a trunk's: a Contact whose host is a configured trunk's host or address
(``is_trunk``, given by the adapter), or that would be reached at one, is
refused (403, logged), and a binding that turns out to be one (a trunk resolved
after it was registered) is dropped: ``connect`` to ``user:NAME`` is not
checked against ``[outbound] allow``, so a user's password must not buy a call
to ``sip:+1900...@<a provider that trusts callhook's address>``.

Which calls are a user's: :meth:`Registrar.own_domain` says whether a host is
one of callhook's own (its addresses, given by the adapter, and ``[sip]
domains``): an INVITE whose From host is one is challenged, whatever its user
(``uas.py``).

Where a phone is reached: a binding remembers where its REGISTER came from.
Over TCP or TLS the phone is reached on that connection (a phone rarely accepts
connections: RFC 5626's flow reuse). Over UDP the phone is reached at its
Contact, unless the Contact names a private, loopback or link-local address
other than the one the REGISTER came from: the phone is behind a NAT, and its
REGISTER's source (the NAT's mapping, kept open by its re-REGISTERs) is used
instead, as Kamailio's ``fix_nated_register`` and Asterisk's ``force_rport`` do.
A Contact naming a host name rather than an address is reached at the source
too: callhook does not look phones' names up (a name can be made to lead
anywhere, a trunk's address included).

Changes are reported (:meth:`take_changes`: the users whose bindings changed)
for the adapter to store; at start the adapter gives the stored ones back
(:meth:`load`), so bindings survive a restart. Expired bindings are dropped
whenever the user's bindings are looked at.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from callhook.sip.authentication import DEFAULT_ALGORITHMS, Authenticator, Verdict
from callhook.sip.grammar import show
from callhook.sip.message import Request, SipMessageError, parse_name_addr, parse_uri
from callhook.sip.transport import Target, reliable, target_of

logger = logging.getLogger("callhook.sip")

#: The shortest registration accepted (seconds); shorter ones get 423 (§10.2.8).
MIN_EXPIRES = 60
#: The longest registration granted (seconds); longer ones are lowered to it.
MAX_EXPIRES = 3600
#: The registration a REGISTER that names no expiry gets (§10.2.1.1: the registrar's choice).
DEFAULT_EXPIRES = 3600
#: Phones one user may have registered at once.
MAX_BINDINGS = 10


@dataclass
class Binding:
    """One registered phone of a user."""

    user: str
    contact: str  # the Contact URI, as registered
    call_id: str
    cseq: int
    expires_at: float  # on the agent's clock
    source: Target  # where the REGISTER came from
    target: Target  # where requests for this phone go

    def expires_in(self, now: float) -> int:
        """Whole seconds left (rounded up, at least 0)."""
        return max(0, int(self.expires_at - now + 0.999))


@dataclass(frozen=True)
class Answer:
    """The response the agent sends to a request the registrar judged."""

    status: int
    reason: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


class RegisterError(Exception):
    """A REGISTER that fails as a whole (nothing of it applied)."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.reason)
        self.answer = answer


class Registrar:
    """The bindings of ``[users]`` and the REGISTERs that change them (see the module docstring)."""

    def __init__(
        self,
        users: Mapping[str, str],
        key: bytes,
        *,
        min_expires: int = MIN_EXPIRES,
        max_expires: int = MAX_EXPIRES,
        default_expires: int = DEFAULT_EXPIRES,
        algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS,
        domains: Iterable[str] = (),
        is_trunk: Callable[[str], bool] = lambda host: False,
        boot: str | None = None,
    ) -> None:
        """``users``: name -> password; ``key``: the digest nonces' HMAC key;
        ``algorithms``: the digest algorithms offered, most preferred first;
        ``domains``: callhook's own hosts (addresses and names phones know it by);
        ``is_trunk``: whether a host is a trunk's (name or address); ``boot``: this
        start's id in the nonces (default random)."""
        self.users = users
        self.auth = Authenticator(users, key, algorithms=algorithms, boot=boot)
        self.domains = {host_key(d) for d in domains}
        self.is_trunk = is_trunk
        self.min_expires = min_expires
        self.max_expires = max_expires
        self.default_expires = min(default_expires, max_expires)
        self._bindings: dict[str, list[Binding]] = {}
        self._changed: list[str] = []
        self._failures: list[tuple[str, str]] = []

    # --- what the adapter asks --------------------------------------------------------------

    def knows(self, user: str) -> bool:
        """Whether ``user`` is one of ``[users]``."""
        return user in self.users

    def own_domain(self, host: str) -> bool:
        """Whether ``host`` is one of callhook's own (the host its users' addresses have)."""
        return host_key(host) in self.domains

    def bindings(self, user: str, now: float) -> list[Binding]:
        """``user``'s live bindings (expired ones and any a trunk's are dropped)."""
        live = []
        for binding in self._bindings.get(user, []):
            if binding.expires_at <= now:
                continue
            trunk = self._trunk_host(binding.contact, binding.target)
            if trunk is not None:
                logger.warning(
                    "user %s: registration %s dropped: %s is a trunk's",
                    user,
                    show(binding.contact),
                    show(trunk),
                )
                self._changed.append(user)
                continue
            live.append(binding)
        if live:
            self._bindings[user] = live
        else:
            self._bindings.pop(user, None)
        return list(live)

    def load(self, bindings: Iterable[Binding], now: float) -> int:
        """Take stored bindings back (at start); those of unknown users or expired are
        left out. How many were taken."""
        taken = 0
        for binding in bindings:
            if binding.user in self.users and binding.expires_at > now:
                self._bindings.setdefault(binding.user, []).append(binding)
                taken += 1
        return taken

    def replace_all(self, bindings: Iterable[Binding], now: float) -> int:
        """Forget every binding and take ``bindings`` instead (a worker of ``serve --workers``
        following the stored ones: ``telephony/users.py``). How many were taken."""
        self._bindings.clear()
        return self.load(bindings, now)

    def take_changes(self) -> list[str]:
        """The users whose bindings changed since the last call (to be stored)."""
        changed, self._changed = self._changed, []
        return list(dict.fromkeys(changed))

    def take_failures(self) -> list[tuple[str, str]]:
        """``(source host, what)`` of each failed authentication since the last call
        (``what``: the method and the user it claimed, for the log)."""
        failures, self._failures = self._failures, []
        return failures

    # --- requests ---------------------------------------------------------------------------

    def authenticate(self, request: Request, source: Target, now: float) -> Answer | str:
        """The user a request from ``source`` is authenticated as, or the answer to send
        instead (401 with challenges, or 403)."""
        verdict = self.auth.check(request, now)
        if verdict.outcome == "ok":
            return verdict.user
        return self._refusal(verdict, request, source, now)

    def _refusal(self, verdict: Verdict, request: Request, source: Target, now: float) -> Answer:
        if verdict.outcome == "wrong":
            self._failures.append((source.host, f"{request.method} as {show(verdict.user)}"))
            return Answer(403, "Forbidden")
        if verdict.outcome == "bad":
            return Answer(400, "Bad Request (digest uri is not the Request-URI)")
        challenges = self.auth.challenges(now, stale=verdict.outcome == "stale")
        return Answer(401, None, tuple(("WWW-Authenticate", c) for c in challenges))

    def register(self, request: Request, source: Target, now: float) -> Answer:
        """Process a REGISTER from ``source`` (RFC 3261 §10.3): the answer to send."""
        authenticated = self.authenticate(request, source, now)
        if isinstance(authenticated, Answer):
            return authenticated
        try:
            aor = parse_name_addr(request.headers.get("To") or "").uri
        except SipMessageError:
            return Answer(400, "Bad Request (To)")
        if aor.user != authenticated:
            return Answer(403, "Forbidden (not your address of record)")
        user = authenticated
        try:
            self._apply(user, request, source, now)
        except RegisterError as exc:
            return exc.answer
        current = self.bindings(user, now)
        contacts = tuple(("Contact", f"<{b.contact}>;expires={b.expires_in(now)}") for b in current)
        return Answer(200, "OK", contacts)

    def _apply(self, user: str, request: Request, source: Target, now: float) -> None:
        """Steps 6 and 7 of §10.3 for ``user``, all or nothing."""
        contacts = request.headers.get_all("Contact")
        header = _seconds(request.headers.get("Expires"))
        call_id, cseq = request.call_id, request.cseq[0]
        existing = self.bindings(user, now)
        if "*" in contacts:
            if len(contacts) != 1 or header != 0:
                raise RegisterError(Answer(400, "Bad Request (Contact: * needs Expires: 0)"))
            for binding in existing:
                if binding.call_id == call_id and cseq <= binding.cseq:
                    raise RegisterError(Answer(500, "Server Internal Error (CSeq out of order)"))
            if existing:
                self._bindings.pop(user, None)
                self._changed.append(user)
                logger.info("user %s: every registration removed", user)
            return
        updates: list[tuple[str, tuple[object, ...], int]] = []
        for value in contacts:
            try:
                contact = parse_name_addr(value)
            except SipMessageError:
                raise RegisterError(Answer(400, "Bad Request (Contact)")) from None
            expires = _seconds(contact.params.get("expires"))
            if expires is None:
                expires = header if header is not None else self.default_expires
            if 0 < expires < self.min_expires:
                raise RegisterError(
                    Answer(423, "Interval Too Brief", (("Min-Expires", str(self.min_expires)),))
                )
            uri = str(contact.uri)
            if contact.uri.scheme not in ("sip", "sips"):
                raise RegisterError(Answer(400, f"Bad Request (Contact {show(uri)})"))
            expires = min(expires, self.max_expires)
            trunk = self._trunk_host(uri, _target(uri, source)) if expires else None
            if trunk is not None:
                logger.warning(
                    "user %s: REGISTER from %s refused: Contact %s is a trunk's (%s)",
                    user,
                    source,
                    show(uri),
                    show(trunk),
                )
                raise RegisterError(Answer(403, "Forbidden (Contact is a trunk's address)"))
            updates.append((uri, _uri_key(uri), expires))
        kept = list(existing)
        added: list[Binding] = []
        for uri, key, expires in updates:
            old = next((b for b in kept if _uri_key(b.contact) == key), None)
            if old is not None and old.call_id == call_id and cseq <= old.cseq:
                raise RegisterError(Answer(500, "Server Internal Error (CSeq out of order)"))
            if old is not None:
                kept.remove(old)
            if expires > 0:
                target = _target(uri, source)
                added.append(Binding(user, uri, call_id, cseq, now + expires, source, target))
                kept.append(added[-1])
        if len(added) > MAX_BINDINGS:
            raise RegisterError(Answer(403, f"Forbidden (more than {MAX_BINDINGS} Contacts)"))
        evicted = _evict(kept, added, source, len(kept) - MAX_BINDINGS)
        if not updates:
            return  # a query (§10.2.3): the 200 lists the bindings
        self._bindings[user] = kept
        if not kept:
            self._bindings.pop(user)
        self._changed.append(user)
        for binding in evicted:
            logger.info(
                "user %s: %s unregistered to make room (at most %d registrations)",
                user,
                binding.contact,
                MAX_BINDINGS,
            )
        for uri, _, expires in updates:
            if expires:
                logger.info("user %s: registered %s from %s for %d s", user, uri, source, expires)
            else:
                logger.info("user %s: %s unregistered", user, uri)

    def _trunk_host(self, contact: str, target: Target) -> str | None:
        """The host that makes ``contact`` (reached at ``target``) a trunk's, if one does."""
        try:
            host = parse_uri(contact).host
        except SipMessageError:
            host = ""
        for candidate in (host, target.host):
            if candidate and self.is_trunk(candidate.strip("[]")):
                return candidate
        return None


def _evict(kept: list[Binding], added: list[Binding], source: Target, excess: int) -> list[Binding]:
    """Remove ``excess`` bindings from ``kept``, none of ``added``: first those registered
    from ``source``'s address (the same phone, its port changed), then the soonest to
    expire. The ones removed."""
    if excess <= 0:
        return []
    fresh = {id(b) for b in added}
    others = [b for b in kept if id(b) not in fresh]
    others.sort(key=lambda b: (b.source.host != source.host, b.expires_at))
    for binding in others[:excess]:
        kept.remove(binding)
    return others[:excess]


def _seconds(value: str | None) -> int | None:
    """A delta-seconds value (§20.19: 1*DIGIT, ASCII digits only), or None when absent or
    not a number. (``"²".isdigit()`` is true, but ``int("²")`` raises.)"""
    if value is None:
        return None
    text = value.strip()
    if not text or not text.isascii() or not text.isdigit():
        return None
    digits = text.lstrip("0") or "0"
    # Past ten digits it is over the cap anyway (and int() refuses 4300 digits and more).
    return 2**32 - 1 if len(digits) > 10 else min(int(digits), 2**32 - 1)


def _uri_key(text: str) -> tuple[object, ...]:
    """What makes two Contact URIs the same binding (§19.1.4, the parts that matter)."""
    try:
        uri = parse_uri(text)
    except SipMessageError:
        return (text,)
    transport = (uri.params.get("transport") or "").lower()
    return (uri.scheme, uri.user, uri.host.lower(), uri.port, transport)


def _target(contact: str, source: Target) -> Target:
    """Where requests for a phone that registered ``contact`` from ``source`` go (see the
    module docstring: its connection, its Contact, or behind a NAT its source)."""
    if reliable(source.transport):
        return source
    try:
        target = target_of(parse_uri(contact))
    except (SipMessageError, ValueError):
        return source
    elsewhere = target.transport == "udp" and target.host != source.host
    if elsewhere and (_private(target.host) or not _is_address(target.host)):
        return source
    return target


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def host_key(host: str) -> str:
    """A host as compared (§19.1.4: without regard to case; an address in one spelling)."""
    text = host.strip().strip("[]").lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def _private(host: str) -> bool:
    """Whether ``host`` is an address a NAT hides (private, loopback, link-local, shared)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    shared = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598, carrier-grade NAT
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or (address.version == 4 and address in shared)
    )
