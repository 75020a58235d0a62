"""Requesting application pages over HTTP (aiohttp).

DESIGN.md §1.3: a page that cannot be reached, does not answer within the
timeout (10 s by default) or answers non-2xx is an application error
(:class:`~callhook.call.PageError`). Page requests are not idempotent, so a
request is not retried once anything may have reached the application; only
a refused connection (nothing was sent) is tried once more.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from callhook import __version__
from callhook.ports import PageError
from callhook.signature import HEADER, sign

logger = logging.getLogger("callhook.pages")

#: The largest page response callhook reads (an action list is a few kB).
MAX_RESPONSE_BYTES = 1 << 20


class HttpPages:
    """Requests pages with one shared aiohttp session (connection reuse across calls)."""

    def __init__(self, timeout: float = 10.0, max_connections: int = 1000) -> None:
        self.timeout = timeout
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                headers={"User-Agent": f"callhook/{__version__}"},
                auto_decompress=True,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(
        self, url: str, method: str, body: bytes, secret: str, *, answer: bool = True
    ) -> bytes:
        """POST (or GET) ``body`` to ``url``; the response body of a 2xx answer.

        ``answer=False`` (a notification): any 2xx is success and its body is not read.
        """
        headers = {HEADER: sign(secret, body)}
        for attempt in (1, 2):
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._once(url, method, body, headers, answer)
            except aiohttp.ClientConnectorError as exc:
                refused = isinstance(exc.os_error, ConnectionRefusedError)
                if refused and attempt == 1:
                    logger.info("page %s refused the connection; trying once more", url)
                    continue
                raise PageError("unreachable", url, f"cannot connect: {exc.os_error}") from None
            except TimeoutError:
                raise PageError("timeout", url, f"no answer within {self.timeout:g} s") from None
            except aiohttp.InvalidURL:
                raise PageError("unreachable", url, "not a valid URL") from None
            except aiohttp.ClientError as exc:
                detail = f"{type(exc).__name__}: {exc}"
                raise PageError("unreachable", url, detail) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(
        self, url: str, method: str, body: bytes, headers: dict[str, str], answer: bool = True
    ) -> bytes:
        client = self._client()
        if method == "GET":
            request = client.get(url, params={"instance_info": body.decode()}, headers=headers)
        else:
            headers = {**headers, "Content-Type": "application/json"}
            request = client.post(url, data=body, headers=headers)
        async with request as response:
            if not answer and 200 <= response.status < 300:
                return b""
            too_big = f"response larger than {MAX_RESPONSE_BYTES} bytes"
            if (response.content_length or 0) > MAX_RESPONSE_BYTES:
                raise PageError("invalid", url, too_big)
            data = bytearray()
            async for chunk in response.content.iter_chunked(1 << 16):
                data += chunk
                if len(data) > MAX_RESPONSE_BYTES:
                    raise PageError("invalid", url, too_big)
            if not 200 <= response.status < 300:
                snippet = data[:200].decode("utf-8", "replace").strip()
                detail = f"HTTP {response.status} {response.reason or ''}".strip()
                if snippet:
                    detail += f": {snippet}"
                raise PageError("status", url, detail, status=response.status)
            return bytes(data)
