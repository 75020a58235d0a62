"""The notifier's doorbell: processes sharing a data directory ring the one that delivers
notifications when they queue one, so that it goes now rather than at that process's next
look at the outbox.

With SQLite one process delivers (it holds ``notifier.lock``: store/database.py): a
worker's transcription result or recording notification would otherwise wait up to the
notifier's poll. The doorbell is a Unix datagram socket in Linux's abstract namespace
(unix(7)), named after the data directory's device and inode: a path inside the
directory could pass the 108 bytes a socket's name may have, and an abstract name goes
with the process that holds it, leaving nothing behind after a ``kill -9``. Only the
process holding the notifier lock listens; a ring carries nothing but the fact.

Another user's processes in the same network namespace can reach an abstract socket, so
the listener takes the sender's credentials from the kernel (``SO_PASSCRED``) and
ignores rings from other users. A ring lost (nobody listens yet, the socket's queue is
full) costs the poll's wait, nothing more: the outbox is the truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger("callhook.notify")

#: struct ucred (pid, uid, gid), as SCM_CREDENTIALS carries it.
_UCRED = struct.Struct("iII")
#: Rings read at most per wake of the loop (a flood is drained over several).
_DRAIN = 64


class Doorbell:
    """The doorbell of the processes sharing one data directory (the module docstring)."""

    def __init__(self, name: bytes) -> None:
        #: The socket's abstract name (its leading NUL included).
        self.name = name
        #: Rings heard from this user's processes, and from others' (ignored).
        self.heard = 0
        self.ignored = 0
        # (Made now: ring() is called from any thread.)
        self._ringer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._ringer.setblocking(False)
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_ring: Callable[[], None] = lambda: None
        self._warned = False

    @classmethod
    def for_directory(cls, data_dir: Path) -> Doorbell:
        """The doorbell of the processes sharing ``data_dir``."""
        found = data_dir.stat()
        return cls(b"\0callhook-notifier-%x-%x" % (found.st_dev, found.st_ino))

    @property
    def listening(self) -> bool:
        """Whether this process answers the doorbell (it delivers the notifications)."""
        return self._listener is not None

    def ring(self) -> None:
        """Tell the process that delivers that a notification was queued (from any thread;
        never blocks, never fails: nobody listening is the poll's business)."""
        # Nobody listens (ECONNREFUSED), the queue is full (EAGAIN), closed (EBADF).
        with contextlib.suppress(OSError):
            self._ringer.sendto(b"\1", self.name)

    def listen(self, on_ring: Callable[[], None]) -> bool:
        """Answer the doorbell on the running loop: ``on_ring()`` once for the rings read
        together. False if another process holds the name (logged the first time)."""
        if self._listener is not None:
            return True
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            listener.bind(self.name)
        except OSError as exc:
            listener.close()
            if self._warned:
                return False  # (tried again at each look at the outbox, said once)
            self._warned = True
            logger.warning(
                "notifications queued by other processes wait for the notifier's next look"
                " at the outbox: its doorbell cannot listen (%s)",
                exc.strerror or exc,
            )
            return False
        listener.setblocking(False)
        self._listener = listener
        self._on_ring = on_ring
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(listener.fileno(), self._read)
        return True

    def _read(self) -> None:
        assert self._listener is not None
        ours = False
        uid = os.getuid()  # (the kernel gives the sender's real user)
        space = socket.CMSG_SPACE(_UCRED.size)
        for _ in range(_DRAIN):
            try:
                _, ancillary, _, _ = self._listener.recvmsg(16, space)
            except OSError:  # (BlockingIOError: all read)
                break
            if _sender_uid(ancillary) == uid:
                self.heard += 1
                ours = True
            else:
                self.ignored += 1
        if ours:
            self._on_ring()

    def close(self) -> None:
        """Stop listening and ringing (the name is free for the next deliverer)."""
        if self._listener is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        self._ringer.close()


def _sender_uid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The sending process's user, from the kernel's SCM_CREDENTIALS (None: none came)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            _, uid, _ = _UCRED.unpack_from(data)
            return int(uid)
    return None
