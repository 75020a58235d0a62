"""Conference rooms across workers: a participant whose call is on another process.

Every participant of a room is mixed on one process, the room's holder
(:func:`callhook.conference.wire.owner`: the same choice in every process, from the
application's and the room's names). A call whose ``connect_to_conference`` names a
room held elsewhere takes part through a WebSocket to the holder's private port
(``GET /conference/link``, cluster/siblings.py: the workers' token, as a web client's
ring across workers):

* the caller's process (:class:`RemoteSeat`) sends the join, the caller's option digits
  and its leaving as JSON (``conference/wire.py``), and each tick the caller's 20 ms of
  audio (one binary message of G.711 in the call's law); it gives what the room says to
  the call's action as the events a local room gives, and pushes each frame of the mix
  it receives into what the call's media session plays;
* the holder (:class:`LinkedParticipant`) seats the socket in the room like a local call:
  the frames it receives go into the participant's talk feed, and after each tick's mix
  the participant's frame of it goes down the socket.

Each side's feeds (``media/bridge.py``) absorb the two processes' ticks being out of
step, as a bridge's do. A socket that breaks takes the participant out: on the holder
as if its call had hung up; on the caller's side the action hears that it left the room
(``failed``), or, before it was in, that the room refused it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol, cast
from urllib.parse import urlencode

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

#: Frames waiting to go down a socket, at most (200 ms): beyond, audio is dropped, as a
#: congested network would drop it; the room's news always goes.
QUEUE = 10


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

    def audio(self, frame: bytes) -> None:
        if self.queue.qsize() >= QUEUE:
            self.dropped += 1
            return
        self.queue.put_nowait(frame)

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


class LinkedParticipant:
    """On the room's holder: a participant whose call is on another process."""

    def __init__(self, pid: str, app: str, name: str, law: Law, sender: _Sender) -> None:
        self.pid = pid
        self.app = app
        self.name = name
        self.law = law
        self.sender = sender
        self.talk: Feed | None = None
        self.hears: Feed | None = None

    def tell(self, event: RoomEvent) -> None:
        self.sender.text(event_message(event))
        if isinstance(event, RoomLeft | RoomRefused):
            self.sender.close()  # (its last word: the socket closes after it)

    def seat(self, talk: Feed, hears: Feed) -> None:
        self.talk, self.hears = talk, hears

    def unseat(self) -> None:
        self.talk = self.hears = None

    def heard(self, frame: bytes) -> None:
        """A frame of what the participant said."""
        if self.talk is not None and len(frame) == FRAME:
            self.talk.push(frame)

    def pump(self) -> None:
        """This tick's frame of the room, to the participant."""
        if self.hears is not None and (frame := self.hears.frame()) is not None:
            self.sender.audio(frame)


class RemoteSeat:
    """On the caller's process: its call in a room held by another process."""

    def __init__(self, links: RoomLinks, call: SipCall) -> None:
        self.links = links
        self.call = call
        self.up: Feed | None = None  # what the caller says, to the room
        self.down: Feed | None = None  # the room's mix, to the caller
        self.joined_at: float | None = None
        self.leaving = False
        self.sender: _Sender | None = None

    async def run(self, holder: Label, command: JoinRoom) -> None:
        """Join through ``holder``, and relay until the call is out of the room."""
        call, session = self.call, self.call.media.session
        query = urlencode(
            {
                "app": call.app.name,
                "pid": participant_id(call),
                "law": session.law,
                "call": call.call_id,
            }
        )
        try:
            ws = await self.links.siblings.socket_at(holder, f"{ROOM_PATH}?{query}", {})
        except ConnectionError as exc:
            logger.warning(
                "call %s: conference %r refused: its holder: %s", call.call_id, command.room, exc
            )
            call.leg.inject(RoomRefused("failed", f"the room's holder: {exc}"))
            return
        if self.leaving:  # (the action stopped meanwhile)
            await ws.close()
            return
        self.sender = _Sender(ws)
        self.sender.text(command_message(command))
        ended = False
        try:
            ended = await self._relay(ws)
        finally:
            self._unseat()
            self.sender.close()
            if not ended and not self.leaving:
                self._lost(command.room)

    async def _relay(self, ws: aiohttp.ClientWebSocketResponse) -> bool:
        """The holder's messages to the call; whether the room ended the participant."""
        call = self.call
        async for msg in ws:
            if msg.type is WSMsgType.BINARY:
                if self.down is not None and len(msg.data) == FRAME:
                    self.down.push(msg.data)
                continue
            if msg.type is not WSMsgType.TEXT:
                break
            try:
                event = read_event(json.loads(msg.data))
            except (ValueError, WireError) as exc:
                logger.error("call %s: its room's holder sent %s", call.call_id, exc)
                break
            if self.leaving:
                # (The action stopped before the room took it in: the holder lets it go,
                # and its media stays the call's own.)
                if isinstance(event, RoomLeft | RoomRefused):
                    return True
                continue
            if isinstance(event, RoomJoined):
                self._seat()
            elif isinstance(event, RoomLeft | RoomRefused):
                self._unseat()
                call.leg.inject(event)
                return True
            call.leg.inject(event)
        return False

    def _lost(self, room: str) -> None:
        """The socket broke (the holder stopped, or went away): the room is gone for it."""
        call = self.call
        if self.joined_at is None:
            logger.warning("call %s: conference %r: its holder went away", call.call_id, room)
            call.leg.inject(RoomRefused("failed", "the room's holder went away"))
            return
        seconds = round(self.links.now() - self.joined_at, 1)
        logger.warning("call %s: out of conference %r: its holder went away", call.call_id, room)
        call.leg.inject(RoomLeft("failed", seconds))

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
        if self.sender is not None:
            self.sender.text(command_message(RoomDigit(digit)))

    def leave(self) -> None:
        """The action stopped or the call ended: out at once; the holder is told."""
        self.leaving = True
        self._unseat()
        if self.sender is not None:
            self.sender.text(command_message(LeaveRoom()))

    def pump(self) -> None:
        """This tick's frame of what the caller said, to the holder."""
        if self.up is not None and self.sender is not None:
            frame = self.up.frame()
            if frame is not None:
                self.sender.audio(frame)


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
        if self._here:
            self._here = False
            self.links.conferences.leave(participant_id(self.call))
        elif self._remote is not None:
            self._remote.leave()
            self._remote = None
        elif self._joining is not None:
            self._joining.cancel()  # (still finding the holder: nothing to leave)
        self._joining = None


class RoomLinks:
    """This process's participants in rooms held elsewhere, and the others' in its own
    (see the module docstring)."""

    def __init__(
        self, conferences: Conferences, siblings: Siblings, now: Callable[[], float]
    ) -> None:
        self.conferences = conferences
        self.siblings = siblings
        self.now = now
        #: This process's calls in rooms held elsewhere, once in.
        self.seated: set[RemoteSeat] = set()
        #: The other processes' participants in this one's rooms.
        self.linked: set[LinkedParticipant] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def port(self, call: SipCall) -> RoomPort:
        """``call``'s way to the rooms."""
        return RoomPort(self, call)

    def start(self, work: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)  # (held: the loop keeps only weak references to tasks)
        task.add_done_callback(self._tasks.discard)
        return task

    def routes(self) -> list[web.RouteDef]:
        return [web.get(ROOM_PATH, self.serve_link, allow_head=False)]

    def pump(self) -> None:
        """Each tick, after the mix: every linked participant's frame goes its way."""
        for seat in self.seated:
            seat.pump()
        for linked in self.linked:
            linked.pump()

    async def close(self) -> None:
        """Stopping: every link ends (the other side's participants leave their rooms)."""
        for task in list(self._tasks):
            task.cancel()
        for linked in list(self.linked):
            linked.sender.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def serve_link(self, request: web.Request) -> web.StreamResponse:
        """Another process's participant in a room held here (see the module docstring)."""
        self.siblings.require_sibling(request)
        query = request.query
        app, pid, law, call = (query.get(k, "") for k in ("app", "pid", "law", "call"))
        if not (app and pid and call) or law not in ("ulaw", "alaw"):
            raise web.HTTPBadRequest()
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=64 * 1024)
        await ws.prepare(request)
        sender = _Sender(ws)
        name = f"call {call} (of {request.headers.get(HEADER, '?')})"
        who = LinkedParticipant(pid, app, name, cast(Law, law), sender)
        self.linked.add(who)
        joined = False
        try:
            async for msg in ws:
                if msg.type is WSMsgType.BINARY:
                    who.heard(msg.data)
                    continue
                if msg.type is not WSMsgType.TEXT:
                    break
                try:
                    command = read_command(json.loads(msg.data))
                except (ValueError, WireError) as exc:
                    logger.error("%s: its process sent %s", name, exc)
                    break
                if isinstance(command, JoinRoom):
                    if joined:
                        logger.error("%s: joined a second room on one link", name)
                        break
                    joined = True
                    self.conferences.join(who, command)
                elif isinstance(command, RoomDigit):
                    self.conferences.digit(pid, command.digit)
                else:
                    self.conferences.leave(pid)
        finally:
            self.linked.discard(who)
            if joined:
                self.conferences.leave(pid, who)  # (gone already, unless the link broke)
            sender.close()
            await sender.task
        return ws
