"""The config reloaded on SIGHUP (serving/reload.py), on real settings and services: what
changes live changes in the objects the running parts hold; a config with an error
changes nothing; what waits for a restart is named."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from callhook.app import build_services
from callhook.calls.services import Services
from callhook.config.settings import load
from callhook.dialplan.outbound import OutboundPolicy
from callhook.httpserver.keys import KeyRing, key_ring
from callhook.serving.reload import Reloader
from callhook.sip.guard import Guard, networks

FIRST = """
[speech]
recogniser = "none"
preload = false

[apps.first]
first_page = "http://127.0.0.1:9/first"
api_key = "first-key-0123456789abcdef0123"
"""
SECOND = """
[apps.second]
first_page = "http://127.0.0.1:9/second"
api_key = "second-key-0123456789abcdef012"
numbers = ["+441632960123"]

[security]
allow = ["10.0.0.0/8"]
rate = 5

[outbound]
allow = ["sip:*@example.com"]
max_calls_per_app = 3

[retention]
recordings_days = 7

[recordings]
min_free_mb = 1
"""


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[Path, Services]]:
    path = tmp_path / "callhook.toml"
    path.write_text(f'data_dir = "{tmp_path}"\n{FIRST}')
    services = build_services(load(path))
    yield path, services
    await services.close()


def reloader(
    path: Path, services: Services, keys: KeyRing
) -> tuple[Reloader, Guard, OutboundPolicy]:
    guard = Guard(networks(["127.0.0.0/8"]), rate=20)
    outbound = OutboundPolicy()
    made = Reloader(
        path,
        services.settings,
        services,
        keys=keys,
        make_keys=lambda settings: key_ring(settings.apps),
        guard=guard,
        outbound=outbound,
    )
    return made, guard, outbound


async def test_a_reload_changes_what_the_running_parts_hold(
    running: tuple[Path, Services], caplog: pytest.LogCaptureFixture
) -> None:
    path, services = running
    settings = services.settings
    keys = key_ring(settings.apps)
    apps = settings.apps  # (held by the dialler, the API...)
    reload, guard, outbound = reloader(path, services, keys)
    path.write_text(path.read_text() + SECOND + '\n[http]\nlisten = "x"\n')
    with caplog.at_level(logging.ERROR):
        assert reload.reload() is False  # [http] listen: unknown: the whole file refused
    assert "the config is refused; the running one stays" in caplog.text
    assert set(apps) == {"first"} and keys.app_for("second-key-0123456789abcdef012") is None
    assert guard.rate == 20
    assert services.store.min_free() == 64 * 2**20

    path.write_text(path.read_text().replace('\n[http]\nlisten = "x"\n', "\n[http]\nport = 9090\n"))
    with caplog.at_level(logging.INFO):
        assert reload.reload() is True
    assert settings.apps is apps and set(apps) == {"first", "second"}
    assert settings.app_for("+441632960123") is apps["second"]
    assert keys.app_for("second-key-0123456789abcdef012") == "second"
    assert keys.app_for("first-key-0123456789abcdef0123") == "first"
    assert (guard.rate, guard.burst) == (5, 10) and guard.allowed("10.1.2.3")
    assert not guard.allowed("127.0.0.1")
    assert outbound.refusal("sip:bob@example.com") is None
    assert outbound.refusal("sip:bob@elsewhere.org") is not None
    assert outbound.max_calls_per_app == 3
    assert settings.retention_of("second").recordings_days == 7
    assert services.store.min_free() == 2**20  # (uploads keep the new floor)
    assert settings.http.port != 9090  # bound at the start: it waits for a restart
    assert "applied at the next restart: [http]" in caplog.text

    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert reload.reload() is True  # nothing new: nothing waits
    assert "next restart" not in caplog.text
