"""Which destinations callhook may call, and how many calls at once: toll-fraud limits. Pure.

A ``serve`` on the internet is probed by people who want it to place calls for
them (toll fraud: premium-rate and international numbers through the trunk the
operator pays for). So every outbound call — ``callhook dial``, ``POST
/api/calls``, the REST API's ``POST /api/v1/calls`` — is checked here before its
INVITE goes out: outbound calls need an authenticated caller and an allowed
destination (docs/security.md, "No toll fraud"):

* ``[outbound] allow`` lists what may be called. A pattern starting ``sip:`` or
  ``sips:`` is ``scheme:user@host[:port]`` with shell-style globs, compared part
  by part with the *parsed* destination, without regard to case: the user glob
  against its user part, the host glob label by label (a ``*`` never spans a
  dot, so ``"sip:*@192.168.1.*"`` does not match ``192.168.1.1.attacker.example``),
  the port glob (if any) against its port. A destination URI with ``maddr`` or
  URI headers is refused whatever the patterns (they would send the call, or
  shape it, elsewhere than its host says). Any other pattern is a number prefix
  (``"+44"``, ``"+4420"``, ``"0800"``): a number matches when, in canonical
  form (:func:`callhook.dialplan.numbers.canonical`), it starts with the prefix; a prefix
  without ``+`` also matches the digits of a ``+`` number. ``"*"`` allows every
  destination (an operator's explicit choice).
* **Through a trunk** the number the provider routes on is what counts: a
  ``sip:`` destination sent through a trunk is judged by its user part
  (percent-decoded), as a number when it has a digit (the provider routes
  ``sip:+1900...@anything`` to +1900...; one with digits that is not a plain
  number, ``*67+1900...``, ``1900...#`` or ``+44...;...``, is refused), else by the
  URI patterns. A URI pattern whose user part has no wildcard (``sip:ext-101@pbx``,
  ``sip:100@192.168.1.5``) allows that exact destination through a trunk too: the
  operator named it.
* With ``allow`` empty (the default) nothing may be called but the
  installation's own numbers, exactly (with or without ``+``): each trunk's
  ``caller_id`` and the ``[apps.X] numbers`` the trunks deliver (calling your
  own number through the provider is how a trunk is tested).
* ``max_calls_per_app`` bounds the outbound calls one application has at once,
  counted over the installation (:class:`OutboundCalls`): this process's, and
  those the other workers or nodes last reported.

A refusal names the rule it comes from, for the caller's error and the log.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from callhook.dialplan import numbers
from callhook.sip.message import SipMessageError, parse_uri

#: The default ``[outbound] max_calls_per_app``.
MAX_CALLS_PER_APP = 10

_PORT = re.compile(r"[0-9*?]+")


class PatternError(ValueError):
    """An ``[outbound] allow`` pattern that is neither a URI glob nor a number prefix."""


@dataclass(frozen=True)
class UriPattern:
    """A ``sip:``/``sips:`` pattern, in parts (globs, lower case)."""

    scheme: str
    user: str
    host: str
    port: str | None

    @property
    def names_user(self) -> bool:
        """Whether the user part is written out (no wildcard): one destination, named."""
        return not any(c in self.user for c in "*?[")

    def matches(self, scheme: str, user: str, host: str, port: int | None) -> bool:
        """Whether a parsed destination matches, part by part (see the module docstring)."""
        if scheme != self.scheme or not fnmatch.fnmatchcase(user.lower(), self.user):
            return False
        if not _host_matches(host.lower(), self.host):
            return False
        if self.port is None:
            return True
        default = 5061 if scheme == "sips" else 5060
        return fnmatch.fnmatchcase(str(port or default), self.port)


def _host_matches(host: str, glob: str) -> bool:
    """A host against a glob label by label, so that ``*`` never spans a dot."""
    if glob.startswith("[") or host.startswith("["):  # an IPv6 reference: no labels
        # (its brackets are not a glob's character class)
        both = glob.startswith("[") and host.startswith("[")
        return both and fnmatch.fnmatchcase(host[1:-1], glob[1:-1])
    labels, globs = host.split("."), glob.split(".")
    return len(labels) == len(globs) and all(
        fnmatch.fnmatchcase(label, g) for label, g in zip(labels, globs, strict=True)
    )


Pattern = UriPattern | str  # a URI pattern, a number prefix, or "*"


def check_pattern(pattern: str) -> Pattern:
    """``pattern`` as it is matched (a URI pattern in parts, a prefix canonical); or raises."""
    text = pattern.strip()
    if text == "*":
        return text
    scheme, colon, rest = text.partition(":")
    if colon and scheme.lower() in ("sip", "sips"):
        return _uri_pattern(pattern, scheme.lower(), rest.lower())
    prefix = numbers.canonical(text)
    if not prefix or prefix == "+":
        raise PatternError(
            f"{pattern!r} is neither a sip: URI pattern nor a number prefix (+ and digits)"
        )
    return prefix


def _uri_pattern(pattern: str, scheme: str, rest: str) -> UriPattern:
    bad = PatternError(
        f"{pattern!r} is not a sip: URI pattern (sip:user@host or sip:user@host:port, "
        "with * and ? as wildcards; no parameters)"
    )
    if not rest or any(c.isspace() or c in ';?&<>"' for c in rest.replace("?", "")):
        raise bad
    user, at, hostport = rest.rpartition("@")
    if not at:
        user = "*"  # sip:host: any user at that host
    if not hostport or "@" in user:
        raise bad
    port: str | None = None
    if hostport.startswith("["):
        host, _, after = hostport.partition("]")
        host += "]"
        if after:
            if not after.startswith(":") or not _PORT.fullmatch(after[1:]):
                raise bad
            port = after[1:]
    else:
        host, colon, after = hostport.partition(":")
        if colon:
            if not _PORT.fullmatch(after):
                raise bad
            port = after
    if not host or host in ("[]",):
        raise bad
    return UriPattern(scheme, user, host, port)


class OutboundPolicy:
    """``[outbound]``: the allowed destinations and the per-application limit."""

    def __init__(
        self,
        allow: Sequence[str] = (),
        own_numbers: Iterable[str] = (),
        max_calls_per_app: int = MAX_CALLS_PER_APP,
    ) -> None:
        self.allow = tuple(check_pattern(p) for p in allow)
        self.own_numbers = tuple(numbers.canonical(n) for n in own_numbers if numbers.canonical(n))
        self.max_calls_per_app = max_calls_per_app

    def refusal(self, destination: str, trunk: str | None = None) -> str | None:
        """Why ``destination`` (a ``sip:`` URI or a number; through ``trunk`` if named) may
        not be called; None: it may."""
        text = destination.strip()
        if text.lower().startswith(("sip:", "sips:")):
            try:
                uri = parse_uri(text)
            except (SipMessageError, ValueError):
                return f"refused by [outbound] allow: {destination} is not a valid SIP URI"
            if uri.headers or "maddr" in uri.params:
                return (
                    f"refused by [outbound] allow: {destination} has maddr or URI headers, "
                    "which callhook does not call"
                )
            user = uri.user or ""
            host = uri.host  # an IPv6 reference keeps its brackets
            patterns = [
                p
                for p in self.allow
                if p == "*"
                or (isinstance(p, UriPattern) and p.matches(uri.scheme, user, host, uri.port))
            ]
            dialled = unquote(user)  # (a provider reads %2B as +)
            if trunk is not None and any(c.isdigit() for c in dialled):
                # What the provider routes on: a number, judged as one, unless a pattern
                # names this very user part. A user part with digits that is not a plain
                # number (*67+1900..., ++1900..., 1900...#, +44...;1900...) is refused: a
                # provider may strip what is not a digit and route the rest.
                if any(isinstance(p, UriPattern) and p.names_user for p in patterns):
                    allowed = True
                elif not numbers.canonical(dialled) or ";" in dialled:
                    return (
                        f"refused by [outbound] allow: through a trunk, the user part of "
                        f"{destination} is dialled, and it is not a telephone number "
                        "(+ and digits)"
                    )
                else:
                    allowed = self._number_allowed(dialled)
            else:
                allowed = bool(patterns)
        else:
            allowed = self._number_allowed(text)
        if allowed:
            return None
        if not self.allow:
            return (
                f"refused by [outbound] allow: {destination} is not one of this "
                "installation's own numbers, and allow is empty (list the destinations "
                'callhook may call, e.g. allow = ["sip:*@192.168.1.*", "+44"])'
            )
        return f"refused by [outbound] allow: {destination} matches none of its patterns"

    def allows(self, destination: str, trunk: str | None = None) -> bool:
        """Whether ``destination`` is allowed (see the module docstring)."""
        return self.refusal(destination, trunk) is None

    def _number_allowed(self, text: str) -> bool:
        number = numbers.canonical(text)
        if not number:
            return False
        if any(number.lstrip("+") == own.lstrip("+") for own in self.own_numbers):
            return True
        for p in self.allow:
            if p == "*":
                return True
            if isinstance(p, UriPattern):
                continue
            if number.startswith(p) or (not p.startswith("+") and number.lstrip("+").startswith(p)):
                return True
        return False

    def over_limit(self, app: str, calls_now: int) -> str | None:
        """Why application ``app``, with ``calls_now`` outbound calls, may not place another."""
        if calls_now < self.max_calls_per_app:
            return None
        return (
            f"refused by [outbound] max_calls_per_app: application {app!r} has "
            f"{calls_now} outbound call(s) already (the limit is {self.max_calls_per_app})"
        )


#: How long another process's report of its outbound calls holds: it reports again
#: every third of this while it has any, so a process that died stops counting.
REPORT_HOLDS = 30.0


class OutboundCalls:
    """The outbound calls each application has at once: this process's own, and the
    last report of each other process (worker or node) that places calls for the same
    installation (``cluster/outboundshare.py`` carries the reports).

    Each change of this process's counts is given to :attr:`on_change` (to tell the
    others); a report older than :data:`REPORT_HOLDS` seconds no longer counts.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.own: dict[str, int] = {}
        self._others: dict[str, tuple[float, dict[str, int]]] = {}
        # Each process's last report: the run it came from, and its number in that run.
        self._latest: dict[str, tuple[str, int]] = {}
        #: Called with :attr:`own` after each change (None: nobody to tell).
        self.on_change: Callable[[dict[str, int]], None] | None = None

    def count(self, app: str) -> int:
        """``app``'s outbound calls now, here and on the others."""
        now = self.clock()
        theirs = sum(
            counts.get(app, 0)
            for heard, counts in self._others.values()
            if now - heard < REPORT_HOLDS
        )
        return self.own.get(app, 0) + theirs

    def add(self, app: str) -> None:
        """One more outbound call of ``app`` here."""
        self.own[app] = self.own.get(app, 0) + 1
        self._changed()

    def remove(self, app: str) -> None:
        """An outbound call of ``app`` here ended (or was never placed)."""
        left = self.own.get(app, 0) - 1
        if left > 0:
            self.own[app] = left
        else:
            self.own.pop(app, None)
        self._changed()

    def heard(self, process: str, counts: dict[str, int], run: str, number: int) -> None:
        """``process`` has ``counts`` outbound calls now: its whole report, the
        ``number``-th of its ``run`` (a worker started again keeps its name, not its
        numbers). A report that arrives after a later one of the same run is ignored."""
        last_run, last = self._latest.get(process, ("", -1))
        if run == last_run and number <= last:
            return
        now = self.clock()
        for gone in [p for p, (heard, _) in self._others.items() if now - heard >= REPORT_HOLDS]:
            del self._others[gone]  # (and what is known of it: names come and go)
            self._latest.pop(gone, None)
        self._latest[process] = (run, number)
        if counts:
            self._others[process] = (now, dict(counts))
        else:
            self._others.pop(process, None)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(dict(self.own))
