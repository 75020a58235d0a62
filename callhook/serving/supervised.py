"""How a worker of ``serve --workers`` learns that its supervisor has gone.

The usual way is a signal: the fork server dies with the supervisor (``PR_SET_PDEATHSIG``,
processes.py's ``own_group``) and sends each worker it forked its farewell, SIGTERM. A
worker whose fork server had ended before (killed: the supervisor starts another for the
next worker) has nobody left to send it one. What every worker has is its standard output,
a pipe whose reading end only the supervisor holds (forkserver.py's ``spawn``): when the
supervisor ends, by SIGKILL too, the kernel closes that end, and a poll of the writing end
reports POLLERR (Linux ``pipe_poll``; POSIX leaves it open), which asyncio's selector
gives to a reader's callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Callable


def when_unread(fd: int, gone: Callable[[], None]) -> bool:
    """Call ``gone`` once, on the running loop, when nothing reads the pipe ``fd`` any
    more. False (and nothing watched) when ``fd`` is not a pipe."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
    except OSError:
        return False
    loop = asyncio.get_running_loop()

    def unread() -> None:
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(fd)
        gone()

    loop.add_reader(fd, unread)
    return True
