"""The machine's CPU stall figure (edge/cpupressure.py), as Linux's PSI file gives it."""

from __future__ import annotations

from pathlib import Path

from callhook.edge import cpupressure

SAMPLE = (
    "some avg10=1.55 avg60=11.81 avg300=37.33 total=16345844905\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


def test_the_some_lines_total_is_read_in_seconds() -> None:
    assert cpupressure.parse(SAMPLE) == 16345.844905
    assert cpupressure.parse("full avg10=0.00 total=7\n") is None
    assert cpupressure.parse("") is None


def test_a_kernel_without_the_file_counts_no_stall(tmp_path: Path) -> None:
    assert cpupressure.stalled_seconds(tmp_path / "absent") == 0.0
    (tmp_path / "cpu").write_text("garbage\n")
    assert cpupressure.stalled_seconds(tmp_path / "cpu") == 0.0
    (tmp_path / "cpu").write_text(SAMPLE)
    assert cpupressure.stalled_seconds(tmp_path / "cpu") == 16345.844905


def test_this_machine_gives_a_figure_that_only_grows() -> None:
    first = cpupressure.stalled_seconds()
    assert cpupressure.stalled_seconds() >= first >= 0.0
