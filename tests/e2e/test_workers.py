"""``serve --workers 2``: two callhook workers behind a real Kamailio, one SIP address,
their state in the data directory's SQLite or in a real PostgreSQL server.

SIPp calls Kamailio's address; the calls are spread over the workers (round robin).
A worker killed with SIGKILL mid-call loses only its own calls: the other worker's
call goes on, new calls go to the survivor, the supervisor starts another worker in
its place, which finishes the dead worker's recording and announces it once, and the
notification the dead worker was delivering is delivered once, by another worker.
Which worker has a call is never asked: a kill shows it (exactly one of two
concurrent calls drops). With PostgreSQL (``[database] url``) the workers are nodes:
every one delivers notifications (row leases), and the survivor finishes a dead one's
recording once its row in ``nodes`` runs out (``node_timeout``).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from callhook.cluster.workers import kamailio_binary, kamailio_modules
from callhook.devtools.harness import AppServer, Received, Reply
from tests.e2e import sipp
from tests.e2e.harness import (
    CALLHOOK,
    Server,
    free_even_udp_port,
    free_tcp_port,
    free_udp_pair,
    free_udp_port,
)
from tests.e2e.test_notifications import talking
from tests.e2e.test_sip_robustness import exchange
from tests.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(
    kamailio_binary() is None or kamailio_modules() is None or sipp.SIPP is None,
    reason="kamailio or SIPp is not installed",
)


def worker_pids(data_dir: Path) -> dict[int, int]:
    """The running workers of the serve using ``data_dir``: index -> pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # (forked by the fork server: its command line is one string, setproctitle's)
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").split()
        except OSError:
            continue
        if b"--worker" in argv and str(data_dir).encode() in argv:
            found[int(argv[argv.index(b"--worker") + 1])] = int(entry.name)
    return found


def notifier_pid(data_dir: Path) -> int | None:
    """The process holding ``notifier.lock`` (the one delivering notifications)."""
    inode = (data_dir / "notifier.lock").stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "FLOCK" in fields and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4])
    return None


async def until(check: Any, what: str, output: Any, seconds: float = 60.0) -> None:
    for _ in range(round(seconds / 0.1)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} did not happen in {seconds:g} s:\n{output()}")


def record(max_silence_ms: int) -> list[dict[str, Any]]:
    return [
        {
            "record": {
                "next_page": {"url": "/recorded"},
                "recording_available_page": {"url": "/available"},
                "milliseconds_max_silence": max_silence_ms,
                "seconds_max_duration": 60,
            }
        }
    ]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
async def test_two_workers_share_the_calls_and_survive_a_kill_9(
    tmp_path: Path, app: AppServer, database: str, request: pytest.FixtureRequest
) -> None:
    # What each call's first page gives, in the order the calls come.
    plan: list[list[dict[str, Any]]] = []
    app.page("/start", lambda _: plan.pop(0))
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/final", None)
    killed = False
    delivered: list[str] = []
    # Set when the worker is to be killed: the next refused attempt kills it before its
    # 503 is answered, so no 2xx is ever in flight to a dying worker. (A 2xx that a worker
    # dies before recording is the one documented way a notification is sent twice.)
    kill_at_next_attempt: int | None = None
    attempt_refused_by_kill = asyncio.Event()

    def available(request: Received) -> Reply:
        # 503 until a worker is killed: that notification is pending in the outbox then.
        nonlocal killed
        if not killed:
            if kill_at_next_attempt is not None:
                os.kill(kill_at_next_attempt, signal.SIGKILL)
                killed = True
                attempt_refused_by_kill.set()
            return Reply(status=503)
        delivered.append(request.json["action_result"]["result"]["filename"])
        return Reply(status=204)

    app.page("/available", available)
    config = tmp_path / "workers.toml"
    config.write_text(
        f"[workers]\nfirst_port = {free_even_udp_port()}\n"
        "[notifications]\nfirst_retry = 0.5\nmax_retry = 1\n"
        "[speech]\npreload = false\n"
        "[sip]\nshutdown_grace = 5\n"
    )
    if database == "postgresql":
        url = request.getfixturevalue("postgres_url")
        with config.open("a") as file:
            file.write(f'[database]\nurl = "{url}"\nnode_timeout = 3\n')
    data_dir = tmp_path / "data"
    server = Server.for_app(data_dir, app, extra=("--workers", "2", "--config", str(config)))
    server.start_timeout = 150.0  # two workers load at once: slow on a loaded machine
    server.fresh = True  # (its supervisor's memory is looked at: not the test zygote's)
    speaking = talking(2.0).write_pcap(tmp_path / "short.pcap")
    long_talk = talking(6.0).write_pcap(tmp_path / "long.pcap")

    def caller(pcap: Path, wait_ms: int) -> list[str]:
        return [
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.PLAY.format(pcap=pcap),
            sipp.BYE_FROM_SERVER.format(timeout_ms=wait_ms),
        ]

    async with server:
        assert "with 2 workers behind Kamailio" in server.output
        # The supervisor takes no calls: it never loaded their modules (numpy's library
        # and pydantic's are not in its memory; cli.py, serving/launch.py).
        assert server.proc is not None
        mapped = Path(f"/proc/{server.proc.pid}/maps").read_text()
        assert "numpy" not in mapped and "pydantic_core" not in mapped, server.output
        pids = worker_pids(data_dir)
        assert sorted(pids) == [0, 1], server.output

        # Kamailio's routing is the same whichever database the workers share.
        if database == "sqlite":
            # A caller that ignores Record-Route (as the load kit's does): its ACK and BYE come
            # to the proxy's address with no Route, and still reach the call's worker.
            plan.append([{"sleep": {"seconds": 30}}])
            run = await sipp.call(server.sip, tmp_path, *routeless())
            assert run.returncode == 0, run.output + run.errors + server.output
            await until(lambda: app.bodies("/final"), "the final page", lambda: server.output)
            assert app.bodies("/final")[0]["this_call"]["call_cause"] == "hung_up"

            # Kamailio is no open relay: a request "in a dialog" routed to anywhere but a
            # worker is refused, and nothing reaches that place.
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as elsewhere:
                elsewhere.bind(("127.0.0.1", 0))
                elsewhere.settimeout(1.0)
                target = elsewhere.getsockname()[1]
                relay = (
                    f"INFO sip:victim@127.0.0.1:{target} SIP/2.0\r\n"
                    "Via: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bKrelay1;rport\r\n"
                    f"Route: <sip:127.0.0.1:{server.sip_port};lr>\r\n"
                    "From: <sip:probe@127.0.0.1>;tag=a\r\nTo: <sip:victim@127.0.0.1>;tag=b\r\n"
                    "Call-ID: relay-1@probe\r\nCSeq: 1 INFO\r\nMax-Forwards: 70\r\n"
                    "Content-Length: 0\r\n\r\n"
                ).encode()
                (refused,) = await asyncio.to_thread(exchange, server.sip, relay, final=True)
                assert refused.status == 403, refused
                with pytest.raises(TimeoutError):
                    elsewhere.recv(2048)

        # A: a recording whose notification is answered 503: it waits in the outbox.
        plan.append(record(800))
        run = await sipp.call(server.sip, tmp_path, *caller(speaking, 20000))
        assert run.returncode == 0, run.output + run.errors + server.output
        await until(lambda: len(app.bodies("/available")) >= 2, "retries", lambda: server.output)
        (pending,) = {b["action_result"]["result"]["filename"] for b in app.bodies("/available")}

        # B and C at once: round robin puts one on each worker; both are recording when
        # the worker delivering notifications is killed.
        plan += [record(2000), record(2000)]
        calls = [
            asyncio.create_task(sipp.call(server.sip, tmp_path, *caller(long_talk, 20000)))
            for _ in range(2)
        ]
        folder = data_dir / "media" / "default" / "recordings"

        def both_recording() -> bool:
            files = list(folder.glob("*.wav")) if folder.exists() else []
            return sum(f.stat().st_size > 58 + 8000 for f in files) >= 3  # A's, B's, C's

        await until(both_recording, "two recordings", lambda: server.output)
        # The REST API on the one web address (every worker listens there) lists both
        # calls and finds each, whichever worker takes the connection.
        for _ in range(4):
            status, listed = await server.api("GET", "/api/v1/calls")
            assert status == 200 and len(listed["calls"]) == 2, listed
        for call in listed["calls"]:
            for _ in range(3):
                status, one = await server.api("GET", f"/api/v1/calls/{call['call_id']}")
                assert status == 200 and one["call_id"] == call["call_id"], one
        # The counters: the answering worker's, and every worker's beside.
        for _ in range(3):
            status, stats = await server.api("GET", "/api/stats")
            # (workers by index; with PostgreSQL, nodes by their private address)
            labels = [w["worker"] for w in stats["workers"]]
            assert status == 200 and len(set(labels)) == 2, stats
            assert labels == [0, 1] or database == "postgresql", stats
            assert sum(w["calls_active"] for w in stats["workers"]) == 2, stats
        if database == "sqlite":  # the one delivering notifications
            victim = notifier_pid(data_dir)
            assert victim is not None and victim in pids.values(), (victim, pids)
        else:  # every worker delivers: the pending one goes from any
            victim = pids[0]
            assert not (data_dir / "notifier.lock").exists()  # (no process lock is used)
        index = next(i for i, pid in pids.items() if pid == victim)
        kill_at_next_attempt = victim  # (retries come at most 1.5 s apart)
        await asyncio.wait_for(attempt_refused_by_kill.wait(), 10)

        # D, right after: it goes to the survivor (a dead worker is skipped).
        plan.append([{"sleep": {"seconds": 0.5}}, {"hang_up": {}}])
        quick = [sipp.invite("ivr"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=15000)]
        run = await sipp.call(server.sip, tmp_path, *quick)
        assert run.returncode == 0, run.output + run.errors + server.output

        outcomes = [r.returncode for r in await asyncio.gather(*calls)]
        assert sorted(c == 0 for c in outcomes) == [False, True], (outcomes, server.output)

        await until(
            lambda: f"worker {index} is serving again" in server.output,
            "the new worker",
            lambda: server.output,
        )
        assert f"worker {index} (pid {victim}) ended" in server.output
        # The dead worker's recording: finished and announced by its successor (SQLite)
        # or by whichever worker finds it gone first (PostgreSQL); the pending
        # notification: delivered by whoever holds the notifier lock now (SQLite), or by
        # one of the workers (PostgreSQL).
        await until(lambda: len(delivered) >= 3, "three notifications", lambda: server.output)
        await asyncio.sleep(2.0)  # time for any duplicate to arrive (retries are 1 s apart)
        assert delivered.count(pending) == 1, delivered
        assert len(delivered) == len(set(delivered)) == 3, delivered
        assert "interrupted by a restart" in server.output

        if database == "sqlite":  # (the same with PostgreSQL)
            # The new worker takes calls: with E and F up, killing the other worker drops
            # exactly one of them.
            plan += [[{"sleep": {"seconds": 6}}, {"hang_up": {}}] for _ in range(2)]
            starts = len(app.bodies("/start"))
            calls = [asyncio.create_task(sipp.call(server.sip, tmp_path, *quick)) for _ in range(2)]
            assert await wait_for_request_count(app, "/start", starts + 2), server.output
            survivor = worker_pids(data_dir)[1 - index]
            os.kill(survivor, signal.SIGKILL)
            outcomes = [r.returncode for r in await asyncio.gather(*calls)]
            assert sorted(c == 0 for c in outcomes) == [False, True], (outcomes, server.output)
        assert await server.stop() == 0, server.output
    assert not leftovers(data_dir), "a worker or Kamailio outlived serve"


def routeless() -> list[str]:
    """A call whose ACK and BYE go to the address called, with no Route header."""
    to_proxy = "sip:ivr@[remote_ip]:[remote_port]"
    answered = sipp.ANSWERED.replace("[next_url]", to_proxy).replace("[routes]\n", "")
    bye = sipp.BYE_FROM_CALLER.format(cseq=2).replace("[next_url]", to_proxy)
    return [
        sipp.invite("ivr"),
        answered,
        sipp.PAUSE.format(ms=1000),
        bye.replace("[routes]\n", ""),
    ]


async def wait_for_request_count(app: AppServer, path: str, count: int) -> bool:
    for _ in range(300):
        if len(app.bodies(path)) >= count:
            return True
        await asyncio.sleep(0.1)
    return False


def _runs(entry: Path, data_dir: Path) -> bool:
    try:
        return str(data_dir).encode() in (entry / "cmdline").read_bytes()
    except OSError:
        return False


async def serve_that_fails(tmp_path: Path, first_port: int, sip_port: int) -> str:
    """``serve --workers 2`` that is expected to stop by itself: exit status 2 (a setting
    that cannot be served), no traceback, nothing of it left running; what it printed."""
    config = tmp_path / "workers.toml"
    config.write_text(f"[workers]\nfirst_port = {first_port}\n[speech]\npreload = false\n")
    data_dir = tmp_path / "data"
    proc = await asyncio.create_subprocess_exec(
        *CALLHOOK, "serve", "--workers", "2", "--config", str(config),
        "--sip", f"127.0.0.1:{sip_port}", "--http", f"127.0.0.1:{free_tcp_port()}",
        "--data-dir", str(data_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    text = out.decode(errors="replace")
    assert proc.returncode == 2, text
    assert "Traceback" not in text, text
    assert "serving with 2 workers" not in text  # no banner for a serve nobody can call
    assert not leftovers(data_dir), "a worker or Kamailio outlived serve"
    return text


def leftovers(data_dir: Path) -> list[Path]:
    """Processes still running with ``data_dir`` in their command line."""
    return [p for p in Path("/proc").iterdir() if p.name.isdigit() and _runs(p, data_dir)]


async def test_a_sip_address_that_is_taken_stops_serve_with_the_reason(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        text = await serve_that_fails(tmp_path, free_even_udp_port(), port)
    # Found before anything starts: one line, the address and what sets it.
    assert text.strip().splitlines() == [
        f"callhook: SIP cannot listen on udp 127.0.0.1:{port}: Address already in use "
        "(set by --sip, or [sip] host and port)"
    ], text


async def test_a_worker_that_cannot_start_stops_serve_with_the_reason(tmp_path: Path) -> None:
    first = free_even_udp_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", first + 1))  # worker 1's SIP port
        text = await serve_that_fails(tmp_path, first, free_udp_port())
    line = (
        f"callhook: SIP cannot listen on udp 127.0.0.1:{first + 1}: Address already in use "
        "(set by [workers] first_port)"
    )
    assert [x for x in text.splitlines() if x.startswith("callhook:")] == [line], text


async def test_two_serves_on_one_machine_each_take_free_ports_for_their_workers(
    tmp_path: Path, app: AppServer
) -> None:
    """No ``[workers] first_port``: each serve's workers take free ports from its SIP
    port + 40 up, so a second serve whose SIP port is 1 above the first's starts beside it
    (its first choice is taken by the first's workers) and both take calls."""
    app.page("/start", [{"sleep": {"seconds": 0.5}}])
    app.page("/final", None)
    sip = free_udp_pair()
    servers = [Server.for_app(tmp_path / f"data{n}", app, extra=("--workers", "2")) for n in (0, 1)]
    for n, server in enumerate(servers):
        server.start_timeout = 150.0
        server.sip_port = sip + n
        server.args[server.args.index("--sip") + 1] = f"127.0.0.1:{sip + n}"
    async with servers[0] as first, servers[1] as second:
        for server in (first, second):
            quick = [
                sipp.invite("ivr"),
                sipp.ANSWERED,
                sipp.BYE_FROM_SERVER.format(timeout_ms=15000),
            ]
            run = await sipp.call(server.sip, tmp_path, *quick)
            assert run.returncode == 0, run.output + server.output
        ports = [_worker_ports(s.output) for s in (first, second)]
    # (Another test's process may hold one of them: then the next free ones.)
    assert len(ports[0]) == len(ports[1]) == 2 and not set(ports[0]) & set(ports[1]), ports
    assert min(ports[0]) >= sip + 40 and min(ports[1]) >= sip + 41, ports


def _worker_ports(banner: str) -> list[int]:
    return [int(m) for m in re.findall(r"worker \d+: SIP 127\.0\.0\.1:(\d+)", banner)]


async def test_a_hang_up_signal_does_not_stop_serve_and_orphaned_workers_end_cleanly(
    tmp_path: Path, app: AppServer
) -> None:
    """SIGHUP (a closed terminal, ``kill -HUP``) reloads the config (each worker says so)
    and serve goes on taking calls. The supervisor killed outright: its workers, told by
    the kernel, shut down cleanly though nothing reads their output any more (no
    BrokenPipeError traceback), and none is left running."""
    from tests.e2e.harness import served

    app.page("/start", [{"sleep": {"seconds": 0.5}}])
    app.page("/final", None)
    bye = sipp.BYE_FROM_SERVER.format(timeout_ms=15000)
    async with served(tmp_path, app, 2) as server:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        await until(lambda: server.output.count("SIGHUP: reloaded") == 2,
                    "the SIGHUP lines", lambda: server.output)  # fmt: skip
        run = await sipp.call(server.sip, tmp_path, sipp.invite("ivr"), sipp.ANSWERED, bye)
        assert run.returncode == 0, run.output + server.output
        workers = worker_pids(server.data_dir)
        assert len(workers) == 2
        for pid in workers.values():
            # A process group of its own (Ctrl-C reaches it through the supervisor), in the
            # supervisor's session (not a scheduling group of its own: supervisor.py's
            # _own_group), SIGTTOU ignored (a write to a `tostop` terminal goes through).
            assert os.getpgid(pid) == pid != os.getpgid(server.proc.pid)
            assert os.getsid(pid) == os.getsid(server.proc.pid)
            ignored = next(
                int(line.split()[1], 16)
                for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("SigIgn:")
            )
            assert ignored >> (signal.SIGTTOU - 1) & 1, hex(ignored)
        server.proc.kill()  # SIGKILL: the supervisor has no say
        await until(lambda: not worker_pids(server.data_dir), "the workers' end",
                    lambda: server.output, 40)  # fmt: skip
    assert "Traceback" not in server.output, server.output
    assert "BrokenPipeError" not in server.output, server.output


async def test_a_call_no_worker_answers_gets_503_from_the_front(
    tmp_path: Path, app: AppServer
) -> None:
    """Both workers stopped (SIGSTOP: alive, silent): Kamailio tries each for its timeout,
    then answers the caller 503 itself, which an upstream proxy takes as "try another
    server" (not the 408 it would relay)."""
    from tests.e2e.harness import served
    from tests.e2e.test_sip_robustness import request as sip_request

    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    async with served(tmp_path, app, 2) as server:
        workers = worker_pids(server.data_dir)
        assert len(workers) == 2
        for pid in workers.values():
            os.kill(pid, signal.SIGSTOP)
        try:
            answers = await asyncio.to_thread(
                exchange,
                server.sip,
                sip_request("INVITE", server.sip_port, via_port=5993),
                20.0,
                final=True,
            )
        finally:
            for pid in workers.values():
                os.kill(pid, signal.SIGCONT)
    assert answers and answers[-1].status == 503, (answers, server.output)
    assert "worker" in answers[-1].reason, answers[-1]
    assert app.bodies("/start") == []
