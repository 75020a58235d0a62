"""Shared fixtures: a real application server on 127.0.0.1 for each test that wants one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from callhook.testing import AppServer


@pytest.fixture
async def app() -> AsyncIterator[AppServer]:
    async with AppServer() as server:
        yield server
