"""prometheus-client's sample files as callhook makes them: every mapped page has its
block before it is written (a page without one, on a full disk, is SIGBUS), and a series
with no room is counted in memory, with one log line. The refusal is made here by a
``posix_fallocate`` that says ENOSPC; the real full disk is the e2e test of faults."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
from prometheus_client import values

from callhook.monitoring import samplefiles
from callhook.monitoring.samplefiles import SampleFile, read


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def key(n: int) -> str:
    return f'["callhook_calls_ended_total", "callhook_calls_ended_total", {{"n": "{n:04}"}}, ""]'


class Clock:
    """The retries' virtual clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    monkeypatch.setattr(samplefiles, "_holding", set())
    made = Clock()
    monkeypatch.setattr(samplefiles, "_clock", made)
    return made


def test_every_page_of_a_file_has_its_block_as_it_is_made_and_grown(tmp_path: Path) -> None:
    path = tmp_path / "counter_1.db"
    made = SampleFile(str(path))
    try:
        assert allocated(path) >= path.stat().st_size == 1 << 16
        for n in range(2000):  # (about 100 bytes each: grown twice)
            made.write_value(key(n), float(n), 0.0)
        assert path.stat().st_size == 1 << 18
        assert allocated(path) >= path.stat().st_size
        assert made.read_value(key(1999)) == (1999.0, 0.0)
    finally:
        made.close()
    assert len(read(str(path))) == 2000


#: The real allocation: room, as the tests' disk has.
ROOM = os.posix_fallocate


def refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)


def test_a_series_with_no_room_to_grow_into_is_counted_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "counter_1.db"
    made = SampleFile(str(path))
    try:
        for n in range(2000):
            if n == 300:
                refuse(monkeypatch)  # (the disk fills before the file must grow)
            made.write_value(key(n), float(n), 0.0)
        assert path.stat().st_size == 1 << 16  # not grown: no room
        # Every series counted all the same, those in the file and those in memory.
        assert all(made.read_value(key(n)) == (float(n), 0.0) for n in range(2000))
        made.write_value(key(0), 4.0, 0.0)
        made.write_value(key(1999), 5.0, 0.0)
    finally:
        made.close()
    # What /metrics reads: the series that had room (the file's first 64 KiB of them).
    found = read(str(path))
    assert found[key(0)] == 4.0 and 300 < len(found) < 1000 and key(1999) not in found
    (line,) = [r for r in caplog.records if "no room for samples" in r.getMessage()]
    assert line.levelno == logging.ERROR and "No space left on device" in line.getMessage()
    assert "room for samples in" not in caplog.text.replace("no room for samples in", "")


def test_a_file_that_cannot_be_made_leaves_nothing_and_counts_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    refuse(monkeypatch)
    path = tmp_path / "gauge_livesum_1.db"
    made = SampleFile(str(path))
    made.write_value(key(1), 7.0, 0.0)
    assert made.read_value(key(1)) == (7.0, 0.0)
    assert made.read_value(key(2)) == (0.0, 0.0)
    made.close()
    # (An empty file would break every /metrics: the collector reads each one's header.)
    assert not path.exists() and list(tmp_path.iterdir()) == []
    assert len([r for r in caplog.records if "no room for samples" in r.getMessage()]) == 1


def test_prometheus_client_s_multiprocess_values_are_kept_in_sample_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import callhook.monitoring.prometheus  # noqa: F401  (installs them)

    assert values.MmapedDict is SampleFile  # type: ignore[attr-defined]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    made = values.MultiProcessValue(lambda: 4242)  # type: ignore[no-untyped-call]
    value = made("counter", "x_total", "x_total", [], [], "")
    value.inc(3.0)
    path = tmp_path / "counter_4242.db"
    assert allocated(path) >= path.stat().st_size > 0
    assert list(read(str(path)).values()) == [3.0]


def test_series_kept_in_memory_go_into_the_file_once_there_is_room_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    path = tmp_path / "counter_1.db"
    made = SampleFile(str(path))
    try:
        for n in range(300):
            made.write_value(key(n), float(n), 0.0)
        refuse(monkeypatch)
        for n in range(300, 2000):  # (the last ones in memory: the file could not grow)
            made.write_value(key(n), float(n), 0.0)
        monkeypatch.setattr(os, "posix_fallocate", ROOM)
        clock.now += samplefiles.RETRY_SECONDS - 0.1
        made.write_value(key(1999), 1999.5, 0.0)  # not looked for yet
        assert key(1999) not in read(str(path))
        clock.now += 0.1
        made.write_value(key(1999), 2000.0, 0.0)  # looked for, found: every series moved
        found = read(str(path))
        assert len(found) == 2000 and found[key(1999)] == 2000.0 and found[key(1500)] == 1500.0
        assert allocated(path) >= path.stat().st_size
        made.write_value(key(1500), 1.0, 0.0)  # (in the file from now on)
        assert read(str(path))[key(1500)] == 1.0
    finally:
        made.close()
    said = [r for r in caplog.records if "room for samples" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.ERROR, logging.WARNING]
    assert "again" in said[1].getMessage()


def test_a_series_kept_in_memory_and_never_counted_again_goes_into_the_file_with_the_next_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    """A rare series (one call cause, counted once) goes back with its file's next count
    of any series: it need not wait to be counted itself."""
    path = tmp_path / "counter_1.db"
    made = SampleFile(str(path))
    try:
        for n in range(300):
            made.write_value(key(n), float(n), 0.0)
        refuse(monkeypatch)
        for n in range(300, 2000):
            made.write_value(key(n), float(n), 0.0)
        assert key(1999) not in read(str(path))
        monkeypatch.setattr(os, "posix_fallocate", ROOM)
        clock.now += samplefiles.RETRY_SECONDS
        made.write_value(key(0), 1.0, 0.0)  # a series that always had room
        found = read(str(path))
        assert len(found) == 2000 and found[key(1999)] == 1999.0 and found[key(0)] == 1.0
    finally:
        made.close()


def test_a_file_not_made_for_want_of_room_is_made_once_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    path = tmp_path / "counter_1.db"
    refuse(monkeypatch)
    made = SampleFile(str(path))
    made.write_value(key(1), 7.0, 0.0)
    clock.now += samplefiles.RETRY_SECONDS
    made.write_value(key(1), 8.0, 0.0)  # looked for: still none, no file, nothing said again
    made.write_value(key(2), 9.0, 0.0)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(os, "posix_fallocate", ROOM)
    clock.now += samplefiles.RETRY_SECONDS
    made.read_value(key(2))
    made.close()
    assert read(str(path)) == {key(1): 8.0, key(2): 9.0}
    assert [p.name for p in tmp_path.iterdir()] == ["counter_1.db"]  # (no .new left)
    said = [r.levelno for r in caplog.records if "room for samples" in r.getMessage()]
    assert said == [logging.ERROR, logging.WARNING]


def test_the_log_says_when_the_first_file_keeps_series_in_memory_and_when_the_last_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    """A worker has several sample files (counters, gauges, histograms): one line when the
    first has no room, one when none keeps series in memory any more."""
    refuse(monkeypatch)
    counters = SampleFile(str(tmp_path / "counter_1.db"))
    histograms = SampleFile(str(tmp_path / "histogram_1.db"))
    counters.write_value(key(1), 1.0, 0.0)
    histograms.write_value(key(2), 2.0, 0.0)
    monkeypatch.setattr(os, "posix_fallocate", ROOM)
    clock.now += samplefiles.RETRY_SECONDS
    counters.write_value(key(1), 3.0, 0.0)  # the counters' file is made: not the last
    said = [r.levelno for r in caplog.records if "room for samples" in r.getMessage()]
    assert said == [logging.ERROR]
    histograms.write_value(key(2), 4.0, 0.0)  # the last: said
    refuse(monkeypatch)  # full again: said again, once, however many files grow
    for n in range(3000, 5000):
        counters.write_value(key(n), 6.0, 0.0)
        histograms.write_value(key(n), 6.0, 0.0)
    counters.close()
    histograms.close()
    said = [r.levelno for r in caplog.records if "room for samples" in r.getMessage()]
    assert said == [logging.ERROR, logging.WARNING, logging.ERROR]
    assert read(str(tmp_path / "counter_1.db"))[key(1)] == 3.0
    assert read(str(tmp_path / "histogram_1.db"))[key(2)] == 4.0


def test_a_file_that_cannot_be_mapped_when_room_comes_stays_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    """Room, but no descriptor or memory to map the file with: the series stay in memory,
    nothing is raised into the code that counted, and it is tried again later."""
    import mmap

    refuse(monkeypatch)
    made = SampleFile(str(tmp_path / "counter_1.db"))
    made.write_value(key(1), 1.0, 0.0)
    monkeypatch.setattr(os, "posix_fallocate", ROOM)
    mapping = mmap.mmap

    def no_memory(*args: object, **kwargs: object) -> mmap.mmap:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", no_memory)
    clock.now += samplefiles.RETRY_SECONDS
    made.write_value(key(1), 2.0, 0.0)
    assert made.read_value(key(1)) == (2.0, 0.0)
    monkeypatch.setattr(mmap, "mmap", mapping)  # the mapping works again
    clock.now += samplefiles.RETRY_SECONDS
    made.write_value(key(1), 3.0, 0.0)
    made.close()
    assert read(str(tmp_path / "counter_1.db")) == {key(1): 3.0}
