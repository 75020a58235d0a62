"""RTP sockets and the one media tick that drives every call's audio, in and out.

Each call has its own UDP port (an even port from the configured range, as
RFC 3550 §11 suggests). The sockets are not registered with the event loop. The
media thread (:mod:`callhook.edge.plane`, one native thread per process) keeps the
20 ms grid: at each slot it sends the frames queued for it (silence where Python's
has not come), reads every socket, and wakes the loop. For each slot it finished, in
order (:mod:`callhook.edge.slots`), :meth:`MediaEngine._slot` does all media work for
all calls at once, with the slot's own time (docs/architecture.md):

1. receive: the datagrams the thread read in the slot (a call whose detector runs no
   model has its usual packets taken by the thread itself, :meth:`Plane.own
   <callhook.edge.plane.Plane.own>`, handed over after each slot's work). The usual RTP packets (the
   latched peer's next packet, plain, in the call's codec) are taken in C in one call
   (:func:`callhook.media.inlet.take_all`), and each other datagram goes to its
   session's :meth:`~callhook.media.session.MediaSession.receive` (or
   ``rtcp_received``);
2. the audio frames received in step 1, every call's at once: decoded, measured and
   handed to the calls' detectors (:mod:`callhook.edge.detection`);
3. every call's packet: the usual one (the prompt's next frame or silence, nothing
   else due on the call) made in C for every call in one call
   (:func:`callhook.media.outlet.tick_all`), the others by each session's
   :meth:`~callhook.media.session.MediaSession.tick`; all queued for the thread's slot
   :data:`~callhook.edge.plane.AHEAD` slots on (a call on hold is made quiet: the
   thread sends nothing in its place), with the playing prompts' coming frames, which
   the thread sends where Python's come too late
   (:func:`callhook.media.outlet.cover_all`); then the RTCP reports that are due;
4. the legs of calls whose sessions have events are woken (the calls with a report
   due or news picked in C: :func:`callhook.media.outlet.due_all`);
5. :attr:`MediaEngine.after_tick`, once the packets are queued: ``serve`` collects the
   garbage collector's young generations there (:mod:`callhook.serving.collector`).

Python may run behind the thread (a collection, a busy loop, another process on the
core): the far end still hears a packet every 20 ms, and Python works through every
slot in order (20 ms of work at a time, so SIP is not kept waiting long), so each
call's prompts and key presses keep the wire's time. Its frames made too late for their
slot are dropped (:attr:`MediaEngine.stale_frames`).

Where the thread's extension is not built, or with ``thread=False``, the same work runs
on a timer of the event loop (:meth:`MediaEngine._tick`): one ``epoll`` poll over every
call's socket and one ``recvfrom`` per ready socket, repeated at most :data:`ROUNDS`
rounds (:class:`~callhook.edge.udp.Udp`), and the packets sent at once. That tick keeps
its phase on a fixed 20 ms grid: after a late tick the missed slots run at once (up to
:data:`MAX_CATCH_UP`); after a longer stall every missed slot is skipped and the grid
starts again from now, and every call's prompt ends that much later. It is the reference
the thread is tested against (tests/unit/edge/test_plane.py).

A call whose audio does not arrive over UDP (the web phone's WebSocket leg,
:mod:`callhook.telephony.webphone`; a ``connect`` to a WebSocket server,
:mod:`callhook.telephony.websocketleg`) takes part in the same tick through
:meth:`MediaEngine.attach`: the packets it is given wait in its inbox for
step 1 (at most :data:`ROUNDS` a tick, as a socket's), or its paced source
gives exactly one each tick; step 3 hands its session's packet to its sender
at once instead of a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import cast

from callhook.clock import TickClock
from callhook.edge.detection import Detection
from callhook.edge.overload import Overload
from callhook.edge.plane import AHEAD, COVER, Plane, counters, new_plane, prioritise
from callhook.edge.roster import Roster, Stream
from callhook.edge.rtpports import RtpPorts
from callhook.edge.slots import Received, SlotReader
from callhook.edge.streammetrics import count_ended
from callhook.edge.udp import Address, Udp, new_udp
from callhook.media import frames, gate, inlet, mixing, outlet
from callhook.media.player import Player
from callhook.media.session import MediaSession
from callhook.monitoring import prometheus

logger = logging.getLogger("callhook.media")

TICK = 0.02
#: Packets read from one socket in one tick at most (50 a second is normal).
ROUNDS = 6
#: Slots a late tick catches up on (60 ms: within a far end's jitter buffer).
MAX_CATCH_UP = 3

#: Packets a socketless stream's inbox holds at most (a second's worth): a flood beyond
#: that is dropped, as a socket's kernel buffer would drop it.
INBOX = 50


_python_logged = False
_thread_logged = False


def _say_if_no_thread() -> None:
    """Say once if the media tick runs on the event loop: ``_plane.c`` was not built."""
    global _thread_logged
    if not _thread_logged:
        _thread_logged = True
        logger.warning(
            "the media tick runs on the event loop: the media thread's extension "
            "(callhook/edge/_plane.c) is not built; rerun scripts/setup where a C compiler is "
            "(audio then waits whenever the loop is busy)"
        )


def _say_if_in_python() -> None:
    """Say once if the usual packets and frames run in Python (no extension built)."""
    global _python_logged
    missing = [m.__name__ for m in (inlet, outlet, gate, frames, mixing) if not m.native()]
    if missing and not _python_logged:
        _python_logged = True
        logger.warning(
            "the usual media path in Python: the native extensions of %s are not built; "
            "rerun scripts/setup where a C compiler is (more CPU per call)",
            ", ".join(missing),
        )


class MediaEngine:
    """All calls' RTP ports and the shared media tick."""

    def __init__(
        self,
        host: str,
        first_port: int = 20000,
        last_port: int = 29999,
        *,
        thread: bool = True,
        max_lag: float = 0.0,
        fifo: int = 0,
        nice: int = 0,
        thread_receive: bool = True,
    ) -> None:
        """``thread``: the media thread where it is built (else the loop's timer);
        ``max_lag``: how far behind the wire the tick may run before :attr:`overload`
        (seconds; 0: never); ``fifo``, ``nice``: the thread's scheduling (0: as is);
        ``thread_receive``: the media thread takes the usual packets of calls whose
        detector runs no model (edge/_rx.h; else Python takes every packet)."""
        self.loop = asyncio.get_running_loop()
        self.streams: dict[int, Stream] = {}  # by port
        # The tick's lists of the streams (None: made from them at the next tick).
        self._roster: Roster | None = None
        # Every call's sockets; each one's key: its stream, and its session for the RTP
        # one (None for RTCP), which inlet.take_all reads.
        self._udp: Udp[tuple[Stream, MediaSession | None]] = new_udp(ROUNDS)
        #: The range's free ports (edge/rtpports.py).
        self.ports = RtpPorts(host, first_port, last_port)
        self._handle: asyncio.TimerHandle | None = None
        self._next = 0.0
        self.late_ticks = 0
        self.send_errors = 0
        self.faults = 0  # exceptions sessions raised (each a bug, contained to its call)
        self._detection = Detection(self._detection_fault)  # step 2
        self._due_faults = 0  # outlet.due_all calls that raised
        self._attached = 0  # the last socketless stream's key (they count down from -1)
        self._socketless: dict[int, Stream] = {}
        #: The sockets :meth:`open` took: closed by :meth:`close` only, never :meth:`release`.
        self._opened: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        # How late each tick ran (ms), the last minute's worth: the media's health.
        self.lateness: deque[float] = deque(maxlen=3000)
        self.durations: deque[float] = deque(maxlen=3000)  # ms each tick took
        #: CPU seconds the event loop's thread spent in media ticks (with the young
        #: collections after them): with that thread's whole CPU time (``/api/stats``), it
        #: splits what the media plane costs from what the calls' control costs.
        self.tick_cpu = 0.0
        #: Called at the end of each tick, once its packets are out: serve collects the
        #: collector's young generations there (collector.py), not in mid-tick.
        self.after_tick: Callable[[], None] | None = None
        #: The conference rooms' mixing (telephony/conferences.py): each tick, after every
        #: call's packets are taken in and measured, before any call's packet is made.
        self.mixing: Callable[[], None] | None = None
        #: The media thread (edge/plane.py), None: the tick runs on the loop's clock.
        self.plane: Plane | None = new_plane(ROUNDS) if thread else None
        if thread and self.plane is None:
            _say_if_no_thread()
        #: Frames made too late for their slot: the media thread had sent silence.
        self.stale_frames = 0
        #: The calls' RTP descriptors the thread has had no frame for yet: where the first
        #: is too late, it still goes, to tell the thread where the call's audio goes
        #: (edge/_plane.c's learn_line), else the thread would send nothing in its place.
        self._untaught: set[int] = set()
        self._priority = (fifo, nice)
        self.thread_receive = thread_receive
        #: The last slot whose calls' ticks ran (a take-back of a call's receive from the
        #: media thread does the slots' ends after it: Plane.reclaim).
        self._worked = -1
        #: The slot the last tick's frames were for (a jump: slots the thread skipped).
        self._target = 1 << 62
        #: How far the calls' media has been worked: their actions' clock (clock.py).
        self.clock = TickClock()
        #: Whether new calls are refused: the media runs behind (edge/overload.py).
        self.overload = Overload(max_lag)
        #: Reads the thread's slots in order (edge/slots.py); None: no thread.
        self.slots: SlotReader | None = None
        if self.plane is not None:
            self.slots = SlotReader(self.plane, self.loop, self._slot, TICK)
        _say_if_in_python()

    def allocate(self) -> tuple[socket.socket, int]:
        """Bind a UDP socket on the next free even port of the range."""
        return self.ports.allocate()

    async def open(
        self, session: MediaSession, sock: socket.socket, port: int, wake: Callable[[], None]
    ) -> None:
        """Make ``session`` take part in the tick from now, on ``sock``."""
        stream = Stream(session, sock, port, wake, self.ports.rtcp_socket(sock, port))
        self._opened.add(sock)
        stream.fd = sock.fileno()
        session.batched = True
        session.media_clock = self.clock
        self._roster = self._adding(port, stream)
        self.streams[port] = stream
        if self.plane is not None:
            self.plane.add(sock, (stream, session), alaw=session.law == "alaw")
            if session.srtp is None:  # (SRTP goes as it is made: nothing to learn)
                self._untaught.add(stream.fd)
            session.reclaimer = functools.partial(self._reclaim, stream.fd)
            if stream.rtcp is not None:
                self.plane.add(stream.rtcp, (stream, None))
        else:
            self._udp.add(sock, (stream, session))
            if stream.rtcp is not None:
                self._udp.add(stream.rtcp, (stream, None))
        self._start()

    def attach(
        self,
        session: MediaSession,
        out: Callable[[bytes], None],
        wake: Callable[[], None],
        pull: Callable[[], tuple[bytes, tuple[str, int]] | None] | None = None,
    ) -> int:
        """Make ``session`` take part in the tick with no socket: what it sends goes to
        ``out``; what it receives is given with :meth:`deliver`, or taken from ``pull``
        once every tick (a source that paces itself). Returns the stream's key (a
        negative number, never a port), for :meth:`deliver` and :meth:`close`."""
        self._attached -= 1
        key = self._attached
        stream = Stream(session, None, key, wake, out=out, inbox=deque(maxlen=INBOX), pull=pull)
        session.batched = True
        session.media_clock = self.clock
        self._roster = self._adding(key, stream)
        self.streams[key] = self._socketless[key] = stream
        self._start()
        return key

    def _adding(self, key: int, stream: Stream) -> Roster | None:
        """The roster once ``stream`` is in :attr:`streams` under ``key`` (None: made
        whole at the next tick, as where a stream took another's key's place)."""
        if self._roster is None or key in self.streams:
            return None
        return self._roster.adding(stream)

    def _start(self) -> None:
        """Tick from now on, if not ticking yet: on the media thread's slots, or on the
        loop's clock where there is no thread."""
        plane = self.plane
        if plane is not None:
            if not plane.running:
                plane.start()
                assert self.slots is not None
                self.loop.add_reader(plane.fileno(), self.slots.read)
                prioritise(plane, *self._priority)
        elif self._handle is None:
            self._next = self.loop.time() + TICK
            self._handle = self.loop.call_at(self._next, self._tick)

    def deliver(self, key: int, data: bytes, source: tuple[str, int]) -> None:
        """A packet for the socketless stream ``key``, received at the next tick."""
        stream = self.streams.get(key)
        if stream is not None and stream.inbox is not None:
            stream.inbox.append((data, source))

    def release(self, sock: socket.socket, port: int) -> None:
        """Give back a port that :meth:`allocate` bound but :meth:`open` never used (a
        socket that was opened is :meth:`close`'s: the media thread may hold it still)."""
        if port not in self.streams and sock not in self._opened:
            sock.close()
            self.ports.free(port)

    def _reclaim(self, fd: int, session: MediaSession) -> None:
        """``session``'s receive state back from the media thread (MediaSession.reclaim)."""
        if self.plane is not None:
            self.plane.reclaim(fd, session, self._worked)

    def close(self, port: int) -> None:
        stream = self.streams.pop(port, None)
        if stream is not None:
            # (What the thread held is the call's: its last counts, for whoever reads them.)
            try:
                stream.session.reclaim()
            except MemoryError:
                self._fault(stream, "closing")
            stream.session.reclaimer = None
            stream.session.media_clock = None
            count_ended(stream.session)  # (/metrics)
        self._socketless.pop(port, None)
        if stream is not None and self._roster is not None:
            try:
                self._roster = self._roster.removing(stream)
            except ValueError:  # (a bug) made again from the streams at the next tick
                logger.error(
                    "%s: its stream was not in the media tick's roster", stream.session.label
                )
                self._roster = None
        if stream is not None and stream.sock is not None:
            for s in (stream.sock, stream.rtcp):
                if s is None:
                    continue
                if self.plane is not None:
                    self._untaught.discard(s.fileno())
                    self.plane.retire(s)  # closed once the thread lets go of it
                    continue
                self._udp.remove(s)
                s.close()
            self.ports.free(port)
        if not self.streams:
            self.overload.calm()  # no call left to be behind for (nor a tick to say so)
            self.clock.stop()  # (nor a clock: the next call's starts at its first tick)
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None

    def _slot(self, slot: int, when: float, received: Received) -> None:
        """The media thread's slot ``slot`` (at ``when``): its work (edge/slots.py reads
        them in order)."""
        if not self.streams:
            self.overload.tick(0.0, time.monotonic())
            return  # (the thread goes on between calls: nothing to do)
        cpu = time.thread_time()
        # (The thread's clock, read afresh: uvloop's loop.time() is the loop's iteration
        # start, in whole milliseconds.)
        started = time.monotonic()
        lag = started - when
        self.lateness.append(lag * 1000)
        prometheus.MEDIA_TICK_LATENESS.observe(max(lag, 0.0))
        self.overload.tick(lag, started)
        self._worked = slot - 1
        try:
            self._work(when, received, slot + AHEAD)
        finally:
            self.durations.append((time.monotonic() - started) * 1000)
            if self.after_tick is not None:
                self.after_tick()
            self.tick_cpu += time.thread_time() - cpu

    def thread_stats(self) -> dict[str, float]:
        """The media thread's counters (empty where the tick runs on the loop)."""
        return {} if self.plane is None else counters(self.plane, self.stale_frames)

    def _tick(self) -> None:
        cpu = time.thread_time()
        now = self.loop.time()
        self.lateness.append((now - self._next) * 1000)
        prometheus.MEDIA_TICK_LATENESS.observe(max(now - self._next, 0.0))
        self.overload.tick(now - self._next, now)
        try:
            self._work(now, self._udp.receive())
        finally:
            # Whatever happened, the tick goes on: every call's audio depends on it.
            self._schedule(now)
            if self.after_tick is not None:
                self.after_tick()
            self.tick_cpu += time.thread_time() - cpu

    def _work(
        self,
        now: float,
        received: Sequence[inlet.Datagram],
        slot: int | None = None,
    ) -> None:
        """One tick at ``now`` with the datagrams ``received`` in it; its packets go at once
        (no ``slot``) or in the media thread's ``slot``."""
        wall = time.time()
        self.clock.advance(now)
        self._receive(now, received)
        if self._socketless:
            self._receive_attached(now)
        roster = self._roster
        if roster is None:
            roster = self._roster = Roster.of(list(self.streams.values()))
        if slot is not None:
            if slot > self._target + 1:
                # The thread skipped slots after a stall of its own, and Python skips them
                # too: each call's audio resumes where it was, a frame for each slot
                # skipped behind the prompts' cover given before for the slots after. That
                # is withdrawn and given again from this tick's frames (else a late slot
                # would play the prompt ahead, and the next on time play it again).
                outlet.uncover(roster.sending)
            self._target = slot
        self._detection.run(roster.sessions)
        if self.mixing is not None:
            self.mixing()
        plane = self.plane
        # Python is behind the thread: this tick's frames miss their slot, or may (the
        # thread may run the next slot, or two, while this tick works). A prompt about
        # to begin begins with silence up to a slot the thread has still to run (AHEAD
        # on from its next, as an on-time tick's frames are), the cover taking it there;
        # beyond the cover's reach, or for its next digit, it waits for a tick that is
        # on time. Either way it is heard from its start.
        held: list[Player] = []
        if plane is not None and slot is not None and slot <= plane.slot + 1:
            lead = plane.slot + AHEAD - slot
            lead = lead if lead < COVER else 0
            held = [s.player for s, _ in roster.sending if s.player.hold_start(lead)]
        try:
            self._send_all(roster, now, wall, slot)
        finally:
            for player in held:
                player.resume()
        slots = self.slots
        if (
            plane is not None
            and slot is not None
            and slots is not None
            and not slots.backlog
            and self.thread_receive
        ):
            # Every datagram read from the thread is worked: the calls whose receive is in
            # its usual state go to the thread (edge/_rx.h), until they need Python again.
            plane.own(roster.sending, slot - AHEAD)

    def _send_all(self, roster: Roster, now: float, wall: float, slot: int | None) -> None:
        """Step 3: every call's packet, at once (no ``slot``) or for the thread's ``slot``,
        the playing prompts' cover with them; then the RTCP reports due."""
        streams = roster.streams
        plane = self.plane
        # The usual packets are made in C (media/outlet.py); the other calls' in Python.
        wired = roster.wired
        batch, rest = outlet.tick_all(roster.sending, now)
        verbatim: list[tuple[int, bytes, Address]] = []
        for stream in [wired[i] for i in rest] + roster.unwired:
            try:
                self._send(stream, now, batch, verbatim, slot)
            except Exception:
                self._fault(stream, "sending")
        if slot is not None:
            self._worked = slot - AHEAD
        # Most calls have no RTCP report due and no news: those are not visited (outlet.py).
        try:
            due = outlet.due_all(roster.reporting, now)
        except Exception:  # (out of memory): every call is visited, the batch still goes
            self.faults += 1
            self._due_faults += 1
            if self._due_faults == 1:  # (it may fail every tick: logged once)
                logger.exception("choosing the calls with a report or news failed")
            due = list(range(len(streams)))
        for i in due:
            try:
                self._report(streams[i], now, wall)
            except Exception:
                self._fault(streams[i], "sending")
        if plane is None:
            # A full buffer or an ICMP error for a peer that went away costs that
            # packet: the next frame goes out 20 ms later anyway.
            self.send_errors += self._udp.send(batch + verbatim)
        elif slot is not None:
            first: list[tuple[int, bytes, Address]] = []
            if self._untaught:
                first = [item for item in batch if item[0] in self._untaught]
                self._untaught.difference_update(fd for fd, _, _ in first + verbatim)
            if slot >= plane.slot:
                self.send_errors += plane.send(batch, slot) if batch else 0
                self.send_errors += plane.send(verbatim, slot, True) if verbatim else 0
            else:  # too late for its slot: the thread sent the prompt's cover or silence
                self.late_ticks += 1
                self.stale_frames += len(batch) - len(first) + len(verbatim)
                # (A call's first frame goes anyway: the thread learns the call from it.)
                self.send_errors += plane.send(first, slot) if first else 0
            # The playing prompts' coming frames, for the slots Python may reach late (on
            # a late tick too: those past the thread's are still to come). What the thread
            # could not take is withdrawn and given again from the next tick.
            cover = outlet.cover_all(roster.sending, COVER)
            if cover and plane.cover(cover, slot):
                outlet.uncover(roster.sending)

    def _send(
        self,
        stream: Stream,
        now: float,
        batch: list[tuple[int, bytes, Address]],
        verbatim: list[tuple[int, bytes, Address]],
        slot: int | None,
    ) -> None:
        """One call's packet made by its session: to its sender, or into ``batch``
        (``verbatim`` for SRTP: the media thread neither renumbers nor fills it in)."""
        session = stream.session
        data = session.tick(now)
        if data is not None and stream.out is not None:
            stream.out(data)
        elif data is not None and session.remote is not None and stream.sock is not None:
            (batch if session.srtp is None else verbatim).append((stream.fd, data, session.remote))
        elif self.plane is not None and stream.sock is not None and slot is not None:
            self.plane.quiet(stream.fd, slot)  # on hold: nothing in its place from then

    def _report(self, stream: Stream, now: float, wall: float) -> None:
        """The call's RTCP report when one is due, and its leg woken when it has news.

        The reference of ``outlet.due_all``, which leaves out the calls for which this
        has nothing to do: a change here is made there too (tests/unit/media/test_outlet.py)."""
        session = stream.session
        if stream.rtcp is not None:
            # What the media thread sent, where it numbers and fills in the packets (not
            # SRTP: those go as Python made them, counted by their sender).
            plane = self.plane
            wire = plane.tally(stream.fd) if plane is not None and session.srtp is None else None
            report = session.rtcp_report(now, wall, wire)  # None: not due (every ~5 s)
            destination = session.rtcp_destination() if report is not None else None
            if report is not None and destination is not None:
                with contextlib.suppress(OSError):
                    stream.rtcp.sendto(report, destination)
        transcript = session.transcriber is not None and session.transcriber.pieces
        if session.events or session.utterances or session.timed_out or transcript:
            stream.wake()

    def _fault(self, stream: Stream, doing: str, exc: BaseException | None = None) -> None:
        """A session raised ``exc`` (a bug): contained to its call, logged the first time
        (a packet that raises once may come 50 times a second)."""
        self.faults += 1
        stream.faults += 1
        if stream.faults == 1:
            logger.error(
                "%s: media %s failed; the call goes on",
                stream.session.label,
                doing,
                exc_info=exc if exc is not None else True,
            )

    def _detection_fault(self, session: MediaSession) -> None:
        """Step 2 raised in ``session``'s detectors."""
        roster = self._roster
        stream = roster.stream_of(session) if roster is not None else None
        if stream is not None:
            self._fault(stream, "detecting")

    def _schedule(self, now: float) -> None:
        self.durations.append((self.loop.time() - now) * 1000)
        self._next += TICK
        behind = self.loop.time() - self._next
        if behind > 0:
            # Late (a GC pass, a busy core): run the missed slots at once, so every
            # call's media clock stays on time and the far end's jitter buffer
            # absorbs the burst; after a longer stall, start again from now.
            self.late_ticks += 1
            if behind > MAX_CATCH_UP * TICK:
                self._next += (int(behind / TICK) + 1) * TICK
        # No call left (the last one closed during this tick): stop until one opens.
        self._handle = self.loop.call_at(self._next, self._tick) if self.streams else None

    def _receive_attached(self, now: float) -> None:
        for stream in list(self._socketless.values()):
            if stream.pull is not None:
                try:
                    paced = stream.pull()
                    if paced is not None:
                        stream.session.receive(paced[0], paced[1], now)
                except Exception:
                    self._fault(stream, "receiving")
            inbox = stream.inbox
            for _ in range(min(ROUNDS, len(inbox) if inbox else 0)):
                assert inbox is not None
                data, source = inbox.popleft()
                try:
                    stream.session.receive(data, source, now)
                except Exception:
                    self._fault(stream, "receiving")

    def _receive(self, now: float, received: Sequence[inlet.Datagram]) -> None:
        # The usual RTP packets are taken in C (media/inlet.py); Python gets the rest.
        # Each: ((stream, session or None for RTCP), data, source[, arrival]); a list
        # (the thread's slot, or the loop's sockets read), as take_all needs.
        rest, faults = inlet.take_all(cast(inlet.Received, received), now)
        for (stream, _), exc in faults:
            self._fault(stream, "receiving", exc)
        for item in rest:
            (stream, session), data, address = item[0], item[1], item[2]
            try:
                if session is not None:
                    session.receive(data, address, now, item[3] if len(item) == 4 else None)
                else:
                    stream.session.rtcp_received(data, address, now)
            except Exception as exc:
                self._fault(stream, "receiving", exc)  # that packet is lost, nothing else

    def shutdown(self) -> None:
        for port in list(self.streams):
            self.close(port)
        self._udp.close()
        if self.plane is not None:
            if self.plane.running:
                self.loop.remove_reader(self.plane.fileno())
            self.plane.close()
            if self.slots is not None:
                self.slots.closed = True
