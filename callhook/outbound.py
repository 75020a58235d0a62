"""Which destinations callhook may call, and how many calls at once: toll-fraud limits. Pure.

A ``serve`` on the internet is probed by people who want it to place calls for
them (toll fraud: premium-rate and international numbers through the trunk the
operator pays for). So every outbound call — ``callhook dial``, ``POST
/api/calls``, the REST API's ``POST /api/v1/calls`` — is checked here before its
INVITE goes out (DESIGN.md §5: "outbound calls need an authenticated caller and
an allowed destination"):

* ``[outbound] allow`` lists what may be called. A pattern starting ``sip:`` or
  ``sips:`` is a shell-style glob over the whole destination URI, compared
  without regard to case (``"sip:*@192.168.1.*"``, ``"sip:alice@pbx.example.com"``).
  Any other pattern is a number prefix (``"+44"``, ``"+4420"``, ``"0800"``):
  a number destination matches when, in canonical form
  (:func:`callhook.numbers.canonical`), it starts with the prefix; a prefix
  without ``+`` also matches the digits of a ``+`` number. ``"*"`` allows
  every destination (an operator's explicit choice).
* With ``allow`` empty (the default) nothing may be called but the
  installation's own numbers: each trunk's ``caller_id`` and the ``[apps.X]
  numbers`` the trunks deliver (calling your own number through the provider
  is how a trunk is tested, and costs nothing to the operator but the call).
* ``max_calls_per_app`` bounds the outbound calls one application has at once.

A refusal names the rule it comes from, for the caller's error and the log.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from callhook import numbers

#: The default ``[outbound] max_calls_per_app``.
MAX_CALLS_PER_APP = 10


class PatternError(ValueError):
    """An ``[outbound] allow`` pattern that is neither a URI glob nor a number prefix."""


def check_pattern(pattern: str) -> str:
    """``pattern`` as it is matched (a URI glob lower-cased, a prefix canonical); or raises."""
    text = pattern.strip()
    if text == "*":
        return text
    if text.lower().startswith(("sip:", "sips:")):
        if len(text) < 5 or any(c.isspace() for c in text):
            raise PatternError(f"{pattern!r} is not a sip: URI pattern")
        return text.lower()
    prefix = numbers.canonical(text)
    if not prefix or prefix == "+":
        raise PatternError(
            f"{pattern!r} is neither a sip: URI pattern nor a number prefix (+ and digits)"
        )
    return prefix


class OutboundPolicy:
    """``[outbound]``: the allowed destinations and the per-application limit."""

    def __init__(
        self,
        allow: Sequence[str] = (),
        own_numbers: Iterable[str] = (),
        max_calls_per_app: int = MAX_CALLS_PER_APP,
    ) -> None:
        self.allow = tuple(check_pattern(p) for p in allow)
        self.own_numbers = tuple(n for n in own_numbers if numbers.canonical(n))
        self.max_calls_per_app = max_calls_per_app

    def refusal(self, destination: str) -> str | None:
        """Why ``destination`` (a ``sip:`` URI or a number) may not be called; None: it may."""
        if self.allows(destination):
            return None
        if not self.allow:
            return (
                f"refused by [outbound] allow: {destination} is not one of this "
                "installation's own numbers, and allow is empty (list the destinations "
                'callhook may call, e.g. allow = ["sip:*@192.168.1.*", "+44"])'
            )
        return f"refused by [outbound] allow: {destination} matches none of its patterns"

    def allows(self, destination: str) -> bool:
        """Whether ``destination`` is allowed (see the module docstring)."""
        text = destination.strip()
        if text.lower().startswith(("sip:", "sips:")):
            uri = text.lower()
            return any(
                p == "*" or (p.startswith(("sip:", "sips:")) and fnmatch.fnmatchcase(uri, p))
                for p in self.allow
            )
        number = numbers.canonical(text)
        if not number:
            return False
        if any(numbers.matches(text, own) for own in self.own_numbers):
            return True
        for p in self.allow:
            if p == "*":
                return True
            if p.startswith(("sip:", "sips:")):
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
