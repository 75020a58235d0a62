"""A ``connect`` far leg that is a WebSocket server: the socket, its pacing, its end.

:class:`WebSocketLeg` is one such call (the protocol is :mod:`callhook.telephony.wsprotocol`,
the decisions docs/behaviour.md's). callhook is the client (aiohttp's): the
connection obeys the egress policy like every other fetch (``[egress]``) and
checks a ``wss://`` server's certificate against the system CAs, or only
``[sip] tls_ca`` when set. Once the handshake is done the leg is *answered*: it
gets a :class:`~callhook.media.session.MediaSession` that takes part in the one
media tick with no socket (:meth:`MediaEngine.attach
<callhook.edge.mediaengine.MediaEngine.attach>`), so joining it to the caller, a
whisper of ``secondary_call``, recording and transcription are a SIP far leg's:

* what the session sends each tick becomes a binary frame (20 ms of linear PCM)
  or, for a relayed digit in v2, a ``dtmf`` message
  (:class:`~callhook.telephony.wsprotocol.Outgoing`); a writer task sends them in order,
  and a server that stops reading loses the oldest frames beyond
  :data:`MAX_QUEUED`, never memory;
* what the server sends goes into a :class:`~callhook.media.pacer.Pacer`, from
  which the tick takes exactly one frame (as an RTP packet into the session: the
  path of every far end's audio), silence when it is dry.

The leg ends when the server sends ``call_hangup`` or closes (its raw cause), when
the connection is lost (``failed``, 1006), or when callhook hangs it up
(:meth:`hang_up`: ``call_hangup``, then a Close frame).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from callhook import __version__
from callhook.edge.egress import Egress
from callhook.edge.mediaengine import MediaEngine
from callhook.media.pacer import Pacer
from callhook.media.rtp import RtpSender
from callhook.media.session import MediaSession
from callhook.telephony.wsprotocol import (
    BAD_HANDSHAKE,
    BAD_TLS,
    BAD_URL,
    NO_CONNECTION,
    NO_NAME,
    OFFERED,
    PCMU,
    TELEPHONE_EVENT,
    UNCLASSIFIED,
    V2,
    Clear,
    Hangup,
    Other,
    Outgoing,
    chosen,
    close_cause,
    handshake_cause,
    hangup_message,
    incoming_frame,
    parse,
    start_message,
)

logger = logging.getLogger("callhook.websocket")

#: Messages waiting for a slow server at most (5 s of frames): older ones are dropped.
MAX_QUEUED = 250
#: The largest message accepted from the server (a minute of audio).
MAX_MESSAGE_BYTES = 8000 * 2 * 60
#: Seconds the connection and handshake may take (the connect's answer timeout, which
#: drops the attempt, is usually shorter).
CONNECT_TIMEOUT = 60.0
_SILENCE_FRAME = bytes(320)


class ConnectFailed(Exception):
    """The call never reached the server: the raw cause, and why (for the log)."""

    def __init__(self, raw: int, why: str) -> None:
        super().__init__(why)
        self.raw = raw


@dataclass
class Ended:
    """How the leg ended: the ``call_cause`` and ``call_raw_cause`` it reports."""

    cause: str
    raw_cause: str


class WebSocketLeg:
    """One call to a WebSocket server (see the module docstring).

    ``answered(session, key)`` is called once the session takes part in the tick;
    ``ended(cause, raw_cause)`` exactly once, at the end, whatever happened.
    """

    def __init__(
        self,
        url: str,
        call: dict[str, Any],
        media: MediaEngine,
        *,
        label: str,
        egress: Egress | None,
        ca: ssl.SSLContext | None,
        answered: Callable[[MediaSession, int], None],
        ended: Callable[[str, str], None],
        wake: Callable[[MediaSession], None],
    ) -> None:
        self.url = url
        self.call = call
        self.media = media
        self.label = label
        self.egress = egress
        self.ca = ca
        self._answered = answered
        self._ended = ended
        self._wake = wake
        self.protocol = ""
        self.session: MediaSession | None = None
        self.pacer = Pacer()
        self._sender = RtpSender(PCMU)
        self._queue: deque[bytes | str] = deque()
        self._ready = asyncio.Event()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._hangup: Ended | None = None  # set when callhook's side ends the call
        self._ignored: set[str] = set()
        self.dropped_messages = 0
        self._task: asyncio.Task[None] | None = None
        self._remote = ("websocket", 0)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def hang_up(self, cause: str) -> None:
        """End the call from callhook's side: while connecting, give up; once connected,
        ``call_hangup`` then a Close frame."""
        if self._hangup is not None:
            return
        self._hangup = Ended(cause, "")
        if self._ws is None:
            if self._task is not None:
                self._task.cancel()
            return
        self._queue.append(hangup_message(cause))
        self._ready.set()

    # --- the connection -------------------------------------------------------------------

    async def _run(self) -> None:
        outcome = Ended("failed", str(UNCLASSIFIED))
        try:
            async with self._client() as client:
                try:
                    ws = await self._connect(client)
                except ConnectFailed as exc:
                    logger.warning("%s: cannot reach %s: %s", self.label, self.url, exc)
                    outcome = Ended(handshake_cause(exc.raw), str(exc.raw))
                    return
                self._ws = ws
                self.protocol = chosen(ws.protocol)
                outcome = await self._connected(ws)
        except asyncio.CancelledError:
            outcome = self._hangup or Ended("no_answer", "")
        except Exception:
            logger.exception("%s: the WebSocket call failed inside callhook", self.label)
        finally:
            if self._hangup is not None and outcome.raw_cause == "":
                outcome = self._hangup
            self._ended(outcome.cause, outcome.raw_cause)

    def _client(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            socket_factory=self.egress,
            resolver=self.egress.resolver() if self.egress is not None else None,
            ssl=self.ca if self.ca is not None else True,
        )
        # callhook's own User-Agent, as its page and prompt fetches have: the web phone
        # gives no loopback rights to what a page makes callhook connect to (webphone.py).
        return aiohttp.ClientSession(
            connector=connector, headers={"User-Agent": f"callhook/{__version__}"}
        )

    async def _connect(self, client: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        """The handshake; :class:`ConnectFailed` with Aculab's raw cause when it fails."""
        parts = urlsplit(self.url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme.lower() not in ("ws", "wss") or not parts.hostname or port == -1:
            raise ConnectFailed(BAD_URL, "not a ws:// or wss:// URL with a host")
        self._remote = (parts.hostname, port or (443 if parts.scheme.lower() == "wss" else 80))
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                return await client.ws_connect(
                    self.url,
                    protocols=OFFERED,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
                    max_msg_size=MAX_MESSAGE_BYTES,
                    compress=0,
                    autoping=True,
                )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 101 or not 100 <= exc.status <= 599:
                raise ConnectFailed(BAD_HANDSHAKE, f"bad handshake: {exc.message}") from None
            raise ConnectFailed(exc.status, f"HTTP {exc.status} {exc.message}") from None
        except aiohttp.InvalidURL as exc:
            raise ConnectFailed(BAD_URL, f"bad URL: {exc}") from None
        except aiohttp.ClientConnectorDNSError as exc:
            raise ConnectFailed(NO_NAME, f"the name does not resolve: {exc}") from None
        except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError) as exc:
            raise ConnectFailed(BAD_TLS, f"TLS: {exc}") from None
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(NO_CONNECTION, f"no connection: {exc.os_error}") from None
        except TimeoutError:
            raise ConnectFailed(NO_CONNECTION, "no answer to the handshake in time") from None
        except aiohttp.ClientError as exc:
            raise ConnectFailed(BAD_HANDSHAKE, f"bad handshake: {exc!r}") from None
        except ValueError as exc:  # after the TLS errors: a certificate error is one too
            raise ConnectFailed(BAD_URL, f"bad URL: {exc}") from None

    async def _connected(self, ws: aiohttp.ClientWebSocketResponse) -> Ended:
        """The call: the session in the tick, the reader here, the writer beside it."""
        v2 = self.protocol == V2
        session = MediaSession(
            "PCMU", PCMU, TELEPHONE_EVENT if v2 else None, self._remote, label=self.label
        )
        self.session = session
        outgoing = Outgoing(self.protocol)
        key = self.media.attach(
            session, lambda data: self._send(outgoing.packet(data)), self._woken, self._pull
        )
        logger.info("%s: connected to %s (%s)", self.label, self.url, self.protocol)
        self._queue.append(start_message(self.protocol, self.call))
        writer = asyncio.get_running_loop().create_task(self._write(ws))
        try:
            self._answered(session, key)
            return await self._read(ws)
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            if not ws.closed:
                with contextlib.suppress(Exception):
                    await ws.close()

    def _woken(self) -> None:
        if self.session is not None:
            self._wake(self.session)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> Ended:
        async for message in ws:
            if message.type is aiohttp.WSMsgType.BINARY:
                self.pacer.push(message.data)
            elif message.type is aiohttp.WSMsgType.TEXT:
                ended = self._text(message.data)
                if ended is not None:
                    return ended
        if self._hangup is not None:
            return self._hangup
        cause, raw = close_cause(ws.close_code)
        logger.info("%s: the server closed the WebSocket (%s)", self.label, raw)
        return Ended(cause, raw)

    def _text(self, text: str) -> Ended | None:
        message = parse(text)
        if isinstance(message, Hangup):
            logger.info("%s: the server hung up (raw cause %r)", self.label, message.raw_cause)
            return Ended("hung_up", message.raw_cause)
        if isinstance(message, Clear):
            self.pacer.clear()
        elif isinstance(message, Other) and message.type not in self._ignored:
            self._ignored.add(message.type)
            if message.why:
                logger.warning("%s: ignoring a server message: %s", self.label, message.why)
            else:
                logger.info("%s: ignoring server messages of type %r", self.label, message.type)
        return None

    # --- the audio ------------------------------------------------------------------------

    def _pull(self) -> tuple[bytes, tuple[str, int]]:
        """The tick's frame from the server (silence when it sent nothing)."""
        pcm = self.pacer.frame()
        payload = incoming_frame(pcm if pcm is not None else _SILENCE_FRAME)
        return self._sender.frame(payload), self._remote

    def _send(self, items: list[bytes | str]) -> None:
        if self._hangup is not None:
            return
        queue = self._queue
        queue.extend(items)
        while len(queue) > MAX_QUEUED:
            queue.popleft()
            self.dropped_messages += 1
            if self.dropped_messages == 1:
                logger.warning("%s: the server is not reading: dropping audio", self.label)
        self._ready.set()

    async def _write(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        queue = self._queue
        while True:
            await self._ready.wait()
            self._ready.clear()
            while queue:
                item = queue.popleft()
                try:
                    if isinstance(item, bytes):
                        await ws.send_bytes(item)
                    else:
                        await ws.send_str(item)
                except (ConnectionError, RuntimeError, aiohttp.ClientError):
                    return  # the reader sees the connection end
            if self._hangup is not None:
                await ws.close()
                return
