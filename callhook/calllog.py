"""The per-call log: one line per page request and response, action start and end, error.

Each call (each application instance) gets a text file in its application's
media file namespace, named in the page requests' ``log_filename``. A line is

    2026-11-21T10:15:02.114Z +3.260 page_request POST http://app/next (get_number)

wall-clock time (UTC, ms), seconds since the call started (media time), a
kind, and the details. Lines are flushed as written, so the log survives a
crash. The call's start and end and every warning and error also go to the server
log (``logging``, ``callhook.call``, with the application instance id); the
other lines do too at DEBUG (``callhook -v``). Listeners (the terminal phone)
get every line.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from callhook.clock import Clock

logger = logging.getLogger("callhook.call")

#: The kinds of line the server log shows at INFO (all are in the call's own log).
SERVER_KINDS = frozenset({"call_start", "call_end", "error", "invalid_response", "aborted"})

#: (kind, text) of each line, for whoever wants to watch a call as it runs.
Listener = Callable[[str, str], None]


class CallLog:
    """Writes one call's log lines to ``path`` (if given), the server log and listeners."""

    def __init__(self, instance_id: str, clock: Clock, path: Path | None = None) -> None:
        self.instance_id = instance_id
        self._clock = clock
        self._start = clock.now()
        self._file: TextIO | None = None
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8", buffering=1)
        self.listeners: list[Listener] = []
        self.lines: list[str] = []

    def write(self, kind: str, text: str = "", *, level: int = logging.INFO) -> None:
        """Add a line of ``kind`` (page_request, action_start, error, ...) with ``text``."""
        wall = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        wall = wall.replace("+00:00", "Z")
        line = f"{wall} +{self._clock.now() - self._start:.3f} {kind} {text}".rstrip()
        self.lines.append(line)
        if self._file is not None:
            self._file.write(line + "\n")
        # The server log gets the call's start and end, and every warning or error;
        # the rest is in the call's own log file (writing it twice costs CPU at scale).
        if level > logging.INFO or kind in SERVER_KINDS:
            logger.log(level, "[%s] %s %s", self.instance_id, kind, text)
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("[%s] %s %s", self.instance_id, kind, text)
        for listener in self.listeners:
            listener(kind, text)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
