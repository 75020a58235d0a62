"""When the cyclic garbage collector may stop ``serve``: rarely, and between calls when it can.

Theory of operation
-------------------
CPython's collector runs a full pass (generation 2) when its own counters say
so, whatever the process is doing. A full pass walks every object the
collector tracks and holds the interpreter for as long as that takes: 100-400
ms with a few hundred calls' objects (docs/scaling.md), and the media tick runs
on the same thread, so every call's audio stops for that long (an RTP gap, late
ticks). Yet calls free their objects by reference counting: a finished call
leaves nothing for the collector (``tests/unit/test_sip_service_faults.py``),
so a full pass finds next to nothing to free.

So ``serve`` turns the automatic full pass off (:func:`automatic_full_passes_off`:
a threshold for generation 2 it never reaches; generations 0 and 1 run as
before, they walk young objects only and take a few ms) and runs it itself when
:class:`FullCollections` says it is due: when no call is up and the last full
pass is at least :attr:`~FullCollections.idle_after` old, or, whatever the calls,
when it is :attr:`~FullCollections.max_interval` old (a safety net for cycles a
bug would leave). The policy is pure (it takes ``now`` and the number of calls);
``adapters/server.py`` asks it every :data:`CHECK_EVERY` seconds.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

#: A generation-2 threshold the collector's counter never reaches (a C int).
NEVER = 2**31 - 1
#: How often ``serve`` asks whether a full pass is due (seconds).
CHECK_EVERY = 10.0


def automatic_full_passes_off() -> None:
    """Leave generations 0 and 1 to the collector; generation 2 only by hand."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, NEVER)


@dataclass
class FullCollections:
    """When a full collection is due (see the module docstring)."""

    #: When the last full pass ran (the clock of ``now``).
    last: float
    #: With no call up, a full pass at most this often (seconds).
    idle_after: float = 60.0
    #: Whatever the calls, a full pass at least this often (seconds).
    max_interval: float = 900.0

    def due(self, now: float, active_calls: int) -> bool:
        """Whether to run a full pass now, with ``active_calls`` calls up."""
        age = now - self.last
        return age >= self.max_interval or (active_calls == 0 and age >= self.idle_after)

    def ran(self, now: float) -> None:
        """A full pass ran at ``now``."""
        self.last = now
