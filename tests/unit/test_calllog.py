"""The call log's line times (callhook/calllog.py ``wall_stamp``)."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from callhook.calllog import wall_stamp


def isoformat(t: float) -> str:
    """What the lines said before: datetime's ISO 8601 to the millisecond, in UTC."""
    stamp = datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@given(st.floats(min_value=1.6e9, max_value=4.1e9))
def test_a_line_time_is_datetimes_iso_8601_to_the_millisecond(t: float) -> None:
    assert wall_stamp(t) == isoformat(t)


def test_line_times_near_a_second_and_a_day_boundary() -> None:
    midnight = datetime.datetime(2026, 11, 28, tzinfo=datetime.UTC).timestamp()
    for t in (
        midnight - 0.0000004,  # rounds up to the next day, as datetime rounds it
        midnight - 0.0000006,
        midnight - 0.0005,
        midnight,
        midnight + 0.9994999,
        midnight + 0.9999996,
        1888848544.7819996,  # a float just under .782: datetime says .782
    ):
        assert wall_stamp(t) == isoformat(t), t
    assert wall_stamp(midnight - 0.0000004) == "2026-11-28T00:00:00.000Z"
    assert wall_stamp(midnight - 0.0005) == "2026-11-27T23:59:59.999Z"
