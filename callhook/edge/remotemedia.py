"""WAV prompts from the web: ``file_to_play`` given as a web page request object.

Aculab's play media lets ``file_to_play`` be ``{"url": ...}``: the WAV is
fetched with a plain GET (nothing of the call is sent to it; relative URLs
were resolved against the page that returned the action before they get
here). A prompt is played on many calls, so:

* **cache by URL with its validators**: the decoded audio is kept with the
  response's ``ETag`` / ``Last-Modified``; the next use asks again with
  ``If-None-Match`` / ``If-Modified-Since`` and a ``304`` reuses it.
  ``Cache-Control: max-age`` (or ``s-maxage``) spares even that request while
  fresh; ``no-store`` keeps nothing; a response with no validator and no
  max-age is not cached (there would be no way to know it is still right);
* **one fetch per URL at a time**: calls that start the same prompt together
  wait for the same request;
* **limits**: at most ``max_bytes`` are read (the ``Content-Length`` is
  checked first), the whole fetch must finish within ``timeout`` seconds,
  at most ``max_redirects`` redirects are followed;
* **the egress policy** (``[egress]``, :mod:`callhook.edge.egress`): every
  connection, redirects included, goes only where it allows.

A fetch that fails raises :class:`~callhook.media.player.PromptError`
whose message names the URL and the cause; the leg logs it to the call's log
and the prompt ends there (the caller hears nothing of that item).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import numpy as np
import numpy.typing as npt

from callhook import __version__
from callhook.edge.egress import Egress
from callhook.media import wav
from callhook.media.player import PromptError

#: Defaults of ``[media]`` in the configuration (docs/configuration.md).
MAX_BYTES = 16 << 20  # about 35 minutes of 8 kHz G.711
TIMEOUT = 10.0
MAX_REDIRECTS = 3
CACHE_ENTRIES = 64


@dataclass
class _Entry:
    audio: npt.NDArray[np.int16]
    etag: str | None
    last_modified: str | None
    fresh_until: float


class RemoteMedia:
    """Fetches, decodes and caches WAV prompts by URL (see the module docstring)."""

    def __init__(
        self,
        *,
        max_bytes: int = MAX_BYTES,
        timeout: float = TIMEOUT,
        max_redirects: int = MAX_REDIRECTS,
        cache_entries: int = CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        egress: Egress | None = None,
    ) -> None:
        """``egress``: the policy every connection obeys (None: none, for tests of one layer)."""
        self.egress = egress
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.max_redirects = max_redirects
        self.cache_entries = cache_entries
        self.clock = clock
        self.requests = 0  # GETs sent (for tests and stats)
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[npt.NDArray[np.int16]]] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def audio(self, url: str) -> npt.NDArray[np.int16]:
        """The prompt at ``url`` as 8 kHz mono samples; raises PromptError."""
        entry = self._cache.get(url)
        if entry is not None and self.clock() < entry.fresh_until:
            self._cache.move_to_end(url)
            return entry.audio
        task = self._inflight.get(url)
        if task is None:
            # The fetch is its own task: a call that hangs up (and cancels its prompt)
            # does not cancel it for the other calls waiting on the same URL.
            task = asyncio.ensure_future(self._fetch(url, entry))
            self._inflight[url] = task
            task.add_done_callback(lambda t: self._done(url, t))
        return await asyncio.shield(task)

    def _done(self, url: str, task: asyncio.Future[npt.NDArray[np.int16]]) -> None:
        if self._inflight.get(url) is task:
            del self._inflight[url]
        if not task.cancelled():
            task.exception()  # retrieved: a failure every waiter gave up on is not logged twice

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    socket_factory=self.egress,
                    resolver=self.egress.resolver() if self.egress else None,
                ),
                headers={"User-Agent": f"callhook/{__version__}"},
                auto_decompress=True,
                # No cookies: one app's media server must not set what another app's sees.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def _fetch(self, url: str, entry: _Entry | None) -> npt.NDArray[np.int16]:
        headers = {}
        if entry is not None and entry.etag:
            headers["If-None-Match"] = entry.etag
        if entry is not None and entry.last_modified:
            headers["If-Modified-Since"] = entry.last_modified
        self.requests += 1
        try:
            async with asyncio.timeout(self.timeout):
                data, status, response_headers = await self._get(url, headers)
        except TimeoutError:
            raise PromptError(f"{url}: no answer within {self.timeout:g} s") from None
        except aiohttp.TooManyRedirects:
            raise PromptError(f"{url}: more than {self.max_redirects} redirects") from None
        except aiohttp.InvalidURL:
            raise PromptError(f"{url}: not a valid URL") from None
        except aiohttp.ClientConnectorError as exc:
            if "refused by [egress]" in str(exc.os_error):
                raise PromptError(f"{url}: {exc.os_error}") from None
            raise PromptError(f"{url}: cannot connect: {exc.os_error}") from None
        except aiohttp.ClientError as exc:
            raise PromptError(f"{url}: {type(exc).__name__}: {exc}") from None
        max_age, no_store = _freshness(response_headers.get("cache-control", ""))
        now = self.clock()
        if status == 304 and entry is not None:
            entry.fresh_until = now + max_age
            self._cache[url] = entry
            self._cache.move_to_end(url)
            return entry.audio
        if not 200 <= status < 300:
            raise PromptError(f"{url}: HTTP {status}")
        try:
            audio = await asyncio.to_thread(wav.decode_to_8k, data)
        except wav.WavError as exc:
            raise PromptError(f"{url}: not a WAV file callhook can play: {exc}") from None
        etag = response_headers.get("etag")
        last_modified = response_headers.get("last-modified")
        if no_store or (etag is None and last_modified is None and max_age <= 0):
            self._cache.pop(url, None)
        else:
            self._cache[url] = _Entry(audio, etag, last_modified, now + max_age)
            self._cache.move_to_end(url)
            while len(self._cache) > self.cache_entries:
                self._cache.popitem(last=False)
        return audio

    async def _get(self, url: str, headers: dict[str, str]) -> tuple[bytes, int, dict[str, str]]:
        request = self._client().get(url, headers=headers, max_redirects=self.max_redirects)
        async with request as response:
            too_big = f"{url}: larger than {self.max_bytes} bytes"
            if (response.content_length or 0) > self.max_bytes:
                raise PromptError(too_big)
            data = bytearray()
            if response.status != 304:
                async for chunk in response.content.iter_chunked(1 << 16):
                    data += chunk
                    if len(data) > self.max_bytes:
                        raise PromptError(too_big)
            # Header names compared in lower case (RFC 9110 §5.1: they are case-insensitive).
            names = {k.lower(): v for k, v in response.headers.items()}
            return bytes(data), response.status, names


def _freshness(cache_control: str) -> tuple[float, bool]:
    """(max-age seconds, no-store) of a Cache-Control header (RFC 9111 §5.2.2)."""
    directives = {
        match.group(1).lower(): match.group(2)
        for match in re.finditer(r"([A-Za-z-]+)\s*(?:=\s*\"?(\d+)\"?)?", cache_control)
    }
    if "no-store" in directives:
        return 0.0, True
    if "no-cache" in directives:
        return 0.0, False  # may be kept, but must be revalidated every time
    for name in ("s-maxage", "max-age"):
        value = directives.get(name)
        if value is not None:
            return float(value), False
    return 0.0, False
