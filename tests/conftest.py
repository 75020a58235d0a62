"""Shared fixtures: a real application server on 127.0.0.1 for each test that wants one;
and, for the whole session, the check that no secret the run used reached a log
(:mod:`tests.leaks`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest

from callhook.testing import AppServer
from tests import leaks


@pytest.fixture
async def app() -> AsyncIterator[AppServer]:
    async with AppServer() as server:
        leaks.used(server.secret)
        yield server


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the in-process ``callhook`` log in a file; at the end, grep every log the
    session wrote for every secret it used. A leak fails the session (an error in the
    last test's teardown, naming the log and the secret's first characters)."""
    base = tmp_path_factory.getbasetemp()
    handler = logging.FileHandler(base / leaks.INPROCESS_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("callhook")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
    found = leaks.leaks(base)
    if found:
        pytest.fail("secrets in logs:\n" + "\n".join(found), pytrace=False)
