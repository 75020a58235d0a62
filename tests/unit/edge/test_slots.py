"""The media thread's slots read in order (callhook/edge/slots.py): every slot worked, a
backlog worked off at once, and a slot that woke a call the last one of its turn, so the
call's runner acts before more of the media is worked. The plane is a stand-in that
hands out finished slots (the real one is tested in test_plane*.py); the loop is real."""

from __future__ import annotations

import asyncio
from typing import Any

from callhook.edge.slots import SlotReader


class Slots:
    """A plane whose thread has finished the slots in ``ready``."""

    def __init__(self, count: int) -> None:
        self.ready: list[tuple[int, float, float, int, list[Any]]] = [
            (n, n * 0.02, 0.0, 0, []) for n in range(count)
        ]

    def next_slot(self) -> tuple[int, float, float, int, list[Any]] | None:
        return self.ready.pop(0) if self.ready else None

    def wake(self) -> int:
        return 0


async def test_a_backlog_is_worked_in_order_and_a_woken_call_acts_before_the_next_slot() -> None:
    loop = asyncio.get_running_loop()
    order: list[str] = []

    def work(slot: int, when: float, received: Any) -> bool:
        order.append(f"slot {slot}")
        if slot == 3:  # this slot woke a call: its runner is ready to run
            loop.call_soon(order.append, "runner")
            return True
        return False

    reader = SlotReader(Slots(8), loop, work, 0.02)  # type: ignore[arg-type]
    reader.read()
    assert order == ["slot 0", "slot 1", "slot 2", "slot 3"]  # no further this turn
    for _ in range(3):
        await asyncio.sleep(0)
    assert order == [f"slot {n}" for n in range(4)] + ["runner"] + [
        f"slot {n}" for n in range(4, 8)
    ]


async def test_slots_that_wake_nobody_are_worked_in_one_turn() -> None:
    worked: list[int] = []

    def work(slot: int, when: float, received: Any) -> bool:
        worked.append(slot)
        return False

    reader = SlotReader(Slots(30), asyncio.get_running_loop(), work, 0.02)  # type: ignore[arg-type]
    reader.read()
    assert worked == list(range(30))
