"""Shared fixtures: a real application server on 127.0.0.1 for each test that wants one;
and, for the whole session, the check that no secret the run used reached a log
(:mod:`tests.leaks`)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from tests import leaks

ROOT = Path(__file__).parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """A compiled module (pyproject.toml's ``[tool.callhook] compiled``) built before its
    source last changed, or left over: Python would import that build, not the source,
    and test it. The run stops, saying how to build it again (scripts/stale_builds.py)."""
    spec = importlib.util.spec_from_file_location(
        "stale_builds", ROOT / "scripts" / "stale_builds.py"
    )
    assert spec is not None and spec.loader is not None
    builds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builds)
    stale = [line for line in builds.stale(ROOT) if "C extension" not in line]
    if stale:
        pytest.exit(
            f"compiled modules older than their source, left over or not built: "
            f"{'; '.join(stale)} (scripts/setup builds them again; why one does not build: "
            ".venv/bin/python -m pip install --no-deps -e . -v; CALLHOOK_NO_MYPYC=1 at "
            "install and here: none compiled)",
            returncode=4,
        )


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
