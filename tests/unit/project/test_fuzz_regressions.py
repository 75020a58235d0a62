"""Every crash a fuzz campaign found, kept as a regression test (issue 14, item 5).

``tests/data/fuzz/<target>/<what>.bin`` is an input that made the check of that
``bench/fuzz.py`` target fail (an exception other than the module's own error
type, or a broken round trip) before its fix; it must pass now. The files are
also seeds of the campaign's corpus. The tests that say what each fix means are
next to the other tests of its module (test_fuzz_<area>.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fuzz import TARGETS, check_of

REGRESSIONS = Path(__file__).resolve().parents[2] / "data" / "fuzz"
INPUTS = sorted(REGRESSIONS.glob("*/*.bin"))


def test_each_input_names_a_target() -> None:
    assert INPUTS, "the crashes found so far are kept here"
    assert {p.parent.name for p in INPUTS} <= set(TARGETS)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_regression(path: Path) -> None:
    check_of(path.parent.name)(path.read_bytes())
