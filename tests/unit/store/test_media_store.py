"""The media file store: names confined to a namespace, atomic writes, listing in pages."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from callhook.store.files import (
    COMPONENT_MAX,
    NAME_MAX,
    BadName,
    FileInfo,
    MediaStore,
    OutsideNamespace,
)


@pytest.fixture
def store(tmp_path: Path) -> MediaStore:
    return MediaStore(tmp_path / "media")


def names(files: list[FileInfo]) -> list[str]:
    return [f.name for f in files]


# --- names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../x.wav", "'..'"),
        ("a/../../x.wav", "'..'"),
        ("..", "'..'"),
        ("/etc/passwd", "absolute"),
        ("//etc/passwd", "absolute"),
    ],
)
def test_names_leaving_the_namespace_are_refused(store: MediaStore, name: str, why: str) -> None:
    with pytest.raises(BadName, match=why) as caught:
        store.path("app", name)
    assert caught.value.code == "outside_namespace"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("a\\..\\b.wav", "backslash"),
        ("\\etc\\passwd", "backslash"),
        ("a\x00b.wav", "control"),
        ("a\nb.wav", "control"),
        ("a//b.wav", "empty path component"),
        ("prompts/", "empty path component"),
        (".hidden.wav", "start with a dot"),
        ("prompts/.x.wav.1234.tmp", "start with a dot"),
        ("./x.wav", "start with a dot"),
        ("hello world.wav", "' '"),
        ("caf\u00e9.wav", "'\u00e9'"),
        ("a;rm.wav", "';'"),
        ("C:x.wav", "':'"),
        ("%2e%2e/x.wav", "'%'"),
        ("x" * (NAME_MAX + 1), "longer than"),
        ("x" * (COMPONENT_MAX + 1), "longer than"),
    ],
)
def test_odd_names_are_refused_saying_why(store: MediaStore, name: str, why: str) -> None:
    with pytest.raises(BadName, match=re.escape(why)) as caught:
        store.path("app", name)
    assert caught.value.code == "bad_name"


def test_the_old_error_name_catches_every_refusal(store: MediaStore) -> None:
    # prompts.py and leg.py catch OutsideNamespace: odd characters must be caught there too.
    with pytest.raises(OutsideNamespace):
        store.path("app", "a b.wav")


@pytest.mark.parametrize(
    "name", ["a.wav", "prompts/hello.wav", "a..b.wav", "x-y_z.WAV", "recordings/x", "a/b/c/d.wav"]
)
def test_good_names_are_inside_the_namespace(store: MediaStore, name: str) -> None:
    path = store.path("app", name)
    assert path == (store.root / "app").resolve() / name


def test_a_generated_recording_name_is_a_good_name(store: MediaStore) -> None:
    name = store.new_recording_name()
    assert re.fullmatch(r"recordings/\d{8}-[0-9a-f]{24}\.wav", name)
    store.check_name(name)
    assert store.new_recording_name() != name


@pytest.mark.parametrize("app", ["", ".", "..", ".hidden", "a/b", "a b", "x" * 65])
def test_bad_application_names_are_refused(store: MediaStore, app: str) -> None:
    with pytest.raises(BadName):
        store.namespace(app)


def test_a_symlink_inside_the_namespace_is_refused(store: MediaStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.wav").write_bytes(b"secret")
    (store.root / "app").mkdir(parents=True)
    (store.root / "app" / "escape").symlink_to(outside)
    (store.root / "app" / "link.wav").symlink_to(outside / "secret.wav")
    for name in ("escape/secret.wav", "link.wav"):
        with pytest.raises(BadName, match="symbolic link") as caught:
            store.path("app", name)
        assert caught.value.code == "outside_namespace"
        with pytest.raises(BadName):
            store.read("app", name)
        with pytest.raises(BadName):
            store.delete("app", name)
    # Even a link that stays inside is refused: the store follows none.
    (store.root / "app" / "inner.wav").write_bytes(b"x")
    (store.root / "app" / "alias.wav").symlink_to(store.root / "app" / "inner.wav")
    with pytest.raises(BadName, match="symbolic link"):
        store.path("app", "alias.wav")
    assert (outside / "secret.wav").read_bytes() == b"secret"
    # Links are not listed either.
    assert names(store.list("app").files) == ["inner.wav"]


def test_a_symlinked_namespace_directory_is_the_operators_choice(
    store: MediaStore, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "big-disk"
    elsewhere.mkdir()
    store.root.mkdir()
    (store.root / "app").symlink_to(elsewhere)
    store.write_atomic("app", "a.wav", b"data")
    assert (elsewhere / "a.wav").read_bytes() == b"data"


def test_a_namespace_linked_after_a_first_lookup_is_followed(
    store: MediaStore, tmp_path: Path
) -> None:
    # The store keeps an application's resolved directory once it exists; asked before
    # it does, it must not keep the guess.
    store.root.mkdir()
    assert store.path("app", "a.wav") == store.root.resolve() / "app" / "a.wav"
    elsewhere = tmp_path / "big-disk"
    elsewhere.mkdir()
    (store.root / "app").symlink_to(elsewhere)
    assert store.path("app", "a.wav") == elsewhere.resolve() / "a.wav"
    store.write_atomic("app", "a.wav", b"data")
    assert (elsewhere / "a.wav").read_bytes() == b"data"


# --- writing --------------------------------------------------------------------------------


def test_an_atomic_write_leaves_no_temporary_file(store: MediaStore) -> None:
    info = store.write_atomic("app", "prompts/hi.wav", [b"RIFF", b"rest"])
    assert (info.name, info.size) == ("prompts/hi.wav", 8)
    assert store.read("app", "prompts/hi.wav") == b"RIFFrest"
    assert os.listdir(store.root / "app" / "prompts") == ["hi.wav"]


def test_a_failed_write_leaves_nothing_and_keeps_the_old_file(store: MediaStore) -> None:
    store.write_atomic("app", "a.wav", b"old")

    def chunks() -> Iterator[bytes]:
        yield b"new"
        raise RuntimeError("the upload broke")

    with pytest.raises(RuntimeError):
        store.write_atomic("app", "a.wav", chunks())
    assert store.read("app", "a.wav") == b"old"
    assert os.listdir(store.root / "app") == ["a.wav"]


def test_while_writing_readers_see_the_old_file(store: MediaStore) -> None:
    store.write_atomic("app", "a.wav", b"old")
    out = store.create("app", "a.wav")
    out.write(b"new")
    assert store.read("app", "a.wav") == b"old"
    assert names(store.list("app").files) == ["a.wav"]  # the temporary file is not listed
    out.commit()
    assert store.read("app", "a.wav") == b"new"


def test_write_without_overwrite_refuses_a_taken_name(store: MediaStore) -> None:
    store.write_atomic("app", "a.wav", b"first")
    with pytest.raises(FileExistsError):
        store.write_atomic("app", "a.wav", b"second", overwrite=False)
    # Taken between create and commit: still refused, and nothing left behind.
    out = store.create("app", "b.wav", overwrite=False)
    out.write(b"late")
    store.write_atomic("app", "b.wav", b"early")
    with pytest.raises(FileExistsError):
        out.commit()
    assert store.read("app", "b.wav") == b"early"
    assert sorted(os.listdir(store.root / "app")) == ["a.wav", "b.wav"]


def test_names_clashing_with_directories(store: MediaStore) -> None:
    store.write_atomic("app", "prompts/a.wav", b"x")
    with pytest.raises(IsADirectoryError):
        store.write_atomic("app", "prompts", b"x")
    with pytest.raises(NotADirectoryError):
        store.write_atomic("app", "prompts/a.wav/b.wav", b"x")
    with pytest.raises(FileNotFoundError):
        store.read("app", "prompts")
    with pytest.raises(FileNotFoundError):
        store.read("app", "prompts/a.wav/b.wav")


def test_rename(store: MediaStore) -> None:
    store.write_atomic("app", "a.wav", b"A")
    store.write_atomic("app", "b.wav", b"B")
    with pytest.raises(FileExistsError):
        store.rename("app", "a.wav", "b.wav")
    assert store.read("app", "b.wav") == b"B"
    info = store.rename("app", "a.wav", "prompts/c.wav")
    assert (info.name, info.size) == ("prompts/c.wav", 1)
    assert names(store.list("app").files) == ["b.wav", "prompts/c.wav"]
    store.rename("app", "prompts/c.wav", "b.wav", overwrite=True)
    assert store.read("app", "b.wav") == b"A"
    assert names(store.list("app").files) == ["b.wav"]
    with pytest.raises(FileNotFoundError):
        store.rename("app", "missing.wav", "d.wav")
    with pytest.raises(BadName):
        store.rename("app", "b.wav", "../d.wav")


def test_delete(store: MediaStore) -> None:
    store.write_atomic("app", "prompts/a.wav", b"A")
    with pytest.raises(FileNotFoundError):
        store.delete("app", "prompts")  # a directory is not a file
    store.delete("app", "prompts/a.wav")
    with pytest.raises(FileNotFoundError):
        store.delete("app", "prompts/a.wav")
    assert store.list("app").files == []


def test_namespaces_are_separate(store: MediaStore) -> None:
    store.write_atomic("one", "a.wav", b"one")
    with pytest.raises(FileNotFoundError):
        store.read("two", "a.wav")
    assert store.list("two").files == []


# --- listing ----------------------------------------------------------------------------------


def test_listing_is_sorted_by_full_name_and_paged(store: MediaStore) -> None:
    # "a-b" < "a.wav" < "a/x" < "a0" in ASCII: a directory sorts as its name plus "/".
    want = ["a-b.wav", "a.wav", "a/x.wav", "a/y/z.wav", "a0.wav", "b.wav", "logs/1.log"]
    for name in reversed(want):
        store.write_atomic("app", name, name.encode())
    (store.root / "app" / "a" / ".tmp-file").write_bytes(b"")
    (store.root / "app" / "odd name.wav").write_bytes(b"")
    (store.root / "app" / "empty").mkdir()
    seen: list[str] = []
    after = ""
    pages = 0
    while True:
        page = store.list("app", after=after, limit=2)
        pages += 1
        seen += names(page.files)
        assert len(page.files) <= 2
        if page.next is None:
            break
        after = page.next
    assert seen == want
    assert pages == 4
    files = store.list("app").files
    assert [f.size for f in files] == [len(n) for n in want]
    assert all(f.modified > 0 for f in files)


def test_listing_by_prefix(store: MediaStore) -> None:
    for name in ["a.wav", "prompts/one.wav", "prompts/two.wav", "prompts2.wav", "recordings/r.wav"]:
        store.write_atomic("app", name, b"x")
    assert names(store.list("app", prefix="prompts/").files) == [
        "prompts/one.wav",
        "prompts/two.wav",
    ]
    assert names(store.list("app", prefix="prompts").files) == [
        "prompts/one.wav",
        "prompts/two.wav",
        "prompts2.wav",
    ]
    page = store.list("app", prefix="prompts/", limit=1)
    assert (names(page.files), page.next) == (["prompts/one.wav"], "prompts/one.wav")
    page = store.list("app", prefix="prompts/", after="prompts/one.wav", limit=1)
    assert (names(page.files), page.next) == (["prompts/two.wav"], None)
    with pytest.raises(BadName):
        store.list("app", prefix="a b")


def test_listing_a_namespace_that_does_not_exist_yet(store: MediaStore) -> None:
    listing = store.list("new")
    assert (listing.files, listing.next) == ([], None)


def test_a_write_that_would_leave_less_than_the_floor_free_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploads stop at the floor recordings keep ([recordings] min_free_mb): one key's
    uploads must not fill the disk every call's recordings, logs and database share."""
    import errno

    from callhook.store import diskspace

    free = [100 << 20]
    monkeypatch.setattr(diskspace, "free_bytes", lambda path: free[0])
    floor = [64 << 20]
    store = MediaStore(tmp_path / "media", min_free=lambda: floor[0])
    store.write_atomic("app", "a.wav", b"x" * 10)  # 100 MB free: room
    free[0] = 63 << 20
    with pytest.raises(OSError) as refused:  # (the REST API's 507 storage_full)
        store.write_atomic("app", "b.wav", b"x" * 10)
    assert refused.value.errno == errno.ENOSPC and "min_free_mb" in str(refused.value)
    free[0] = 65 << 20
    out = store.create("app", "c.wav")  # room when it began...
    out.write(b"x" * 10)
    free[0] = 63 << 20  # ...not once written (another upload took it meanwhile)
    with pytest.raises(OSError):
        out.commit()
    assert sorted(p.name for p in (tmp_path / "media" / "app").iterdir()) == ["a.wav"]
    floor[0] = 32 << 20  # (a reloaded config: the next write keeps the new floor)
    assert store.write_atomic("app", "e.wav", b"x").size == 1
    assert MediaStore(tmp_path / "other").write_atomic("app", "d.wav", b"x").size == 1  # no floor
