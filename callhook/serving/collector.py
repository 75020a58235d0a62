"""When the cyclic garbage collector may stop ``serve``: rarely, and between calls when it can.

Theory of operation
-------------------
CPython's collector runs a full pass (generation 2) when its own counters say
so, whatever the process is doing. A full pass walks every object the
collector tracks and holds the interpreter for as long as that takes: 100-400
ms with a few hundred calls' objects (bench/RESULTS.md), and the media tick runs
on the same thread, so every call's audio stops for that long (an RTP gap, late
ticks). Yet calls free their objects by reference counting: a finished call
leaves nothing for the collector (``tests/unit/telephony/test_sip_service_faults.py``),
so a full pass finds next to nothing to free.

So ``serve`` turns the automatic full pass off (:func:`automatic_full_passes_off`:
a threshold for generation 2 it never reaches; generations 0 and 1 run as
before, they walk young objects only and take a few ms) and runs it itself when
:class:`FullCollections` says it is due: when no call is up and the last full
pass is at least :attr:`~FullCollections.idle_after` old, or, whatever the calls,
when it is :attr:`~FullCollections.max_interval` old (a safety net for cycles a
bug would leave). The policy is pure (it takes ``now`` and the number of calls);
``serving/serve.py`` asks it every :data:`CHECK_EVERY` seconds.

The young generations, between ticks
------------------------------------
Generations 0 and 1 are cheap only while they are small, and under load they are
not: CPython starts a generation-0 pass when allocations minus deallocations of
collector-tracked objects pass its threshold (700), and every call replaces objects
it keeps a while (timers; until 28 Nov the recent frames of its pre-roll, now a ring
in C that makes no object per packet) as fast as it makes them, so the count hardly
moves while the young generation fills with live objects.
At 200 calls of the load kit a pass found 4,000-25,000 young objects, all alive, and
took 2-25 ms (``gc.DEBUG_STATS``), generation 1 up to 50 ms: whenever an allocation
happened to trip it, often in the middle of the media tick, every call's audio
waited. So ``serve`` has the media tick run them itself at the end of each tick,
after its packets are out (:func:`young_pass`): a pass over 20 ms of survivors, a
generation-1 pass when the automatic one is one pass away: the longest 0.9-2.4 ms at
200 calls (5-8 ms at 400, where the core is saturated). Every object is examined as often as before
(once in each generation it passes through), in slices, at a time the tick chose.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
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


def young_pass(counts: tuple[int, int, int], thresholds: tuple[int, int, int]) -> int | None:
    """The generation to collect at the end of a media tick (see the module docstring),
    from ``gc.get_count()`` and ``gc.get_threshold()``; None when nothing was made.

    Generation 1 when the automatic one would come with the next pass of generation 0
    (so it never comes in the middle of a tick), else generation 0.
    """
    young, passes, _ = counts
    if young <= 0:
        return None
    return 1 if passes + 1 >= thresholds[1] else 0


def collect_young() -> None:
    """Collect the young generations now, as :func:`young_pass` says (``gc``'s own state)."""
    generation = young_pass(gc.get_count(), gc.get_threshold())
    if generation is not None:
        gc.collect(generation)


@contextlib.contextmanager
def frozen_imports() -> Iterator[None]:
    """Import with the collector off, then freeze what was imported (``gc.freeze``): the
    modules' many long-lived objects are not scanned again and again as they accumulate,
    nor by any later pass (the reason in full: ``callhook/__main__.py``)."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
