"""A real PostgreSQL server for the tests (Debian ``postgresql``, which ``scripts/setup
--test`` installs): made with ``initdb`` in a temporary directory, on a free port of
127.0.0.1, trusting local logins, stopped at the end. One per test process
(``postgres_server``); each test gets a database of its own (``postgres_url``).

As root (CI, containers) the server runs as the ``postgres`` user: PostgreSQL refuses to
run as root.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.harness import free_tcp_port


def _bin(name: str) -> str:
    # Debian keeps the server's programs out of PATH, under its version's directory.
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise RuntimeError(f"{name} not found: install Debian's postgresql (scripts/setup --test)")
    return found


class Postgres:
    """A PostgreSQL server of the tests."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_tcp_port()
        self.log = directory / "server.log"
        self.user: list[str] = []
        data = directory / "data"
        data.mkdir(parents=True)
        if os.geteuid() == 0:
            self.user = ["runuser", "-u", "postgres", "--"]
            entry = pwd.getpwnam("postgres")
            for path in (directory, data):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            [*self.user, _bin("initdb"), "-D", str(data), "-A", "trust", "-U", "callhook",
             "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True,
        )  # fmt: skip
        self.process = subprocess.Popen(
            [*self.user, _bin("postgres"), "-D", str(data), "-p", str(self.port),
             "-k", str(directory), "-c", "listen_addresses=127.0.0.1",
             "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=200"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"),  # noqa: SIM115
        )  # fmt: skip
        self.url = f"postgresql://callhook@127.0.0.1:{self.port}/postgres"
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = self.log.read_text()
                    raise RuntimeError(f"PostgreSQL did not start: {log}") from None
                time.sleep(0.1)

    def database(self) -> str:
        """A new, empty database: its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    # Not under pytest's temporary directory: as root that is closed to the postgres user.
    directory = Path(tempfile.mkdtemp(prefix="callhook-postgres-"))
    try:
        server = Postgres(directory)
        try:
            yield server
        finally:
            with contextlib.suppress(Exception):
                server.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: Postgres) -> str:
    """A database of this test's own on the session's server."""
    return postgres_server.database()
