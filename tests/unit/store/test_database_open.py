"""Processes that start together on one fresh data directory (``serve --workers``
starting its workers): each opens the state database (none is told "database is
locked"), and all agree on the installation secret."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
from pathlib import Path

from callhook.config.secret import data_secret
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


def _secret(
    path: str, start: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue[str | None]
) -> None:
    start.wait()
    out.put(data_secret(Path(path)))


def test_processes_making_the_installation_secret_together_agree(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    for round_ in range(20):
        data_dir = tmp_path / f"{round_}"
        start, out = context.Barrier(4), context.Queue()
        processes = [
            context.Process(target=_secret, args=(str(data_dir), start, out)) for _ in range(4)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(30)
        seen = {out.get(timeout=5) for _ in processes}
        assert seen == {(data_dir / "secret").read_text().strip()}, round_
