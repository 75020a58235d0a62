"""The media plane's thread: every call's RTP sent and received on a clock of its own.

The media tick (:mod:`callhook.edge.mediaengine`) decides what each call sends and
hears: that is Python, and it runs on the event loop with SIP, the action runners and
the page requests. The part that must happen every 20 ms whatever Python is doing runs
on one native thread per process (``_plane.c``), which never takes the GIL:

* it wakes on an absolute 20 ms grid (``clock_nanosleep`` on ``CLOCK_MONOTONIC``, the
  clock of ``loop.time()``); each wake-up is a *slot*, numbered from 0;
* at each slot it sends every call's frame Python queued for that slot, numbering the
  packets itself (RFC 3550 §5.1); a call whose frame has not come (Python is late: a
  collection, a busy core, another process on the core) gets silence in its law with
  the next sequence number and the timestamp its media clock has reached, so the far
  end hears no gap. SRTP frames go as Python made them (they cannot be authenticated
  here) and get no such filler;
* it then reads every socket (``epoll``, ``recvmmsg``: at most ``rounds`` datagrams per
  socket a slot; a flood stays in the kernel's buffer), and publishes the datagrams and
  a record that closes the slot, waking the loop through an ``eventfd``;
* the usual packets of a call whose receive Python handed it (:meth:`Plane.own`: the
  call's detector runs no model, nothing but it and a recording hear the caller) it
  takes itself, changing what Python would (``_rx.h``); any other packet of that call
  gives the call back to Python with the packet (docs/architecture.md, "The thread's receive").

Python reads the slots in order (:meth:`Plane.next_slot`): for each it runs the tick's
work with the datagrams read in it and the slot's own time, and queues the frames it
makes for a slot :data:`AHEAD` slots on. Those frames are due 60 ms after the slot it
works on began, so Python may start that much late, less its own work, before a filler
goes instead: the tolerance the tick on the loop had (it caught up three missed slots
at once). Python may fall behind further without the wire hearing a gap; it catches up
slot by slot, so prompts and key presses keep the wire's time.

What a late Python's slot gets is the prompt's own audio where the call plays one:
each tick Python also gives the thread the playing prompt's coming frames, up to
:data:`COVER` slots beyond the frame it makes (:func:`callhook.media.outlet.cover_all`,
:meth:`Plane.cover`), and withdraws them from the next slot when the prompt stops or
another begins; a play list's next file is joined to the audio playing as that audio
comes within the cover's reach of its end, so the cover runs on across it. A digit
being sent as an RFC 4733 event goes on as Python sends it (the thread keeps its last
packet). Only where nothing is covered (no prompt, a bridge's audio, a sentence not yet
synthesised) does the thread send silence. A prompt that would
begin on a late tick begins with silence up to a slot the thread has still to run, the
cover taking its first frame there; a digit it sends waits for a tick on time. Either
way it is heard from its start (``Player.hold_start``).

The two sides exchange fixed-size records through two lock-free single-producer,
single-consumer rings (:mod:`callhook.media.ring`): commands (a socket added or retired,
a frame for a slot, a call gone quiet) one way, events (datagrams, the end of a slot, a
socket let go) the other. The thread allocates nothing per packet and waits on nothing
but its clock. A retired socket still sends the frames queued for it; it is closed only
once the thread has let go of its descriptor.

Where the extension was not built (no C compiler) :func:`new_plane` gives None and the
media tick runs on the event loop, as it did before the thread (said once in the log).
"""

from __future__ import annotations

import logging
import socket
from typing import Any, Protocol

logger = logging.getLogger("callhook.media")

Address = tuple[str, int]

#: Slots between the one Python works on and the one its frames go out in.
AHEAD = 3
#: Slots of a playing prompt's coming audio the thread holds beyond Python's frames, for
#: when Python is late (the thread keeps 32: this, plus three frames topped up at once,
#: plus AHEAD, fit in them).
COVER = 24
#: Records of the ring from the thread to Python: about four seconds of 650 calls' packets
#: should Python hold every call's receive. A slot's record the ring has no room for is
#: worked with no datagrams, and its calls' packets wait in the kernel: each of those calls
#: then seems to fall silent (a recording may stop short), and Python feeds each the
#: silence, which costs it more than the packets would, while it is behind. Memory: a
#: record is some 600 bytes: about 80 MB, resident once records have gone round it.
EVENTS = 131072


class Plane(Protocol):
    """The native media thread (see the module docstring)."""

    @property
    def slot(self) -> int:
        """The next slot the thread runs."""
        ...

    @property
    def capacity(self) -> int:
        """Records the ring to Python holds (datagrams and slots' ends)."""
        ...

    @property
    def running(self) -> bool: ...
    @property
    def late_slots(self) -> int:
        """Slots the thread started more than 2 ms late."""
        ...

    @property
    def max_late(self) -> int:
        """The latest start of a slot, in nanoseconds."""
        ...

    @property
    def skipped(self) -> int:
        """Slots skipped after the thread itself started one more than 60 ms late."""
        ...

    @property
    def fillers(self) -> int:
        """Silent frames sent where Python's had not come."""
        ...

    @property
    def covered(self) -> int:
        """Frames of a prompt's cover, or packets of a digit's event going on, sent where
        Python's had not come."""
        ...

    @property
    def stale(self) -> int:
        """Python's frames that came after their slot (a filler had gone)."""
        ...

    @property
    def sent(self) -> int: ...
    @property
    def send_errors(self) -> int: ...
    @property
    def lost_ticks(self) -> int: ...
    @property
    def faults(self) -> int: ...
    @property
    def oversized(self) -> int: ...
    @property
    def refused(self) -> int: ...
    def start(self) -> None:
        """Start the thread: its first slot is one tick from now."""

    def step(self, now: float) -> None:
        """Run one slot at ``now`` without the thread (the tests' virtual clock)."""

    def set_origin(self, at: float) -> None:
        """The time of slot 0, for :meth:`step`."""

    def add(self, sock: socket.socket, key: Any, alaw: bool = False) -> None:
        """The thread reads and writes ``sock`` from its next slot; datagrams come with
        ``key``. ``alaw``: the call's audio is G.711 A-law (else μ-law), for the silence
        the thread sends where Python is late."""

    def retire(self, sock: socket.socket) -> None:
        """The call is over: the thread reads ``sock`` no more and makes up nothing for it
        (no filler, no cover), sends the frames already queued for it in their slots (a
        prompt's end before a hang-up), then lets go of it; it is then closed (during a
        later :meth:`next_slot`)."""

    def tally(self, fd: int) -> tuple[int, int, int, float]:
        """What the thread sent on the socket ``fd``: RTP packets, their payload octets,
        the last one's RTP timestamp and when it went (Unix time; all 0 before the first),
        for the call's RTCP Sender Report (RFC 3550 §6.4.1)."""

    def quiet(self, fd: int, slot: int) -> None:
        """From ``slot`` the socket's call sends nothing until its next frame: no fillers
        (on hold)."""

    def send(
        self, batch: list[tuple[int, bytes, Address]], slot: int, verbatim: bool = False
    ) -> int:
        """Queue each ``(fd, data, destination)`` for ``slot``; how many cannot go.
        ``verbatim``: sent as given (SRTP), never renumbered or filled in."""
        ...

    def cover(self, batch: list[tuple[int, int, bool, bytes]], slot: int) -> int:
        """Each ``(fd, first, clear, audio)``: the call's prompt audio (whole G.711 frames,
        at most three) for the slots from ``slot + first`` on, sent there instead of
        silence if Python's frame comes too late; ``clear``: the call's cover from that
        slot on is dropped first. How many cannot be queued."""
        ...

    def next_slot(
        self,
    ) -> tuple[int, float, float, int, list[tuple[Any, bytes, Address, float]]] | None:
        """The next slot the thread finished: its number, time, how late the thread
        started it (s), how many slots it skipped just before it (a stall of the thread),
        and the datagrams read in it as ``(key, data, sender, arrival)``, ``arrival`` being
        when the datagram reached the host (the kernel's timestamp, on the clock of the
        slots' times; earlier than the slot's when it waited in the kernel while Python
        was behind). A slot missing between
        two and not skipped ran without a word (the ring was full): no datagrams."""
        ...

    def wake(self) -> int:
        """Reset the wake-up descriptor; call it before reading the slots."""
        ...

    def fileno(self) -> int:
        """Readable when the thread has finished a slot."""
        ...

    @property
    def rx_taken(self) -> int:
        """Usual packets the thread took itself, for the calls whose receive it held."""
        ...

    @property
    def rx_returned(self) -> int:
        """Times the thread gave a call's receive back (a packet it does not take)."""
        ...

    @property
    def handed(self) -> int:
        """Times a call's receive was handed to the thread (:meth:`own`)."""
        ...

    @property
    def parks(self) -> int:
        """Times a call's datagrams were held by the thread for a hand-over while Python
        was behind it (:meth:`own`)."""
        ...

    def own(self, calls: list[tuple[Any, int]], slot: int) -> int:
        """Of each ``(session, fd)``, hand the sessions whose receive is in its usual
        state (latched plain RTP, the detector running no model, nothing but it and a
        recording hearing the caller)
        to the thread, where every datagram the thread read for it has been worked, once
        Python has worked slot ``slot``; how many (``_rx.h``, ``_rxpy.h``). Where the
        thread is ahead of ``slot``, it first holds such a call's datagrams, each with its
        slot: the call is handed over once Python has worked the last one the thread gave
        it, and the thread takes the ones it held first; where the call is no longer in
        that state by then, Python gets them, each in its slot (:meth:`next_slot`)."""
        ...

    def reclaim(self, fd: int, session: Any, slot: int) -> None:
        """``session``'s receive state back from the thread, if it holds it, Python
        working (or having worked) slot ``slot``."""

    def prioritise(self, fifo: int, nice: int) -> None:
        """``SCHED_FIFO`` at priority ``fifo`` (0: not) and nice ``nice`` (0: not) for
        the thread; OSError where the operator does not allow it."""

    def close(self) -> None:
        """Stop the thread and close the sockets retired."""


def new_plane(rounds: int) -> Plane | None:
    """The media thread's plane (not started), or None where ``_plane.c`` was not built."""
    try:
        from callhook.edge._plane import Plane as NativePlane
    except ImportError:
        return None
    plane: Plane = NativePlane(rounds, capacity=EVENTS)
    return plane


def prioritise(plane: Plane, fifo: int, nice: int) -> None:
    """Give ``plane``'s thread ``SCHED_FIFO`` priority ``fifo`` and nice level ``nice`` (0:
    leave it), or say in one line why it keeps the normal priority."""
    if not (fifo or nice):
        return
    try:
        plane.prioritise(fifo, nice)
    except OSError as exc:
        logger.warning(
            "the media thread keeps the normal priority: SCHED_FIFO %d / nice %d "
            "refused (%s; [media] thread_fifo, thread_nice)",
            fifo,
            nice,
            exc.strerror or exc,
        )
    else:
        logger.info("the media thread runs at SCHED_FIFO %d, nice %d", fifo, nice)


def counters(plane: Plane, stale: int = 0) -> dict[str, float]:
    """``plane``'s counters as ``/api/stats`` shows them (``media_thread``), with ``stale``
    more frames made too late for their slot (the ones Python dropped itself)."""
    return {
        "late_slots": plane.late_slots,
        "max_late_ms": round(plane.max_late / 1e6, 3),
        "skipped_slots": plane.skipped,
        "fillers": plane.fillers,
        "covered": plane.covered,
        "stale_frames": plane.stale + stale,
        "lost_slots": plane.lost_ticks,
        "sent": plane.sent,
        "rx_taken": plane.rx_taken,
        "rx_handed": plane.handed,
        "rx_parks": plane.parks,
        "rx_returned": plane.rx_returned,
    }
