"""How long the machine's tasks have waited for a CPU, in all: Linux's pressure stall
information (``/proc/pressure/cpu``, the ``some`` line's ``total``: microseconds during
which at least one runnable task had no CPU; kernel 4.20 and later).

The speech recogniser's supervisor (:mod:`callhook.speech.supervisor`) adds the growth
of this figure to a decode's deadline, so that a decode starved by an overloaded
machine is not taken for a hung engine.
"""

from __future__ import annotations

from pathlib import Path

PATH = Path("/proc/pressure/cpu")


def parse(text: str) -> float | None:
    """The ``some`` line's total, in seconds (None: not in ``text``)."""
    for line in text.splitlines():
        kind, _, fields = line.partition(" ")
        if kind != "some":
            continue
        for field in fields.split():
            name, _, value = field.partition("=")
            if name == "total" and value.isdigit():
                return int(value) / 1e6
    return None


def stalled_seconds(path: Path = PATH) -> float:
    """The machine's seconds of waiting for a CPU so far; 0.0 where the kernel does not
    say (no PSI, or a container that hides it): no stall is then counted."""
    try:
        found = parse(path.read_text())
    except OSError:
        return 0.0
    return found if found is not None else 0.0
