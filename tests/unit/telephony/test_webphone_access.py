"""Who may use the web phone (docs/webphone.md): its routes are the REST API's business.

Every socket of the test suite is on loopback, where the web phone needs no key; these
tests give the handlers requests from elsewhere (aiohttp's mocked requests, with a
remote address of TEST-NET-1), which no real socket here can make; and requests from
loopback that get no loopback rights all the same: a name rebound to 127.0.0.1 (DNS
rebinding), callhook's own HTTP client (a page's prompt aimed at this server), a page
of another site.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Generator
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp.test_utils import make_mocked_request
from aiohttp.web import Request

from callhook.config.settings import AppConfig
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.restapi import ApiError
from callhook.telephony.webphone import WebPhone, local_rights, loopback, loopback_host

SALES_KEY = "k" * 32
SUPPORT_KEY = "s" * 32


class Done:
    """Told already (no siblings here)."""

    def __await__(self) -> Generator[None, None, None]:
        return
        yield


class Bans:
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []

    def bans(self) -> list[dict[str, Any]]:
        return []

    def lift_ban(self, address: str) -> bool:
        return False

    def banned(self, address: str) -> bool:
        return address == "192.0.2.99"

    def auth_failed(self, address: str, what: str) -> Awaitable[None]:
        self.failed.append((address, what))
        return Done()


def phone(bans: Bans) -> WebPhone:
    apps = {
        name: AppConfig(name=name, first_page=f"http://127.0.0.1:1/{name}", secret="x" * 32)
        for name in ("sales", "support")
    }
    keys = KeyRing({SALES_KEY: "sales", SUPPORT_KEY: "support"})
    # Only the access checks run here: no call is made, so no services are needed.
    return WebPhone(cast(Any, None), lambda: None, cast(Any, None), keys, lambda: apps, bans)


def request(
    path: str, remote: str, key: str | None = None, host: str = "127.0.0.1:8080", **more: str
) -> Request:
    """A request from ``remote`` to ``host`` (a browser's Host header), with ``key``
    and headers ``more`` (``User_Agent``: the header User-Agent)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    headers |= {"Host": host, **{k.replace("_", "-"): v for k, v in more.items()}}
    return make_mocked_request("GET", path, headers=headers).clone(remote=remote)


async def apps_seen(
    p: WebPhone, remote: str, key: str | None = None, host: str = "127.0.0.1:8080", **more: str
) -> list[str]:
    response = await p.list_apps(request("/phone/api/apps", remote, key, host, **more))
    body = json.loads(cast(Any, response).body)
    return cast(list[str], body["apps"])


@pytest.mark.parametrize("remote", ["127.0.0.1", "127.0.0.2", "::1"])
async def test_loopback_sees_every_application_without_a_key(remote: str) -> None:
    assert await apps_seen(phone(Bans()), remote) == ["sales", "support"]


async def test_elsewhere_needs_a_key_and_sees_only_its_application() -> None:
    bans = Bans()
    p = phone(bans)
    with pytest.raises(ApiError) as no_key:
        await apps_seen(p, "192.0.2.7")
    assert no_key.value.status == 401
    assert await apps_seen(p, "192.0.2.7", SALES_KEY) == ["sales"]
    assert bans.failed == []  # no key at all is not a wrong key


async def test_a_wrong_key_is_refused_and_counts_towards_a_ban() -> None:
    bans = Bans()
    p = phone(bans)
    with pytest.raises(ApiError) as wrong:
        await apps_seen(p, "192.0.2.7", "w" * 32)
    assert wrong.value.status == 401
    assert bans.failed == [("192.0.2.7", "web phone authentication")]


async def test_a_wrong_key_is_answered_once_the_other_workers_counted_it() -> None:
    """With workers, a guess answered before the others counted it would let the next
    guess, to another worker, go uncounted with it (as the REST API, it waits)."""
    told: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    class Slow(Bans):
        def auth_failed(self, address: str, what: str) -> Awaitable[None]:
            super().auth_failed(address, what)
            return told

    p = phone(Slow())
    answer = asyncio.ensure_future(apps_seen(p, "192.0.2.7", "w" * 32))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not answer.done()  # still being told
    told.set_result(None)
    with pytest.raises(ApiError) as wrong:
        await answer
    assert wrong.value.status == 401


async def test_another_applications_calls_and_recordings_do_not_exist() -> None:
    p = phone(Bans())
    for path, handler in (
        ("/phone/api/calls/support", p.past_calls),
        ("/phone/api/media/support/recordings/a.wav", p.media_file),
    ):
        req = request(path, "192.0.2.7", SALES_KEY)
        info = {"app": "support", "name": "recordings/a.wav"}
        req.match_info.update(info)
        with pytest.raises(ApiError) as other:
            await handler(req)
        assert other.value.status == 404, path


async def test_a_banned_source_is_refused_before_its_key_is_looked_at() -> None:
    with pytest.raises(ApiError) as banned:
        await phone(Bans()).list_apps(request("/phone/api/apps", "192.0.2.99", SALES_KEY))
    assert banned.value.status == 403


def test_loopback_addresses() -> None:
    assert loopback("127.0.0.1") and loopback("127.9.9.9") and loopback("::1")
    assert not loopback("192.0.2.7") and not loopback(None) and not loopback("nonsense")


def test_past_calls_are_the_newest_logs_whatever_their_random_names(tmp_path: Path) -> None:
    import os
    from types import SimpleNamespace

    from callhook.store.files import MediaStore
    from callhook.telephony.webphone import PAST_CALLS

    store = MediaStore(tmp_path)
    logs = store.namespace("sales") / "logs"
    logs.mkdir(parents=True)
    for i in range(PAST_CALLS + 20):
        # Random-looking names whose order says nothing of their age.
        path = logs / f"{(i * 7919) % 1000:04d}{i:03d}.log"
        path.write_text("x")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    p = phone(Bans())
    p.services = cast(Any, SimpleNamespace(store=store))
    newest = p._newest_logs("sales")
    assert len(newest) == PAST_CALLS
    assert [when for when, _ in newest] == [1_000_000 + i for i in range(PAST_CALLS + 19, 19, -1)]
    assert p._newest_logs("support") == []  # no calls yet


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:8080",
        "127.0.0.1",
        "127.1.2.3:80",
        "localhost:8080",
        "LOCALHOST",
        "[::1]:8080",
        "[::1]",
    ],
)
async def test_loopback_rights_need_a_host_header_that_names_loopback(host: str) -> None:
    assert await apps_seen(phone(Bans()), "127.0.0.1", host=host) == ["sales", "support"]


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:8080",  # a name rebound to 127.0.0.1 (DNS rebinding)
        "evil.example",
        "localhost.evil.example:8080",
        "127.0.0.1.evil.example",
        "127.0.0.1:8080@evil.example",
        "127.0.0.1:http",
        "[::1]x",
        "::1",
        "",
    ],
)
async def test_a_rebound_name_gets_no_loopback_rights(host: str) -> None:
    """A site whose name the browser was made to resolve to 127.0.0.1 reaches the web
    phone from loopback, with its own name in Host: it needs a key like any client."""
    bans = Bans()
    p = phone(bans)
    with pytest.raises(ApiError) as refused:
        await apps_seen(p, "127.0.0.1", host=host)
    assert refused.value.status == 401
    assert await apps_seen(p, "127.0.0.1", SALES_KEY, host=host) == ["sales"]
    assert bans.failed == []


def test_loopback_hosts() -> None:
    for good in ("localhost", "localhost:1", "127.0.0.1", "127.9.9.9:65535", "[::1]:8080"):
        assert loopback_host(good), good
    for bad in (None, "", "evil.example", "10.0.0.1:8080", "[::1", "[::1]:", "[2001:db8::1]"):
        assert not loopback_host(bad), bad


async def test_callhook_own_http_client_gets_no_loopback_rights() -> None:
    """A page's prompt URL aimed at this server's web phone: another application's file
    is refused as an absent one, and the page's own application's too (no oracle)."""
    p = phone(Bans())
    own = {"User_Agent": "callhook/1.0"}
    assert not local_rights(request("/phone/api/apps", "127.0.0.1", **own))
    assert local_rights(request("/phone/api/apps", "127.0.0.1", User_Agent="Mozilla/5.0"))
    with pytest.raises(ApiError) as refused:
        await apps_seen(p, "127.0.0.1", **own)
    assert refused.value.status == 401
    statuses = []
    for app, name in (("support", "a.wav"), ("support", "absent.wav"), ("sales", "a.wav")):
        req = request(f"/phone/api/media/{app}/{name}", "127.0.0.1", **own)
        req.match_info.update({"app": app, "name": name})
        with pytest.raises(ApiError) as caught:
            await p.media_file(req)
        statuses.append((caught.value.status, caught.value.code))
    assert statuses == [(401, "unauthorized")] * 3


async def test_a_page_of_another_site_may_not_read_the_json_routes() -> None:
    p = phone(Bans())
    with pytest.raises(ApiError) as refused:
        await apps_seen(p, "127.0.0.1", Origin="http://evil.example")
    assert (refused.value.status, refused.value.code) == (403, "forbidden")
    with pytest.raises(ApiError):  # even with a key: the key is no browser page's to lend
        await apps_seen(p, "192.0.2.7", SALES_KEY, host="phone.example", Origin="null")
    # The page's own origin (the browser's, when it sends one) is fine.
    assert await apps_seen(p, "127.0.0.1", Origin="http://127.0.0.1:8080") == ["sales", "support"]
    assert await apps_seen(
        p, "192.0.2.7", SALES_KEY, host="phone.example", Origin="https://phone.example"
    ) == ["sales"]
