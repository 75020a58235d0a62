"""A page that signs in to receive calls (``/phone/client``), as docs/webphone.md describes
one: JSON text messages, and RTP packets (G.711 µ-law, RFC 4733 events) once answered.
It stands where a browser would (tests/e2e/test_webphone.py has the real browser)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from typing import Any

import aiohttp
import numpy as np

from callhook.media import g711, tones

PCMU, TELEPHONE_EVENT = 0, 101


class Page:
    """One signed-in page: its messages in order, the audio and digits it heard."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.heard = bytearray()  # µ-law payloads, in order
        self.events: list[int] = []  # RFC 4733 event codes, each once
        self._http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._talker: asyncio.Task[None] | None = None
        self._event_ts: set[int] = set()

    async def sign_in(self, client_id: str, **credentials: str) -> dict[str, Any]:
        """Open the socket and register; the answer (``registered`` or ``error``)."""
        self._http = aiohttp.ClientSession()
        url = self.base.replace("http://", "ws://") + "/phone/client"
        self.ws = await self._http.ws_connect(url)
        await self.ws.send_json({"type": "register", "client_id": client_id, **credentials})
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return await self.next()

    async def next(self, kind: str | None = None, timeout: float = 20.0) -> dict[str, Any]:
        """The next text message (of type ``kind``: others before it are skipped)."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self.messages.get()
                if kind is None or message.get("type") == kind:
                    return message

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            if msg.type is aiohttp.WSMsgType.TEXT:
                self.messages.put_nowait(json.loads(msg.data))
            elif msg.type is aiohttp.WSMsgType.BINARY:
                self._packet(msg.data)
        self.messages.put_nowait({"type": "closed"})

    def _packet(self, data: bytes) -> None:
        if len(data) < 12:
            return
        pt, ts = data[1] & 0x7F, struct.unpack("!I", data[4:8])[0]
        if pt == PCMU:
            self.heard += data[12:]
        elif pt == TELEPHONE_EVENT and ts not in self._event_ts:
            self._event_ts.add(ts)
            self.events.append(data[12])

    async def send(self, message: dict[str, Any]) -> None:
        assert self.ws is not None
        await self.ws.send_json(message)

    def talk(self, hz: float) -> None:
        """Send a tone of ``hz`` as RTP every 20 ms until :meth:`close` (or :meth:`talk`
        again)."""
        if self._talker is not None:
            self._talker.cancel()
        self._talker = asyncio.get_running_loop().create_task(self._talk(hz))

    async def _talk(self, hz: float) -> None:
        assert self.ws is not None
        audio = g711.encode("ulaw", tones.tone(hz, 1.0))
        seq, ts, n = 1, 0, 0
        loop = asyncio.get_running_loop()
        start = loop.time()
        while not self.ws.closed:
            frame = audio[(n % 50) * 160 : (n % 50) * 160 + 160]
            header = struct.pack("!BBHII", 0x80, PCMU, seq & 0xFFFF, ts, 0x1234ABCD)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_bytes(header + bytes(frame))
            seq, ts, n = seq + 1, ts + 160, n + 1
            await asyncio.sleep(max(0.0, start + n * 0.02 - loop.time()))

    def heard_pcm(self) -> np.ndarray:
        return g711.decode("ulaw", bytes(self.heard))

    async def close(self) -> None:
        if self._talker is not None:
            self._talker.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._http is not None:
            await self._http.close()
