"""``delete_file``: the runner deletes files of the application's namespace, on real disk.

The application's pages are served by a real local server; the media store is
a real directory. A missing file is logged and the list goes on; a symbolic
link is refused (it could lead out of the namespace); the final page may
answer ``delete_file`` (Aculab allows it there) and nothing else runs there.
"""

from __future__ import annotations

import os
from pathlib import Path

from callhook.store.files import MediaStore
from callhook.testing import AppServer, Caller, run_call

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
