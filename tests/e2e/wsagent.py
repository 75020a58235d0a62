"""A WebSocket server for the tests: the far end of a ``connect`` to ``wss://``.

It speaks what callhook's WebSocket calls speak (callhook/telephony/wsprotocol.py), over TLS
with a certificate from a test CA (``trustme``), and keeps what it received: the
handshake's offered sub-protocols, every text message, the audio (linear PCM). Its
``on_start`` coroutine runs when the ``start`` message comes, with the socket, so each
test says what the server does (send audio, wait for a digit, hang up).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt
import trustme
from aiohttp import WSMsgType, web

from callhook.telephony.wsprotocol import V1, V2


class Agent:
    """The server (see the module docstring)."""

    def __init__(
        self,
        tmp_path: Path,
        on_start: Callable[[Agent, web.WebSocketResponse], Coroutine[Any, Any, None]] | None = None,
        *,
        protocols: tuple[str, ...] = (V2, V1),
        status: int | None = None,
    ) -> None:
        self.ca = trustme.CA()
        self.ca_file = tmp_path / "agent-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.on_start = on_start
        self.protocols = protocols
        self.status = status  # answer the handshake with this HTTP status instead
        self.offered: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self.audio = bytearray()
        self.arrivals: list[tuple[float, int]] = []  # (time, bytes) of each audio frame
        self.protocol: str | None = None
        self.closed = asyncio.Event()
        self.started = asyncio.Event()
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"wss://127.0.0.1:{self.port}/agent"

    def samples(self) -> npt.NDArray[np.int16]:
        return np.frombuffer(bytes(self.audio), dtype="<i2").astype(np.int16)

    async def __aenter__(self) -> Agent:
        app = web.Application()
        app.router.add_get("/agent", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        offered = request.headers.get("Sec-WebSocket-Protocol", "")
        self.offered = [p.strip() for p in offered.split(",") if p.strip()]
        if self.status is not None:
            return web.Response(status=self.status, text="no agent here")
        ws = web.WebSocketResponse(protocols=self.protocols)
        await ws.prepare(request)
        self.protocol = ws.ws_protocol
        loop = asyncio.get_running_loop()
        task: asyncio.Task[None] | None = None
        try:
            async for message in ws:
                if message.type is WSMsgType.BINARY:
                    self.audio += message.data
                    self.arrivals.append((loop.time(), len(message.data)))
                elif message.type is WSMsgType.TEXT:
                    data = json.loads(message.data)
                    self.messages.append(data)
                    if data.get("type") == "start":
                        self.started.set()
                        if self.on_start is not None:
                            task = loop.create_task(self.on_start(self, ws))
        finally:
            if task is not None and not task.done():
                task.cancel()
            self.closed.set()
        return ws

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("type") == kind]

    async def wait_for(self, kind: str, timeout: float = 20.0) -> dict[str, Any]:
        """The first message of ``kind`` (waiting for it)."""
        async with asyncio.timeout(timeout):
            while not self.of_type(kind):
                await asyncio.sleep(0.02)
        return self.of_type(kind)[0]
