"""The media plane's tests share one plane, stepped on the virtual clock from T0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from callhook.edge.plane import Plane, new_plane

#: The virtual clock's origin for the plane's slots (slot n is at T0 + n x 20 ms).
T0 = 1000.0


@pytest.fixture
def plane() -> Iterator[Plane]:
    made = new_plane(6)
    assert made is not None
    made.set_origin(T0)
    yield made
    made.close()
