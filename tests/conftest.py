"""Shared fixtures: a real application server on 127.0.0.1 for each test that wants one;
and, for the whole session, the check that no secret the run used reached a log
(:mod:`tests.leaks`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest

from callhook.devtools.harness import AppServer
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
    # (backslashreplace: a peer's bytes that were not UTF-8 are logged escaped, as on
    # serve's stderr, rather than failing the write)
    handler = logging.FileHandler(
        base / leaks.INPROCESS_LOG, encoding="utf-8", errors="backslashreplace"
    )
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test's captured output as UTF-8 that can be sent: pytest-xdist's workers send
    reports to the controller as UTF-8, and a peer's bytes that were not UTF-8 (kept as
    surrogates by the SIP parser, then logged) once stopped the whole run there."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [
        (name, text.encode("utf-8", "backslashreplace").decode("utf-8"))
        for name, text in report.sections
    ]
