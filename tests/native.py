"""Running test code as if callhook's native extensions had never been built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def without(modules: list[str], script: str) -> str:
    """Run ``script`` in a fresh interpreter where importing ``modules`` fails (as where
    no C compiler was), from the repository's root; what it printed."""
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in modules)
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + blocked + script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
