"""The local-directory media file store.

Each application has its own namespace, a directory under the store's root
(DESIGN.md §1.5). File names given by applications are confined to it: no
absolute paths, no ``..``, no way out through a symlink.
"""

from __future__ import annotations

import datetime
import re
import secrets
from pathlib import Path


class OutsideNamespace(ValueError):
    """A file name that would leave the application's namespace."""


_SAFE_APP = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class MediaStore:
    """Files of every application, under ``root/<application name>/``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def namespace(self, app: str) -> Path:
        if not _SAFE_APP.fullmatch(app) or app in (".", ".."):
            raise OutsideNamespace(f"not a valid application name: {app!r}")
        return self.root / app

    def path(self, app: str, name: str) -> Path:
        """Where ``name`` of application ``app`` lives; raises :class:`OutsideNamespace`."""
        base = self.namespace(app).resolve()
        clean = name.replace("\\", "/")
        if not clean or clean.startswith("/") or "\x00" in clean or ".." in clean.split("/"):
            raise OutsideNamespace(f"file name outside the application's namespace: {name!r}")
        target = (base / clean).resolve()
        if not target.is_relative_to(base):
            raise OutsideNamespace(f"file name outside the application's namespace: {name!r}")
        return target

    @staticmethod
    def new_recording_name() -> str:
        """A new recording name: unique, unguessable, safe characters only (DESIGN.md §1.5)."""
        day = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
        return f"recordings/{day}-{secrets.token_hex(12)}.wav"
