"""Conference rooms across workers: a participant whose call is on another process.

Every participant of a room is mixed on one process, the room's holder
(:func:`callhook.conference.wire.owner`: the same choice in every process, from the
application's and the room's names). A call whose ``connect_to_conference`` names a
room held elsewhere takes part through a WebSocket to the holder's private port
(``GET /conference/link``, cluster/siblings.py: the workers' token, as a web client's
ring across workers). One socket carries every such participant between two processes,
each a *seat* numbered by the caller's process:

* the caller's process (:class:`HolderLink`, a :class:`RemoteSeat` per call) sends each
  seat's join, option digits and leaving as JSON (``conference/wire.py``, with its
  ``seat``), and each tick one binary message with every seat's 20 ms of audio (a
  4-byte seat number, then 160 bytes of G.711 in the call's law, per seat); it gives
  what the room says to each call's action as the events a local room gives, and pushes
  each frame of the mix it receives into what the call's media session plays;
* the holder (:class:`OwnedLink`, a :class:`LinkedParticipant` per seat) seats each in
  its room like a local call: the frames it receives go into the participant's talk
  feed, and after each tick's mix one message carries every seat's frame of it back.

A message per tick per direction, whatever the number of participants: a message each
per participant cost the event loops more than the mix itself. Each side's feeds
(``media/bridge.py``) absorb the two processes' ticks being out of step, as a bridge's
do. A socket that breaks takes its participants out: on the holder as if their calls
had hung up; on the callers' side each action hears that it left the room (``failed``),
or, before it was in, that the room refused it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import struct
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Protocol, cast

import aiohttp
from aiohttp import WSMsgType, web

from callhook.cluster.siblings import HEADER, ROOM_PATH, Siblings
from callhook.conference.wire import (
    Label,
    RoomEvent,
    WireError,
    command_message,
    event_message,
    owner,
    read_command,
    read_event,
)
from callhook.events import JoinRoom, LeaveRoom, RoomDigit, RoomJoined, RoomLeft, RoomRefused
from callhook.media.bridge import FRAME, Feed
from callhook.media.g711 import Law
from callhook.telephony.conferences import Conferences, LocalParticipant, participant_id
from callhook.telephony.sipcall import SipCall

logger = logging.getLogger("callhook.conference")

#: Ticks of audio waiting to go down a socket, at most (200 ms): beyond, audio is
#: dropped, as a congested network would drop it; the rooms' news always goes.
QUEUE = 10
_SEAT = struct.Struct("!I")
_ENTRY = _SEAT.size + FRAME


def _batch(frames: list[tuple[int, bytes]]) -> bytes:
    """One tick's frames of several seats as one message."""
    return b"".join(_SEAT.pack(seat) + frame for seat, frame in frames)


def _unbatch(data: bytes) -> Iterator[tuple[int, bytes]]:
    """The (seat, frame) pairs of a message (a short tail, not a whole entry, is left)."""
    for at in range(0, len(data) - _ENTRY + 1, _ENTRY):
        yield _SEAT.unpack_from(data, at)[0], data[at + _SEAT.size : at + _ENTRY]


class _Socket(Protocol):
    async def send_bytes(self, data: bytes) -> None: ...

    async def send_str(self, data: str) -> None: ...

    async def close(self) -> Any: ...


class _Sender:
    """What goes down one socket, in order, sent by one task: the media tick never waits."""

    def __init__(self, ws: _Socket) -> None:
        self.ws = ws
        self.queue: asyncio.Queue[bytes | str | None] = asyncio.Queue()
        self.dropped = 0
        self.task = asyncio.get_running_loop().create_task(self._send())

    def audio(self, batch: bytes) -> None:
        if self.queue.qsize() >= QUEUE:
            self.dropped += 1
            return
        self.queue.put_nowait(batch)

    def text(self, message: dict[str, Any]) -> None:
        self.queue.put_nowait(json.dumps(message))

    def close(self) -> None:
        self.queue.put_nowait(None)

    async def _send(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
            while (item := await self.queue.get()) is not None:
                if isinstance(item, bytes):
                    await self.ws.send_bytes(item)
                else:
                    await self.ws.send_str(item)
        with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
            await self.ws.close()


# --- on the room's holder ----------------------------------------------------------------------


class OwnedLink:
    """On the holder: one other process's seats in this process's rooms."""

    def __init__(self, sender: _Sender, peer: str) -> None:
        self.sender = sender
        self.peer = peer
        self.seats: dict[int, LinkedParticipant] = {}

    def pump(self) -> None:
        """This tick's frame of the room, for each seat: one message."""
        frames = []
        for seat, who in self.seats.items():
            hears = who.hears
            if hears is not None and (frame := hears.frame()) is not None:
                frames.append((seat, frame))
        if frames:
            self.sender.audio(_batch(frames))


class LinkedParticipant:
    """On the holder: a participant whose call is on another process (a seat of a link)."""

    def __init__(
        self, link: OwnedLink, number: int, pid: str, app: str, name: str, law: Law
    ) -> None:
        self.link = link
        self.number = number  # its seat's, on the link
        self.pid = pid
        self.app = app
        self.name = name
        self.law = law
        self.talk: Feed | None = None
        self.hears: Feed | None = None

    def tell(self, event: RoomEvent) -> None:
        self.link.sender.text({"seat": self.number, **event_message(event)})
        if isinstance(event, RoomLeft | RoomRefused):
            self.link.seats.pop(self.number, None)  # (its last word)

    def seat(self, talk: Feed, hears: Feed) -> None:
        self.talk, self.hears = talk, hears

    def unseat(self) -> None:
        self.talk = self.hears = None

    def heard(self, frame: bytes) -> None:
        """A frame of what the participant said."""
        if self.talk is not None:
            self.talk.push(frame)


# --- on the caller's process --------------------------------------------------------------------


class HolderLink:
    """On the callers' process: the socket to one holder, and this process's seats there."""

    def __init__(self, links: RoomLinks, label: Label, ws: aiohttp.ClientWebSocketResponse):
        self.links = links
        self.label = label
        self.ws = ws
        self.sender = _Sender(ws)
        self.seats: dict[int, RemoteSeat] = {}
        self.closed = False

    async def read(self) -> None:
        """The holder's messages, each to its seat, until the socket ends."""
        try:
            async for msg in self.ws:
                if msg.type is WSMsgType.BINARY:
                    for seat, frame in _unbatch(msg.data):
                        remote = self.seats.get(seat)
                        if remote is not None:
                            remote.heard(frame)
                    continue
                if msg.type is not WSMsgType.TEXT:
                    break
                try:
                    message = json.loads(msg.data)
                    number = message.pop("seat") if isinstance(message, dict) else None
                    event = read_event(message)
                except (ValueError, KeyError, WireError) as exc:
                    logger.error("the rooms' holder (worker %s) sent %s", self.label, exc)
                    break
                remote = self.seats.get(number) if isinstance(number, int) else None
                if remote is not None:
                    remote.event(event)
        finally:
            self.closed = True
            if self.links.holders.get(self.label) is self:
                del self.links.holders[self.label]
            for remote in list(self.seats.values()):
                remote.lost()
            self.sender.close()

    def pump(self) -> None:
        """This tick's frame of what each seat's caller said: one message."""
        frames = []
        for seat, remote in self.seats.items():
            up = remote.up
            if up is not None and (frame := up.frame()) is not None:
                frames.append((seat, frame))
        if frames:
            self.sender.audio(_batch(frames))


class RemoteSeat:
    """On the caller's process: its call in a room held by another process."""

    def __init__(self, links: RoomLinks, call: SipCall) -> None:
        self.links = links
        self.call = call
        self.up: Feed | None = None  # what the caller says, to the room
        self.down: Feed | None = None  # the room's mix, to the caller
        self.joined_at: float | None = None
        self.leaving = False
        self.link: HolderLink | None = None
        self.seat = next(links.seat_numbers)
        self.room = ""
        self.over = asyncio.Event()

    async def run(self, holder: Label, command: JoinRoom) -> None:
        """Join through ``holder``, and wait until the call is out of the room."""
        call, self.room = self.call, command.room
        try:
            link = await self.links.holder_link(holder)
        except ConnectionError as exc:
            logger.warning(
                "call %s: conference %r refused: its holder: %s", call.call_id, command.room, exc
            )
            call.leg.inject(RoomRefused("failed", f"the room's holder: {exc}"))
            return
        if self.leaving:  # (the action stopped meanwhile)
            return
        if link.closed:  # (it ended as it was opened for another seat)
            call.leg.inject(RoomRefused("failed", "the room's holder went away"))
            return
        self.link = link
        link.seats[self.seat] = self
        join = {
            "seat": self.seat,
            "app": call.app.name,
            "pid": participant_id(call),
            "law": call.media.session.law,
            "call": call.call_id,
        }
        link.sender.text({**join, **command_message(command)})
        await self.over.wait()

    def event(self, event: RoomEvent) -> None:
        """The room's news, from the holder."""
        ends = isinstance(event, RoomLeft | RoomRefused)
        if ends:
            self._finish()
        if self.leaving:
            # (The action stopped before the room's answer came: the holder lets it go,
            # and the call's media stays its own.)
            return
        if isinstance(event, RoomJoined):
            self._seat()
        self.call.leg.inject(event)

    def heard(self, frame: bytes) -> None:
        if self.down is not None:
            self.down.push(frame)

    def lost(self) -> None:
        """The socket broke (the holder stopped, or went away): the room is gone for it."""
        joined = self.joined_at
        self._finish()
        if self.leaving:
            return
        call = self.call
        if joined is None:
            logger.warning("call %s: conference %r: its holder went away", call.call_id, self.room)
            call.leg.inject(RoomRefused("failed", "the room's holder went away"))
            return
        seconds = round(self.links.now() - joined, 1)
        logger.warning(
            "call %s: out of conference %r: its holder went away", call.call_id, self.room
        )
        call.leg.inject(RoomLeft("failed", seconds))

    def _finish(self) -> None:
        self._unseat()
        if self.link is not None:
            self.link.seats.pop(self.seat, None)
        self.over.set()

    def _seat(self) -> None:
        session = self.call.media.session
        law = session.law
        self.up, self.down = Feed(law, law), Feed(law, law)
        session.reclaim()  # (its receive comes back from the media thread: the link takes it)
        session.tells, session.tells_digits, session.hears = self.up, None, self.down
        self.joined_at = self.links.now()
        self.links.seated.add(self)

    def _unseat(self) -> None:
        if self.up is None:
            return
        self.links.seated.discard(self)
        self.up = self.down = None
        session = self.call.media.session
        session.reclaim()
        session.tells = session.hears = None

    def digit(self, digit: str) -> None:
        if self.link is not None and not self.leaving:
            self.link.sender.text({"seat": self.seat, **command_message(RoomDigit(digit))})

    def leave(self) -> None:
        """The action stopped or the call ended: out at once; the holder is told."""
        self.leaving = True
        self._unseat()
        if self.link is None:
            self.over.set()
        elif not self.link.closed:
            self.link.sender.text({"seat": self.seat, **command_message(LeaveRoom())})


class RoomPort:
    """A call's :class:`~callhook.telephony.leg.ConferencePort` where rooms may be held by
    another process: each join goes to the room's holder, here or there."""

    def __init__(self, links: RoomLinks, call: SipCall) -> None:
        self.links = links
        self.call = call
        self._here = False
        self._remote: RemoteSeat | None = None
        self._joining: asyncio.Task[None] | None = None

    def join(self, command: JoinRoom) -> None:
        # (A call's earlier room is over by now: left, refused or put out, its action done.)
        self._here, self._remote = False, None
        self._joining = self.links.start(self._join(command))

    async def _join(self, command: JoinRoom) -> None:
        links, call = self.links, self.call
        try:
            holder = owner(call.app.name, command.room, await links.siblings.members())
        except ValueError as exc:  # (not expected: this process is always a member)
            call.leg.inject(RoomRefused("failed", str(exc)))
            return
        if holder == links.siblings.label:
            self._here = True
            links.conferences.join(LocalParticipant(call), command)
            return
        self._remote = RemoteSeat(links, call)
        await self._remote.run(holder, command)

    def digit(self, digit: str) -> None:
        if self._here:
            self.links.conferences.digit(participant_id(self.call), digit)
        elif self._remote is not None:
            self._remote.digit(digit)

    def leave(self) -> None:
        joining, self._joining = self._joining, None
        if self._here:
            self._here = False
            self.links.conferences.leave(participant_id(self.call))
        elif self._remote is not None:
            self._remote.leave()
            self._remote = None
        elif joining is not None and not joining.done():
            joining.cancel()  # (still finding the holder: nothing to leave)


class RoomLinks:
    """This process's participants in rooms held elsewhere, and the others' in its own
    (see the module docstring)."""

    def __init__(
        self, conferences: Conferences, siblings: Siblings, now: Callable[[], float]
    ) -> None:
        self.conferences = conferences
        self.siblings = siblings
        self.now = now
        #: The sockets to the holders of rooms this process's calls are in, by label.
        self.holders: dict[Label, HolderLink] = {}
        #: The sockets from the other processes whose calls are in this one's rooms.
        self.owned: set[OwnedLink] = set()
        #: This process's calls in rooms held elsewhere, once in.
        self.seated: set[RemoteSeat] = set()
        self.seat_numbers = itertools.count(1)
        self._opening: dict[Label, asyncio.Future[HolderLink]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def linked(self) -> list[LinkedParticipant]:
        """The other processes' participants in this one's rooms."""
        return [who for link in self.owned for who in link.seats.values()]

    def port(self, call: SipCall) -> RoomPort:
        """``call``'s way to the rooms."""
        return RoomPort(self, call)

    def start(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)  # (held: the loop keeps only weak references to tasks)
        task.add_done_callback(self._tasks.discard)
        return task

    async def holder_link(self, label: Label) -> HolderLink:
        """The socket to ``label`` (opened on first use, once however many ask at once);
        :class:`ConnectionError` naming why it cannot be opened."""
        link = self.holders.get(label)
        if link is not None and not link.closed:
            return link
        opening = self._opening.get(label)
        if opening is None:
            opening = self._opening[label] = asyncio.get_running_loop().create_future()
            try:
                ws = await self.siblings.socket_at(label, ROOM_PATH, {})
            except ConnectionError as exc:
                opening.set_exception(exc)
                opening.exception()  # (retrieved: the others waiting get it too)
                raise
            finally:
                self._opening.pop(label, None)
            link = self.holders[label] = HolderLink(self, label, ws)
            self.start(link.read())
            opening.set_result(link)
            return link
        return await asyncio.shield(opening)

    def routes(self) -> list[web.RouteDef]:
        return [web.get(ROOM_PATH, self.serve_link, allow_head=False)]

    def pump(self) -> None:
        """Each tick, after the mix: every link's frames go their way, a message each."""
        for holder in self.holders.values():
            holder.pump()
        for link in self.owned:
            link.pump()

    async def close(self) -> None:
        """Stopping: every link ends (the other side's participants leave their rooms)."""
        for holder in list(self.holders.values()):
            with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
                await holder.ws.close()
        for link in list(self.owned):
            link.sender.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def serve_link(self, request: web.Request) -> web.StreamResponse:
        """Another process's participants in rooms held here (see the module docstring)."""
        self.siblings.require_sibling(request)
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=1 << 20)
        await ws.prepare(request)
        link = OwnedLink(_Sender(ws), request.headers.get(HEADER, "?"))
        self.owned.add(link)
        try:
            async for msg in ws:
                if msg.type is WSMsgType.BINARY:
                    for seat, frame in _unbatch(msg.data):
                        who = link.seats.get(seat)
                        if who is not None:
                            who.heard(frame)
                    continue
                if msg.type is not WSMsgType.TEXT:
                    break
                try:
                    self._command(link, json.loads(msg.data))
                except (ValueError, WireError) as exc:
                    logger.error("worker %s's conference link sent %s", link.peer, exc)
                    break
        finally:
            self.owned.discard(link)
            for who in list(link.seats.values()):
                self.conferences.leave(who.pid, who)  # (its process went: as a hang-up)
            link.seats.clear()
            link.sender.close()
            await link.sender.task
        return ws

    def _command(self, link: OwnedLink, message: object) -> None:
        """One seat's command; :class:`WireError` when the message is none."""
        seat = message.get("seat") if isinstance(message, dict) else None
        if not isinstance(seat, int) or isinstance(seat, bool) or not 0 <= seat < 2**32:
            raise WireError("a room link's message names its seat (0 to 2**32 - 1)")
        assert isinstance(message, dict)
        command = read_command(message)
        if isinstance(command, JoinRoom):
            app, pid, law, call = (message.get(k) for k in ("app", "pid", "law", "call"))
            if not (isinstance(app, str) and isinstance(pid, str) and isinstance(call, str)):
                raise WireError("join: app, pid and call are strings")
            if law not in ("ulaw", "alaw") or seat in link.seats:
                raise WireError(f"join: law {law!r}, seat {seat} (taken: {seat in link.seats})")
            name = f"call {call} (of {link.peer})"
            who = LinkedParticipant(link, seat, pid, app, name, cast(Law, law))
            link.seats[seat] = who
            self.conferences.join(who, command)
            return
        found = link.seats.get(seat)
        if found is None:
            return  # (out of its room already: a digit or a leave that crossed its end)
        if isinstance(command, RoomDigit):
            self.conferences.digit(found.pid, command.digit)
        else:
            self.conferences.leave(found.pid, found)
