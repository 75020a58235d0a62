"""The rings between the media plane's thread and Python: the native ring (``_ring.c``) does
what the Python reference does on the same pushes and pops, and keeps every record, in
order, when a native thread pushes without the GIL while Python pops."""

from __future__ import annotations

import random
import struct

import pytest

from callhook.media.ring import PythonRing, Ring, new_ring

_ring = pytest.importorskip("callhook.media._ring")  # (optional: built where cc is)


def rings(capacity: int, record_size: int) -> list[Ring]:
    return [PythonRing(capacity, record_size), _ring.Ring(capacity, record_size)]


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_full_ring_refuses_and_counts_an_empty_one_returns_none(kind: str) -> None:
    ring = rings(3, 4)[kind == "native"]
    assert (ring.capacity, ring.record_size, len(ring), ring.dropped) == (4, 4, 0, 0)
    assert ring.pop() is None
    assert [ring.push(bytes([i]) * 4) for i in range(6)] == [True] * 4 + [False] * 2
    assert (len(ring), ring.dropped) == (4, 2)
    assert [ring.pop() for _ in range(5)] == [bytes([i]) * 4 for i in range(4)] + [None]
    with pytest.raises(ValueError):
        ring.push(b"12345")  # not a record's size
    with pytest.raises(ValueError):
        (PythonRing if kind == "python" else _ring.Ring)(0, 4)


def test_the_native_ring_does_what_the_reference_does_on_the_same_operations() -> None:
    reference, native = rings(8, 3)
    chance = random.Random(7)
    for step in range(20000):
        if chance.random() < 0.55:
            record = step.to_bytes(3, "little")
            assert native.push(record) == reference.push(record)
        else:
            assert native.pop() == reference.pop()
        assert (len(native), native.dropped) == (len(reference), reference.dropped)
    assert reference.dropped > 0  # the walk did fill the ring


def test_a_native_thread_pushes_while_python_pops_and_nothing_is_lost_or_reordered() -> None:
    ring = _ring.Ring(64, 16)
    count = 200_000
    producer = _ring.produce_in_thread(ring, count)
    numbers: list[int] = []
    while len(numbers) < count:
        record = ring.pop()
        if record is not None:
            numbers.append(struct.unpack_from("=Q", record)[0])
    pushed, full = producer.join()
    assert pushed == count and numbers == list(range(count))
    assert (len(ring), ring.dropped) == (0, 0)  # a full ring made the thread retry, not drop
    del full  # (how often it had to: this machine's scheduling, not the ring's contract)


def test_one_producer_at_a_time() -> None:
    ring = _ring.Ring(4, 8)
    producer = _ring.produce_in_thread(ring, 2)
    with pytest.raises(RuntimeError):
        _ring.produce_in_thread(ring, 1)
    producer.join()
    assert [ring.pop() is not None for _ in range(3)] == [True, True, False]


def test_new_ring_is_the_native_one_here() -> None:
    assert isinstance(new_ring(16, 8), _ring.Ring)
