"""Writing a recording: a G.711 WAV file that is valid at every moment (docs/recordings.md).

The audio is written as it arrives, in :data:`FLUSH_BYTES` pieces (one
``pwrite`` each), never buffered for the whole call; killing the process
loses at most that much. The file is written under its final name so the
application can play it as soon as ``next_page`` is requested.

*Plain files*: the header is written first with the sizes of an empty file
and rewritten with the real sizes every second and at the end; a crash
leaves a playable file, and :func:`recover` sets its sizes from its length.

*Encrypted files* (``aescbc``): the plaintext never touches the disk. The
header cannot be rewritten in place (in CBC every block depends on the one
before), so while recording it declares an unknown length
(:data:`callhook.media.wav.UNKNOWN_SIZE`) and the file is kept a complete
ciphertext (see :class:`~callhook.store.crypto.CbcStream`). When the
recording ends the file is decrypted in memory, given its real sizes,
encrypted again into a temporary file and renamed over the first one. A
file cut short by a crash keeps the unknown length; ``callhook decrypt`` and
``play`` fix the sizes when they decrypt it (callhook never has the key).

Closing forces the file to disk (``fsync`` of the file and of its directory, and of
the parents of directories made for it) on a worker thread, so the event loop, which
plays every call's audio, never waits for the disk; ``on_durable`` is called (on that
thread) when it is done: the recording is then safe from a power cut, and may be
announced.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import struct
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from callhook.events import StartRecording
from callhook.media import wav
from callhook.media.sink import SinkFull
from callhook.store import crypto
from callhook.store.files import fsync_directories, fsync_directory, make_directories

logger = logging.getLogger("callhook.store")

#: Audio bytes gathered before each write (0.2 s of G.711): the most a crash can lose.
FLUSH_BYTES = 1600
#: A plain file's header is brought up to date after this many bytes (one second).
HEADER_REFRESH_BYTES = 8000

#: Finishes closed recordings (fsync, re-encryption) off the event loop.
_finisher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="callhook-wav")
_finishing: set[Future[None]] = set()
#: The finisher of each recording being finished, by path (for :func:`finished`).
_finishing_paths: dict[Path, Future[None]] = {}


def drain(timeout: float = 30.0) -> bool:
    """Wait until every closed recording is finished (at shutdown); False on timeout."""
    _, not_done = wait(list(_finishing), timeout)
    return not not_done


def finished(path: Path, timeout: float = 30.0) -> bool:
    """Wait until the recording at ``path`` is finished, if it is being finished.

    Blocking (call it off the event loop). A recording deleted while its finisher
    still works on it would be announced anyway, or come back when an encrypted
    one's re-encryption is renamed over it. False on timeout.
    """
    future = _finishing_paths.get(path)
    if future is None:
        return True
    _, not_done = wait([future], timeout)
    return not not_done


def _forget_finisher(path: Path, future: Future[None]) -> None:
    if _finishing_paths.get(path) is future:
        del _finishing_paths[path]


@dataclass(frozen=True)
class Written:
    """A finished recording: where it is and how much audio it holds."""

    path: Path
    length: int  # G.711 bytes of audio (8000 a second)

    @property
    def seconds(self) -> float:
        return self.length / 8000


def unknown_length_header(law: str, channels: int = 1) -> bytes:
    """A G.711 header that declares an unknown length (RIFF, fact and data sizes)."""
    header = bytearray(wav.g711_header(law, 0, channels=channels))
    struct.pack_into("<I", header, 4, wav.UNKNOWN_SIZE)
    struct.pack_into("<I", header, header.index(b"fact") + 8, wav.UNKNOWN_SIZE)
    struct.pack_into("<I", header, len(header) - 4, wav.UNKNOWN_SIZE)
    return bytes(header)


class ShortWrite(OSError):
    """A write that stopped part-way (a full disk): ``written`` bytes of it reached the file."""

    def __init__(self, cause: OSError, written: int) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.written = written


def write_all(fd: int, data: bytes, offset: int) -> None:
    """``pwrite`` all of ``data`` at ``offset``; raises :class:`ShortWrite` (an OSError)
    saying how much was written when the disk fails part-way (a full disk fills
    the last page it has, then refuses)."""
    view = memoryview(data)
    done = 0
    while view:
        try:
            n = os.pwrite(fd, view, offset)
        except OSError as exc:
            raise ShortWrite(exc, done) from exc
        if n <= 0:
            raise ShortWrite(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), done)
        view, offset, done = view[n:], offset + n, done + n


class WavWriter:
    """A recording sink (``media.sink.Sink``) writing a G.711 WAV file, maybe encrypted.

    ``max_bytes`` is the process's size limit (going past it raises
    ``SinkFull``: reason ``filesize``); ``limit_bytes`` the recording's own
    maximum duration (audio past it is dropped). :attr:`length` counts only
    audio that reached the file.

    The media tick takes a caller's usual frame into :attr:`_pending` in C (the
    ``records`` step of ``media/_inlet.c``) when it neither fills the recording nor
    is due to be written: a change to :meth:`write` is made there too
    (``tests/unit/media/test_inlet.py``).
    """

    #: Audio bytes gathered before each write (:data:`FLUSH_BYTES`).
    flush_bytes: ClassVar[int] = FLUSH_BYTES

    def __init__(
        self,
        path: Path,
        law: str,
        max_bytes: int | None = None,
        *,
        limit_bytes: int | None = None,
        key: crypto.Key | None = None,
        on_durable: Callable[[Written], object] | None = None,
        channels: int = 1,
    ) -> None:
        self.path = path
        self.law = law
        self.channels = channels  # 2: a stereo file, the bytes of the two interleaved
        self.max_bytes = max_bytes
        self.limit_bytes = limit_bytes
        self.key = key
        self.on_durable = on_durable
        self.length = 0  # audio bytes in the file
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._since_header = 0
        #: A write failed (a full disk): nothing more is written, the file is finished
        #: from what it holds (issue 14: the recording so far is kept).
        self._broken = False
        # (New directories are synced with the file, by the finisher: not on the loop.)
        self._unsynced = make_directories(path.parent, sync=False)
        # Read-write: an encrypted file is read back when it is finished.
        self._fd: int | None = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640
        )
        try:
            if key is None:
                self._stream = None
                header = wav.g711_header(law, 0, channels=channels)
                write_all(self._fd, header, 0)
                self._offset = len(header)  # where the next audio byte goes
            else:
                self._stream = crypto.CbcStream(key)
                header = unknown_length_header(law, channels)
                blocks, tail = self._stream.encrypt(header)
                write_all(self._fd, blocks + tail, 0)
                self._stream.commit(header, blocks)
                self._offset = len(blocks)  # where the tail block is
        except OSError:
            os.close(self._fd)
            self._fd = None
            # Not even the header fits (a full disk): no half-made file is left behind
            # the name (the journal forgets the recording: RecordingJournal.failed).
            path.unlink(missing_ok=True)
            raise

    @classmethod
    def for_recording(
        cls,
        path: Path,
        law: str,
        command: StartRecording,
        max_bytes: int | None = None,
        on_durable: Callable[[Written], object] | None = None,
        channels: int = 1,
    ) -> WavWriter:
        """The writer of the recording ``command`` starts: its cipher, its duration limit.

        Raises OSError, or ValueError for a cipher that cannot be used.
        """
        key = crypto.Key.from_cipher(command.cipher) if command.cipher else None
        limit = None if command.max_seconds is None else round(command.max_seconds * 8000)
        if limit is not None:
            limit *= channels
        return cls(
            path,
            law,
            max_bytes,
            limit_bytes=limit,
            key=key,
            on_durable=on_durable,
            channels=channels,
        )

    def room(self) -> int | None:
        """The bytes :meth:`write` takes before it raises ``SinkFull`` (None: no limit)."""
        if self.max_bytes is None:
            return None
        return self.max_bytes - self.length - self._pending_bytes

    def write(self, data: bytes) -> None:
        if self._fd is None or self._broken:
            return
        taken = self.length + self._pending_bytes
        if self.limit_bytes is not None and taken + len(data) > self.limit_bytes:
            # The recording's own maximum duration: audio past it is not wanted.
            data = data[: max(0, self.limit_bytes - taken)]
            if not data:
                return
        if self.max_bytes is not None and taken + len(data) > self.max_bytes:
            raise SinkFull(f"recording reached its size limit of {self.max_bytes} bytes")
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= self.flush_bytes:
            self._flush()

    def _flush(self, pad: bytes = b"") -> None:
        """Write the pending audio (and ``pad``); what fails to be written is dropped.

        A failed write marks the writer broken (nothing more is written) and
        raises; the file still holds a valid recording of everything before.
        """
        assert self._fd is not None
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        if self._stream is not None:
            # The final blocks go where the old tail was, the new tail after them:
            # one write, so the file is a complete ciphertext before and after it.
            blocks, tail = self._stream.encrypt(data)
            try:
                write_all(self._fd, blocks + tail, self._offset)
            except OSError:
                self._broken = True
                self._restore_tail()
                raise
            self._stream.commit(data, blocks)
            self._offset += len(blocks)
            self.length += len(data)
            return
        if data or pad:
            try:
                write_all(self._fd, data + pad, self._offset)
            except ShortWrite as exc:
                # What reached the disk is audio the caller sent: it counts. An even
                # number of bytes is kept (no pad byte is needed, which there may be no
                # room for) and the file is cut there: shrinking a file needs no space.
                kept = min(exc.written, len(data)) & ~1
                self._offset += kept
                self.length += kept
                self._broken = True
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._offset)
                raise
            except OSError:
                self._broken = True
                raise
            self._offset += len(data) + len(pad)
            self.length += len(data)
            self._since_header += len(data)
        if self._since_header >= HEADER_REFRESH_BYTES:
            self._since_header = 0
            write_all(self._fd, wav.g711_header(self.law, self.length, channels=self.channels), 0)

    def _restore_tail(self) -> None:
        """After a failed write of an encrypted file: put the old tail block back.

        A partial write may have replaced it with a block that is not a final
        one, and the file would no longer decrypt. The tail's block is already
        on disk (no new space is needed) and whatever the failed write added
        after it is cut off, so the file is again the complete ciphertext of
        what was committed (the :class:`~callhook.store.crypto.CbcStream` promise).
        """
        assert self._fd is not None and self._stream is not None
        _, tail = self._stream.encrypt(b"")
        try:
            os.pwrite(self._fd, tail, self._offset)
            os.ftruncate(self._fd, self._offset + len(tail))
        except OSError as exc:
            logger.error("recording %s: its last block could not be restored: %s", self.path, exc)

    def close(self) -> None:
        """Write what is left and the final header; the file is finished on a worker thread.

        Whatever fails here or there, the recording is still finished: the file
        is repaired as start-up recovery would, and announced with what it holds.
        """
        if self._fd is None:
            return
        fd = self._fd
        failed = False
        try:
            if self._broken:
                # A write failed (a full disk): nothing more is written but the header,
                # in place (no new space). An encrypted file's tail is already restored.
                if self._stream is None:
                    write_all(fd, wav.g711_header(self.law, self.length, channels=self.channels), 0)
            else:
                odd = (self.length + self._pending_bytes) & 1
                self._since_header = HEADER_REFRESH_BYTES  # the header is rewritten now
                # RIFF chunks are word-aligned: a pad byte after odd-length audio.
                self._flush(pad=b"\x00" if self._stream is None and odd else b"")
        except OSError as exc:
            logger.error("recording %s: the last write failed: %s", self.path, exc)
            failed = True
        self._fd = None
        future = _finisher.submit(self._finish, fd, Written(self.path, self.length), failed)
        _finishing.add(future)
        _finishing_paths[self.path] = future
        future.add_done_callback(_finishing.discard)
        future.add_done_callback(functools.partial(_forget_finisher, self.path))

    def _finish(self, fd: int, written: Written, failed: bool) -> None:
        try:
            if failed:
                raise OSError("a write failed")
            if self.key is not None:
                self._reencrypt(fd, written)
            else:
                os.fsync(fd)
                fsync_directory(self.path.parent)
            fsync_directories(self._unsynced)
        except (OSError, ValueError) as exc:  # ValueError: crypto.DecryptionError
            logger.error("recording %s could not be finished normally: %s", self.path, exc)
            try:
                # What reached the file is kept: repaired as after a crash.
                written = Written(self.path, recover(self.path, self.key is not None))
            except (OSError, ValueError) as again:
                logger.error("recording %s cannot be repaired: %s", self.path, again)
                return  # left to start-up recovery (the journal says "not durable")
        finally:
            os.close(fd)
        if self.on_durable is not None:
            try:
                self.on_durable(written)
            except Exception:
                logger.exception("recording %s: announcing it failed", self.path)

    def _reencrypt(self, fd: int, written: Written) -> None:
        """Give an encrypted recording its real sizes: re-encrypt it to a new file, rename."""
        assert self.key is not None
        temp = self.path.with_name(f".{self.path.name}.tmp")
        header = wav.g711_header(self.law, written.length, channels=self.channels)
        try:
            with os.fdopen(os.dup(fd), "rb") as source, temp.open("wb") as target:
                size = crypto.reencrypt_with_header(source, target, self.key, header)
                target.flush()
                os.fsync(target.fileno())
            expected = (len(header) + written.length) // crypto.BLOCK * crypto.BLOCK
            if size != expected + crypto.BLOCK:
                raise OSError(f"re-encrypted file is {size} bytes, not {expected + crypto.BLOCK}")
            os.replace(temp, self.path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        fsync_directory(self.path.parent)

    @property
    def seconds(self) -> float:
        return self.length / (8000 * self.channels)


def recover(path: Path, encrypted: bool) -> int:
    """Make a recording a crash left behind valid and durable; returns its audio bytes.

    A plain file gets sizes that match its length. An encrypted file cannot be
    read without the key: it is cut to whole cipher blocks (it is always a
    complete ciphertext, see the module docstring) and its audio length is
    estimated to the millisecond. Raises OSError or ``wav.WavError``.
    """
    with path.open("r+b") as f:
        if encrypted:
            size = os.fstat(f.fileno()).st_size
            whole = size - size % crypto.BLOCK
            if whole != size:
                f.truncate(whole)
            header = len(wav.g711_header("ulaw", 0))
            # The plaintext is the header and the audio, then 1 to 16 bytes of padding.
            length = max(0, whole - header - crypto.BLOCK // 2)
        else:
            data = f.read()
            fixed = wav.fix_sizes(data, force=True)
            info = wav.read_info(fixed)
            f.seek(0)
            f.write(fixed[: info.data_offset])
            length = info.data_length
        f.flush()
        os.fsync(f.fileno())
    fsync_directory(path.parent)
    return length
