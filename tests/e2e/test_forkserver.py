"""The fork server (``callhook serve --fork-server``, callhook/serving/forkserver.py), which
``serve --workers`` forks its workers from and the tests their serves: a forked process
gets what a new one would (the arguments, environment and folder asked for, its exit
status, signals to its own pid, a process group of its own), and every way the fork
server or its requester can go has its outcome: a requester that went takes its
processes with it; a fork server told to stop sends its farewell to all of them; a fork
server killed leaves them running, their end seen all the same, and the next request
starts another."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from callhook.serving.forkserver import UNKNOWN, ForkedProcess, ForkServer, ForkServerError
from tests.e2e import sipp
from tests.e2e.harness import free_tcp_port, free_udp_port, served
from tests.e2e.test_workers import until, worker_pids

REPO = Path(__file__).resolve().parents[2]


def fork_server(farewell: str) -> ForkServer:
    return ForkServer(
        [sys.executable, "-m", "callhook", "serve", "--fork-server", farewell],
        {**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=str(REPO),
    )


@pytest.fixture
def zygote() -> Iterator[ForkServer]:
    made = fork_server("KILL")
    yield made
    made.close()


async def started(zygote: ForkServer, folder: Path, env: dict[str, str]) -> ForkedProcess:
    """``serve`` on free ports, its data in ``folder``/data (a path relative to the
    folder it runs in), once it says where its web server is."""
    args = ["serve", "--workers", "1", "--sip", f"127.0.0.1:{free_udp_port()}"]
    args += ["--http", f"127.0.0.1:{free_tcp_port()}", "--data-dir", "data"]
    folder.mkdir(exist_ok=True)
    proc = await zygote.spawn(args, {**os.environ, **env}, str(folder))
    said = ""
    while "web: " not in said:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, said
        said += line.decode()
    return proc


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


async def gone(pid: int, seconds: float = 10.0) -> bool:
    for _ in range(int(seconds / 0.05)):
        if not running(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_command_gets_its_arguments_and_folder_and_its_status_comes_back(
    zygote: ForkServer, tmp_path: Path
) -> None:
    (tmp_path / "a.json").write_text('{"actions": [{"hang_up": {}}]}')
    proc = await zygote.spawn(["validate", "a.json"], {**os.environ}, str(tmp_path))
    text = (await proc.stdout.read()).decode()
    assert await proc.wait() == 0 and proc.returncode == 0 and "valid" in text, text
    proc = await zygote.spawn(["validate", "missing.json"], {**os.environ}, str(tmp_path))
    text = (await proc.stdout.read()).decode()
    assert await proc.wait() == 2 and "missing.json" in text, text
    gone_folder = str(tmp_path / "gone")
    proc = await zygote.spawn(["validate", "a.json"], {**os.environ}, gone_folder)
    text = (await proc.stdout.read()).decode()
    said = f"callhook: cannot run in {gone_folder}: No such file or directory\n"
    assert await proc.wait() == 1 and text == said, text


async def test_a_serve_has_the_environment_asked_for_and_stops_on_a_signal_to_its_pid(
    zygote: ForkServer, tmp_path: Path
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
        stat = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        assert int(stat[1]) == zygote.pid  # (the fork server's child: its own pid)
        assert int(stat[2]) == proc.pid  # (a process group of its own)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        receiver.close()


async def test_a_killed_serve_reports_its_signal(zygote: ForkServer, tmp_path: Path) -> None:
    proc = await started(zygote, tmp_path, {})
    proc.kill()
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL


async def test_a_serve_whose_requester_went_is_sent_the_farewell(
    zygote: ForkServer, tmp_path: Path
) -> None:
    proc = await started(zygote, tmp_path, {})
    # The requester's end of the connection closes, as when its process dies.
    connection = proc._connection
    asyncio.get_running_loop().remove_reader(connection.fileno())
    connection.close()
    assert await gone(proc.pid), f"serve {proc.pid} still runs"


async def test_a_fork_server_told_to_stop_sends_its_farewell_to_every_process(
    tmp_path: Path,
) -> None:
    server = fork_server("TERM")
    try:
        first = await started(server, tmp_path / "a", {})
        second = await started(server, tmp_path / "b", {})
    finally:
        await asyncio.to_thread(server.close)  # (its control socket closes)
    # SIGTERM: each serve stops as it does on SIGTERM, saying so.
    for proc in (first, second):
        said = (await asyncio.wait_for(proc.stdout.read(), 30)).decode()
        assert "shutting down" in said, said
        assert await asyncio.wait_for(proc.wait(), 30) == UNKNOWN  # (its server had gone)


async def test_a_killed_fork_server_leaves_its_processes_running_and_another_starts(
    zygote: ForkServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = await started(zygote, tmp_path / "a", {})
    first = zygote.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert await gone(first)
    assert running(proc.pid) and proc.returncode is None  # (its serve goes on)
    with caplog.at_level(logging.ERROR, "callhook.workers"):
        again = await started(zygote, tmp_path / "b", {})
    assert zygote.pid not in (None, first)
    assert f"fork server (pid {first}) ended with signal 9" in caplog.text, caplog.text
    # The orphan's end is seen (from a pidfd: its status went with its fork server).
    proc.terminate()
    assert await asyncio.wait_for(proc.wait(), 30) == UNKNOWN and not running(proc.pid)
    again.terminate()
    assert await asyncio.wait_for(again.wait(), 30) == 0


async def test_a_fork_server_that_cannot_start_says_so() -> None:
    server = ForkServer([sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(ForkServerError, match="status 3"):
        await server.spawn(["validate", "-"], {}, str(REPO))


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")
async def test_serve_s_workers_are_forked_and_outlive_their_fork_server(
    tmp_path: Path, app: AppServer
) -> None:
    """``serve --workers 2``: the workers are the fork server's children, shown in ``ps``
    as the command a new worker would run. The fork server killed: the workers go on
    taking calls; a worker killed then is forked again from a new fork server, with a
    line for each, and the calls go on. The supervisor killed last: every worker ends,
    the one the first fork server left too (no farewell comes to it: its standard
    output's reader gone tells it)."""
    app.page("/start", [{"sleep": {"seconds": 0.5}}])
    app.page("/final", None)
    bye = sipp.BYE_FROM_SERVER.format(timeout_ms=15000)
    async with served(tmp_path, app, 2) as server:
        assert server.proc is not None
        workers = worker_pids(server.data_dir)
        assert len(workers) == 2, server.output
        fork_server = parent_of(workers[0])
        assert parent_of(workers[1]) == fork_server != server.proc.pid
        assert parent_of(fork_server) == server.proc.pid
        title = Path(f"/proc/{workers[0]}/cmdline").read_bytes().rstrip(b"\0").decode()
        http = f"127.0.0.1:{server.http_port}"
        assert " -m callhook serve " in title, title
        assert title.endswith(f" --worker 0 --http {http}"), title
        assert str(server.data_dir) in Path(f"/proc/{fork_server}/cmdline").read_text()

        os.kill(fork_server, signal.SIGKILL)
        assert await gone(fork_server)
        for _ in range(2):  # (Kamailio deals them to both workers)
            run = await sipp.call(server.sip, tmp_path, sipp.invite("ivr"), sipp.ANSWERED, bye)
            assert run.returncode == 0, run.output + server.output
        assert worker_pids(server.data_dir) == workers

        os.kill(workers[0], signal.SIGKILL)
        await until(lambda: "worker 0 is serving again" in server.output,
                    "worker 0's restart", lambda: server.output)  # fmt: skip
        again = worker_pids(server.data_dir)
        assert again[1] == workers[1] and again[0] != workers[0]
        assert parent_of(again[0]) not in (fork_server, server.proc.pid)
        assert f"worker 0 (pid {workers[0]}) ended after" in server.output
        assert "with a status unknown (its fork server had ended)" in server.output
        assert f"the workers' fork server (pid {fork_server}) ended with signal 9" in (
            server.output
        )
        for _ in range(2):
            run = await sipp.call(server.sip, tmp_path, sipp.invite("ivr"), sipp.ANSWERED, bye)
            assert run.returncode == 0, run.output + server.output

        server.proc.kill()  # SIGKILL: the second fork server says farewell to worker 0
        for pid in again.values():
            assert await gone(pid, 40), (pid, server.output)
    assert "Traceback" not in server.output, server.output
    assert "worker 1: the supervisor has gone: shutting down" in server.output, server.output


async def test_a_request_at_the_moment_the_fork_server_dies_is_forked_by_another(
    zygote: ForkServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a.json").write_text('{"actions": [{"hang_up": {}}]}')
    for _ in range(3):
        zygote.start()
        dying = zygote.pid
        assert dying is not None
        os.kill(dying, signal.SIGKILL)  # (the request may find it still running)
        with caplog.at_level(logging.ERROR, "callhook.workers"):
            proc = await zygote.spawn(["validate", "a.json"], {**os.environ}, str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert zygote.pid not in (None, dying)
        assert f"fork server (pid {dying}) ended with signal 9" in caplog.text
