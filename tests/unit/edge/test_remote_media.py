"""``file_to_play`` from the web: fetching, caching with validators, limits, failures.

A real aiohttp server in the test serves the WAVs; freshness (``max-age``) is
checked on a virtual clock, so no test waits for a cache entry to expire.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from aiohttp import web

from callhook.devtools.harness import VirtualClock
from callhook.edge.remotemedia import RemoteMedia
from callhook.media import g711, tones, wav
from callhook.media.player import PromptError

TONE = tones.tone(440.0, 0.5)
WAV = wav.g711_file("ulaw", g711.encode("ulaw", TONE))


@dataclass
class Site:
    """The web server: what each path answers, and the requests it got."""

    base: str = ""
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    hang: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    state = Site()

    async def handle(request: web.Request) -> web.StreamResponse:
        state.requests.append((request.path, dict(request.headers)))
        path = request.path
        if path == "/etag.wav":
            if request.headers.get("If-None-Match") == '"v1"':
                return web.Response(status=304, headers={"ETag": '"v1"'})
            return web.Response(body=WAV, headers={"ETag": '"v1"', **state.headers})
        if path == "/modified.wav":
            stamp = "Tue, 24 Nov 2026 10:00:00 GMT"
            if request.headers.get("If-Modified-Since") == stamp:
                return web.Response(status=304)
            return web.Response(body=WAV, headers={"Last-Modified": stamp})
        if path == "/plain.wav":
            return web.Response(body=WAV, headers=state.headers)
        if path == "/big.wav":
            return web.Response(body=WAV + b"\0" * 10_000)
        if path == "/chunked.wav":
            response = web.StreamResponse()
            await response.prepare(request)
            for _ in range(20):
                await response.write(b"\0" * 1000)
            return response
        if path == "/slow.wav":
            await state.hang.wait()
            return web.Response(body=WAV)
        if path == "/text":
            return web.Response(text="<html>not a wav</html>")
        if path.startswith("/loop"):
            raise web.HTTPFound(f"/loop{int(path[5:] or 0) + 1}")
        if path == "/moved.wav":
            raise web.HTTPFound("/plain.wav")
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{port}"
    yield state
    state.hang.set()
    await runner.cleanup()


@pytest.fixture
async def media() -> AsyncIterator[RemoteMedia]:
    clock = VirtualClock()
    remote = RemoteMedia(clock=clock.now, max_bytes=len(WAV) + 100, timeout=1.0)
    yield remote
    await remote.close()


def same_audio(audio: np.ndarray) -> bool:
    expected = g711.decode("ulaw", g711.encode("ulaw", TONE))
    return len(audio) == len(expected) and bool(np.array_equal(audio, expected))


async def test_a_wav_is_fetched_with_a_plain_get(site: Site, media: RemoteMedia) -> None:
    assert same_audio(await media.audio(site.url("/plain.wav")))
    ((path, headers),) = site.requests
    assert path == "/plain.wav"
    assert headers["User-Agent"].startswith("callhook/")
    assert "If-None-Match" not in headers


async def test_an_etag_is_revalidated_and_a_304_reuses_the_audio(
    site: Site, media: RemoteMedia
) -> None:
    first = await media.audio(site.url("/etag.wav"))
    second = await media.audio(site.url("/etag.wav"))
    assert second is first  # the cached decoding, not a new one
    assert [h.get("If-None-Match") for _, h in site.requests] == [None, '"v1"']


async def test_last_modified_is_revalidated(site: Site, media: RemoteMedia) -> None:
    await media.audio(site.url("/modified.wav"))
    await media.audio(site.url("/modified.wav"))
    stamps = [h.get("If-Modified-Since") for _, h in site.requests]
    assert stamps == [None, "Tue, 24 Nov 2026 10:00:00 GMT"]


async def test_max_age_spares_the_request_while_fresh(site: Site) -> None:
    clock = VirtualClock()
    media = RemoteMedia(clock=clock.now)
    site.headers["Cache-Control"] = "public, max-age=60"
    try:
        await media.audio(site.url("/etag.wav"))
        clock.advance_to(59.0)
        await media.audio(site.url("/etag.wav"))
        assert len(site.requests) == 1
        clock.advance_to(61.0)
        await media.audio(site.url("/etag.wav"))
        assert len(site.requests) == 2  # stale: asked again (and got a 304)
    finally:
        await media.close()


async def test_no_store_and_no_validator_are_not_cached(site: Site, media: RemoteMedia) -> None:
    await media.audio(site.url("/plain.wav"))  # no ETag, no Last-Modified, no max-age
    await media.audio(site.url("/plain.wav"))
    site.headers["Cache-Control"] = "no-store"
    await media.audio(site.url("/etag.wav"))
    await media.audio(site.url("/etag.wav"))
    assert [h.get("If-None-Match") for _, h in site.requests] == [None, None, None, None]


async def test_calls_starting_the_same_prompt_share_one_request(site: Site) -> None:
    media = RemoteMedia()
    try:
        results = await asyncio.gather(*(media.audio(site.url("/plain.wav")) for _ in range(20)))
    finally:
        await media.close()
    assert all(same_audio(a) for a in results)
    assert len(site.requests) == 1


async def test_a_waiter_that_gives_up_does_not_cancel_the_fetch_for_others(site: Site) -> None:
    media = RemoteMedia()
    try:
        first = asyncio.ensure_future(media.audio(site.url("/slow.wav")))
        second = asyncio.ensure_future(media.audio(site.url("/slow.wav")))
        while not site.requests:
            await asyncio.sleep(0.01)
        first.cancel()
        site.hang.set()
        assert same_audio(await second)
        assert first.cancelled()
    finally:
        await media.close()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/missing.wav", "/missing.wav: HTTP 404"),
        ("/big.wav", "larger than"),
        ("/chunked.wav", "larger than"),  # no Content-Length: counted while reading
        ("/text", "not a WAV file callhook can play"),
        ("/loop", "more than 3 redirects"),
    ],
)
async def test_failures_name_the_url_and_the_cause(
    site: Site, media: RemoteMedia, path: str, expected: str
) -> None:
    with pytest.raises(PromptError) as info:
        await media.audio(site.url(path))
    assert expected in str(info.value)
    assert site.url(path) in str(info.value)


async def test_a_redirect_within_the_limit_is_followed(site: Site, media: RemoteMedia) -> None:
    assert same_audio(await media.audio(site.url("/moved.wav")))


async def test_a_server_that_never_answers_times_out(site: Site) -> None:
    media = RemoteMedia(timeout=0.2)
    try:
        with pytest.raises(PromptError, match=r"no answer within 0\.2 s"):
            await media.audio(site.url("/slow.wav"))
    finally:
        await media.close()


async def test_nothing_listening_is_a_clear_error(media: RemoteMedia) -> None:
    with pytest.raises(PromptError, match="cannot connect"):
        await media.audio("http://127.0.0.1:9/x.wav")
