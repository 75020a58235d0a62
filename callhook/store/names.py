"""The names of files in the media file store: the rules, with no disk involved.

Pure, so that validating an action list (``actions/schema.py``) can apply the
store's own rules without importing the store. A name is one or more
``/``-separated components of ASCII letters, digits, ``.``, ``_`` and ``-``;
no component is empty, ``..`` or starts with a dot (hidden and temporary
files); at most :data:`NAME_MAX` characters.
"""

from __future__ import annotations

import re

#: The longest file name (all components and separators).
NAME_MAX = 255
#: The longest component: the temporary file adds to it and must fit a file system's 255.
COMPONENT_MAX = 128

COMPONENT = re.compile(r"[A-Za-z0-9_.-]+")


class BadName(ValueError):
    """A file name the store refuses; the message says why.

    ``code`` is ``outside_namespace`` for a name that would leave the
    application's namespace (absolute, ``..``, through a symbolic link) and
    ``bad_name`` for one that is not a valid name (characters, length,
    empty or hidden components).
    """

    def __init__(self, message: str, code: str = "bad_name") -> None:
        super().__init__(message)
        self.code = code


def check_name(name: str) -> list[str]:
    """The components of file name ``name``; raises :class:`BadName` saying what is wrong."""
    if not name:
        raise BadName("the file name is empty")
    if len(name) > NAME_MAX:
        raise BadName(f"the file name is longer than {NAME_MAX} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise BadName(f"{name!r}: control characters are not allowed in file names")
    if name.startswith("/"):
        raise BadName(f"{name!r}: absolute paths are not allowed", "outside_namespace")
    if "\\" in name:
        raise BadName(f"{name!r}: backslashes are not allowed (the separator is /)")
    parts = name.split("/")
    if ".." in parts:
        raise BadName(f"{name!r}: '..' is not allowed in file names", "outside_namespace")
    for part in parts:
        if not part:
            raise BadName(f"{name!r}: empty path component (// or a trailing /)")
        if part.startswith("."):
            raise BadName(f"{name!r}: no component may start with a dot")
        if len(part) > COMPONENT_MAX:
            raise BadName(f"{name!r}: a component is longer than {COMPONENT_MAX} characters")
        if not COMPONENT.fullmatch(part):
            bad = next(c for c in part if not COMPONENT.fullmatch(c))
            raise BadName(
                f"{name!r}: {bad!r} is not allowed in file names "
                "(letters, digits, '.', '_', '-' and '/' between components)"
            )
    return parts
