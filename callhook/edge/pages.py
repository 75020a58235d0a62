"""Requesting application pages over HTTP (aiohttp).

docs/behaviour.md: a page that cannot be reached, does not answer within the
timeout (10 s by default) or answers non-2xx is an application error
(:class:`~callhook.calls.runner.PageError`). Page requests are not idempotent, so a
request is not retried once the application may have acted on it. Two failures
say it cannot have: a refused connection (nothing was sent) is tried once more, and so
is a request whose body could not be written (the connection was found closed after
it was picked: a server closes a connection it finds idle, RFC 9112 §9.3.1; a request
cut short is one no server acts on). A request that was written and got no answer is
not retried, though its connection may have been closed as idle just as it was sent
(the application cannot be told apart from one that read it and failed): connections
idle for :data:`KEEPALIVE_SECONDS` are not reused, below common servers' idle timeout,
so that race is rare.

Every connection obeys the egress policy (``[egress]``, :mod:`callhook.edge.egresspolicy`):
a page (or notification) URL whose address it refuses is an application error
naming the rule; redirects are followed up to ``max_redirects``, each one
checked; a body larger than ``max_response_mb`` is refused.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from callhook import __version__
from callhook.edge.egress import Egress
from callhook.edge.egresspolicy import EgressRefused
from callhook.monitoring import tracing
from callhook.ports import PageError
from callhook.signature import HEADER, sign

logger = logging.getLogger("callhook.pages")

#: The largest page response callhook reads by default (an action list is a few kB;
#: ``[egress] max_response_mb``).
MAX_RESPONSE_BYTES = 5 << 20
#: Redirects followed by default (``[egress] max_redirects``).
MAX_REDIRECTS = 3
#: How long an idle connection to an application is kept for the next request: below
#: the idle timeout of uvicorn and of Node's http server (5 s), so a connection they
#: are about to close is not picked.
KEEPALIVE_SECONDS = 4.0
#: How many connections in a row may turn out closed before a request's body is written,
#: before it fails (several idle connections to one server are often closed together).
UNWRITTEN_RETRIES = 3
#: What aiohttp says when a request's body could not be written (the connection closed).
_UNWRITTEN = "Can not write request body"


class HttpPages:
    """Requests pages with one shared aiohttp session (connection reuse across calls)."""

    def __init__(
        self,
        timeout: float = 10.0,
        max_connections: int = 1000,
        *,
        egress: Egress | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        """``egress``: the policy every connection obeys (None: none, for tests of one layer)."""
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.max_redirects = max_redirects
        self._egress = egress
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections,
                    keepalive_timeout=KEEPALIVE_SECONDS,
                    socket_factory=self._egress,
                    resolver=self._egress.resolver() if self._egress else None,
                ),
                headers={"User-Agent": f"callhook/{__version__}"},
                auto_decompress=True,
                # No cookies kept: the session is every call's and every application's, so
                # one page's Set-Cookie would go with other calls' requests (a call's state
                # is its token, as on Aculab).
                cookie_jar=aiohttp.DummyCookieJar(),
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
        return (await self.fetch_status(url, method, body, secret, answer=answer))[1]

    async def fetch_status(
        self, url: str, method: str, body: bytes, secret: str, *, answer: bool = True
    ) -> tuple[int, bytes]:
        """:meth:`fetch`, with the 2xx status of the answer (the web phone shows it)."""
        headers = {HEADER: sign(secret, body)}
        tracing.inject(headers)  # W3C traceparent: the application's spans join the call's
        refusals, unwritten = 1, UNWRITTEN_RETRIES
        while True:
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._once(url, method, body, headers, answer)
            except aiohttp.ClientConnectorError as exc:
                if _egress_refusal(exc.os_error):
                    raise PageError("unreachable", url, str(exc.os_error)) from None
                if isinstance(exc.os_error, ConnectionRefusedError) and refusals:
                    refusals -= 1
                    logger.info("page %s refused the connection; trying once more", url)
                    continue
                raise PageError("unreachable", url, f"cannot connect: {exc.os_error}") from None
            except aiohttp.ClientOSError as exc:
                if str(exc.strerror or exc).startswith(_UNWRITTEN) and unwritten:
                    unwritten -= 1  # cut short before its body: no server acts on it
                    continue
                raise PageError("unreachable", url, f"{type(exc).__name__}: {exc}") from None
            except TimeoutError:
                raise PageError("timeout", url, f"no answer within {self.timeout:g} s") from None
            except aiohttp.TooManyRedirects:
                detail = f"more than {self.max_redirects} redirects ([egress] max_redirects)"
                raise PageError("unreachable", url, detail) from None
            except aiohttp.InvalidURL:
                raise PageError("unreachable", url, "not a valid URL") from None
            except aiohttp.ClientError as exc:
                detail = f"{type(exc).__name__}: {exc}"
                raise PageError("unreachable", url, detail) from None

    async def _once(
        self, url: str, method: str, body: bytes, headers: dict[str, str], answer: bool = True
    ) -> tuple[int, bytes]:
        client = self._client()
        if method == "GET":
            request = client.get(
                url,
                params={"instance_info": body.decode()},
                headers=headers,
                max_redirects=self.max_redirects,
            )
        else:
            headers = {**headers, "Content-Type": "application/json"}
            request = client.post(url, data=body, headers=headers, max_redirects=self.max_redirects)
        limit = self.max_response_bytes
        async with request as response:
            if not answer and 200 <= response.status < 300:
                return response.status, b""
            too_big = f"response larger than {limit} bytes ([egress] max_response_mb)"
            if (response.content_length or 0) > limit:
                raise PageError("invalid", url, too_big)
            data = bytearray()
            async for chunk in response.content.iter_chunked(1 << 16):
                data += chunk
                if len(data) > limit:
                    raise PageError("invalid", url, too_big)
            if not 200 <= response.status < 300:
                snippet = data[:200].decode("utf-8", "replace").strip()
                detail = f"HTTP {response.status} {response.reason or ''}".strip()
                if snippet:
                    detail += f": {snippet}"
                raise PageError("status", url, detail, status=response.status)
            return response.status, bytes(data)


def _egress_refusal(error: BaseException | None) -> bool:
    """Whether a connection error is the egress policy's refusal (several addresses tried
    give a combined OSError that keeps only the messages)."""
    return isinstance(error, EgressRefused) or "refused by [egress]" in str(error)
