"""The call log's line times (callhook/calls/calllog.py ``wall_stamp``)."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callhook.calls.calllog import CallLog, wall_stamp
from callhook.devtools.harness import VirtualClock
from callhook.store.appender import APPENDER, Appender

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def isoformat(ns: int) -> str:
    """What the lines said before: ``datetime.now(UTC)`` (the clock rounded down to the
    microsecond) in ISO 8601 to the millisecond, with Z."""
    now = EPOCH + datetime.timedelta(microseconds=ns // 1000)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@given(st.integers(min_value=1_600_000_000 * 10**9, max_value=4_100_000_000 * 10**9))
def test_a_line_time_is_datetimes_iso_8601_to_the_millisecond(ns: int) -> None:
    assert wall_stamp(ns) == isoformat(ns)


def test_line_times_are_rounded_down_at_a_second_and_a_day_boundary() -> None:
    midnight = int(datetime.datetime(2026, 11, 28, tzinfo=datetime.UTC).timestamp()) * 10**9
    for ns in (midnight - 1, midnight - 400, midnight - 999_999, midnight, midnight + 999_999):
        assert wall_stamp(ns) == isoformat(ns), ns
    assert wall_stamp(midnight - 1) == "2026-11-27T23:59:59.999Z"
    assert wall_stamp(midnight) == "2026-11-28T00:00:00.000Z"
    assert wall_stamp(midnight + 999_999) == "2026-11-28T00:00:00.000Z"
    assert wall_stamp(midnight + 1_000_000) == "2026-11-28T00:00:00.001Z"
    # The second before again (the cached text is the other second's now).
    assert wall_stamp(midnight - 1_000_001) == "2026-11-27T23:59:59.998Z"


# --- the file: written off the caller's thread, in order, complete at close ---------------


def test_lines_are_written_by_the_appenders_thread_in_order_and_complete_at_close(
    tmp_path: Path,
) -> None:
    """A write the disk holds up does not hold up ``write`` (the event loop): the thread
    that writes files waits for it; the lines reach the file in order, all of them once
    ``close`` returns."""
    log = CallLog("i1", VirtualClock(), tmp_path / "logs" / "i1.log")
    assert log._file is not None
    disk = threading.Event()
    writer = log._file.write
    writers: set[int] = set()

    def slow(data: bytes) -> int | None:
        writers.add(threading.get_ident())
        disk.wait(5.0)  # the disk, busy
        return writer(data)

    log._file.write = slow  # type: ignore[method-assign,assignment]
    started = time.monotonic()
    for n in range(50):
        log.write("action_start", f"line {n}")
    assert time.monotonic() - started < 1.0  # (the first write alone would take 5 s)
    assert len(log.lines) == 50  # the listeners and the in-memory lines have them at once
    disk.set()
    log.close()
    written = (tmp_path / "logs" / "i1.log").read_text().splitlines()
    assert [line.rsplit(" ", 2)[1:] for line in written] == [["line", str(n)] for n in range(50)]
    assert writers == {APPENDER._thread.ident if APPENDER._thread else -1}
    assert threading.get_ident() not in writers


def test_a_job_that_raises_costs_that_job_only(caplog: pytest.LogCaptureFixture) -> None:
    appender = Appender()
    done: list[int] = []
    with caplog.at_level(logging.ERROR, "callhook.store"):
        appender.submit(lambda: 1 / 0)
        appender.submit(lambda: done.append(1))
        appender.wait()
    assert done == [1] and appender.faults == 1
    assert sum("writing to a file failed" in r.getMessage() for r in caplog.records) == 1


def test_without_a_thread_the_jobs_run_on_the_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    appender = Appender()

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    ran: list[int] = []
    appender.submit(lambda: ran.append(threading.get_ident()))
    assert ran == [threading.get_ident()] and not appender.usable
    appender.wait()  # (nothing to wait for)
