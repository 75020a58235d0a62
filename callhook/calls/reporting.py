"""What the call runner tells the recordings journal: a recording began, it is complete.

A recording is journaled when its file begins (a ``record`` action's with its
``recording_available_page``; a connect's whole-call recording with none, and
complete when it stops), so a crash cannot lose it (``store/journal.py``).

A completed ``record`` is reported (:meth:`Recordings.completed
<callhook.ports.Recordings.completed>`, which may lead to the
``recording_available_page`` notification) only once its ``next_page`` has been
requested, so an application hears of its recording from ``next_page`` first
(``file_available: false``). When ``next_page``'s answer deletes the recording
with ``delete_file``, the report is held back until that has run: a recording
the application deletes at once is never announced (were it reported first,
the notification could be on its way before the file is gone). If the
deletion fails, or never runs, it is reported then, or when the call is over.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin

from callhook.actions.schema import DeleteFile, Record
from callhook.events import RecordCall, StartRecording
from callhook.monitoring import tracing
from callhook.ports import Recordings


class RecordingReports:
    """One call's completed recordings on their way to the journal (see the module doc)."""

    def __init__(self, app: str, recordings: Recordings | None) -> None:
        self.app = app
        self.recordings = recordings
        self._completed: dict[str, Any] | None = None  # until its next_page is requested
        self._withheld: dict[str, Any] | None = None  # until its delete_file has run
        self._calls: set[str] = set()  # connects' whole-call recordings running
        #: Recordings begun (the call's record).
        self.made = 0

    def record_started(
        self, command: StartRecording, action: Record, base: str, body: dict[str, Any]
    ) -> None:
        """A record action's file began (``base``: its page's URL; ``body``: the instance
        info its ``recording_available_page`` notification will carry)."""
        self.made += 1
        if self.recordings is None:
            return
        page = action.recording_available_page
        notify = (urljoin(base, page.url), page.method) if page is not None else None
        self.recordings.started(
            self.app,
            command.filename,
            encrypted=command.cipher is not None,
            record_id=action.id,
            notify=notify,
            body=body,
            traceparent=tracing.traceparent(),  # (its action's span: the notification joins)
        )

    def call_recording_started(self, command: RecordCall) -> None:
        """A connect's whole-call recording: journaled like any (recovered after a crash)."""
        self.made += 1
        if self.recordings is None:
            return
        self._calls.add(command.filename)
        self.recordings.started(
            self.app,
            command.filename,
            encrypted=command.cipher is not None,
            record_id="",
            notify=None,
            body={"channels": 2 if command.mode == "separate" else 1},  # for recovery's figures
        )

    def call_recording_stopped(self, filename: str) -> None:
        """It ended: no page announces it (Aculab has none), the journal sees it safe."""
        if filename in self._calls and self.recordings is not None:
            self._calls.discard(filename)
            self.recordings.completed(self.app, filename, {"filename": filename})

    def completed(self, result: dict[str, Any]) -> None:
        """The record action completed with ``result`` (reported after its next_page)."""
        self._completed = result

    def next_page_requested(self, actions: list[Any] | None = None) -> None:
        """Its next_page was requested (``actions``: the answer, if it was a valid list)."""
        result, self._completed = self._completed, None
        if result is None or self.recordings is None:
            return
        filename = str(result["filename"])
        if any(isinstance(a, DeleteFile) and a.filename == filename for a in actions or ()):
            self.delete_ran()  # an earlier one whose delete_file never ran
            self._withheld = result
            return
        self.recordings.completed(self.app, filename, result)

    def delete_ran(self, name: str | None = None, *, deleted: bool = False) -> None:
        """``delete_file`` of ``name`` ran (None: whatever is held back is due now).

        A held-back recording is reported now, unless it was ``deleted`` (the
        store's hook has told the journal: nothing is to be sent).
        """
        result = self._withheld
        if result is None or (name is not None and result["filename"] != name):
            return
        self._withheld = None
        if not deleted and self.recordings is not None:
            self.recordings.completed(self.app, str(result["filename"]), result)

    def call_over(self) -> None:
        """The call ended: whatever is still waiting is reported."""
        self.next_page_requested()
        self.delete_ran()
