"""The installation's own secret: ``<data_dir>/secret``, made on first use."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def data_secret(data_dir: Path) -> str:
    """The installation's own secret (created on first use), for apps configured without one."""
    path = data_dir / "secret"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    try:  # created whole, once: processes starting together (workers) agree on it
        temp = data_dir / f".secret.{secrets.token_hex(4)}"
        temp.write_text(value + "\n")
        temp.chmod(0o600)
        os.link(temp, path)  # fails if another process made it first
    except FileExistsError:
        return path.read_text().strip()
    finally:
        temp.unlink(missing_ok=True)
    return value
