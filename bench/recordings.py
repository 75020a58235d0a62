"""Recordings under load, and the notification outbox: what one callhook process sustains.

    .venv/bin/python -m bench.recordings [--calls 200] [--encrypted] [--only recordings|outbox]
        [--notifications 5000] [--apps 10] [--journal 1000] [--data-root /var/tmp]

**Part 1: N simultaneous 60 s recordings** (default N = 200). One ``callhook
serve`` process; its application (this module run with ``--serve-app``, in its
own process so its CPU is not callhook's) answers the first page with one
``record`` action (60 s at most, silence limits of 60 s, a
``recording_available_page``; ``--encrypted`` adds an ``aescbc`` cipher),
``/recorded`` with ``hang_up`` and ``/available`` with 204, noting when each
arrived. The callers are SIPp: N calls started at ``--rate`` a second, each
replaying a 68 s pcap of continuous real speech (spoken digits of the FSDD
set, jackson and nicolas), so the recording starts at once and ends by
``duration`` 60 s later; callhook then hangs up. One warm-up call (a 2 s
recording) loads the speech model and opens the page client's connection
before the baseline is read.

While the calls run, callhook's process is sampled every 0.5 s: CPU
(utime + stime), RSS, and ``/proc/<pid>/io``. The *steady window* runs from
2 s after the last call's first page to 0.5 s before the first recording
ends: every recording is being written. Reported:

* CPU in the window, % of one core and ms of CPU per recording-second;
* memory per recording call: (median RSS in the window - RSS before the
  calls) / N (the whole call: SIP dialog, RTP session, runner, writer);
* disk writes against the G.711 payload (8000 B/s per recording; ideal
  ratio 1.0), three ways:

  - ``write_bytes`` of ``/proc/<pid>/io``: the kernel charges it when a
    page-cache page becomes dirty (4 KiB each time a clean page is
    dirtied), not when writeback reaches the disk. A page written again
    after writeback (the WAV header, rewritten every second; the last,
    partial page of each file) is charged again; a page written many times
    between two writebacks once. ``os.sync()`` is called after the last
    notification so that the device counter below holds the writeback too;
  - ``wchar``: bytes passed to write system calls (what callhook asked for);
  - file sizes: the recordings on disk at the end, and their sum per second.

  Rates are for the steady window; totals for the whole run (before the
  first call to after the last notification and ``sync``) are divided by
  the audio the files hold. An encrypted recording is written twice
  (``callhook/store/wavfile.py``: decrypted, given its sizes, re-encrypted
  into a new file when it ends), so its whole-run ratio is about 2 while
  its steady-window rate stays about 1. The device's sectors written
  (``/sys/dev/block/<dev>/stat``) are also shown: they include the file
  system's journal, SQLite and *any other process writing to that disk*.

* correctness: every ``/recorded`` result has reason ``duration`` and
  ``seconds_duration`` 60.0 (±0.2); every file is a valid G.711 WAV
  (decrypted first when encrypted) holding 59.8-60.5 s; every recording
  was announced once on ``/available`` with ``file_available`` true;
* availability -> notification: for each recording, from its ``/recorded``
  request to its ``/available`` request (both as the application saw
  them): fsync of the file (or re-encryption), the journal's SQLite
  transactions, the outbox, the notifier.

**Part 2: the outbox and the journal, without SIP** (this process, uvloop;
the endpoint is the application process, a separate aiohttp server answering
204). ``Database`` + ``Outbox`` + ``Notifier`` + ``HttpPages`` as
``callhook serve`` builds them (per application 4 deliveries in flight, 64 in
all): K notifications (default 5000) for ``--apps`` applications queued at
once, then delivered: notifications a second and the time each waited
(queued -> 2xx; a backlog, so the median is about half the drain time). Then
notifications queued at a steady rate (half the burst throughput) for 10 s:
the delivery latency when the outbox keeps up (``Notifier.latencies``).
The journal: M recordings through ``RecordingJournal`` started -> completed
-> durable (3 SQLite transactions each, ``synchronous=FULL``, the last one
queueing the notification): recordings a second, which bounds how many
recordings can end per second; and, for scale, the disk's rate of 4 KiB
write + ``fdatasync``.

Needs ``sipp`` (Debian ``sip-tester``). The data directory must be on a real
disk (``write_bytes`` is 0 on tmpfs): ``--data-root`` (default /var/tmp).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from bench.ivr_load import ROOT, Sampler, free_port, get_json, load_config
from callhook.media import wav
from callhook.store import crypto

SPEECH = Path("/work/shared/data/speech/fsdd")
SPEECH_FALLBACK = ROOT / "tests" / "data" / "speech"
RECORD_SECONDS = 60
WARMUP_SECONDS = 2
STREAM_SECONDS = 68.0  # longer than page latency + 60 s: the caller talks until callhook hangs up
PAYLOAD_RATE = 8000  # G.711 bytes per second of audio
KEY = "00112233445566778899aabbccddeeff" * 2  # AES-256, 64 hex characters
IV = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
SAMPLE_PERIOD = 0.5
RTP_FIRST = 42000


# --- the application (its own process) ------------------------------------------------------


def record_action(seconds: int, encrypted: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "next_page": {"url": "recorded"},
        "seconds_max_duration": seconds,
        "milliseconds_max_silence": 60000,
        "milliseconds_max_initial_silence": 60000,
        "recording_available_page": {"url": "available"},
    }
    if encrypted:
        record["encryption_cipher"] = {"type": "aescbc", "key": KEY, "initialisation_vector": IV}
    return {"record": record}


def application() -> web.Application:
    """The recording app, and a 204 sink for the outbox benchmark (``/sink/{app}``)."""
    mode = {"warmup": True, "encrypted": False}
    stats: dict[str, Any] = {}

    def reset() -> None:
        stats.update(starts=[], recorded={}, available={}, duplicates=0, sink=0, sink_last=0.0)

    reset()

    def result_of(body: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = (body.get("action_result") or {}).get("result") or {}
        return found

    async def page(request: web.Request) -> web.Response:
        now = time.monotonic()
        body = json.loads(await request.read())
        name = request.match_info["page"]
        if name == "start":
            stats["starts"].append(now)
            seconds = WARMUP_SECONDS if mode["warmup"] else RECORD_SECONDS
            return web.json_response({"actions": [record_action(seconds, mode["encrypted"])]})
        if name == "available":
            result = result_of(body)
            filename = str(result.get("filename"))
            if filename in stats["available"]:
                stats["duplicates"] += 1
            stats["available"][filename] = [now, result.get("file_available")]
            return web.Response(status=204)
        if name == "recorded":
            result = result_of(body)
            stats["recorded"][str(result.get("filename"))] = [now, result]
        return web.json_response({"actions": [{"hang_up": {}}]})

    async def sink(request: web.Request) -> web.Response:
        await request.read()
        stats["sink"] += 1
        stats["sink_last"] = time.monotonic()
        return web.Response(status=204)

    async def show(request: web.Request) -> web.Response:
        return web.json_response(stats)

    async def set_mode(request: web.Request) -> web.Response:
        mode.update(json.loads(await request.read()))
        reset()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_get("/stats", show)
    app.router.add_post("/mode", set_mode)
    app.router.add_post("/rec/{page}", page)
    app.router.add_post("/sink/{app}", sink)
    return app


def serve_app(port: int) -> None:
    async def serve() -> None:
        runner = web.AppRunner(application(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


def post_json(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    urllib.request.urlopen(request, timeout=10).close()


# --- the caller -----------------------------------------------------------------------------


def speech(seconds: float) -> np.ndarray[Any, np.dtype[np.int16]]:
    """Continuous speech: spoken digits of two loud speakers, 50 ms apart, ``seconds`` long."""
    clips = sorted(SPEECH.glob("*_jackson_*.wav")) + sorted(SPEECH.glob("*_nicolas_*.wav"))
    if not clips:
        clips = sorted(SPEECH_FALLBACK.glob("*.wav"))
    order = [c for pair in zip(clips[::2], clips[1::2], strict=False) for c in pair] or clips
    pause = np.zeros(400, dtype=np.int16)
    parts: list[np.ndarray[Any, np.dtype[np.int16]]] = []
    total = 0
    while total < seconds * 8000:
        for clip in order:
            samples = wav.decode_to_8k(clip.read_bytes())
            parts += [samples, pause]
            total += len(samples) + len(pause)
            if total >= seconds * 8000:
                break
    return np.concatenate(parts)[: round(seconds * 8000)]


def make_pcap(path: Path, seconds: float) -> Path:
    from tests.e2e.rtpstream import Stream

    return Stream(seconds).speech(speech(seconds), 0.0).write_pcap(path)


SCENARIO = """<?xml version="1.0" encoding="ISO-8859-1" ?>
<!DOCTYPE scenario SYSTEM "sipp.dtd">
<!-- A caller who talks (PCMU, {pcap}) until callhook hangs up, after its recording. -->
<scenario name="callhook recording benchmark caller">
  <send retrans="500" start_rtd="setup">
    <![CDATA[

      INVITE sip:rec@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:rec@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 INVITE
      Contact: <sip:caller[call_number]@[local_ip]:[local_port];transport=[transport]>
      Max-Forwards: 70
      Subject: recording benchmark
      Content-Type: application/sdp
      Content-Length: [len]

      v=0
      o=recbench 53655765 2353687637 IN IP[local_ip_type] [local_ip]
      s=recbench
      c=IN IP[media_ip_type] [media_ip]
      t=0 0
      m=audio [media_port] RTP/AVP 0 101
      a=rtpmap:0 PCMU/8000
      a=rtpmap:101 telephone-event/8000
      a=fmtp:101 0-16
      a=ptime:20
      a=sendrecv

    ]]>
  </send>
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="183" optional="true"/>
  <recv response="200" rtd="setup" crlf="true"/>
  <send start_rtd="call">
    <![CDATA[

      ACK sip:rec@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:rec@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 1 ACK
      Contact: <sip:caller[call_number]@[local_ip]:[local_port];transport=[transport]>
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
  <nop>
    <action>
      <exec play_pcap_audio="{pcap}"/>
    </action>
  </nop>
  <label id="wait_bye"/>
  <recv response="100" optional="true" timeout="{bye_ms}" next="wait_bye"/>
  <recv request="BYE" timeout="{bye_ms}" rtd="call"/>
  <send>
    <![CDATA[

      SIP/2.0 200 OK
      [last_Via:]
      [last_From:]
      [last_To:]
      [last_Call-ID:]
      [last_CSeq:]
      Contact: <sip:caller[call_number]@[local_ip]:[local_port];transport=[transport]>
      Content-Length: 0

    ]]>
  </send>
  <ResponseTimeRepartition value="10, 20, 50, 100, 200, 500, 1000, 2000"/>
  <CallLengthRepartition value="1000, 5000, 30000, 59000, 60000, 61000, 62000, 65000"/>
</scenario>
"""


def free_udp_port(even: bool = False) -> int:
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if not even or port % 2 == 0:
            return port
    raise RuntimeError("no free UDP port")


def sipp_command(scenario: Path, sip_port: int, n: int, rate: int) -> list[str]:
    return [
        "sipp",
        "-sf",
        str(scenario),
        f"127.0.0.1:{sip_port}",
        "-i",
        "127.0.0.1",
        "-p",
        str(free_udp_port()),
        "-mi",
        "127.0.0.1",
        "-mp",
        str(free_udp_port(even=True)),
        "-l",
        str(n),
        "-r",
        str(rate),
        "-m",
        str(n),
        "-recv_timeout",
        "120000",
        "-nostdin",
        "-trace_err",
    ]


def sipp_counts(screen: str) -> tuple[int, int]:
    def count(label: str) -> int:
        found = re.findall(rf"{label}\s*\|\s*\d+\s*\|\s*(\d+)", screen)
        return int(found[-1]) if found else -1

    return count("Successful call"), count("Failed call")


# --- measuring callhook's process ------------------------------------------------------------


def read_io(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = int(value)
    return fields


def thread_io(pid: int) -> dict[str, tuple[int, int]]:
    """(write_bytes, wchar) of each thread of ``pid`` still alive, by thread id and name."""
    found: dict[str, tuple[int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            if task.name == str(pid):
                name = "event loop"  # the recordings' audio, call logs
            elif name == "callhook":  # Python's thread names do not reach the kernel
                name = "Python worker threads"  # SQLite, WAV fsync/re-encryption, speech
            io = _task_io(task)
        except OSError:
            continue
        found[f"{task.name}:{name}"] = io
    return found


def _task_io(task: Path) -> tuple[int, int]:
    fields = dict(line.split(": ") for line in (task / "io").read_text().splitlines())
    return int(fields["write_bytes"]), int(fields["wchar"])


def io_by_thread(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """What each kind of thread wrote between two :func:`thread_io` snapshots."""
    kinds: dict[str, tuple[int, int]] = {}
    for key, (wb, wc) in after.items():
        wb0, wc0 = before.get(key, (0, 0))
        name = key.partition(":")[2]
        kind = name.rsplit("_", 1)[0] if name.startswith("callhook-") else name
        total = kinds.get(kind, (0, 0))
        kinds[kind] = (total[0] + wb - wb0, total[1] + wc - wc0)
    return {k: v for k, v in kinds.items() if v != (0, 0)}


def device_stat(path: Path) -> Path | None:
    """The block device statistics file of the device ``path`` is on (None: not a block device)."""
    dev = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    return stat if stat.exists() else None


def sectors_written(stat: Path | None) -> int:
    return int(stat.read_text().split()[6]) if stat is not None else 0


def fs_type(path: Path) -> str:
    best, kind = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        device, mount, fstype = line.split()[:3]
        if str(path).startswith(mount) and len(mount) > len(best):
            best, kind = mount, f"{fstype} on {device}"
    return kind


class IoSampler(Sampler):
    """:class:`bench.ivr_load.Sampler` plus ``/proc/<pid>/io`` and the disk's sectors written."""

    def __init__(self, pid: int, device: Path | None) -> None:
        super().__init__(pid)
        self.device = device
        #: (time, cpu s, rss kB, write_bytes, wchar, device sectors written)
        self.rows: list[tuple[float, float, int, int, int, int]] = []

    def sample(self) -> tuple[float, float, int, int, int, int] | None:
        value = self.read()
        try:
            io = read_io(self.pid)
        except OSError:
            return None
        if value is None:
            return None
        return (
            time.monotonic(),
            value[0],
            value[1],
            io["write_bytes"],
            io["wchar"],
            sectors_written(self.device),
        )

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_PERIOD):
            row = self.sample()
            if row is None:
                return
            self.rows.append(row)


def quantiles(values: list[float]) -> tuple[float, float, float, float]:
    """p50, p95, p99, max."""
    if len(values) < 2:
        v = values[0] if values else float("nan")
        return v, v, v, v
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49], q[94], q[98], max(values)


def wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up in {seconds:g} s")


def wait_steady_rss(sampler: IoSampler, seconds: float = 20.0) -> None:
    """Until callhook's RSS stops growing (models loading on worker threads at start-up)."""
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        row = sampler.sample()
        if row is None:
            return
        if abs(row[2] - last) > 512:
            last, since = row[2], time.monotonic()
        elif time.monotonic() - since >= 2.0:
            return
        time.sleep(0.5)


# --- part 1 ---------------------------------------------------------------------------------


def run_recordings(args: argparse.Namespace, app_base: str, workdir: Path) -> dict[str, Any]:
    n = args.calls
    data = workdir / "data"
    data.mkdir()
    pcap = make_pcap(workdir / "caller_speech.pcap", STREAM_SECONDS)
    scenario = workdir / "recording_uac.xml"
    bye_ms = int((STREAM_SECONDS + 30) * 1000)
    scenario.write_text(SCENARIO.format(pcap=pcap, bye_ms=bye_ms))
    http, sip_port = free_port(), free_udp_port()
    rtp_last = RTP_FIRST + max(999, 4 * n)
    serve_cmd = [
        str(ROOT / ".venv" / "bin" / "callhook"),
        "serve",
        "--workers",
        "1",
        "--config",
        str(load_config(workdir)),
        "--sip",
        f"127.0.0.1:{sip_port}",
        "--http",
        f"127.0.0.1:{http}",
        "--rtp-ports",
        f"{RTP_FIRST}-{rtp_last}",
        "--max-calls",
        str(max(500, n + 50)),
        "--data-dir",
        str(data),
        "--app-url",
        f"{app_base}/rec/start",
        "--secret",
        "bench",
    ]
    log = (workdir / "callhook.log").open("w")
    server = subprocess.Popen(serve_cmd, stdout=log, stderr=subprocess.STDOUT)
    device = device_stat(data)
    sampler = IoSampler(server.pid, device)
    result: dict[str, Any] = {"serve": serve_cmd, "data": data, "fs": fs_type(data)}
    try:
        wait_http(f"http://127.0.0.1:{http}/", 30)
        wait_steady_rss(sampler)
        # Warm-up: one short recording loads the speech model and opens the page connection.
        post_json(f"{app_base}/mode", {"warmup": True, "encrypted": args.encrypted})
        subprocess.run(
            sipp_command(scenario, sip_port, 1, 1),
            cwd=workdir,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 15
        while not get_json(f"{app_base}/stats")["available"] and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        post_json(f"{app_base}/mode", {"warmup": False, "encrypted": args.encrypted})
        os.sync()
        time.sleep(1.0)
        before = sampler.sample()
        threads_before = thread_io(server.pid)
        assert before is not None
        sampler.start()
        sipp_cmd = sipp_command(scenario, sip_port, n, args.rate)
        result["sipp"] = sipp_cmd
        sipp = subprocess.run(sipp_cmd, cwd=workdir, capture_output=True, text=True)
        result["ok"], result["failed"] = sipp_counts(sipp.stdout + sipp.stderr)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            app = get_json(f"{app_base}/stats")
            if len(app["available"]) >= len(app["recorded"]) and app["recorded"]:
                break
            time.sleep(0.2)
        app = get_json(f"{app_base}/stats")
        sampler.stop.set()
        sampler.join()
        os.sync()
        after = sampler.sample()
        assert after is not None
        result["threads"] = io_by_thread(threads_before, thread_io(server.pid))
        secret = (data / "secret").read_text().strip()
        result["callhook_stats"] = get_json(f"http://127.0.0.1:{http}/api/stats", secret)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()

    # The steady window: every call is recording.
    starts = sorted(app["starts"])
    recorded_at = sorted(t for t, _ in app["recorded"].values())
    rows = sampler.rows
    result["calls_started"] = len(starts)
    if starts and recorded_at:
        w0, w1 = starts[-1] + 2.0, recorded_at[0] - 0.5
        inside = [r for r in rows if w0 <= r[0] <= w1]
    else:
        inside = []
    if len(inside) >= 2:
        a, b = inside[0], inside[-1]
        dt = b[0] - a[0]
        recording = len(starts)
        payload_rate = recording * PAYLOAD_RATE
        result["window"] = dt
        result["cpu_pct"] = (b[1] - a[1]) / dt * 100
        result["cpu_ms_per_rec_s"] = (b[1] - a[1]) * 1000 / (dt * recording)
        result["rss_steady_mb"] = statistics.median(r[2] for r in inside) / 1024
        result["rss_per_call_kb"] = (statistics.median(r[2] for r in inside) - before[2]) / n
        result["wb_rate"] = (b[3] - a[3]) / dt
        result["wchar_rate"] = (b[4] - a[4]) / dt
        result["dev_rate"] = (b[5] - a[5]) * 512 / dt
        result["payload_rate"] = payload_rate
    result["rss_before_mb"] = before[2] / 1024
    result["rss_peak_mb"] = max(r[2] for r in rows) / 1024 if rows else float("nan")
    result["wb_total"] = after[3] - before[3]
    result["wchar_total"] = after[4] - before[4]
    result["dev_total"] = (after[5] - before[5]) * 512
    result["cpu_total"] = after[1] - before[1]

    # Correctness, and what is on disk.
    key = crypto.Key.from_hex(KEY, IV) if args.encrypted else None
    results_ok = files_ok = announced_ok = 0
    payload = file_bytes = 0
    problems: list[str] = []
    latencies: list[float] = []
    durations: list[float] = []
    lengths: list[float] = []
    mismatched = 0
    for filename, (at, res) in app["recorded"].items():
        duration = float(res.get("seconds_duration", 0))
        durations.append(duration)
        if res.get("reason") == "duration" and abs(duration - 60) <= 0.2 + 1e-6:
            results_ok += 1
        elif len(problems) < 5:
            problems.append(f"result {res}")
        found = list(data.glob(f"media/*/{filename}"))
        try:
            raw = found[0].read_bytes()
            file_bytes += len(raw)
            plain = crypto.decrypt(raw, key) if key is not None else raw
            info = wav.read_info(plain)
            payload += info.data_length
            lengths.append(info.data_length / PAYLOAD_RATE)
            mismatched += abs(lengths[-1] - duration) > 0.1 + 1e-6
            if 59.8 <= info.data_length / PAYLOAD_RATE <= 60.5:
                files_ok += 1
            elif len(problems) < 5:
                problems.append(f"{filename}: {info.data_length / PAYLOAD_RATE:.2f} s")
        except (IndexError, OSError, ValueError, wav.WavError) as exc:
            if len(problems) < 5:
                problems.append(f"{filename}: {type(exc).__name__}: {exc}")
        announced = app["available"].get(filename)
        if announced is not None:
            latencies.append(announced[0] - at)
            announced_ok += announced[1] is True
    result.update(
        recorded=len(app["recorded"]),
        results_ok=results_ok,
        files_ok=files_ok,
        announced=len(app["available"]),
        announced_ok=announced_ok,
        duplicates=app["duplicates"],
        problems=problems,
        payload=payload,
        file_bytes=file_bytes,
        logs_bytes=sum(p.stat().st_size for p in data.glob("media/*/logs/*")),
        state_bytes=sum(p.stat().st_size for p in data.glob("state.sqlite3*")),
        available_latency=quantiles(latencies),
        durations=(min(durations, default=0), max(durations, default=0)),
        lengths=(min(lengths, default=0), max(lengths, default=0)),
        mismatched=mismatched,
    )
    return result


# --- part 2 ---------------------------------------------------------------------------------


def fsync_rate(directory: Path, seconds: float = 2.0) -> float:
    """4 KiB writes + fdatasync a second on ``directory``'s disk."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    block = b"\x5a" * 4096
    count, start = 0, time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            os.pwrite(fd, block, (count % 256) * 4096)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        path.unlink()
    return count / (time.monotonic() - start)


def notice(app: str, i: int) -> dict[str, Any]:
    """A recording_available_page body of realistic size."""
    return {
        "this_call": {
            "application_instance_id": f"{app}-{i:08d}-0123456789abcdef",
            "call_from": "sip:caller@192.0.2.1",
            "call_to": "sip:rec@192.0.2.2",
        },
        "action_result": {
            "action": "record",
            "result": {
                "filename": f"recordings/20250101-{i:024x}.wav",
                "file_available": True,
                "id": "",
                "contains_sound": True,
                "seconds_duration": 60.0,
                "reason": "duration",
            },
        },
    }


def proc_cpu(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_outbox(
    args: argparse.Namespace, app_base: str, app_pid: int, workdir: Path
) -> dict[str, Any]:
    from callhook.edge.notifier import Notifier
    from callhook.edge.pages import HttpPages
    from callhook.store import outbox
    from callhook.store.database import Database
    from callhook.store.journal import RecordingJournal

    k, apps = args.notifications, args.apps
    result: dict[str, Any] = {
        "fsync_rate": statistics.median(fsync_rate(workdir, 1.0) for _ in range(3))
    }
    db = Database(workdir / "outbox.sqlite3")
    box = outbox.Outbox(db)
    pages = HttpPages()
    notifier = Notifier(box, pages, lambda app: "bench")
    result["limits"] = (notifier.per_app, notifier.total)
    names = [f"app{i}" for i in range(apps)]
    try:
        # Burst: K queued at once (one transaction), then drained.
        now = time.time()

        def queue(conn: Any) -> None:
            for i in range(k):
                app = names[i % apps]
                outbox.insert(conn, app, f"{app_base}/sink/{app}", "POST", notice(app, i), now)

        db.call(queue)
        cpu0, app_cpu0, t0 = time.process_time(), proc_cpu(app_pid), time.monotonic()
        wb0 = read_io(os.getpid())["write_bytes"]
        notifier.start()
        deadline = t0 + 600
        while notifier.delivered < k and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - t0
        result["burst"] = {
            "delivered": notifier.delivered,
            "failed": notifier.failed_attempts,
            "seconds": elapsed,
            "rate": notifier.delivered / elapsed,
            "cpu_ms": (time.process_time() - cpu0) * 1000 / max(1, notifier.delivered),
            "app_cpu_ms": (proc_cpu(app_pid) - app_cpu0) * 1000 / max(1, notifier.delivered),
            "write_bytes": (read_io(os.getpid())["write_bytes"] - wb0) / max(1, notifier.delivered),
            "latency": quantiles(list(notifier.latencies)),
        }
        # Paced: half the burst rate, as recordings ending would queue them.
        rate = args.paced_rate or max(1.0, result["burst"]["rate"] / 2)
        notifier.latencies.clear()
        delivered0, failed0 = notifier.delivered, notifier.failed_attempts
        count = round(rate * args.paced_seconds)
        start = time.monotonic()
        cpu0 = time.process_time()
        for i in range(count):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            app = names[i % apps]
            await box.add(app, f"{app_base}/sink/{app}", "POST", notice(app, i), time.time())
            notifier.wake()
        while notifier.delivered - delivered0 < count and time.monotonic() < start + 600:
            await asyncio.sleep(0.01)
        result["paced"] = {
            "rate": rate,
            "queued": count,
            "delivered": notifier.delivered - delivered0,
            "failed": notifier.failed_attempts - failed0,
            "cpu_pct": (time.process_time() - cpu0) / (time.monotonic() - start) * 100,
            "latency": quantiles(list(notifier.latencies)),
        }
    finally:
        await notifier.close()
        await pages.close()
        db.close()

    # The journal: started -> completed -> durable (notification queued), M recordings.
    jdb = Database(workdir / "journal.sqlite3")
    journal = RecordingJournal(jdb)
    m = args.journal
    t0, cpu0 = time.monotonic(), time.process_time()
    wb0 = read_io(os.getpid())["write_bytes"]
    futures = []
    for i in range(m):
        name = f"recordings/20250101-{i:024x}.wav"
        body = notice("app0", i)
        journal.started(
            "app0",
            name,
            encrypted=False,
            record_id="",
            notify=(f"{app_base}/sink/app0", "POST"),
            body={"this_call": body["this_call"]},
        )
        journal.completed(
            "app0", name, {**body["action_result"]["result"], "file_available": False}
        )
        futures.append(journal.durable("app0", name, RECORD_SECONDS * PAYLOAD_RATE))
    queued = sum(1 for f in futures if f.result())
    elapsed = time.monotonic() - t0
    pending = jdb.call(lambda conn: conn.execute("SELECT COUNT(*) FROM notifications").fetchone())
    jdb.close()
    result["journal"] = {
        "recordings": m,
        "queued": queued,
        "rows": pending[0],
        "seconds": elapsed,
        "rate": m / elapsed,
        "cpu_ms": (time.process_time() - cpu0) * 1000 / m,
        "write_bytes": (read_io(os.getpid())["write_bytes"] - wb0) / m,
    }
    return result


# --- report ---------------------------------------------------------------------------------


def ms4(q: tuple[float, float, float, float], digits: int = 0) -> str:
    return " / ".join(f"{v * 1000:.{digits}f}" for v in q)


def row(label: str, value: str, unit: str = "") -> None:
    print(f"  {label:<58} {value:>14}  {unit}", flush=True)


def report_recordings(r: dict[str, Any], args: argparse.Namespace) -> None:
    n = args.calls
    print(
        f"\n== Part 1: {n} simultaneous 60 s recordings"
        f" ({'aescbc-encrypted' if args.encrypted else 'plain'} G.711 u-law WAV) =="
    )
    print(f"  callhook: {shlex.join(r['serve'])}")
    print(f"  callers (in the work dir): {shlex.join(r.get('sipp', []))}")
    print(f"  data dir: {r['data']} ({r['fs']})")
    row("SIPp calls ok / failed", f"{r['ok']} / {r['failed']}", "calls")
    row("calls that reached the application", f"{r['calls_started']}", "calls")
    row("results reason=duration, 60.0 +/- 0.2 s", f"{r['results_ok']} / {r['recorded']}")
    row("files valid WAV of 59.8-60.5 s", f"{r['files_ok']} / {r['recorded']}")
    row(
        "announced on /available (file_available true), duplicates",
        f"{r['announced_ok']} / {r['recorded']}, {r['duplicates']}",
    )
    row(
        "seconds_duration min-max; file seconds min-max",
        "{:.1f}-{:.1f}; {:.2f}-{:.2f}".format(*r["durations"], *r["lengths"]),
        "s",
    )
    row("results whose seconds_duration is > 0.1 s off the file's", f"{r['mismatched']}")
    for problem in r["problems"]:
        print(f"    problem: {problem}")
    if "window" not in r:
        print("  (no steady window: not enough samples)")
        return
    pr = r["payload_rate"]
    row("steady window (every call recording)", f"{r['window']:.1f}", "s")
    row("callhook CPU in the window", f"{r['cpu_pct']:.1f}", "% of one core")
    row("callhook CPU per recording-second", f"{r['cpu_ms_per_rec_s']:.3f}", "ms")
    row(
        "RSS before the calls / in the window / peak",
        f"{r['rss_before_mb']:.0f} / {r['rss_steady_mb']:.0f} / {r['rss_peak_mb']:.0f}",
        "MB",
    )
    row("memory per recording call ((window - before) / N)", f"{r['rss_per_call_kb']:.0f}", "kB")
    row("G.711 payload rate (N x 8000 B/s)", f"{pr / 1000:.0f}", "kB/s")
    row(
        "write_bytes rate in the window; ratio to payload",
        f"{r['wb_rate'] / 1000:.0f}; {r['wb_rate'] / pr:.3f}",
        "kB/s; x",
    )
    row(
        "wchar rate in the window; ratio to payload",
        f"{r['wchar_rate'] / 1000:.0f}; {r['wchar_rate'] / pr:.3f}",
        "kB/s; x",
    )
    row(
        "device sectors written in the window; ratio (all processes)",
        f"{r['dev_rate'] / 1000:.0f}; {r['dev_rate'] / pr:.3f}",
        "kB/s; x",
    )
    payload = r["payload"]
    if payload:
        row("audio in the files (whole run)", f"{payload / 1e6:.2f}", "MB")
        row(
            "recording files on disk; ratio to audio",
            f"{r['file_bytes'] / 1e6:.2f}; {r['file_bytes'] / payload:.4f}",
            "MB; x",
        )
        row(
            "write_bytes whole run (+sync); ratio to audio",
            f"{r['wb_total'] / 1e6:.2f}; {r['wb_total'] / payload:.3f}",
            "MB; x",
        )
        row(
            "wchar whole run; ratio to audio",
            f"{r['wchar_total'] / 1e6:.2f}; {r['wchar_total'] / payload:.3f}",
            "MB; x",
        )
        row(
            "device bytes written whole run; ratio (all processes)",
            f"{r['dev_total'] / 1e6:.2f}; {r['dev_total'] / payload:.3f}",
            "MB; x",
        )
    threads = ", ".join(
        f"{kind} {wb / 1e6:.1f} / {wc / 1e6:.1f}"
        for kind, (wb, wc) in sorted(r["threads"].items(), key=lambda kv: -kv[1][0])
    )
    print(f"  whole-run write_bytes / wchar by thread (MB; threads alive at the end): {threads}")
    row(
        "call logs; state.sqlite3 + WAL at the end",
        f"{r['logs_bytes'] / 1e3:.0f}; {r['state_bytes'] / 1e3:.0f}",
        "kB",
    )
    row("callhook CPU whole run", f"{r['cpu_total']:.1f}", "s")
    row("/recorded -> /available p50 / p95 / p99 / max", ms4(r["available_latency"]), "ms")
    stats = r.get("callhook_stats", {})
    tick = stats.get("media_tick") or {}
    if tick:
        row(
            "media tick lateness p50 / p99 / max (last minute)",
            f"{tick['late_p50_ms']:.1f} / {tick['late_p99_ms']:.1f} / {tick['late_max_ms']:.0f}",
            "ms",
        )
    page = stats.get("page_latency") or {}
    if page:
        row(
            "page latency p50 / p99 (callhook's view)",
            f"{page['p50_ms']:.1f} / {page['p99_ms']:.1f}",
            "ms",
        )


def report_outbox(r: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        "\n== Part 2: notification outbox and recordings journal (in-process, uvloop; "
        "endpoint: a separate aiohttp process answering 204) =="
    )
    per_app, total = r["limits"]
    row("disk: 4 KiB pwrite + fdatasync (median of 3 x 1 s)", f"{r['fsync_rate']:.0f}", "/s")
    b = r["burst"]
    row(
        f"burst: {args.notifications} queued at once for {args.apps} apps, delivered",
        f"{b['delivered']} ({b['failed']} failed)",
    )
    row(
        f"  throughput (in flight <= {per_app}/app, {total} total)",
        f"{b['rate']:.0f}",
        "notifications/s",
    )
    row(
        "  CPU per notification: notifier process / endpoint",
        f"{b['cpu_ms']:.2f} / {b['app_cpu_ms']:.2f}",
        "ms",
    )
    row("  write_bytes per notification delivered (SQLite)", f"{b['write_bytes'] / 1e3:.1f}", "kB")
    row("  waiting time queued -> 2xx p50 / p95 / p99 / max", ms4(b["latency"]), "ms")
    p = r["paced"]
    row(
        f"paced: {p['rate']:.0f}/s for {args.paced_seconds:g} s, delivered",
        f"{p['delivered']} / {p['queued']} ({p['failed']} failed)",
    )
    row("  notifier process CPU", f"{p['cpu_pct']:.1f}", "% of one core")
    row("  latency queued -> 2xx p50 / p95 / p99 / max", ms4(p["latency"], 1), "ms")
    j = r["journal"]
    row(
        f"journal: {j['recordings']} recordings started/completed/durable",
        f"{j['queued']} queued",
        f"({j['rows']} rows)",
    )
    row("  recordings through the journal", f"{j['rate']:.0f}", "recordings/s")
    row("  SQLite transactions (synchronous=FULL)", f"{3 * j['rate']:.0f}", "/s")
    row("  CPU per recording (journal)", f"{j['cpu_ms']:.2f}", "ms")
    row("  write_bytes per recording (journal)", f"{j['write_bytes'] / 1e3:.1f}", "kB")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200, help="simultaneous recordings")
    parser.add_argument("--rate", type=int, default=40, help="calls started a second")
    parser.add_argument("--encrypted", action="store_true", help="aescbc-encrypted recordings")
    parser.add_argument("--only", choices=("recordings", "outbox"))
    parser.add_argument("--notifications", type=int, default=5000)
    parser.add_argument("--apps", type=int, default=10)
    parser.add_argument("--paced-rate", type=float, default=0.0, help="0: half the burst rate")
    parser.add_argument("--paced-seconds", type=float, default=10.0)
    parser.add_argument("--journal", type=int, default=1000, help="recordings through the journal")
    parser.add_argument("--data-root", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--serve-app", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_app:
        serve_app(args.serve_app)
        return
    if args.only != "outbox" and shutil.which("sipp") is None:
        sys.exit("sipp is not installed (apt-get install sip-tester)")
    workdir = Path(tempfile.mkdtemp(prefix="callhook-bench-rec-", dir=args.data_root))
    kind = fs_type(workdir)
    if kind.startswith("tmpfs"):
        print(f"warning: {workdir} is on tmpfs: write_bytes will be 0 (use --data-root)")
    app_port = free_port()
    app = subprocess.Popen(
        [sys.executable, "-m", "bench.recordings", "--serve-app", str(app_port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert app.stdout is not None and app.stdout.readline().strip() == "ready"
    app_base = f"http://127.0.0.1:{app_port}"
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"callhook recordings benchmark: {shlex.join([sys.executable, *sys.argv])}")
    print(f"  {os.cpu_count()} CPUs, load average {load} at the start; work dir {workdir} ({kind})")
    try:
        if args.only != "outbox":
            rec = run_recordings(args, app_base, workdir)
            report_recordings(rec, args)
            if not args.keep:
                shutil.rmtree(workdir / "data", ignore_errors=True)
        if args.only != "recordings":
            try:
                import uvloop

                runner: Any = uvloop.run  # as callhook serve runs
            except ImportError:
                runner = asyncio.run
            out = runner(run_outbox(args, app_base, app.pid, workdir))
            report_outbox(out, args)
        with open("/proc/loadavg") as f:
            print(f"\n  load average at the end: {' '.join(f.read().split()[:3])}")
    finally:
        app.terminate()
        app.wait(timeout=10)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
