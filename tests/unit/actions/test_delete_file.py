"""``delete_file``: the runner deletes files of the application's namespace, on real disk.

The application's pages are served by a real local server; the media store is
a real directory. A missing file is logged and the list goes on; a symbolic
link is refused (it could lead out of the namespace); the final page may
answer ``delete_file`` (Aculab allows it there) and nothing else runs there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from callhook.devtools.harness import AppServer, Caller, Received, run_call
from callhook.store.files import MediaStore

SPOKEN = {"play": {"play_list": [{"text_to_say": "after"}]}}


def store_with(tmp_path: Path, *names: str) -> MediaStore:
    store = MediaStore(tmp_path / "media")
    for name in names:
        path = store.path("test", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"RIFF")
    return store


async def test_delete_file_deletes_and_the_list_goes_on(app: AppServer, tmp_path: Path) -> None:
    store = store_with(tmp_path, "recordings/a.wav", "recordings/b.wav")
    app.page("/start", [{"delete_file": {"filename": "recordings/a.wav"}}, SPOKEN])
    run = await run_call(app, Caller().hang_up(at=30), files=store)
    assert not store.path("test", "recordings/a.wav").exists()
    assert store.path("test", "recordings/b.wav").exists()  # only the one named
    assert any("recordings/a.wav deleted" in line for line in run.log.lines)
    assert any("prompt_start" in line and "after" in line for line in run.log.lines)
    assert run.summary.errors == []


async def test_a_missing_file_is_logged_not_an_error(app: AppServer, tmp_path: Path) -> None:
    store = store_with(tmp_path)
    app.page("/start", [{"delete_file": {"filename": "gone.wav"}}, SPOKEN])
    run = await run_call(app, Caller().hang_up(at=30), files=store)
    assert any("gone.wav: no such file" in line for line in run.log.lines)
    assert any("prompt_start" in line for line in run.log.lines)
    assert run.summary.errors == []
    assert run.summary.cause == "completed"


async def test_a_symbolic_link_is_refused_and_its_target_kept(
    app: AppServer, tmp_path: Path
) -> None:
    store = store_with(tmp_path, "real.wav")
    outside = tmp_path / "outside.wav"
    outside.write_bytes(b"keep me")
    link = tmp_path / "media" / "test" / "link.wav"
    os.symlink(outside, link)
    app.page("/start", [{"delete_file": {"filename": "link.wav"}}])
    run = await run_call(app, Caller().hang_up(at=30), files=store)
    assert outside.read_bytes() == b"keep me"
    assert link.is_symlink()
    (error,) = run.summary.errors
    assert "link.wav: cannot be deleted" in error and "symbolic link" in error


async def test_another_applications_file_cannot_be_named(app: AppServer, tmp_path: Path) -> None:
    store = store_with(tmp_path)
    other = MediaStore(tmp_path / "media").path("other", "secret.wav")
    other.parent.mkdir(parents=True)
    other.write_bytes(b"x")
    app.page("/start", [{"delete_file": {"filename": "../other/secret.wav"}}])
    run = await run_call(app, Caller().hang_up(at=30), files=store)
    assert other.exists()
    assert run.summary.cause == "failed"  # an invalid action list: nothing of it ran
    assert any("'..' is not allowed" in e for e in run.summary.errors)


async def test_the_final_page_may_delete_files_and_nothing_else_runs(
    app: AppServer, tmp_path: Path
) -> None:
    store = store_with(tmp_path, "recordings/done.wav")
    app.page("/start", [])
    app.page(
        "/final",
        [{"delete_file": {"filename": "recordings/done.wav"}}, SPOKEN, {"hang_up": {}}],
    )
    run = await run_call(app, Caller().hang_up(at=30), final_page="/final", files=store)
    assert not store.path("test", "recordings/done.wav").exists()
    assert any("[1] play: the call has ended" in line for line in run.log.lines)
    assert not any("prompt_start" in line for line in run.log.lines)
    assert run.summary.errors == []


async def test_a_final_page_answer_that_is_not_a_list_is_ignored(
    app: AppServer, tmp_path: Path
) -> None:
    app.page("/start", [])
    app.page("/final", {"not": "actions"})
    run = await run_call(
        app, Caller().hang_up(at=30), final_page="/final", files=store_with(tmp_path)
    )
    assert run.summary.errors == []
    assert any("final page; answer ignored" in line for line in run.log.lines)


class Journal:
    """What the runner reports about recordings (``completed`` is what may announce one)."""

    def __init__(self) -> None:
        self.completed_files: list[str] = []

    def started(self, app: str, filename: str, **details: Any) -> None:
        pass

    def completed(self, app: str, filename: str, result: dict[str, Any]) -> None:
        self.completed_files.append(filename)


RECORD = {
    "record": {
        "next_page": {"url": "/recorded"},
        "recording_available_page": {"url": "/available"},
        "milliseconds_max_silence": 500,
    }
}


def deleting(*before: dict[str, Any]) -> Callable[[Received], list[dict[str, Any]]]:
    """next_page's answer: ``before``, then delete_file of the recording just made."""

    def answer(request: Received) -> list[dict[str, Any]]:
        filename = request.json["action_result"]["result"]["filename"]
        return [*before, {"delete_file": {"filename": filename}}]

    return answer


async def test_a_recording_deleted_by_next_pages_answer_is_never_reported(
    app: AppServer, tmp_path: Path
) -> None:
    journal, store = Journal(), store_with(tmp_path, "recordings/rec-1.wav")
    app.page("/start", [RECORD])
    app.page("/recorded", deleting())
    caller = Caller().say("hello", at=0.5, seconds=1.0).hang_up(at=30)
    await run_call(app, caller, recordings=journal, files=store)
    assert not store.path("test", "recordings/rec-1.wav").exists()
    assert journal.completed_files == []  # nothing can announce it


async def test_a_recording_whose_deletion_fails_is_reported_then(
    app: AppServer, tmp_path: Path
) -> None:
    journal = Journal()
    app.page("/start", [RECORD])
    app.page("/recorded", deleting())  # no such file in the store: the delete fails
    caller = Caller().say("hello", at=0.5, seconds=1.0).hang_up(at=30)
    run = await run_call(app, caller, recordings=journal, files=store_with(tmp_path))
    assert journal.completed_files == ["recordings/rec-1.wav"]
    assert any("no such file" in line for line in run.log.lines)


async def test_a_recording_whose_delete_never_runs_is_reported_at_the_end(
    app: AppServer, tmp_path: Path
) -> None:
    journal, store = Journal(), store_with(tmp_path, "recordings/rec-1.wav")
    app.page("/start", [RECORD])
    app.page("/recorded", deleting({"sleep": {"seconds": 60}}))  # the caller hangs up first
    caller = Caller().say("hello", at=0.5, seconds=1.0).hang_up(at=10)
    await run_call(app, caller, recordings=journal, files=store)
    assert store.path("test", "recordings/rec-1.wav").exists()
    assert journal.completed_files == ["recordings/rec-1.wav"]
