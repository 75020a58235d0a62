"""The conference load benchmark: rooms of SIPp callers, on callhook and on Asterisk ConfBridge.

    .venv/bin/python -m bench.conference_load [--rooms 20] [--size 5] [--seconds 40]
                                              [--workers 1[,2]] [--rate 20] [--no-floor]
                                              [--asterisk PATH | --no-asterisk] [--kit DIR]

Issue 41's load: ROOMS rooms of SIZE participants (``--rooms`` may be a list, a step
each), every participant one SIPp call (UAC) of its own. One SIPp process places all
ROOMS x SIZE calls at once (``-l`` and ``-m`` ROOMS x SIZE, ``--rate`` new calls a second,
so 100 calls are all up after 5 s); each call's room is the user part of its
Request-URI, ``sip:room07@...``, taken by SIPp from an injection file (``-inf``, one line
a call, in turn: each round of ROOMS calls puts one in every room, so every room fills
during the ramp, and, behind Kamailio, each room has callers on both workers). A
call is the e2e tests' SIPp parts (``tests/e2e/sipp.py``): INVITE offering PCMU and
telephone-event, ACK, replay of a pcap of speech (the load kit's
``sounds/caller_speech.ulaw``, 4.8 s, looped for the whole call: every participant talks
all the time, the mixer's worst case, as no talker is left out by the -45 dBov gate for
long), ``--seconds`` in the room, then a BYE from the caller. A participant-second is a
second one call spends in its room: the benchmark's basis is the successful calls times
``--seconds`` (the same for both servers); callhook's own count (the ``out of conference``
lines of its log) is printed beside it.

callhook: one ``callhook serve`` (``--workers 1``), or ``serve --workers N`` (a
supervisor, N workers and Kamailio in front, which hands the calls to the workers in
turn: a room is held by one worker and its callers on the others take part over a
WebSocket), whose application is ``bench/ivr_app.py``'s ``/conference/`` route:
``connect_to_conference`` to the room the called user names, ``beep_on_entry`` false.

Asterisk (unless ``--no-asterisk``): the same SIPp load, in the same run, against
Asterisk 20 with chan_sip and app_confbridge (``--asterisk``, else looked for where
:mod:`bench.peer` looks: ``/usr/sbin``, ``/usr/local/sbin``, then where
``python -m bench.asterisk`` builds one; skipped, and said so, where there is none), run
before callhook for each step, on
the same SIP address and RTP port range, its configuration written into the work
directory: ``exten => _room.,1,Answer()``, ``Log`` of the join, ``ConfBridge(${EXTEN})``
with the default bridge profile and a default user profile but for ``quiet=yes`` (no
join and leave sounds, as callhook's ``beep_on_entry`` false).

For each server it prints one row: calls completed and failed (SIPp's count), rooms
formed (rooms with two or more participants in at once, for callhook from its log's ``in
conference 'R' (N participants)``; for Asterisk rooms joined twice or more, from its
dialplan's ``Log``) and rooms that held all SIZE at once (callhook only), the
participant-seconds, the server's CPU per participant-second (its processes' CPU from
``/proc``, once a second, over the whole SIPp run, ramp and drain included, over the
participant-seconds: serve with its workers and Kamailio) and the IO floor of the same
run (:mod:`bench.floor`: the captured streams echoed by a process that does nothing
else) with the server's CPU as a multiple of it, % of one core while loaded (the middle
half of the run), peak RSS, and the gaps between consecutive RTP packets the server sent
to the participants (p50/p99/max, tcpdump on loopback of what leaves the server's RTP
port range, one stream per port pair and SSRC: :func:`bench.capture.rtp_gaps`; ideal 20
ms), and the share of those packets that carry sound (not µ-law silence, by the first
bytes of their payload the capture keeps: the rooms did mix; the speech's own pauses and
the rooms' holding during the ramp are silent). Under callhook's row: its late media
ticks (``/api/stats``, summed over the workers), the tick's lateness and length, the CPU
of the media ticks (the rooms' mix is in them: receive, mix, send) and of the rest per
participant-second (the event loops' thread clocks from ``/api/stats`` before and
after), its final causes, and the warnings and errors its log holds. Then whether issue
41's target was met: RTP gap p99 under 30 ms and no failed call.

Needs ``sipp`` and ``tcpdump`` (Debian ``sip-tester``, ``tcpdump``) and root for the
capture, the load kit (``--kit``, default ``../shared/bench``) for its speech, and, for
``--workers`` above 1, Kamailio; CI does not run it.
"""

from __future__ import annotations

import argparse
import re
import signal
import struct
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from bench import floor, ivr_load, peer
from bench.capture import quantiles, rtp_gaps
from bench.connect_load import payloads, quiet
from bench.ivr_load import (
    KIT,
    ROOT,
    RTP_FIRST,
    RTP_LAST,
    SIP_PORT,
    Sampler,
    check_kit,
    free_port,
    get_json,
    loop_cpu,
    start_app,
    wait_started,
)
from tests.e2e import sipp as scenarios

CALLER_SIP, CALLER_MEDIA = 5061, 6000  # the kit's -p and -mp
SPEECH = "sounds/caller_speech.ulaw"
#: issue 41's target for callhook: the RTP gap p99 under this (ms), and no failed call.
TARGET_P99_MS = 30.0


# --- the callers -----------------------------------------------------------------------


def speech_pcap(kit: Path, path: Path, seconds: float) -> Path:
    """A pcap of one RTP stream (PCMU, 20 ms, one SSRC) of the kit's speech looped for
    ``seconds``, for SIPp's ``play_pcap_audio`` (which rewrites its addresses and ports)."""
    speech = (kit / SPEECH).read_bytes()
    frames = int(seconds / 0.02)
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]  # Ethernet
    for i in range(frames):
        at = (i * 160) % len(speech)
        payload = (speech + speech)[at : at + 160]
        rtp = struct.pack("!BBHII", 0x80, (0x80 if i == 0 else 0), i & 0xFFFF, i * 160, 0x5EED0041)
        udp = struct.pack("!HHHH", CALLER_MEDIA, 10000, 8 + 12 + 160, 0) + rtp + payload
        ip = struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            0,
            20 + len(udp),
            0,
            0x4000,
            64,
            17,
            0,
            *[bytes([127, 0, 0, 1])] * 2,
        )
        ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
        frame = b"\x00" * 12 + b"\x08\x00" + ip + udp
        t = i * 0.02
        out.append(
            struct.pack("<IIII", 1_700_000_000 + int(t), round(t % 1 * 1e6), len(frame), len(frame))
        )
        out.append(frame)
    path.write_bytes(b"".join(out))
    return path


def _checksum(header: bytes) -> int:
    total: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def rooms_file(path: Path, rooms: int, size: int) -> Path:
    """SIPp's injection file: one line a call, in turn. Call i goes to room (i + i //
    ``rooms``) mod ``rooms``: each round of ``rooms`` calls has every room once, one room
    further on than the round before, so that Kamailio, handing calls to two workers in
    turn, puts each room's callers on both (with i mod ``rooms``, an even number of rooms
    would have every caller of a room on one worker)."""
    lines = [f"room{(i + i // rooms) % rooms:02d};\n" for i in range(rooms * size)]
    path.write_text("SEQUENTIAL\n" + "".join(lines))
    return path


def caller_scenario(pcap: Path, seconds: float) -> str:
    """One participant: INVITE ``sip:<its room>@server``, ACK, the speech, ``seconds`` in
    the room, BYE."""
    return scenarios.scenario(
        scenarios.invite("[field0]"),
        scenarios.ANSWERED,
        scenarios.PLAY.format(pcap=pcap.resolve()),
        scenarios.PAUSE.format(ms=int(seconds * 1000)),
        scenarios.BYE_FROM_CALLER.format(cseq=2),
    )


def run_callers(
    workdir: Path, label: str, rooms: int, size: int, seconds: float, rate: int, kit: Path
) -> subprocess.CompletedProcess[str]:
    """The SIPp run of one step: ``rooms`` x ``size`` calls at once, ``rate`` new a second."""
    calls = rooms * size
    scenario = workdir / "conference_uac.xml"
    scenario.write_text(
        caller_scenario(speech_pcap(kit, workdir / "speech.pcap", seconds), seconds)
    )
    inject = rooms_file(workdir / f"rooms-{rooms}x{size}.csv", rooms, size)
    return subprocess.run(
        [
            "sipp",
            "-sf",
            str(scenario),
            f"127.0.0.1:{SIP_PORT}",
            "-inf",
            str(inject),
            "-i",
            "127.0.0.1",
            "-p",
            str(CALLER_SIP),
            "-mi",
            "127.0.0.1",
            "-mp",
            str(CALLER_MEDIA),
            "-l",
            str(calls),
            "-m",
            str(calls),
            "-r",
            str(rate),
            "-recv_timeout",
            "40000",
            "-nostdin",
            "-trace_err",
            "-error_file",
            str(workdir / f"sipp-{label}-errors.log"),
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=seconds + calls / rate + 120,
    )


def sipp_counts(screen: str) -> tuple[int, int]:
    return peer.count(screen, "Successful call"), peer.count(screen, "Failed call")


def gap_figures(pcap: Path, with_floor: bool) -> dict[str, object]:
    """The RTP gaps of a capture and, with ``with_floor``, its IO floor (CPU seconds);
    the capture is deleted."""
    figures: dict[str, object] = {"gaps": quantiles(rtp_gaps(pcap)), "heard": heard(pcap)}
    figures["floor_cpu"] = floor.measure(pcap) if with_floor else float("nan")
    pcap.unlink(missing_ok=True)
    return figures


def heard(pcap: Path) -> float:
    """The share (%) of the packets sent to the participants that carry sound (not
    µ-law silence, as far as the captured bytes of their payload say): the rooms mixed."""
    flows = payloads(pcap).values()
    sent = sum(len(flow) for flow in flows)
    loud = sum(1 for flow in flows for payload in flow if not quiet(payload[:10]))
    return 100 * loud / sent if sent else float("nan")


# --- callhook ----------------------------------------------------------------------------

JOINED = re.compile(r"in conference '([^']+)' \((\d+) participants\)")
LEFT = re.compile(r"out of conference '([^']+)' \((\w+), ([\d.]+) s\)")


def run_callhook(
    rooms: int,
    size: int,
    seconds: float,
    rate: int,
    kit: Path,
    app_base: str,
    workdir: Path,
    workers: int,
    with_floor: bool,
) -> dict[str, object]:
    """One step against ``callhook serve``: the figures of its row."""
    label = f"callhook-{rooms}x{size}-w{workers}"
    data = workdir / f"data-{label}"
    data.mkdir(parents=True, exist_ok=True)
    base = f"{app_base}/conference"
    http = free_port()
    log_path = workdir / f"{label}.log"
    log = log_path.open("w")
    server = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "callhook"),
            "serve",
            "--workers",
            str(workers),
            "--config",
            str(ivr_load.load_config(workdir)),
            "--sip",
            f"127.0.0.1:{SIP_PORT}",
            "--http",
            f"127.0.0.1:{http}",
            "--rtp-ports",
            f"{RTP_FIRST}-{RTP_LAST}",
            "--data-dir",
            str(data),
            "--app-url",
            f"{base}/start",
            "--error-page",
            f"{base}/error",
            "--final-page",
            f"{base}/final",
            "--secret",
            "bench",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_started(log_path, server)
        secret = (data / "secret").read_text().strip()
        loop_before = loop_cpu(get_json(f"http://127.0.0.1:{http}/api/stats", secret))
        process_before = Sampler(server.pid).read()
        urllib.request.urlopen(urllib.request.Request(f"{app_base}/stats/reset", method="POST"))
        pcap = workdir / f"rtp-{label}.pcap"
        dump = ivr_load.capture(pcap)
        time.sleep(1.0)
        sampler = Sampler(server.pid)
        sampler.start()
        started = time.monotonic()
        sipp = run_callers(workdir, label, rooms, size, seconds, rate, kit)
        elapsed = time.monotonic() - started
        time.sleep(2.0)  # the final pages, the last packets
        sampler.stop.set()
        sampler.join()
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=10)
        stats = get_json(f"http://127.0.0.1:{http}/api/stats", secret)
        loop_after = loop_cpu(stats)
        process_after = Sampler(server.pid).read()
        app = get_json(f"{app_base}/stats")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()

    screen = sipp.stdout + sipp.stderr
    (workdir / f"sipp-{label}.out").write_text(screen)
    ok, failed = sipp_counts(screen)
    server_log = log_path.read_text(errors="replace")
    most: Counter[str] = Counter()
    for room, count in JOINED.findall(server_log):
        most[room] = max(most[room], int(count))
    left = LEFT.findall(server_log)
    problems = [
        line
        for line in server_log.splitlines()
        if re.search(r"Traceback|ERROR|Exception|WARNING", line)
    ]
    cpu_total, pct, rss_mb = sampler.figures()
    participant_s = max(ok, 0) * seconds
    nan = float("nan")
    tick_cpu, loop_cpu_s = loop_after[0] - loop_before[0], loop_after[1] - loop_before[1]
    if loop_after[2] != loop_before[2] or process_before is None or process_after is None:
        tick_cpu = loop_cpu_s = process_cpu = nan  # a worker did not answer, or serve died
    else:
        process_cpu = process_after[0] - process_before[0]
    per = 1000 / participant_s if participant_s else nan
    return {
        "server": "callhook",
        "workers": workers,
        "ok": ok,
        "failed": failed,
        "rooms_formed": sum(1 for n in most.values() if n >= 2),
        "rooms_full": sum(1 for n in most.values() if n >= size),
        "participant_s": participant_s,
        "logged_participant_s": sum(float(s) for _, _, s in left),
        "left_reasons": dict(Counter(reason for _, reason, _ in left)),
        "cpu_total": cpu_total,
        "cpu_pct": pct,
        "rss_mb": rss_mb,
        "split_ms": {
            "tick": tick_cpu * per,  # the media ticks: receive, the rooms' mix, send
            "control": (loop_cpu_s - tick_cpu) * per,  # SIP, runners, pages, room links
            "other": (process_cpu - loop_cpu_s) * per,  # other threads (and processes)
        },
        "late_ticks": sum(w.get("media_late_ticks") or 0 for w in stats["workers"])
        if "workers" in stats
        else stats.get("media_late_ticks"),
        "tick": stats.get("media_tick", {}),
        "final": app.get("final", {}),
        "app_rooms": len(app.get("rooms", {})),
        "errors": app.get("errors", 0),
        "problems": problems,
        "elapsed": elapsed,
        **gap_figures(pcap, with_floor),
    }


# --- Asterisk ConfBridge -----------------------------------------------------------------

#: The modules ConfBridge on chan_sip needs, and nothing else (``autoload`` is off).
MODULES = (
    "chan_sip.so",
    "pbx_config.so",
    "app_confbridge.so",
    "bridge_softmix.so",  # ConfBridge's mixing
    "app_verbose.so",  # Log(), which notes each join
    "codec_ulaw.so",
    "res_rtp_asterisk.so",
    "res_timing_timerfd.so",
)

CONFJOIN = re.compile(r"CONFJOIN <([^>]*)>")


def write_asterisk_config(work: Path, modules: Path, data: Path) -> Path:
    """Asterisk's configuration for the rooms (ConfBridge) in ``work``; its asterisk.conf.
    As :func:`bench.peer.write_config`: only the installation's modules and data are read."""
    etc = peer.write_asterisk_conf(work, modules, data, MODULES)
    (etc / "logger.conf").write_text("[general]\n[logfiles]\nmessages => notice,warning,error\n")
    (etc / "rtp.conf").write_text(f"[general]\nrtpstart = {RTP_FIRST}\nrtpend = {RTP_LAST}\n")
    (etc / "sip.conf").write_text(
        "[general]\n"
        f"udpbindaddr = 127.0.0.1:{SIP_PORT}\n"
        "tcpenable = no\n"
        "context = rooms\n"
        "allowguest = yes\n"
        "alwaysauthreject = yes\n"
        "disallow = all\n"
        "allow = ulaw\n"
        "dtmfmode = rfc2833\n"
        "directmedia = no\n"
        "rtptimeout = 60\n"
    )
    (etc / "confbridge.conf").write_text(
        "[general]\n"
        "[default_bridge]\ntype = bridge\n"
        # quiet: no join or leave sounds (callhook's participants: beep_on_entry false)
        "[default_user]\ntype = user\nquiet = yes\n"
    )
    (etc / "extensions.conf").write_text(
        "[general]\nstatic = yes\nwriteprotect = yes\n"
        "[rooms]\n"
        "exten => _room.,1,Answer()\n"
        " same => n,Log(NOTICE,CONFJOIN <${EXTEN}>)\n"
        " same => n,ConfBridge(${EXTEN})\n"
        " same => n,Hangup()\n"
    )
    return etc / "asterisk.conf"


def run_asterisk(
    rooms: int,
    size: int,
    seconds: float,
    rate: int,
    kit: Path,
    workdir: Path,
    binary: Path,
    modules: Path,
    with_floor: bool,
) -> dict[str, object]:
    """One step against Asterisk ConfBridge: the figures of its row."""
    label = f"asterisk-{rooms}x{size}"
    work = workdir / label
    conf = write_asterisk_config(work, modules, peer.find_data(binary))
    console = work / "console.log"
    with console.open("w") as out:
        server = subprocess.Popen(
            [str(binary), "-f", "-C", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        peer.wait_listening(console, server)
        pcap = workdir / f"rtp-{label}.pcap"
        dump = ivr_load.capture(pcap)
        time.sleep(1.0)
        sampler = Sampler(server.pid)
        sampler.start()
        started = time.monotonic()
        sipp = run_callers(workdir, label, rooms, size, seconds, rate, kit)
        elapsed = time.monotonic() - started
        time.sleep(2.0)
        sampler.stop.set()
        sampler.join()
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=10)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    screen = sipp.stdout + sipp.stderr
    (workdir / f"sipp-{label}.out").write_text(screen)
    ok, failed = sipp_counts(screen)
    messages_path = work / "log" / "messages"
    messages = messages_path.read_text(errors="replace") if messages_path.exists() else ""
    joins = Counter(CONFJOIN.findall(messages))
    # (what it says of its start, the configuration files it was not given, is left out)
    after = messages[messages.find("CONFJOIN") :] if "CONFJOIN" in messages else ""
    problems = [line for line in after.splitlines() if re.search(r"WARNING|ERROR", line)]
    cpu_total, pct, rss_mb = sampler.figures()
    return {
        "server": "asterisk",
        "workers": 0,
        "ok": ok,
        "failed": failed,
        "rooms_formed": sum(1 for n in joins.values() if n >= 2),
        "rooms_full": -1,  # (its log says who joined, not who was in at once)
        "participant_s": max(ok, 0) * seconds,
        "cpu_total": cpu_total,
        "cpu_pct": pct,
        "rss_mb": rss_mb,
        "problems": problems,
        "elapsed": elapsed,
        **gap_figures(pcap, with_floor),
    }


def find_peer(given: Path | None) -> tuple[Path, Path] | str:
    """Asterisk's binary and modules, or why there is none to compare with."""
    places = [given] if given is not None else []
    if given is None:
        places += [Path(p) for p in peer.ASTERISK_PLACES]
    for candidate in places:
        if candidate.is_file():
            prefix = candidate.resolve().parent.parent
            for lib in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
                found = prefix / lib / "asterisk" / "modules"
                if (found / "chan_sip.so").exists() and (found / "app_confbridge.so").exists():
                    return candidate, found
    where = str(given) if given is not None else ", ".join(peer.ASTERISK_PLACES)
    return (
        f"no Asterisk 20 with chan_sip and app_confbridge at {where} "
        "(python -m bench.asterisk builds one)"
    )


# --- the table ---------------------------------------------------------------------------

HEADER = (
    " rooms x size | server   | W |  ok | fail | rooms formed/full | participant-s "
    "| CPU ms/participant-s | floor ms (x)  | % core | RSS MB | RTP gap p50/p99/max ms "
    "| sound %"
)


def row(rooms: int, size: int, r: dict[str, object]) -> str:
    gaps = r["gaps"]
    assert isinstance(gaps, tuple)
    participant_s = r["participant_s"]
    cpu_total, floor_cpu = r["cpu_total"], r["floor_cpu"]
    assert isinstance(participant_s, float) and isinstance(cpu_total, float)
    assert isinstance(floor_cpu, float)
    nan = float("nan")
    cpu = cpu_total * 1000 / participant_s if participant_s else nan
    floor_ms = floor_cpu * 1000 / participant_s if participant_s else nan
    ratio = cpu_total / floor_cpu if floor_cpu > 0 else nan
    full = "-" if r["rooms_full"] == -1 else str(r["rooms_full"])
    workers = "-" if r["server"] == "asterisk" else str(r["workers"])
    return (
        f" {rooms:5d} x {size:<4d} | {r['server']:8} | {workers} | {r['ok']:3} | {r['failed']:4} "
        f"| {r['rooms_formed']:8} / {full:<6} | {participant_s:13.0f} "
        f"| {cpu:20.3f} | {floor_ms:5.3f} ({ratio:4.1f}) | {r['cpu_pct']:6.1f} "
        f"| {r['rss_mb']:6.0f} | {gaps[0]:4.1f} / {gaps[1]:5.1f} / {gaps[2]:5.0f}      "
        f"| {r['heard']:5.1f}"
    )


def print_callhook(r: dict[str, object]) -> None:
    """The lines under callhook's row."""
    tick = r["tick"]
    assert isinstance(tick, dict)
    split = r["split_ms"]
    assert isinstance(split, dict)
    print(
        f"       late media ticks {r['late_ticks']}"
        + (
            f"; tick lateness (last minute) p50/p99/max {tick['late_p50_ms']:.1f} / "
            f"{tick['late_p99_ms']:.1f} / {tick['late_max_ms']:.1f} ms, tick took "
            f"{tick['took_p50_ms']:.2f} / {tick['took_p99_ms']:.2f} / {tick['took_max_ms']:.2f} ms"
            if tick
            else ""
        ),
        flush=True,
    )
    print(
        f"       CPU ms/participant-s: media ticks (receive, mix, send) {split['tick']:.3f}, "
        f"the loop's thread outside them (SIP, pages, room links) {split['control']:.3f}, "
        f"the rest (other threads{', supervisor, Kamailio' if r['workers'] != 1 else ''}) "
        f"{split['other']:.3f}",
        flush=True,
    )
    print(
        f"       in the rooms by serve's log: {r['logged_participant_s']:.0f} participant-s, "
        f"left {r['left_reasons']}; rooms the application saw {r['app_rooms']}; "
        f"final causes {r['final']}; error pages {r['errors']}; SIPp ran {r['elapsed']:.0f} s",
        flush=True,
    )
    print_problems("serve", r)
    gaps = r["gaps"]
    assert isinstance(gaps, tuple)
    met = gaps[1] < TARGET_P99_MS and r["failed"] == 0 and r["ok"] != -1
    print(
        f"       issue 41's target (RTP gap p99 < {TARGET_P99_MS:.0f} ms, no failed call): "
        f"{'met' if met else 'NOT met'} (p99 {gaps[1]:.1f} ms, {r['failed']} failed)",
        flush=True,
    )


def print_problems(server: str, r: dict[str, object]) -> None:
    problems = r["problems"]
    assert isinstance(problems, list)
    if problems:
        print(f"       {server} logged {len(problems)} warnings/errors, first:", flush=True)
        for line in problems[:5]:
            print(f"         {line[:300]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rooms", default="20", help="rooms, a list: a step each")
    parser.add_argument("--size", type=int, default=5, help="participants in each room")
    parser.add_argument("--seconds", type=float, default=40.0, help="each call in its room")
    parser.add_argument("--rate", type=int, default=20, help="new calls a second")
    parser.add_argument(
        "--workers", default="1", help="serve --workers for each step, a list (e.g. 1,2)"
    )
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--asterisk", type=Path, help="the Asterisk 20 binary (chan_sip)")
    parser.add_argument("--no-asterisk", action="store_true", help="callhook only")
    parser.add_argument("--no-floor", action="store_true", help="no IO floor (saves a minute)")
    args = parser.parse_args()
    check_kit(args.kit)
    found: tuple[Path, Path] | str = "--no-asterisk"
    if not args.no_asterisk:
        found = find_peer(args.asterisk)
    workdir = Path(tempfile.mkdtemp(prefix="callhook-bench-conference-"))
    app, app_base = start_app()
    print(f"callhook conference load benchmark; kit {args.kit}; work dir {workdir}")
    print(
        f"each participant: one SIPp call, {args.seconds:.0f} s in its room talking (the kit's "
        f"speech, looped); {args.rate} new calls a second"
    )
    if isinstance(found, str):
        print(f"Asterisk ConfBridge: skipped ({found})")
    else:
        print(f"peer: {peer.asterisk_version(found[0])} ({found[0]}), ConfBridge")
    print(HEADER, flush=True)
    try:
        for rooms in (int(x) for x in args.rooms.split(",")):
            if not isinstance(found, str):
                theirs = run_asterisk(
                    rooms,
                    args.size,
                    args.seconds,
                    args.rate,
                    args.kit,
                    workdir,
                    *found,
                    not args.no_floor,
                )
                print(row(rooms, args.size, theirs), flush=True)
                print_problems("Asterisk", theirs)
            for workers in (int(w) for w in args.workers.split(",")):
                ours = run_callhook(
                    rooms,
                    args.size,
                    args.seconds,
                    args.rate,
                    args.kit,
                    app_base,
                    workdir,
                    workers,
                    not args.no_floor,
                )
                print(row(rooms, args.size, ours), flush=True)
                print_callhook(ours)
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
