"""The peer benchmark: the load kit's IVR call on Asterisk 20 and on callhook, in one run.

    .venv/bin/python -m bench.peer [--steps 200,400,650] [--asterisk PATH | --build [SRC]]
                                   [--workers 1] [--hog 2 [--hog-session]] [--kit DIR]

Absolute figures on a shared machine move by a third between runs, so a comparison with
another server only holds when both are measured in the same run, with the same driver:
for each step N this runs the kit's SIPp caller (N calls at once, 5 x N in all, the kit's
ramp) first against Asterisk, then against ``callhook serve``, and prints one row for each,
with the same columns: calls completed and failed (SIPp's count), digits right, recordings
of the right length, calls that heard the prompt whole (every frame in order, nothing
between: :func:`bench.capture.prompts_whole`), CPU (ms per call-second: the server's
processes, read from ``/proc`` once a second), % of one core while loaded, peak RSS, the IO
floor of the same run (:mod:`bench.floor`, from that server's own capture) and the server's
CPU as a multiple of it, and the gaps between consecutive RTP packets the server sent on a
call (p50/p99/max, from a capture on loopback; ideal 20 ms).

Asterisk runs the same call as a dialplan (``Answer``, ``Playback`` of the kit's prompt,
``Read`` of 4 digits after the kit's beep, ``Record`` until 3 s of silence, 10 s at most,
keeping the silence as callhook does, ``Hangup``) with chan_sip on the same address and
RTP port range callhook uses. This benchmark needs an Asterisk 20 (chan_sip left Asterisk
in version 21) built with chan_sip. With ``--build`` it is built from Asterisk's public
source (20.15.0; ``--build SRC``: another source, as :mod:`bench.asterisk` takes) with
:mod:`bench.asterisk`'s recipe and installed under ``~/.cache/callhook-bench/`` (a few
minutes on 2 cores; an earlier build there is reused); otherwise the benchmark finds an
installed one: its binary on ``PATH``, at ``/usr/sbin/asterisk``,
``/usr/local/sbin/asterisk`` or where ``--build`` put it, or where ``--asterisk`` says, and
its modules beside it (or ``--modules``). Its configuration is written into the run's
work directory; nothing of the installation's is read.

``--hog N`` runs ``stress-ng --cpu N`` (Debian's ``stress-ng``) at nice 0 during both
servers' steps: the same busy machine for both. It runs in the benchmark's session, with
SIPp, the application and the server under test; ``--hog-session`` starts it in a session
of its own, as a job from another login would be. Where the kernel groups tasks by session
for the scheduler (``kernel.sched_autogroup_enabled``, on by default in Debian's kernels),
that makes it a group of its own, which gets the same share of the CPU as the whole
benchmark, instead of one share per thread beside the benchmark's threads.

Needs ``sipp`` and ``tcpdump`` (Debian ``sip-tester``, ``tcpdump``) and root for the
capture, as :mod:`bench.ivr_load` does; CI does not run it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

from bench import asterisk, capture, floor, ivr_load, report
from bench.ivr_load import CALL_SECONDS, EXPECTED_RECORDING, KIT, RTP_FIRST, RTP_LAST, SIP_PORT

#: Where an installed Asterisk's binary is looked for, after ``PATH``: the system's places,
#: then where ``--build`` (bench/asterisk.py) installs one.
ASTERISK_PLACES = (
    "/usr/sbin/asterisk",
    "/usr/local/sbin/asterisk",
    str(asterisk.DEFAULT_PREFIX / "sbin" / "asterisk"),
)

#: The modules the dialplan needs, and nothing else (``autoload`` is off).
MODULES = (
    "chan_sip.so",
    "pbx_config.so",
    "app_playback.so",
    "app_read.so",
    "app_record.so",
    "app_verbose.so",  # Log(), which notes the digits read
    "format_pcm.so",  # the kit's raw µ-law sounds
    "format_wav.so",  # the recordings
    "codec_ulaw.so",
    "res_rtp_asterisk.so",
    "res_timing_timerfd.so",  # a channel's own clock while it plays
)

#: The line the dialplan logs for each call's digits.
DIGITS_LINE = re.compile(r"IVRDIGITS <([0-9*#]*)>")


def find_asterisk(given: Path | None) -> Path:
    """The Asterisk binary to run, or exit saying how to get one."""
    candidates = [given] if given is not None else []
    if given is None:
        on_path = shutil.which("asterisk")
        candidates += [Path(on_path)] if on_path else []
        candidates += [Path(p) for p in ASTERISK_PLACES]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    sys.exit(
        "bench.peer needs Asterisk 20 built with chan_sip (version 21 removed it) and "
        "installed; none was found"
        + (f" at {given}" if given is not None else f" on PATH or at {', '.join(ASTERISK_PLACES)}")
        + ": pass its binary with --asterisk, or --build builds one from Asterisk's public "
        "source (a few minutes on 2 cores)"
    )


def find_modules(binary: Path, given: Path | None) -> Path:
    """The directory of the Asterisk's modules: ``--modules``, or beside its binary."""
    if given is not None:
        return given
    prefix = binary.resolve().parent.parent
    for lib in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
        candidate = prefix / lib / "asterisk" / "modules"
        if (candidate / "chan_sip.so").exists():
            return candidate
    sys.exit(f"no chan_sip.so found under {prefix}/lib*/asterisk/modules: pass --modules DIR")


def find_data(binary: Path) -> Path:
    """The Asterisk's data directory (its modules' XML documentation, without which its
    core does not start): beside its binary as ``make install`` or a package puts it."""
    prefix = binary.resolve().parent.parent
    for candidate in (
        prefix / "var" / "lib" / "asterisk",
        prefix / "share" / "asterisk",
        Path("/var/lib/asterisk"),
        Path("/usr/share/asterisk"),
    ):
        if (candidate / "documentation").is_dir():
            return candidate
    sys.exit(f"no Asterisk data directory (with documentation/) found for {binary}")


def asterisk_version(binary: Path) -> str:
    result = subprocess.run([str(binary), "-V"], capture_output=True, text=True, timeout=30)
    return (result.stdout or result.stderr).strip()


def write_asterisk_conf(
    work: Path,
    modules: Path,
    data: Path,
    load: tuple[str, ...],
    *,
    verbose: int = 0,
    transmit_silence: bool = True,
    subdirs: tuple[str, ...] = (),
) -> Path:
    """An Asterisk of its own in ``work`` (the peer benchmarks'): its directories (and
    ``subdirs``), ``asterisk.conf`` (only the installation's ``modules`` and ``data`` are
    read; all it writes is in ``work``) and ``modules.conf`` loading ``load`` alone; its
    ``etc`` directory, for the rest of the configuration."""
    silence = "transmit_silence = yes\n" if transmit_silence else ""  # RTP throughout, as ours
    etc = work / "etc"
    for sub in ("etc", "run", "log", "spool", "lib", *subdirs):
        (work / sub).mkdir(parents=True, exist_ok=True)
    (etc / "asterisk.conf").write_text(
        "[directories]\n"
        f"astetcdir => {etc}\n"
        f"astmoddir => {modules}\n"
        f"astvarlibdir => {work / 'lib'}\n"
        f"astdbdir => {work / 'lib'}\n"
        f"astkeydir => {work / 'lib'}\n"
        f"astdatadir => {data}\n"
        f"astagidir => {work / 'lib'}\n"
        f"astspooldir => {work / 'spool'}\n"
        f"astrundir => {work / 'run'}\n"
        f"astlogdir => {work / 'log'}\n"
        f"astsbindir => {work / 'lib'}\n"
        "[options]\n"
        f"verbose = {verbose}\n"
        "debug = 0\n"
        "maxcalls = 2000\n"
        f"{silence}"
    )
    (etc / "modules.conf").write_text(
        "[modules]\nautoload = no\n" + "".join(f"load => {m}\n" for m in load)
    )
    return etc


def write_config(work: Path, modules: Path, data: Path, kit: Path) -> Path:
    """The Asterisk configuration of the kit's IVR in ``work``; its asterisk.conf. Only the
    installation's modules and data (documentation) are read; all it writes is in ``work``."""
    etc = write_asterisk_conf(work, modules, data, MODULES, subdirs=("recordings",))
    sounds = kit / "sounds"
    (etc / "logger.conf").write_text("[general]\n[logfiles]\nmessages => notice,warning,error\n")
    (etc / "rtp.conf").write_text(f"[general]\nrtpstart = {RTP_FIRST}\nrtpend = {RTP_LAST}\n")
    (etc / "sip.conf").write_text(
        "[general]\n"
        f"udpbindaddr = 127.0.0.1:{SIP_PORT}\n"
        "tcpenable = no\n"
        "context = ivr\n"
        "allowguest = yes\n"
        "alwaysauthreject = yes\n"
        "disallow = all\n"
        "allow = ulaw\n"
        "dtmfmode = rfc2833\n"
        "directmedia = no\n"
        "rtptimeout = 60\n"
    )
    recording = work / "recordings" / "rec-${UNIQUEID}"
    (etc / "extensions.conf").write_text(
        "[general]\nstatic = yes\nwriteprotect = yes\n"
        "[ivr]\n"
        "exten => ivr,1,Answer()\n"
        f" same => n,Playback({sounds / 'prompt'})\n"
        f" same => n,Read(DIGITS,{sounds / 'beep'},4,,1,5)\n"
        " same => n,Log(NOTICE,IVRDIGITS <${DIGITS}>)\n"
        # q: no beep of its own (the kit's beep came before the digits); u: keep the
        # silence that ends it, as callhook's recording does.
        f" same => n,Record({recording}.wav,3,10,qu)\n"
        " same => n,Hangup()\n"
    )
    return etc / "asterisk.conf"


def wait_listening(log: Path, server: subprocess.Popen[bytes], seconds: float = 60.0) -> None:
    """Until Asterisk answers a SIP OPTIONS on the kit's port (its modules are loaded)."""
    deadline = time.monotonic() + seconds
    while not answers_options():
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"Asterisk did not start: see {log}")
        time.sleep(0.5)


def answers_options(port: int = SIP_PORT) -> bool:
    """Whether something answers a SIP OPTIONS (RFC 3261 §11) on 127.0.0.1:``port``."""
    request = (
        f"OPTIONS sip:ivr@127.0.0.1:{port} SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 127.0.0.1:5069;branch=z9hG4bK-peer-probe;rport\r\n"
        "Max-Forwards: 70\r\n"
        f"To: <sip:ivr@127.0.0.1:{port}>\r\n"
        "From: <sip:probe@127.0.0.1:5069>;tag=probe\r\n"
        "Call-ID: peer-probe\r\n"
        "CSeq: 1 OPTIONS\r\n"
        "Content-Length: 0\r\n\r\n"
    )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.settimeout(0.5)
        probe.sendto(request.encode(), ("127.0.0.1", port))
        try:
            return probe.recv(4096).startswith(b"SIP/2.0 ")
        except OSError:
            return False


def recording_seconds(path: Path) -> float | None:
    try:
        with wave.open(str(path)) as w:
            frames: int = w.getnframes()
            rate: int = w.getframerate()
            return frames / rate
    except (OSError, wave.Error, EOFError):
        return None


def run_asterisk_step(
    n: int, kit: Path, workdir: Path, binary: Path, modules: Path
) -> dict[str, object]:
    """One load step against Asterisk: its figures, as :func:`bench.ivr_load.run_load`'s."""
    work = workdir / f"asterisk-{n}"
    conf = write_config(work, modules, find_data(binary), kit)
    console = work / "console.log"
    with console.open("w") as out:
        # -f: in the foreground (no console: there is no -c), -C: this configuration only.
        server = subprocess.Popen(
            [str(binary), "-f", "-C", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_listening(console, server)
        pcap = workdir / f"rtp-asterisk-{n}.pcap"
        dump = ivr_load.capture(pcap)
        events = workdir / f"events-asterisk-{n}.pcap"
        events_dump = ivr_load.capture_events(events)
        time.sleep(1.0)
        sampler = ivr_load.Sampler(server.pid)
        sampler.start()
        errors = workdir / f"sipp-asterisk-{n}-errors.log"
        sipp = subprocess.run(
            [
                "sipp",
                "-sf",
                "ivr_uac.xml",
                *ivr_load.sipp_common(n),
                "-mp",
                "6000",
                "-error_file",
                str(errors),
            ],
            cwd=kit / "scenarios",
            capture_output=True,
            text=True,
        )
        time.sleep(2.0)
        sampler.stop.set()
        sampler.join()
        for each in (dump, events_dump):
            each.send_signal(signal.SIGINT)
            each.wait(timeout=10)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    screen = sipp.stdout + sipp.stderr
    (workdir / f"sipp-asterisk-{n}.out").write_text(screen)
    ok, failed = count(screen, "Successful call"), count(screen, "Failed call")
    messages = (
        (work / "log" / "messages").read_text(errors="replace")
        if (work / "log" / "messages").exists()
        else ""
    )
    digits = DIGITS_LINE.findall(messages)
    lengths = [recording_seconds(p) for p in sorted((work / "recordings").glob("*.wav"))]
    known = [d for d in lengths if d is not None]
    right = sum(1 for d in known if EXPECTED_RECORDING[0] <= d <= EXPECTED_RECORDING[1])
    cpu_total, pct, rss_mb = sampler.figures()
    call_seconds = max(ok, 0) * CALL_SECONDS
    p50, p99, gmax = capture.quantiles(capture.rtp_gaps(pcap))
    prompts = ivr_load.prompt_figures(pcap, kit)
    began = capture.server_starts(pcap)
    floor_cpu = floor.measure(pcap)
    pcap.unlink(missing_ok=True)
    nan = float("nan")
    return {
        **ivr_load.driver_figures(events, began),
        "n": n,
        "ok": ok,
        "failed": failed,
        "digits_right": digits.count("1234"),
        "digits_calls": len(digits),
        "recordings_right": right,
        "recordings": len(lengths),
        "recording_lengths": capture.quantiles(known),
        **report.wrong_recordings(lengths, EXPECTED_RECORDING),
        "cpu_ms_per_call_s": cpu_total * 1000 / call_seconds if call_seconds else nan,
        "floor_ms_per_call_s": floor_cpu * 1000 / call_seconds if call_seconds else nan,
        "floor_ratio": cpu_total / floor_cpu if floor_cpu > 0 else nan,
        "cpu_pct": pct,
        "rss_mb": rss_mb,
        **prompts,
        "gap_p50": p50,
        "gap_p99": p99,
        "gap_max": gmax,
    }


def count(screen: str, label: str) -> int:
    """A SIPp statistics screen's cumulative count of ``label``."""
    found = re.findall(rf"{label}\s*\|\s*\d+\s*\|\s*(\d+)", screen)
    return int(found[-1]) if found else -1


def row(server: str, r: dict[str, object]) -> str:
    lengths = r["recording_lengths"]
    assert isinstance(lengths, tuple)
    return (
        f"{r['n']:4d} | {server:12} | {r['ok']:4} | {r['failed']:4} "
        f"| {r['digits_right']:4}/{r['digits_calls']:<4} "
        f"| {r['recordings_right']:4}/{r['recordings']:<4} ({lengths[0]:.1f}) "
        f"| {r.get('prompts_whole', 0):5}/{r.get('prompts', 0):<6} "
        f"| {r['cpu_ms_per_call_s']:13.2f} "
        f"| {r['floor_ms_per_call_s']:5.2f} ({r['floor_ratio']:4.1f}) "
        f"| {r['cpu_pct']:6.1f} | {r['rss_mb']:6.0f} "
        f"| {r['gap_p50']:5.1f} / {r['gap_p99']:5.1f} / {r['gap_max']:5.0f}"
    )


def start_hog(cpus: int, own_session: bool = False) -> subprocess.Popen[bytes] | None:
    """``stress-ng --cpu N`` at nice 0 (in a session of its own with ``own_session``), or
    None when ``cpus`` is 0."""
    if not cpus:
        return None
    if shutil.which("stress-ng") is None:
        sys.exit("--hog needs stress-ng (apt-get install stress-ng)")
    return subprocess.Popen(
        ["stress-ng", "--cpu", str(cpus), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=own_session,
    )


def hog_seconds(hog: subprocess.Popen[bytes] | None) -> float:
    """The CPU seconds ``hog`` and its running children (stress-ng's workers) used so far."""
    if hog is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The fields after the command's name (which may hold spaces): state, ppid, ...
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(entry.name) == hog.pid or int(fields[1]) == hog.pid:
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def print_hog(hog: subprocess.Popen[bytes] | None, server: str, start: tuple[float, float]) -> None:
    """How many cores the hog kept busy since ``start`` (its CPU seconds, the wall clock)."""
    if hog is not None:
        cores = (hog_seconds(hog) - start[0]) / (time.monotonic() - start[1])
        print(f"       the hog kept {cores:.2f} cores busy during {server}'s step", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="200,400,650")
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--asterisk", type=Path, help="the Asterisk 20 binary (chan_sip)")
    parser.add_argument("--modules", type=Path, help="its modules' directory")
    parser.add_argument(
        "--build",
        nargs="?",
        const=asterisk.DEFAULT_SOURCE,
        metavar="SRC",
        help="without --asterisk: build Asterisk 20 with chan_sip (bench.asterisk; an earlier "
        "build is reused) from SRC, by default Asterisk's public source",
    )
    parser.add_argument("--workers", type=int, default=1, help="serve --workers")
    parser.add_argument("--hog", type=int, default=0, help="stress-ng --cpu N meanwhile")
    parser.add_argument(
        "--hog-session",
        action="store_true",
        help="the hog in a session of its own (a scheduling group of its own under autogroup)",
    )
    args = parser.parse_args()
    ivr_load.check_kit(args.kit)
    if args.build is not None and args.asterisk is None:
        binary = asterisk.build(args.build)
    else:
        binary = find_asterisk(args.asterisk)
    modules = find_modules(binary, args.modules)
    workdir = Path(tempfile.mkdtemp(prefix="callhook-peer-"))
    app, app_base = ivr_load.start_app()
    print(f"the peer benchmark; kit {args.kit}; work dir {workdir}")
    print(f"peer: {asterisk_version(binary)} ({binary}); callhook serve --workers {args.workers}")
    if args.hog:
        where = "in a session of its own" if args.hog_session else "in this session"
        print(f"stress-ng --cpu {args.hog} at nice 0 runs during every step, {where}")
    print(
        "   N | server       |   ok | fail | digits ok | rec ok (p50 s) | prompt whole "
        "| CPU ms/call-s | floor ms (x) | % core | RSS MB | RTP gap p50/p99/max ms"
    )
    try:
        for n in (int(x) for x in args.steps.split(",")):
            hog = start_hog(args.hog, args.hog_session)
            try:
                start = (hog_seconds(hog), time.monotonic())
                peer = run_asterisk_step(n, args.kit, workdir, binary, modules)
                print(row("asterisk", peer), flush=True)
                print_hog(hog, "Asterisk", start)
                report.print_prompts(peer)
                report.print_recordings(peer)
                report.print_driver(peer)
                start = (hog_seconds(hog), time.monotonic())
                ours = ivr_load.run_step(n, args.kit, app_base, workdir, args.workers)
                print(row("callhook", ours), flush=True)
                print_hog(hog, "callhook", start)
                tick = ours["tick"]
                if isinstance(tick, dict) and tick:
                    print(
                        f"       callhook's tick behind the wire (last minute) p50/p99/max: "
                        f"{tick['late_p50_ms']:.1f} / {tick['late_p99_ms']:.1f} / "
                        f"{tick['late_max_ms']:.1f} ms; {ours['late_ticks']} ticks late",
                        flush=True,
                    )
                report.print_prompts(ours)
                report.print_recordings(ours)
                report.print_driver(ours)
                report.print_thread(ours)
            finally:
                if hog is not None:
                    hog.terminate()
                    hog.wait()
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
