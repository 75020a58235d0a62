"""A worker learns that its supervisor has gone from its standard output: the reading end
of that pipe closed (by the kernel, when the supervisor ends however it ends)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from callhook.serving.supervised import when_unread


async def test_the_reading_end_closed_is_told_once() -> None:
    await reading_end_closed()


def test_the_reading_end_closed_is_told_once_on_uvloop() -> None:
    """(serve's loop, where it is installed: libuv reports a poll's error its own way.)"""
    uvloop = pytest.importorskip("uvloop")
    uvloop.run(reading_end_closed())


async def reading_end_closed() -> None:
    read_end, write_end = os.pipe()
    told: list[str] = []
    try:
        assert when_unread(write_end, lambda: told.append("gone"))
        os.write(write_end, b"a line nobody reads yet\n")
        await asyncio.sleep(0.05)
        assert told == []  # (a reader there: nothing to tell, the pipe full or not)
        os.close(read_end)
        async with asyncio.timeout(5):
            while not told:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert told == ["gone"]  # once: not again at every turn of the loop
    finally:
        os.close(write_end)


async def test_what_is_not_a_pipe_is_not_watched(tmp_path: Path) -> None:
    with (tmp_path / "out").open("wb") as f:
        assert not when_unread(f.fileno(), lambda: None)
    assert not when_unread(10_000, lambda: None)  # (not open at all)
