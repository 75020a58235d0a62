"""The media tick's calls: each call's stream, and the lists the tick works through.

A :class:`Stream` is one call taking part in the media tick
(:class:`~callhook.edge.mediaengine.MediaEngine`): its session, its socket (or, for a call
whose audio does not come over UDP, what sends and receives in its place), its RTCP
socket. The :class:`Roster` is the tick's lists of them, in the order the calls joined,
in the shapes the C steps take (``outlet.tick_all``, ``outlet.due_all``).
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from callhook.media.session import MediaSession

T = TypeVar("T")


@dataclass(eq=False)  # (identity: the roster finds a stream in its lists by it, in C)
class Stream:
    """One call in the media tick."""

    session: MediaSession
    sock: socket.socket | None  # None: a socketless stream (``out`` sends, ``inbox`` receives)
    port: int
    wake: Callable[[], None]
    rtcp: socket.socket | None = None
    #: Exceptions its session raised (a bug: logged the first time, the call goes on).
    faults: int = 0
    out: Callable[[bytes], None] | None = None
    inbox: deque[tuple[bytes, tuple[str, int]]] | None = None
    #: A socketless stream's paced source: one packet a tick (a WebSocket far end).
    pull: Callable[[], tuple[bytes, tuple[str, int]] | None] | None = None
    fd: int = -1  # the RTP socket's descriptor (-1: socketless)


@dataclass
class Roster:
    """The tick's lists of the calls: made whole when the tick first needs them, then
    changed call by call as streams open and close (:meth:`adding`, :meth:`removing`),
    as new lists, so that lists a tick is working through never change under it."""

    streams: list[Stream]
    sessions: list[MediaSession]
    #: Those with a socket, and each one's (session, descriptor) for ``outlet.tick_all``.
    wired: list[Stream]
    sending: list[tuple[MediaSession, int]]
    unwired: list[Stream]
    #: Each stream's (session, has an RTCP socket), for ``outlet.due_all``.
    reporting: list[tuple[MediaSession, bool]]

    def stream_of(self, session: MediaSession) -> Stream:
        """The stream of one of :attr:`sessions` (a fault's: rare, so a search)."""
        return self.streams[self.sessions.index(session)]

    @classmethod
    def of(cls, streams: list[Stream]) -> Roster:
        wired = [s for s in streams if s.sock is not None]
        return cls(
            streams,
            [s.session for s in streams],
            wired,
            [(s.session, s.fd) for s in wired],
            [s for s in streams if s.sock is None],
            [(s.session, s.rtcp is not None) for s in streams],
        )

    def adding(self, stream: Stream) -> Roster:
        """This roster with ``stream`` last (where :meth:`of` puts a stream opened last).
        Under the load kit's churn streams open and close every other tick: the lists
        made again in Python each time cost more than the tick's own work on them."""
        wired, sending, unwired = self.wired, self.sending, self.unwired
        if stream.sock is not None:
            wired = [*wired, stream]
            sending = [*sending, (stream.session, stream.fd)]
        else:
            unwired = [*unwired, stream]
        return Roster(
            [*self.streams, stream],
            [*self.sessions, stream.session],
            wired,
            sending,
            unwired,
            [*self.reporting, (stream.session, stream.rtcp is not None)],
        )

    def removing(self, stream: Stream) -> Roster:
        """This roster without ``stream`` (the others in their order)."""
        i = self.streams.index(stream)  # (by identity: Stream compares so)
        wired, sending, unwired = self.wired, self.sending, self.unwired
        if stream.sock is not None:
            j = wired.index(stream)
            wired, sending = without(wired, j), without(sending, j)
        else:
            unwired = without(unwired, unwired.index(stream))
        return Roster(
            without(self.streams, i),
            without(self.sessions, i),
            wired,
            sending,
            unwired,
            without(self.reporting, i),
        )


def without(items: list[T], i: int) -> list[T]:
    return items[:i] + items[i + 1 :]
