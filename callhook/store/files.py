"""The media file store: per-application namespaces of files, on a local directory.

Each application has its own namespace, a directory under the store's root
(docs/recordings.md): its recordings (``recordings/<date>-<random>.wav``), its
call logs (``logs/<application instance id>.log``) and the files it plays.
Every name an application gives (``file_to_play``, a REST API path) is
checked before it touches the disk (:mod:`callhook.store.names`): a name is
one or more ``/``-separated components of ASCII letters, digits, ``.``,
``_`` and ``-``; no component is empty, ``..`` or starts with a dot (hidden
and temporary files); at most :data:`NAME_MAX` characters. No symbolic link
inside a namespace is ever followed: a link could lead anywhere, so a name
that passes through one is refused (links at or above the namespace
directory are the operator's business and are followed).

Writes are atomic: a temporary dot-file in the target's directory is written,
``fsync``-ed and renamed over the name, and the directory is synced, so a
reader sees the old file or the new one, never half of one, and a crash
leaves at most an invisible temporary file.

:class:`FileStore` is the interface the REST API uses; it is small so that
an S3-compatible backend can implement it (``path`` is the local backend's
own: prompts, recordings and call logs use local files directly).
These methods block on the disk: async code runs them on a worker thread.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import itertools
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Protocol

from callhook.store.diskspace import check_room
from callhook.store.names import COMPONENT as _COMPONENT
from callhook.store.names import COMPONENT_MAX as COMPONENT_MAX
from callhook.store.names import NAME_MAX as NAME_MAX
from callhook.store.names import BadName as BadName
from callhook.store.names import check_name

#: The most files one :meth:`MediaStore.list` call returns.
LIST_MAX = 1000

_PREFIX = re.compile(r"[A-Za-z0-9_./-]*")
_SAFE_APP = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: The most application directories MediaStore keeps resolved (one per application).
_BASES_KEPT = 1000


#: The older name of :class:`BadName`: callers that catch it catch every refused name.
OutsideNamespace = BadName


@dataclass(frozen=True)
class FileInfo:
    """A file in a namespace: its name, size in bytes and last change (Unix time)."""

    name: str
    size: int
    modified: float


@dataclass(frozen=True)
class Listing:
    """One page of a listing; ``next`` is the ``after`` for the next page (None: no more)."""

    files: list[FileInfo]
    next: str | None


class AtomicWrite(Protocol):
    """A file being written: ``write`` its bytes, then ``commit`` (or ``abort``)."""

    def write(self, data: bytes) -> None: ...
    def commit(self) -> FileInfo: ...
    def abort(self) -> None: ...


class FileStore(Protocol):
    """What the REST API needs of a media file store (local directory, or S3 later).

    Missing files raise :class:`FileNotFoundError`, a name taken when
    overwriting was not asked for :class:`FileExistsError`, a name that is a
    directory of others (or under a file) :class:`IsADirectoryError` /
    :class:`NotADirectoryError`, a refused name :class:`BadName`.
    """

    def list(self, app: str, prefix: str = "", after: str = "", limit: int = 100) -> Listing: ...
    def stat(self, app: str, name: str) -> FileInfo: ...
    def open(self, app: str, name: str) -> BinaryIO: ...
    def create(self, app: str, name: str, *, overwrite: bool = True) -> AtomicWrite: ...
    def rename(self, app: str, old: str, new: str, *, overwrite: bool = False) -> FileInfo: ...
    def delete(self, app: str, name: str) -> None: ...


def make_directories(directory: Path, *, sync: bool = True) -> list[Path]:
    """Create ``directory`` and its missing parents, durably (each new entry synced).

    With ``sync`` False nothing is synced here: the directories whose new entries still
    need it are returned, for a worker thread to sync (:func:`fsync_directories`). The
    event loop must not wait for ``fsync``: under other writes a directory's can take
    seconds, and every call's audio would wait with it.

    A file in the way raises FileExistsError (``mkdir``'s way of saying so).
    """
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    unsynced = []
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        if sync:
            fsync_directory(new.parent)
        else:
            unsynced.append(new.parent)
    return unsynced


def fsync_directories(paths: list[Path]) -> None:
    """:func:`fsync_directory` each of ``paths``, deepest first (what
    :func:`make_directories` left unsynced)."""
    for path in reversed(paths):
        fsync_directory(path)


def fsync_directory(path: Path) -> None:
    """Make a rename, a new file or a deletion in ``path`` durable (POSIX syncs the directory)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MediaStore:
    """Files of every application, under ``root/<application name>/`` (see the module doc)."""

    def __init__(self, root: Path, *, min_free: Callable[[], int] = lambda: 0) -> None:
        self.root = root
        #: Bytes a write must leave free on the disk (``[recordings] min_free_mb``: an
        #: upload must not take the room the calls' recordings are kept for); 0: none.
        #: Asked at each write, so a reloaded config applies to the next one.
        self.min_free = min_free
        #: Called (blocking) with a file's path before it is deleted, and with (app,
        #: name) after: the composition root waits for a recording still being finished
        #: and withdraws its notification (app.py). Whoever deletes, the rules hold.
        self.before_delete: Callable[[Path], object] | None = None
        self.after_delete: Callable[[str, str], object] | None = None
        # Each application's directory, resolved once it exists (resolving costs a system
        # call per component, and every call asks for a few paths): a namespace an
        # operator points elsewhere while serve runs is seen at the next start.
        self._bases: dict[str, Path] = {}

    # --- names ------------------------------------------------------------------------------

    def namespace(self, app: str) -> Path:
        """The directory of application ``app`` (it may not exist yet)."""
        if not _SAFE_APP.fullmatch(app) or app.startswith("."):
            raise BadName(f"not a valid application name: {app!r}", "outside_namespace")
        return self.root / app

    #: The name rules (:func:`callhook.store.names.check_name`).
    check_name = staticmethod(check_name)

    def path(self, app: str, name: str) -> Path:
        """Where ``name`` of application ``app`` lives on disk; raises :class:`BadName`."""
        parts = self.check_name(name)
        base = self._bases.get(app)
        if base is None:
            base = self.namespace(app).resolve()
            if base.is_dir() and len(self._bases) < _BASES_KEPT:
                self._bases[app] = base
        current = str(base)
        for i, part in enumerate(parts):
            current = os.path.join(current, part)
            try:
                mode = os.lstat(current).st_mode
            except (FileNotFoundError, NotADirectoryError):
                break  # the rest does not exist: nothing to follow
            if stat.S_ISLNK(mode):
                raise BadName(
                    f"{name!r}: {'/'.join(parts[: i + 1])} is a symbolic link; the store "
                    "follows none (one could lead out of the namespace)",
                    "outside_namespace",
                )
        return base.joinpath(*parts)

    @staticmethod
    def new_recording_name() -> str:
        """A new recording name: unique, unguessable, safe characters only (docs/recordings.md)."""
        day = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
        return f"recordings/{day}-{secrets.token_hex(12)}.wav"

    # --- reading ----------------------------------------------------------------------------

    def list(self, app: str, prefix: str = "", after: str = "", limit: int = 100) -> Listing:
        """Files whose names start with ``prefix`` and sort after ``after``, by name (ASCII).

        At most ``limit`` (1 to :data:`LIST_MAX`) files; ``Listing.next`` is set when
        there are more. Temporary and hidden files, files whose names the store
        would refuse and symbolic links are not listed.
        """
        if not _PREFIX.fullmatch(prefix) or len(prefix) > NAME_MAX:
            raise BadName(f"{prefix!r}: not a valid name prefix")
        if len(after) > 4 * NAME_MAX:
            raise BadName("the 'after' cursor is too long")
        limit = max(1, min(limit, LIST_MAX))
        walk = self._walk(self.namespace(app), "", prefix, after)
        files = list(itertools.islice(walk, limit + 1))
        if len(files) > limit:
            return Listing(files[:limit], files[limit - 1].name)
        return Listing(files, None)

    def _walk(self, directory: Path, rel: str, prefix: str, after: str) -> Iterator[FileInfo]:
        # Entries are visited in the order of their names as they appear in full
        # names (a directory "a" as "a/"), so the walk yields names already sorted
        # and skips whole subtrees outside the prefix or at or before the cursor.
        try:
            with os.scandir(directory) as it:
                entries = [e for e in it if _listable(e.name)]
        except (FileNotFoundError, NotADirectoryError):
            return
        keyed: list[tuple[str, os.DirEntry[str], bool]] = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                keyed.append((rel + entry.name + "/", entry, True))
            elif entry.is_file(follow_symlinks=False):
                keyed.append((rel + entry.name, entry, False))
        keyed.sort(key=lambda k: k[0])
        for key, entry, is_dir in keyed:
            if is_dir:
                if not (key.startswith(prefix) or prefix.startswith(key)):
                    continue
                if key < after and not after.startswith(key):
                    continue  # every name below is before the cursor
                yield from self._walk(Path(entry.path), key, prefix, after)
            elif key.startswith(prefix) and key > after and len(key) <= NAME_MAX:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # deleted meanwhile
                yield FileInfo(key, st.st_size, st.st_mtime)

    def stat(self, app: str, name: str) -> FileInfo:
        """Size and time of file ``name``; :class:`FileNotFoundError` if it is not a file."""
        st = _file_stat(self.path(app, name), name)
        return FileInfo(name, st.st_size, st.st_mtime)

    def open(self, app: str, name: str) -> BinaryIO:
        """File ``name`` open for reading (binary)."""
        path = self.path(app, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # made a link since path() looked
                raise BadName(f"{name!r} is a symbolic link", "outside_namespace") from None
            if exc.errno == errno.ENOTDIR:  # a component is a file
                raise FileNotFoundError(errno.ENOENT, "no such file", name) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise FileNotFoundError(errno.ENOENT, "no such file", name)
        return os.fdopen(fd, "rb")

    def read(self, app: str, name: str) -> bytes:
        """The whole of file ``name``."""
        with self.open(app, name) as f:
            return f.read()

    # --- writing ----------------------------------------------------------------------------

    def create(self, app: str, name: str, *, overwrite: bool = True) -> LocalAtomicWrite:
        """Start writing file ``name`` atomically (see :class:`LocalAtomicWrite`).

        Without ``overwrite``, :meth:`LocalAtomicWrite.commit` raises
        :class:`FileExistsError` if the name is taken by then.
        """
        target = self.path(app, name)
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "a directory of other files", name)
        if not overwrite and target.exists():
            raise FileExistsError(errno.EEXIST, "file exists", name)
        floor = self.min_free()
        check_room(self.namespace(app), floor)
        _make_parent(target, name)
        return LocalAtomicWrite(name, target, overwrite, floor)

    def write_atomic(
        self, app: str, name: str, data: bytes | Iterable[bytes], *, overwrite: bool = True
    ) -> FileInfo:
        """Write file ``name`` from ``data`` (bytes or chunks) atomically and durably."""
        with self.create(app, name, overwrite=overwrite) as out:
            for chunk in [data] if isinstance(data, bytes) else data:
                out.write(chunk)
        assert out.info is not None
        return out.info

    def rename(self, app: str, old: str, new: str, *, overwrite: bool = False) -> FileInfo:
        """Rename file ``old`` to ``new`` atomically; replaces a ``new`` only with ``overwrite``."""
        source, target = self.path(app, old), self.path(app, new)
        st = _file_stat(source, old)
        if source == target:
            return FileInfo(new, st.st_size, st.st_mtime)
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "a directory of other files", new)
        _make_parent(target, new)
        if overwrite:
            os.replace(source, target)
        else:
            # link() refuses an existing name atomically, which rename() cannot be asked to.
            try:
                os.link(source, target, follow_symlinks=False)
            except FileExistsError:
                raise FileExistsError(errno.EEXIST, "file exists", new) from None
            os.unlink(source)
        fsync_directory(target.parent)
        if source.parent != target.parent:
            fsync_directory(source.parent)
        return FileInfo(new, st.st_size, st.st_mtime)

    def delete(self, app: str, name: str) -> None:
        """Delete file ``name`` (durably); :class:`FileNotFoundError` if there is none."""
        path = self.path(app, name)
        _file_stat(path, name)
        if self.before_delete is not None:
            self.before_delete(path)
        os.unlink(path)
        fsync_directory(path.parent)
        if self.after_delete is not None:
            self.after_delete(app, name)


def _file_stat(path: Path, name: str) -> os.stat_result:
    """``lstat`` of a regular file; anything else (missing, a directory) is not found."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except NotADirectoryError:  # a component is a file
        raise FileNotFoundError(errno.ENOENT, "no such file", name) from None
    if not stat.S_ISREG(st.st_mode):
        raise FileNotFoundError(errno.ENOENT, "no such file", name)
    return st


def _make_parent(target: Path, name: str) -> None:
    """Create the directories ``target`` goes in; a file in the way is NotADirectoryError."""
    try:
        make_directories(target.parent)
    except FileExistsError:  # mkdir's way of saying a file has the directory's name
        raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", name) from None


def _listable(component: str) -> bool:
    return (
        not component.startswith(".")
        and len(component) <= COMPONENT_MAX
        and _COMPONENT.fullmatch(component) is not None
    )


class LocalAtomicWrite:
    """A file being written to a temporary dot-file beside its name, renamed in on commit.

    Use it as a context manager (commits on a clean exit, aborts on an
    exception) or call :meth:`commit` / :meth:`abort`; after either,
    ``info`` describes the committed file (None if aborted).
    """

    def __init__(self, name: str, target: Path, overwrite: bool, min_free: int = 0) -> None:
        self.name = name
        self.target = target
        self.overwrite = overwrite
        self.min_free = min_free
        self.temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self._file: BinaryIO | None = os.fdopen(os.open(self.temp, flags, 0o666), "wb")
        self.size = 0
        self.info: FileInfo | None = None

    def write(self, data: bytes) -> None:
        """Append ``data``."""
        if self._file is None:
            raise ValueError("the file is already committed or aborted")
        self._file.write(data)
        self.size += len(data)

    def commit(self) -> FileInfo:
        """Make the file durable and give it its name; returns what it is now."""
        file = self._file
        if file is None:
            raise ValueError("the file is already committed or aborted")
        self._file = None
        try:
            file.flush()
            os.fsync(file.fileno())
            file.close()
            check_room(self.target.parent, self.min_free)  # (written: what it left free)
            if self.overwrite:
                os.replace(self.temp, self.target)
            else:
                try:
                    os.link(self.temp, self.target, follow_symlinks=False)
                except FileExistsError:
                    raise FileExistsError(errno.EEXIST, "file exists", self.name) from None
                os.unlink(self.temp)
            fsync_directory(self.target.parent)
        except BaseException:
            file.close()
            _unlink_quietly(self.temp)
            raise
        self.info = FileInfo(self.name, self.size, os.stat(self.target).st_mtime)
        return self.info

    def abort(self) -> None:
        """Throw away what was written (nothing is left behind)."""
        if self._file is not None:
            self._file.close()
            self._file = None
            _unlink_quietly(self.temp)

    def __enter__(self) -> LocalAtomicWrite:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
