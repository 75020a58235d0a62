"""Processes that open one fresh state database at the same moment (``serve --workers``
starting its workers) all get it: none is told "database is locked"."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
from pathlib import Path

from callhook.store.database import Database


def _open(
    path: str, start: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue[str | None]
) -> None:
    start.wait()  # all at once
    try:
        Database(Path(path)).close()
        out.put(None)
    except Exception as exc:
        out.put(repr(exc))


def test_processes_opening_a_new_database_together_all_get_it(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    errors = []
    for round_ in range(20):
        path = tmp_path / f"{round_}" / "state.sqlite3"
        start, out = context.Barrier(4), context.Queue()
        processes = [context.Process(target=_open, args=(str(path), start, out)) for _ in range(4)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(30)
        errors += [e for e in (out.get(timeout=5) for _ in processes) if e is not None]
    assert errors == []
