"""``callhook validate URL`` as docs/applications.md shows it: the recipe's commands, run as
written against the example application, which checks signatures."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import free_tcp_port

ROOT = Path(__file__).resolve().parents[2]
CALLHOOK = [sys.executable, "-m", "callhook"]


def recipe() -> list[str]:
    """The command lines of the docs' recipe (the block that validates a page's URL)."""
    text = (ROOT / "docs" / "applications.md").read_text()
    section = text[text.index("## Checking an action list before you ship it") :]
    blocks: list[str] = re.findall(r"```sh\n(.*?)```", section, re.S)
    (block,) = [b for b in blocks if "http" in b]
    return block.strip().splitlines()


def _words(line: str, port: int) -> list[str]:
    """A recipe line as this test runs it: on this test's port, with this venv's programs."""
    words = shlex.split(line.replace(":5000", f":{port}").replace("--port 5000", f"--port {port}"))
    if words[-1] == "&":
        words.pop()
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    assert words[0] == "callhook", line
    return [*CALLHOOK, *words[1:]]


@pytest.fixture
def started(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """The recipe's first line (the example application, in the background) run on a free
    port; that port, and the recipe's validate line."""
    start, validate = recipe()
    assert start.endswith("&"), start
    port = free_tcp_port()
    app = subprocess.Popen(
        _words(start, port), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and app.poll() is None, "the app did not start"
                time.sleep(0.1)
        yield port, validate
    finally:
        app.terminate()
        app.wait(timeout=10)


def _run(words: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(words, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_the_recipe_validates_a_signature_checking_page_as_written(
    started: tuple[int, str],
) -> None:
    port, validate = started
    ran = _run(_words(validate, port))
    assert (ran.returncode, ran.stdout) == (0, "valid\n"), ran.stdout + ran.stderr


def test_with_another_secret_it_says_why_there_is_nothing_to_check(
    started: tuple[int, str],
) -> None:
    port, validate = started
    words = _words(validate, port)
    words[words.index("--secret") + 1] = "not-the-apps-secret"
    ran = _run(words)
    url = f"http://127.0.0.1:{port}/get_number/start"
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stdout == f"{url}: HTTP 403 Forbidden: bad signature\n"  # as the docs say
    # Without --secret a URL is not requested at all.
    ran = _run([*CALLHOOK, "validate", url])
    assert ran.returncode == 2
    assert "needs --secret" in ran.stderr
    # The plain curl the recipe replaced is refused by the application.
    curl = _run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url, "-d", "{}"])
    assert curl.stdout == "403"
