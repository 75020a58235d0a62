"""The call log's line times (callhook/calls/calllog.py ``wall_stamp``)."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from callhook.calls.calllog import CallLog, wall_stamp
from callhook.devtools.harness import VirtualClock

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


def test_the_lines_of_what_an_action_does_on_an_event_are_stamped_at_the_events_time() -> None:
    """The runner may reach an event late (the loop behind the wire, working other calls'
    media): the lines of what the action does on it say when it happened; the others, the
    call's media time when they are written."""
    clock = VirtualClock(100.0)
    log = CallLog("i", clock)
    clock.advance_to(105.5)
    with log.acting(104.25):
        log.write("digit", "1")
        log.write("timers", f"inter-digit {log.since(104.25):.3f}..{log.since(109.25):.3f}")
    log.write("page_request", "POST /next")
    assert [line.split()[1:3] for line in log.lines] == [
        ["+4.250", "digit"],
        ["+4.250", "timers"],
        ["+5.500", "page_request"],
    ]
    assert log.lines[1].endswith("inter-digit 4.250..9.250")
