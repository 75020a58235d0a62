"""The wheel and the sdist ``python -m build`` makes from this checkout, kept by their
source's hash in ``~/.cache/callhook/wheel`` (one build at a time, under a lock), so that
scripts/test can build them at the lowest priority while the other tests run and
tests/e2e/test_wheel.py finds them made.

``python -m tests.e2e.wheelbuild`` builds them (or finds them kept) and prints where.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "callhook" / "wheel"
#: What the distributions are built from (the sdist holds these; the wheel is built from it).
SOURCES = ("callhook", "pyproject.toml", "setup.py", "README.md", "LICENSE")


def tracked(*paths: str) -> list[str]:
    """The checkout's files git knows or would (nothing ignored, nothing built)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    return sorted(name for name in listed.split("\0") if name and (ROOT / name).is_file())


def _key(names: list[str]) -> str:
    digest = hashlib.sha256(sys.version.encode())
    digest.update(Path(__file__).read_bytes())
    for name in names:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes())
    return digest.hexdigest()[:16]


def dist() -> Path:
    """The folder holding ``callhook-*.tar.gz`` and ``callhook-*.whl`` built from this very
    source: kept, or built now (at the lowest CPU priority: a minute of C on both cores)."""
    names = tracked(*SOURCES)
    key = _key(names)
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = CACHE / key
        if not kept.is_dir():
            with tempfile.TemporaryDirectory() as work:
                source = Path(work) / "source"
                for name in names:
                    (source / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / name, source / name)
                done = subprocess.run(
                    ["nice", "-n", "19", sys.executable, "-m", "build",
                     "--outdir", str(Path(work) / "dist"), str(source)],
                    capture_output=True, text=True, timeout=1800,
                )  # fmt: skip
                if done.returncode != 0:
                    raise RuntimeError(
                        f"python -m build: {done.stdout[-4000:]}{done.stderr[-4000:]}"
                    )
                for old in CACHE.iterdir():  # only the newest is kept
                    if old.is_dir():
                        shutil.rmtree(old)
                shutil.move(Path(work) / "dist", kept)
        return kept


if __name__ == "__main__":
    print(dist())
