"""Dialled numbers: which application a call to a number runs (``[apps.X] numbers``).

A provider or PBX puts the dialled number in the request-URI's user part (or
only in the To header), written the way it likes: ``+441234567890``,
``441234567890``, ``00441234567890``, ``01234 567890``. callhook compares
numbers in one canonical form (docs/configuration.md):

* visual separators (space, ``-``, ``.``, ``(``, ``)``) and URI parameters
  (``;phone-context=...``) are dropped; a leading ``00`` is the international
  prefix, written ``+``;
* a configured number and a dialled one match when their digits are equal
  (with or without ``+``), or when the dialled one is in national form — one
  leading ``0`` (a trunk prefix) and the rest — and the configured one is
  ``+``, a country code of 1 to 3 digits, and that rest.

Pure: no IO, no configuration file; :mod:`callhook.config.settings` builds the plan.
"""

from __future__ import annotations

import re

_SEPARATORS = re.compile(r"[\s\-.()]")


class BadNumber(ValueError):
    """A configured number that is not one."""


def canonical(number: str) -> str:
    """``number`` in the form callhook compares: ``+`` and digits, or digits (else ``""``)."""
    text = _SEPARATORS.sub("", number.split(";", 1)[0])
    if text.startswith("00"):
        text = "+" + text[2:]
    if not re.fullmatch(r"\+?\d+", text):
        return ""
    return text


def configured(number: str) -> str:
    """A number from the configuration in canonical form; :class:`BadNumber` if not one."""
    result = canonical(str(number))
    if len(result.lstrip("+")) < 2:
        raise BadNumber(f"{number!r} is not a telephone number (digits, optionally + first)")
    return result


def matches(dialled: str, number: str) -> bool:
    """Whether a dialled number (as it came in) is the configured ``number`` (canonical)."""
    called = canonical(dialled)
    if not called:
        return False
    digits, wanted = called.lstrip("+"), number.lstrip("+")
    if digits == wanted:
        return True
    national = called.startswith("0") and not called.startswith("00")
    if national and number.startswith("+") and len(digits) > 1:
        rest = digits[1:]
        return wanted.endswith(rest) and 1 <= len(wanted) - len(rest) <= 3
    return False


def app_for_number(plan: dict[str, str], *dialled: str) -> str | None:
    """The application of the first of ``dialled`` that a number of ``plan`` matches."""
    for candidate in dialled:
        if not candidate:
            continue
        for number, app in plan.items():
            if matches(candidate, number):
                return app
    return None
