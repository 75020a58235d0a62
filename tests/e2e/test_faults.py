"""Faults lose nothing (issue 14, item 6): each fault made real against a real ``serve``.

* **Disk full while recording.** ``serve`` runs with its data directory on a
  small tmpfs of its own: ``unshare -rm`` (a user and mount namespace, which a
  user who is not root may make on Debian) mounts it and execs ``serve``, so
  nothing outside sees it. The test reaches that directory through
  ``/proc/<serve's pid>/root`` (the kernel's view of another mount namespace),
  fills it with a file while SIPp's caller is being recorded, and deletes the
  file to bring space back. The state database lives there too, so the
  recordings journal is refused as well (SQLITE_FULL). Workers behind Kamailio too: all
  in the namespace, and none may die of it (a worker's Prometheus samples are files
  there, mapped into memory: a new page of one on a full disk was SIGBUS); a worker
  started while it is full counts in memory, and writes its samples there once there
  is room.
* **The speech recogniser crashing or hanging mid-``get_input``.** The real
  engine runs; ``CALLHOOK_FAULT_RECOGNISER`` (read once at start-up by
  ``callhook.speech.faults``) breaks the first engine instance on its first
  utterance. The instances the restart builds are the real engine, healthy.
* **The page server slow or resetting connections under load**: 21 SIPp calls at
  once; a third of them get a next_page answered after the page timeout, a third
  get a connection closed without an answer.
* **5 % RTP loss with 60 ms jitter**, both ways: a userspace relay that ``serve``
  advertises as its external address drops and delays the real RTP
  (tests/e2e/impair.py; seeded, so it runs and loses the same packets everywhere),
  and where the kernel has ``sch_netem`` and the test is root, ``tc netem`` on the
  loopback of a network namespace of the test's own, with ``serve`` and SIPp inside.

Outcomes are in docs/behaviour.md, "Faults".
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from aiohttp import web

from callhook.devtools.harness import AppServer, Received, Reply
from callhook.media import wav
from tests.e2e import harness, sipp
from tests.e2e.harness import WORKERS, Server, served, wait_for_request
from tests.e2e.impair import BACK, CLEAR, FORTH, Impairment, Relay
from tests.e2e.rtpstream import Stream
from tests.e2e.test_recordings import (
    assert_holds_what_was_sent,
    assert_result_matches_file,
    talk,
)

pytestmark = [
    pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed"),
    # Calls under load, lossy links, a recogniser that hangs: timing counts (scripts/test).
    pytest.mark.solo,
]

DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
SPEECH = Path(__file__).parent.parent / "data" / "speech"

#: The tmpfs the data directory is on: serve's start-up needs well under 1 MB of it.
TMPFS_BYTES = 4 << 20


def speech_clip(name: str) -> npt.NDArray[np.int16]:
    """A real recording of a spoken digit (tests/data/speech), 8 kHz."""
    return wav.decode_to_8k((SPEECH / name).read_bytes())


async def until(condition: Any, timeout: float, what: str, step: float = 0.05) -> None:
    """Wait until ``condition()`` is true, at most ``timeout`` seconds (a deadline, not hope)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(step)


# --- disk full while recording ---------------------------------------------------------------


def _unshare_works() -> str | None:
    """Why a user+mount namespace with a tmpfs cannot be made here (None: it can)."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k probe /mnt"],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"unshare -rm cannot mount a tmpfs here: {probe.stderr.strip()}"
    return None


@contextlib.contextmanager
def serve_on_small_tmpfs(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> Iterator[None]:
    """Make the harness start serve in its own mount namespace, its data dir a small tmpfs."""
    why = _unshare_works()
    if why is not None:
        pytest.skip(why)
    data_dir.mkdir(parents=True)
    script = f'mount -t tmpfs -o size={TMPFS_BYTES} callhook-faults "$0" && exec "$@"'
    with monkeypatch.context() as patch:
        patch.setattr(
            harness,
            "CALLHOOK",
            ["unshare", "-rm", "sh", "-c", script, str(data_dir), sys.executable, "-m", "callhook"],
        )
        yield


def fill(directory: Path) -> Path:
    """Write a file in ``directory`` until its filesystem is full; returns the file."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        try:  # the last partial page too
            while f.write(b"\0" * 512):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


@pytest.mark.parametrize("workers", WORKERS)
async def test_disk_full_while_recording_keeps_the_recording_and_notifies_later(
    tmp_path: Path, app: AppServer, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    data_dir = tmp_path / "data"  # (served's)
    app.page(
        "/start",
        [
            # The call is transcribed too: its results go through the same database.
            {"start_transcription": {"results_page": {"url": "/results"}, "id": "full"}},
            {
                "record": {
                    "next_page": {"url": "/recorded"},
                    "recording_available_page": {"url": "/available"},
                    "id": "full",
                    "milliseconds_max_silence": 10000,
                    "seconds_max_duration": 30,
                }
            },
        ],
    )
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/available", None)
    app.page("/results", None)
    app.page("/final", None)
    sent = talk(1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6)  # ~8 s of continuous speech
    stream = Stream(12.0).speech(sent, at=0.5)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("rec"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=40000))
    # No free-space floor: the disk fills in the middle of the recording (as when another
    # program fills it), which the floor is there to make rare.
    config = "[recordings]\nmin_free_mb = 0\n"
    with serve_on_small_tmpfs(monkeypatch, data_dir):
        async with served(tmp_path, app, workers, config) as server:
            assert server.proc is not None
            inside = Path(f"/proc/{server.proc.pid}/root") / data_dir.relative_to("/")
            recordings = inside / "media" / "default" / "recordings"
            caller = asyncio.create_task(sipp.call(server.sip, tmp_path, *parts))

            def recording_under_way() -> bool:
                return any(f.stat().st_size > 16000 for f in recordings.glob("*.wav"))

            await until(recording_under_way, 15, "the recording did not start")
            filler = fill(inside)
            assert await wait_for_request(app, "/recorded", 10), server.output
            (body,) = app.bodies("/recorded")
            result = body["action_result"]["result"]
            assert result["reason"] == "error", result
            assert result["id"] == "full" and result["contains_sound"] is True
            data = (inside / "media" / "default" / result["filename"]).read_bytes()
            # The recording so far: a valid WAV holding exactly a span of what was said.
            assert_holds_what_was_sent(data, stream.sent(), law="ulaw", sent_law="ulaw")
            assert_result_matches_file(result, data)
            assert result["seconds_duration"] >= 1.5
            run = await caller
            assert run.returncode == 0, run.output + run.errors + server.output
            await until(lambda: app.bodies("/final"), 10, "no final page")
            # The cause, in the server log; the journal could not be written either.
            assert "No space left on device" in server.output, server.output
            assert "recordings journal cannot be written" in server.output, server.output
            assert "ended after" not in server.output, server.output  # (no worker died)
            # The call's end stopped its transcription: its last results, made while the
            # disk was full, are held in memory.
            refused = "transcription results for default cannot be queued"
            await until(lambda: refused in server.output, 20, "no transcription result held")
            held = re.search(
                r"transcription results for default cannot be queued \(.*\): (\d+) held",
                server.output,
            )
            assert held is not None, server.output
            assert app.bodies("/available") == []  # not while the disk is full
            if workers > 1:  # a worker dies meanwhile: the one in its place starts all the same
                from tests.e2e.test_workers import worker_pids

                os.kill(worker_pids(data_dir)[0], signal.SIGKILL)
                again = "worker 0 is serving again"
                await until(lambda: again in server.output, 60, "worker 0 on the full disk")
                restarted = time.monotonic()
                assert "Traceback" not in server.output, server.output
            before = len(app.bodies("/results"))
            filler.unlink()  # space comes back
            assert await wait_for_request(app, "/available", 30), server.output
            (notice,) = app.bodies("/available")
            assert notice["is_notification"] is True
            assert notice["action_result"]["result"] == {**result, "file_available": True}
            assert (inside / "media" / "default" / result["filename"]).read_bytes() == data

            def completed() -> bool:
                return any(
                    b["action_result"]["result"]["completed"] for b in app.bodies("/results")
                )

            await until(completed, 30, "the held transcription results were not delivered")
            results = [b["action_result"]["result"] for b in app.bodies("/results")]
            # Every held result came, in order: the completed one last.
            assert len(results) - before >= int(held[1]), results
            assert [r["completed"] for r in results] == [False] * (len(results) - 1) + [True]
            assert "transcription results for default are queued again" in server.output
            if workers > 1:  # the worker started on the full disk counted in memory ...
                assert "metrics: no room for samples" in server.output, server.output
                # ... and writes its samples to the disk once there is room, when it next
                # counts after its 10 s between looks: calls until one is worker 0's
                # (Kamailio takes turns, each of its processes on its own).
                await asyncio.sleep(max(0.0, restarted + 10.5 - time.monotonic()))
                short = [sipp.invite("rec"), sipp.ANSWERED, sipp.PAUSE.format(ms=300)]
                short.append(sipp.BYE_FROM_CALLER.format(cseq=2))
                before = server.output.count(" 0:callhook.call: ")
                for _ in range(4):
                    if server.output.count(" 0:callhook.call: ") > before:
                        break
                    run = await sipp.call(server.sip, tmp_path, *short)
                    assert run.returncode == 0, run.output + run.errors + server.output
                back = "metrics: room for samples in"
                await until(lambda: back in server.output, 10, f"no {back}: {server.output}")
            # No worker died of the full disk (the one killed above: once, and started).
            assert server.output.count("ended after") == (workers > 1), server.output
        assert server.proc.returncode == 0, server.output
    assert "Traceback" not in server.output, server.output


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("secret", [False, True], ids=["new", "used"])
def test_serve_on_a_full_disk_says_so_in_one_line(
    tmp_path: Path, workers: int, secret: bool
) -> None:
    """A data directory whose disk is full from the start: ``serve`` ends at once with one
    line naming the cause, not a traceback (a new one cannot make its secret; one used
    before cannot write the workers' configuration, or open its state database)."""
    why = _unshare_works()
    if why is not None:
        pytest.skip(why)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    made = 'echo a-secret-of-an-earlier-run > "$0/secret" && ' if secret else ""
    script = (
        f'mount -t tmpfs -o size=64k callhook-full "$0" && {made}'
        '(cat /dev/zero > "$0/filler" 2>/dev/null; true) && exec "$@"'
    )
    # (The workers' ports as the harness gives them: a SIP port drawn near 65535 leaves
    # no room for them after it, and serve would refuse that first.)
    config = tmp_path / "callhook.toml"
    config.write_text(f"[workers]\nfirst_port = {harness.free_even_udp_port()}\n")
    serve = [sys.executable, "-m", "callhook", "serve", "--workers", str(workers)]
    serve += ["--data-dir", str(data_dir), "--sip", f"127.0.0.1:{harness.free_udp_port()}"]
    serve += ["--http", f"127.0.0.1:{harness.free_tcp_port()}", "--config", str(config)]
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, str(data_dir), *serve],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    said = [line for line in run.stderr.splitlines() if "DEBUG" not in line]
    assert said[-1].startswith("callhook: "), run.stderr
    assert "No space left on device" in said[-1] or "disk is full" in said[-1], run.stderr
    assert "Traceback" not in run.stderr, run.stderr


# --- the speech recogniser crashing or hanging --------------------------------------------


def _get_input(page: str, **props: Any) -> dict[str, Any]:
    return {
        "get_input": {
            "next_page": {"url": page},
            "speech_input_mode": "auto",
            "speech_recognition_options": {"word_hints": [{"words": DIGITS}]},
            "milliseconds_initial_timeout": 2000,
            "on_input_timeout_messages": [],
            **props,
        }
    }


#: When the caller says its second word: after the first get_input gave up (crash: the
#: fault is at once, then 2 s initial timeout; hang: the deadline, 5 s + 2 s per second
#: of the ~1 s utterance, plus the time the machine's tasks waited for a CPU meanwhile,
#: then 2 s initial timeout, or the get_input's seconds_timeout of 20 s at the latest).
SECOND_WORD_AT = {"crash": 6.0, "hang": 21.0}


@pytest.mark.parametrize(
    ("fault", "workers"),
    [
        pytest.param("crash", 1, id="crash-one-process"),
        pytest.param("hang", 1, id="hang-one-process"),
        pytest.param("crash", 2, id="crash-workers-behind-kamailio", marks=WORKERS[1].marks),
    ],
)
async def test_the_recogniser_crashing_or_hanging_ends_get_input_and_the_call_goes_on(
    tmp_path: Path, app: AppServer, monkeypatch: pytest.MonkeyPatch, fault: str, workers: int
) -> None:
    monkeypatch.setenv("CALLHOOK_FAULT_RECOGNISER", fault)
    app.page(
        "/start",
        [
            _get_input("/heard1", seconds_timeout=20),
            _get_input("/heard2", milliseconds_initial_timeout=16000),
        ],
    )
    app.page("/heard1", [{"hang_up": {}}])
    app.page("/heard2", [{"hang_up": {}}])
    app.page("/final", None)
    second = SECOND_WORD_AT[fault]
    stream = Stream(second + 3.0).speech(speech_clip("7_jackson_7.wav"), at=1.5)
    stream.speech(speech_clip("3_jackson_3.wav"), at=second)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=40000))
    async with served(tmp_path, app, workers) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
        await until(lambda: app.bodies("/final"), 10, "no final page")
    assert run.returncode == 0, run.output + run.errors + server.output
    # The first get_input: nothing recognised, so no next_page (docs/behaviour.md);
    # the call went on to the next action, whose word the restarted engine heard.
    assert app.bodies("/heard1") == [], server.output
    (body,) = app.bodies("/heard2")
    result = body["action_result"]["result"]
    assert result["input_type"] == "speech", result
    assert result["speech_input"][0]["alternatives"][0]["text"] == "three", result
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"
    # The cause: in the server log, and in the call's own log (the application's).
    expected = {"crash": "crashed: InjectedCrash", "hang": "hung"}[fault]
    assert f"speech recognition fault: the whisper recogniser {expected}" in server.output
    assert "speech recogniser restarted (whisper)" in server.output, server.output
    call_log = (tmp_path / "data" / "media" / "default" / body["log_filename"]).read_text()
    assert "speech_failed" in call_log and expected in call_log, call_log
    assert "Traceback" not in server.output, server.output


# --- the page server slow or resetting connections under load ------------------------------

#: Page timeout of the load test's serve; the slow pages answer well after it.
PAGE_TIMEOUT = 2.0
SLOW = 2 * PAGE_TIMEOUT + 1.0
CALLS = 21  # a third of each kind


class FlakyApp(AppServer):
    """The application server, except that ``/reset/...`` pages close the connection
    without a byte of answer (an RST: SO_LINGER 0), as a crashing app server does."""

    def __init__(self) -> None:
        super().__init__()
        self.resets: list[str] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not request.path.startswith("/reset/"):
            return await super()._handle(request)
        await request.read()
        self.resets.append(request.path)
        transport = request.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
        raise asyncio.CancelledError  # nothing is answered


async def test_slow_and_resetting_pages_under_load_give_each_call_its_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = FlakyApp()
    async with app:
        kinds = {
            f"{kind}{n}": kind
            for n, kind in zip(range(CALLS), ["ok", "slow", "reset"] * CALLS, strict=False)
        }

        def start(request: Received) -> list[dict[str, Any]]:
            user = str(request.json["this_call"]["call_to"]).removeprefix("sip:").split("@")[0]
            prefix = {"ok": "/next", "slow": "/slow", "reset": "/reset"}[kinds[user]]
            return [
                {
                    "get_number": {
                        "digit_count": 3,
                        "next_page": {"url": f"{prefix}/{user}"},
                        "milliseconds_initial_timeout": 10000,
                    }
                }
            ]

        app.page("/start", start)
        for user, kind in kinds.items():
            if kind == "ok":
                app.page(f"/next/{user}", [{"hang_up": {}}])
            elif kind == "slow":
                app.page(f"/slow/{user}", Reply([{"hang_up": {}}], delay=SLOW))
        app.page("/error", [{"hang_up": {}}])
        app.page("/final", None)
        config = tmp_path / "callhook.toml"
        # 21 calls at once from one address pass the flood guard's default 20 requests a
        # second: this test is about pages, so the rate is raised (test_security tests it).
        config.write_text(f"page_timeout = {PAGE_TIMEOUT}\n[security]\nrate = 1000\n")
        stream = Stream(8.0).rfc4733("123", at=1.0)
        pcap = stream.write_pcap(tmp_path / "caller.pcap")
        server = Server(
            tmp_path / "data",
            app_url=app.url("/start"),
            secret=app.secret,
            final_page=app.url("/final"),
            error_page=app.url("/error"),
            extra=("--config", str(config)),
        )
        async with server:

            async def one(user: str) -> sipp.SippRun:
                workdir = tmp_path / user
                workdir.mkdir()
                parts = [sipp.invite(user), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
                parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
                return await sipp.call(server.sip, workdir, *parts)

            runs = await asyncio.gather(*(one(user) for user in kinds))
            # A caller that failed says why first: a call whose peer is gone ends only when
            # its BYE times out (64*T1), so its final page would just be "late".
            for user, run in zip(kinds, runs, strict=True):
                assert run.returncode == 0, (user, run.output + run.errors, server.output[-4000:])

            def finals_missing() -> list[str]:
                got = {str(b["this_call"]["call_to"]) for b in app.bodies("/final")}
                return [u for u in kinds if not any(f"{u}@" in to for to in got)]

            try:
                await until(lambda: not finals_missing(), 20, "final pages")
            except AssertionError as exc:
                missing = finals_missing()
                raise AssertionError(f"{exc}; missing {missing}\n{server.output}") from None
            status, stats = await server.api("GET", "/api/stats")
            assert status == 200, stats
            # No call leaked: every one ended, in serve's own count ...
            assert stats["calls_active"] == 0, stats
            assert stats["calls_ended"] == {"completed": CALLS}, stats
            # The loop thread's CPU, and the media ticks' part of it (bench.ivr_load's split).
            assert 0 < stats["cpu_media_tick_s"] < stats["cpu_loop_s"], stats
            # ... and the SIP agent forgets each once its last transaction is over (the
            # INVITE server transaction's Accepted state lasts 64*T1 = 32 s, RFC 6026).
            deadline = asyncio.get_running_loop().time() + 40
            while stats["sip_calls"] and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(1.0)
                stats = (await server.api("GET", "/api/stats"))[1]
            assert stats["sip_calls"] == 0, stats
        finals = {
            str(b["this_call"]["call_to"]).removeprefix("sip:").split("@")[0]: b
            for b in app.bodies("/final")
        }
        errors = {b["application_instance_id"]: b["error_result"] for b in app.bodies("/error")}
        for user, kind in kinds.items():
            final = finals[user]
            assert final["this_call"]["call_cause"] == "completed", (user, final)
            instance = final["application_instance_id"]
            if kind == "ok":  # untouched by the others: its digits, no error page
                (body,) = app.bodies(f"/next/{user}")
                assert body["action_result"]["result"] == {"entered_number": "123"}
                assert instance not in errors, (user, errors.get(instance))
            else:  # an application error: the error page, with the cause (behaviour.md, Errors)
                expected = "timeout" if kind == "slow" else "unreachable"
                assert errors[instance]["cause"] == expected, (user, errors[instance])
                assert errors[instance]["url"] == app.url(f"/{kind}/{user}")
        # A page request that was sent is never retried (not idempotent, §1.3).
        assert sorted(app.resets) == sorted(f"/reset/{u}" for u, k in kinds.items() if k == "reset")
        assert "Traceback" not in server.output, server.output


# --- 5 % loss and 60 ms jitter on the line ----------------------------------------------------


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=15, check=False)


@contextlib.contextmanager
def lossy_netns() -> Iterator[str]:
    """A network namespace of the test's own whose loopback loses 5 % and jitters 60 ms."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces and tc need root")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install iproute2)")
    name = f"chk-netem-{os.getpid()}"
    _ip("netns", "del", name)  # a leftover of a killed run with the same pid
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"ip netns cannot be used here: {made.stderr.strip()}")
    try:
        assert _ip("-n", name, "link", "set", "lo", "up").returncode == 0
        qdisc = subprocess.run(
            ["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root",
             "netem", "loss", "5%", "delay", "20ms", "60ms"],
            capture_output=True, text=True, timeout=15, check=False,
        )  # fmt: skip
        if qdisc.returncode != 0:
            pytest.skip(f"tc netem cannot be used here: {qdisc.stderr.strip()}")
        yield name
    finally:
        for pid in _ip("netns", "pids", name).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 9)
        _ip("netns", "del", name)  # the qdisc goes with it


async def call_in_lossy_netns(
    tmp_path: Path, app: AppServer, monkeypatch: pytest.MonkeyPatch, scenario_parts: list[str]
) -> Server:
    """The call with serve and SIPp in :func:`lossy_netns` (skips where it cannot be made)."""
    from tests.e2e.test_nat_netns import app_reachable_from

    with lossy_netns() as netns:
        monkeypatch.setattr(
            harness, "CALLHOOK", ["ip", "netns", "exec", netns, sys.executable, "-m", "callhook"]
        )
        server = Server.for_app(tmp_path / "data", app)
        async with app_reachable_from(netns, app), server:
            await sipp_in_netns(netns, sipp.scenario(*scenario_parts), tmp_path, server.sip)
            await until(lambda: app.bodies("/final"), 20, "no final page")
    return server


async def sipp_in_netns(netns: str, text: str, workdir: Path, target: tuple[str, int]) -> str:
    """One SIPp call inside ``netns``; returns its output (raises if it failed)."""
    assert sipp.SIPP is not None
    path = workdir / "scenario.xml"
    path.write_text(text)
    errors = workdir / "sipp-errors.log"
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", netns, sipp.SIPP, "-sf", str(path), f"{target[0]}:{target[1]}",
        "-i", "127.0.0.1", "-p", str(harness.free_udp_port()),
        "-mi", "127.0.0.1", "-mp", str(harness.free_even_udp_port()),
        "-m", "1", "-nostdin", "-t", "u1", "-timeout", "60s",
        "-trace_err", "-error_file", str(errors),
        cwd=workdir, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 70)
    report = out.decode(errors="replace")
    if errors.exists():
        report += errors.read_text(errors="replace")
    assert proc.returncode == 0, report
    return report


#: The relay's address: 127.0.0.5 is this machine's too (all of 127/8 is), so serve,
#: bound to 127.0.0.1, can advertise it as its external address.
RELAY = "127.0.0.5"
#: netem's ``loss 5% delay 20ms 60ms``, in userspace.
LOSS_AND_JITTER = Impairment(loss=0.05, delay=0.020, jitter=0.060)


async def call_through_relay(
    tmp_path: Path, app: AppServer, scenario_parts: list[str]
) -> tuple[Server, Relay, int]:
    """The call, with serve advertising the relay (``[sip] external_address``) and one RTP
    port (and its RTCP port) that the relay impairs; serve, the relay and the RTP port."""
    rtp = harness.free_even_udp_port()
    config = tmp_path / "callhook.toml"
    config.write_text(f'[sip]\nexternal_address = "{RELAY}"\n')
    # The harness's --rtp-ports comes first; the last one given counts.
    extra = ("--config", str(config), "--rtp-ports", f"{rtp}-{rtp + 1}")
    server = Server.for_app(tmp_path / "data", app, extra=extra)
    # SIP would cross the relay unimpaired (the test is about media; SIP retransmits):
    # SIPp sends all its SIP to the address it called, so only a UA that followed
    # serve's Contact and Via would use it.
    ports = {server.sip_port: CLEAR, rtp: LOSS_AND_JITTER, rtp + 1: LOSS_AND_JITTER}
    async with Relay(RELAY, "127.0.0.1", ports, seed=14) as relay, server:
        run = await sipp.call(server.sip, tmp_path, *scenario_parts)
        await until(lambda: app.bodies("/final"), 20, "no final page")
    assert run.returncode == 0, run.output + run.errors + server.output
    return server, relay, rtp


@pytest.mark.parametrize("line", ["relay", "netem"])
async def test_digits_and_a_recording_survive_5_percent_loss_and_60_ms_jitter(
    tmp_path: Path, app: AppServer, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    """The caller sends RFC 4733 digits, then speaks, over a line that loses 5 % of the
    RTP and delays each packet 20 ms ± 60 ms (so packets arrive out of order), both ways.

    ``relay``: a userspace relay on 127.0.0.5 (tests/e2e/impair.py), which serve
    advertises as its external address; SIPp's RTP goes to it and it forwards to
    serve, which latches onto it and sends its RTP back through it. Seeded, so
    each run loses the same packets; it runs wherever the test suite runs.
    ``netem``: ``tc netem`` on the loopback of a network namespace, serve and
    SIPp inside; it needs root and the kernel's sch_netem, and skips without.
    """
    from tests.e2e.test_recordings import assert_valid_wav

    data_dir = tmp_path / "data"
    app.page(
        "/start",
        [{"get_number": {"digit_count": 4, "next_page": {"url": "/number"}}}],
    )
    # The recording listens from the last digit (~2.6 s) and the caller speaks at 4.5 s:
    # the initial silence must outlast that gap (1.5 s, the max_silence, would not).
    record = {
        "next_page": {"url": "/recorded"},
        "milliseconds_max_silence": 1500,
        "milliseconds_max_initial_silence": 5000,
    }
    app.page("/number", [{"record": record}])
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/final", None)
    stream = Stream(12.0).rfc4733("1937", at=1.0)
    stream.speech(talk(1, 2, 3, 4, 5, 6), at=4.5)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=40000))
    if line == "netem":
        server = await call_in_lossy_netns(tmp_path, app, monkeypatch, parts)
    else:
        server, relay, rtp = await call_through_relay(tmp_path, app, parts)
        report = relay.report()
        print(report)
        forth, back = relay.line(rtp, FORTH), relay.line(rtp, BACK)
        # The caller's RTP and serve's both crossed the relay (serve latched onto it) ...
        assert forth.sent >= 400 and back.sent >= 400, report  # the ~10 s the call lasts
        assert f"sending RTP to {RELAY}:{rtp} (where it comes from)" in server.output
        # ... and the line was as bad as it says, each way.
        for way in (forth, back):
            assert way.dropped >= 0.02 * way.sent, report
            assert way.reordered >= 0.05 * way.sent, report
    (number,) = app.bodies("/number")
    assert number["action_result"]["result"] == {"entered_number": "1937"}, server.output
    (recorded,) = app.bodies("/recorded")
    result = recorded["action_result"]["result"]
    assert result["reason"] == "silence" and result["contains_sound"] is True, result
    data = (data_dir / "media" / "default" / result["filename"]).read_bytes()
    info = assert_valid_wav(data, "ulaw")
    # ~3.2 s of speech: lost packets are silence in the file, not a shorter file.
    assert 3.0 <= info.data_length / 8000 <= 6.0, info
    assert result["seconds_duration"] == pytest.approx(info.data_length / 8000, abs=0.1 + 1e-6)
    assert "Traceback" not in server.output, server.output
