"""The import contracts (pyproject's ``[tool.importlinter]``, drawn in docs/architecture.md)
hold, and break when a module reaches up a layer, into the IO edge or round a circle."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    # In the copy's folder, so "callhook" is the copy (the working directory comes first).
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "callhook", tmp_path / "callhook", ignore=shutil.ignore_patterns("*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def _plant(tree: Path, module: str, line: str) -> None:
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_repository_keeps_every_contract(tree: Path) -> None:
    run = _lint(tree)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # the telephony service reaching the composition root
        ("callhook/telephony/leg.py", "import callhook.app", "only the command imports"),
        # the SIP core opening a socket
        ("callhook/sip/uas.py", "import socket", "sans-IO core"),
        # the media core using the HTTP client
        ("callhook/media/player.py", "import callhook.edge.pages", "sans-IO core"),
        # a circle inside a package
        ("callhook/calls/calllog.py", "import callhook.calls.runner", "No circle"),
    ],
)
def test_a_planted_violation_breaks_its_contract(
    tree: Path, module: str, line: str, broken: str
) -> None:
    _plant(tree, module, line)
    run = _lint(tree)
    assert run.returncode != 0, run.stdout
    # The contract's verdict is the first KEPT or BROKEN after its name in the summary.
    text = " ".join(run.stdout.split())
    verdict = re.search(re.escape(broken) + r".*?\b(KEPT|BROKEN)\b", text)
    assert verdict is not None and verdict.group(1) == "BROKEN", run.stdout
