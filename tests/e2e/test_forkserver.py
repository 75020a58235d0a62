"""The tests' fork server (``tests/e2e/forkserver.py``) gives what a new process would:
the arguments, environment and folder asked for, the exit status, signals to the serve's
own pid, and no serve left behind by a test process that went."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.forkserver import ForkedServe, Zygote
from tests.e2e.harness import free_tcp_port, free_udp_port


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    made = Zygote(dict(os.environ))
    yield made
    made.close()


async def started(zygote: Zygote, folder: Path, env: dict[str, str]) -> ForkedServe:
    """``serve`` on free ports, its data in ``folder``/data (a path relative to the
    folder it runs in), once it says where its web server is."""
    args = ["serve", "--workers", "1", "--sip", f"127.0.0.1:{free_udp_port()}"]
    args += ["--http", f"127.0.0.1:{free_tcp_port()}", "--data-dir", "data"]
    proc = await zygote.spawn(args, {**os.environ, **env}, str(folder))
    said = ""
    while "web: " not in said:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, said
        said += line.decode()
    return proc


async def test_a_command_gets_its_arguments_and_folder_and_its_status_comes_back(
    zygote: Zygote, tmp_path: Path
) -> None:
    (tmp_path / "a.json").write_text('{"actions": [{"hang_up": {}}]}')
    proc = await zygote.spawn(["validate", "a.json"], {**os.environ}, str(tmp_path))
    text = (await proc.stdout.read()).decode()
    assert await proc.wait() == 0 and proc.returncode == 0 and "valid" in text, text
    proc = await zygote.spawn(["validate", "missing.json"], {**os.environ}, str(tmp_path))
    text = (await proc.stdout.read()).decode()
    assert await proc.wait() == 2 and "missing.json" in text, text


async def test_a_serve_has_the_environment_asked_for_and_stops_on_a_signal_to_its_pid(
    zygote: Zygote, tmp_path: Path
) -> None:
    name = f"callhook-test-forked-{os.getpid()}"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind("\0" + name)
    receiver.settimeout(30)
    try:
        proc = await started(zygote, tmp_path, {"NOTIFY_SOCKET": "@" + name})
        told = await asyncio.to_thread(receiver.recv, 4096)
        assert b"READY=1" in told  # (it read the environment this request gave)
        assert (tmp_path / "data" / "secret").exists()  # (in the folder asked for)
        parent = int(Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert parent != os.getpid()  # (the zygote's child: the pid is the serve's own)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        receiver.close()


async def test_a_killed_serve_reports_its_signal(zygote: Zygote, tmp_path: Path) -> None:
    proc = await started(zygote, tmp_path, {})
    proc.kill()
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL


async def test_a_serve_whose_test_process_went_is_killed(zygote: Zygote, tmp_path: Path) -> None:
    proc = await started(zygote, tmp_path, {})
    # The test process's end of the connection closes, as when that process dies.
    connection = proc._connection
    asyncio.get_running_loop().remove_reader(connection.fileno())
    connection.close()
    for _ in range(200):
        try:
            os.kill(proc.pid, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"serve {proc.pid} still runs")
