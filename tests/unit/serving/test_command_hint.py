"""The commands serve prints work as printed: ``callhook`` when the shell finds this one by
that name, else its path (from a checkout, ``.venv/bin/callhook``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from callhook.serving import serve as server


def test_the_printed_command_is_one_the_shell_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "callhook").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(shutil, "which", lambda name: None)  # not on PATH
    assert server.command() == ".venv/bin/callhook"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # not below it: the whole path
    assert server.command() == str(bin_dir / "callhook")
    monkeypatch.setattr(shutil, "which", lambda name: str(bin_dir / "callhook"))
    assert server.command() == "callhook"  # the shell finds this very one
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/callhook")
    assert server.command() == str(bin_dir / "callhook")  # another one: not that


def test_workers_import_the_callhook_the_supervisor_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m`` would put the working directory first on the module path: a folder
    holding another callhook must not shadow this one in the workers."""
    import callhook
    from callhook.serving.processes import python_command

    monkeypatch.chdir(tmp_path)
    (tmp_path / "callhook").mkdir()
    assert python_command() == [sys.executable, "-P"]
    monkeypatch.chdir(Path(callhook.__file__).parent.parent)  # a checkout's own folder
    assert python_command() == [sys.executable]
