"""A blocking iterator's items taken on a thread pool, for the event loop: each ``next`` runs
on ``executor`` and the loop awaits it (a voice that hands a sentence over in pieces is
played piece by piece without blocking the loop that times every call's audio)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Executor
from typing import TypeVar

T = TypeVar("T")
_END = object()


async def iterate(executor: Executor, items: Iterator[T]) -> AsyncIterator[T]:
    """``items`` one by one, each taken on ``executor``; its exceptions are raised here."""
    loop = asyncio.get_running_loop()
    while True:
        item = await loop.run_in_executor(executor, next, items, _END)
        if item is _END:
            return
        yield item  # type: ignore[misc]
