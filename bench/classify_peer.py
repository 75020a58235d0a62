"""The peer of bench/classify.py: Asterisk 20's ``AMD()`` (app_amd) on the same labelled clips.

    .venv/bin/python -m bench.classify                    # callhook, then this peer beside it
    .venv/bin/python -m bench.classify_peer [--set small|larger|both] [--count 400] [--seed 1]
                                            [--asterisk PATH] [--modules DIR]
                                            [--amd-args ARGS] [--concurrency 20] [--show 10]

Our rule for benchmarks: a peer measured in the same run, on the same input. This runs an
Asterisk 20 (:func:`bench.peer.find_asterisk` finds it: on ``PATH``, in the system's places
or where ``python -m bench.asterisk`` builds one, ``~/.cache/callhook-bench/asterisk-20.15.0``)
in the foreground (``asterisk -f -C <conf>``, as :mod:`bench.peer` does) with a configuration
of its own in a temporary directory: only its modules and data are read from the
installation, chan_sip listens on a free UDP port of 127.0.0.1, and nothing is written outside
that directory. Its dialplan, for every call::

    exten => _X.,1,Set(CLIP=${EXTEN})
     same => n,Log(NOTICE,AMDANSWER ${EXTEN})
     same => n,Answer()
     same => n,Log(NOTICE,AMDSTART ${EXTEN})
     same => n,AMD()                     ; or AMD(ARGS) with --amd-args
     same => n,Log(NOTICE,AMDRESULT ${EXTEN} ${AMDSTATUS} ${AMDCAUSE})
     same => n,Hangup()

    exten => h,1,Log(NOTICE,AMDEND ${CLIP} ${AMDSTATUS} ${AMDCAUSE})  ; after a HANGUP too

``amd.conf`` holds only ``[general]`` (without one app_amd declines to load), so ``AMD()``
without arguments runs with the installed module's own compiled-in defaults; the module logs
them as it loads ("AMD defaults: ...", which reaches the log at verbose 5 only: the log is at
verbose 5 while Asterisk starts, then at verbose 3 for the calls, by ``logger reload``), and
every call logs the ones it runs with; the report shows both.

Each clip is one call: SIPp (Debian ``sip-tester``) calls the extension of the clip's index
and, once answered, plays the clip as its RTP (µ-law, 20 ms packets, a pcap made by
:class:`tests.e2e.rtpstream.Stream`; the scenario from :mod:`tests.e2e.sipp`'s pieces), then
waits for Asterisk's BYE. ``--concurrency`` calls (20) run at once, each its own SIPp
process (ports of their own in 4000-7000; Asterisk's RTP in 11000-11999). Every clip is
longer (6 s and up) than AMD's default 5 s analysis time; the report counts verdicts that
came after their clip's end, when the caller had gone quiet (none with the defaults). AMD
counts the frames it reads, so how busy the machine is moves its verdicts' times a little
(the checks below), not the verdicts.

Time to a verdict: the log's clock. logger.conf's ``dateformat = %F %T.%3q`` stamps every line
with milliseconds, taken when the line is logged; the verdict's time is ``AMDRESULT``'s stamp
minus ``AMDSTART``'s, plus the first packet's 20 ms. AMD's clock starts at ``AMD()``, right
after ``Answer()``; and ``Answer()`` on an incoming chan_sip call returns when the caller's
first RTP packet arrives (it waits up to 500 ms for one) and puts that frame back for AMD, so
``AMDSTART`` is when the clip's first 20 ms arrived, and a verdict on the packet that
carries the clip up to t arrives at ``AMDSTART`` + t - 20 ms: the clip's time of the end of
the last frame heard, as bench/classify.py times callhook. The clip is paced in real time by
SIPp; the report checks the clock twice: how long ``Answer()`` waited for the first packet,
and the log's time of ``TOOLONG`` verdicts against AMD's own count of the audio it read.

Verdicts are mapped to callhook's classes: ``HUMAN`` → live, ``MACHINE`` → answering_machine,
``NOTSURE`` → unknown, ``HANGUP`` (or no verdict: a failed call) → error. AMD has no fax
class: a fax clip is counted as what AMD said (so always wrong in the per-class accuracy;
its confusion row shows what it said) and no silence class of its own: a line with nothing
on it is ``MACHINE`` (``INITIALSILENCE``) by design; ``NOTSURE`` on a silence clip counts as
right (callhook's right answer there is unknown).

CPU: the Asterisk process's CPU time (utime + stime of all its threads, from ``/proc``) from
just before the first call to just after the last, per call and per second of audio AMD read;
also with the idle process's rate (measured for 3 s before the calls) taken off. That covers
all of Asterisk's work on a call: SIP, RTP receiving, µ-law to linear, the dialplan, AMD, the
log; SIPp's is not counted.

(Past 600 lines: the peer's whole run, Asterisk's configuration, the calls and the
reading of its log, is one file beside the benchmark it answers.)
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import classifyset, peer
from bench.ivr_load import Sampler
from tests.e2e import sipp as scenarios
from tests.e2e.rtpstream import Stream

#: The modules the dialplan needs, and nothing else (``autoload`` is off).
MODULES = (
    "chan_sip.so",
    "pbx_config.so",
    "app_amd.so",
    "app_verbose.so",  # Log()
    "codec_ulaw.so",  # AMD reads signed linear
    "res_rtp_asterisk.so",
    "res_timing_timerfd.so",
)

#: AMD's verdicts as callhook's classes.
VERDICTS = {
    "HUMAN": "live",
    "MACHINE": "answering_machine",
    "NOTSURE": "unknown",
    "HANGUP": "error",
}

#: What callhook's right answer is for each class, in the mapped terms.
EXPECTED = {
    "live": "live",
    "machine": "answering_machine",
    "fax": "fax_machine",
    "silence": "unknown",
}

#: The confusion table's columns: AMDSTATUS, and for MACHINE and NOTSURE the cause's word
#: (a call with no verdict, "-", is counted below the table).
COLUMNS = (
    "HUMAN",
    "MACHINE/INITIALSILENCE",
    "MACHINE/LONGGREETING",
    "MACHINE/MAXWORDS",
    "MACHINE/MAXWORDLENGTH",
    "NOTSURE/TOOLONG",
    "NOTSURE/NOAUDIODATA",
    "HANGUP",
)
SHORT = {
    "HUMAN": "HUMAN",
    "MACHINE/INITIALSILENCE": "M/INITSIL",
    "MACHINE/LONGGREETING": "M/LONGGREET",
    "MACHINE/MAXWORDS": "M/MAXWORDS",
    "MACHINE/MAXWORDLENGTH": "M/MAXWORDLEN",
    "NOTSURE/TOOLONG": "NS/TOOLONG",
    "NOTSURE/NOAUDIODATA": "NS/NOAUDIO",
    "HANGUP": "HANGUP",
}

#: A line of the log: its time, and one of the dialplan's marks.
MARK = re.compile(
    r"^\[([0-9-]+ [0-9:.]+)\] .*?\b(AMDANSWER|AMDSTART|AMDRESULT|AMDEND) (\d+)"
    r"(?: (\S*))?(?: (\S*))?"
)
DEFAULTS_LINE = re.compile(r"AMD defaults: (.*?)\s*$", re.M)
CALL_LINE = re.compile(r"AMD: (initialSilence .*?)\s*$", re.M)

#: The ports the callers and Asterisk use: SIPp's in 3000-10000 as tests/e2e's, below the
#: kernel's ephemeral ports; Asterisk's SIP from 15060 and its RTP in 11000-11999.
SIPP_SIP_FIRST = 4000
SIPP_CONTROL_FIRST = 4500
SIPP_MEDIA_FIRST = 6000
ASTERISK_SIP_FIRST = 15060
RTP_FIRST, RTP_LAST = 11000, 11999
IDLE_SECONDS = 3.0
#: The audio of the first packet, which arrived as Answer() returned: a time on the log's
#: clock plus this is the clip's time at the end of the last packet AMD read, the clock
#: bench/classify.py's times are on (the end of the last frame fed).
FIRST_PACKET = 0.020

#: The log while Asterisk starts: app_amd's line with its defaults ("AMD defaults: ...")
#: reaches the log only at verbose 5 while the modules load.
LOAD_LOG = "notice,warning,error,verbose(5)"
#: The log during the calls (``logger reload`` once started): the dialplan's marks (NOTICE)
#: and app_amd's lines of verbose 3 (the parameters each call runs with, its states).
CALL_LOG = "notice,warning,error,verbose(3)"


@dataclass
class Verdict:
    """What AMD said about one clip, and when."""

    label: dict[str, Any]
    status: str = ""  # AMDSTATUS: HUMAN, MACHINE, NOTSURE, HANGUP; "" when none came
    cause: str = ""  # AMDCAUSE, e.g. HUMAN-800-800, TOOLONG-5000
    seconds: float | None = None  # AMDSTART to AMDRESULT on the log's clock, + FIRST_PACKET
    answer_wait: float | None = None  # AMDANSWER to AMDSTART: Answer() until the first frame
    sipp_ok: bool = False

    @property
    def kind(self) -> str:
        """The verdict in callhook's terms (error: HANGUP, or none)."""
        return VERDICTS.get(self.status, "error")

    @property
    def column(self) -> str:
        if not self.status:
            return "-"
        if self.status in ("MACHINE", "NOTSURE"):
            return f"{self.status}/{self.cause.split('-')[0]}"
        return self.status

    @property
    def right(self) -> bool:
        return self.kind == EXPECTED[self.label["class"]]

    @property
    def person_right(self) -> bool:
        """A person or not: live said ``HUMAN``, anything else not."""
        return (self.status == "HUMAN") == bool(self.label["class"] == "live")


@dataclass
class PeerRun:
    """One set through Asterisk's AMD: the verdicts and how the run went."""

    verdicts: list[Verdict]
    version: str
    amd_args: str
    defaults: str  # the module's load line
    per_call: Counter[str]  # the parameters each call ran with
    concurrency: int
    cpu: float  # the Asterisk process's CPU seconds over the calls
    idle_rate: float  # its CPU seconds per second, idle, before the calls
    wall: float  # seconds from the first call's start to the last call's end
    workdir: Path
    failures: list[str] = field(default_factory=list)  # SIPp's output of failed calls

    @property
    def analysed_seconds(self) -> float:
        return sum(v.seconds for v in self.verdicts if v.seconds is not None)


def locate(binary: Path | None = None, modules: Path | None = None) -> tuple[Path, Path] | str:
    """The Asterisk to run and its modules' directory (:func:`bench.peer.find_asterisk` and
    :func:`bench.peer.find_modules`), or why there is none: no Asterisk, no chan_sip or no
    app_amd, or no SIPp to call it."""
    if scenarios.SIPP is None:
        return "no sipp (Debian sip-tester) to call it"
    try:
        found = peer.find_asterisk(binary)
        where = peer.find_modules(found, modules)
    except SystemExit as e:
        return str(e.code)
    if not (where / "app_amd.so").exists():
        return f"no app_amd.so in {where}"
    return found, where


def write_config(work: Path, modules: Path, data: Path, sip_port: int, amd_args: str = "") -> Path:
    """Asterisk's configuration for the AMD calls in ``work``, as
    :func:`bench.peer.write_config` writes the IVR's; its asterisk.conf."""
    etc = peer.write_asterisk_conf(work, modules, data, MODULES, verbose=3, transmit_silence=False)
    write_logger(etc, LOAD_LOG)
    (etc / "amd.conf").write_text("[general]\n")  # app_amd declines to load without one
    (etc / "rtp.conf").write_text(f"[general]\nrtpstart = {RTP_FIRST}\nrtpend = {RTP_LAST}\n")
    (etc / "sip.conf").write_text(
        "[general]\n"
        f"udpbindaddr = 127.0.0.1:{sip_port}\n"
        "tcpenable = no\n"
        "context = amd\n"
        "allowguest = yes\n"
        "alwaysauthreject = yes\n"
        "disallow = all\n"
        "allow = ulaw\n"
        "directmedia = no\n"
        "rtptimeout = 60\n"
    )
    (etc / "extensions.conf").write_text(
        "[general]\nstatic = yes\nwriteprotect = yes\n"
        "[amd]\n"
        "exten => _X.,1,Set(CLIP=${EXTEN})\n"
        " same => n,Log(NOTICE,AMDANSWER ${EXTEN})\n"
        " same => n,Answer()\n"
        " same => n,Log(NOTICE,AMDSTART ${EXTEN})\n"
        f" same => n,AMD({amd_args})\n"
        " same => n,Log(NOTICE,AMDRESULT ${EXTEN} ${AMDSTATUS} ${AMDCAUSE})\n"
        " same => n,Hangup()\n"
        # After a HANGUP verdict the dialplan stops; this still says what AMD set.
        "exten => h,1,Log(NOTICE,AMDEND ${CLIP} ${AMDSTATUS} ${AMDCAUSE})\n"
    )
    return etc / "asterisk.conf"


def write_logger(etc: Path, levels: str) -> None:
    """logger.conf: milliseconds on every line (the stamp is taken when the line is logged),
    and the ``messages`` file at ``levels``."""
    (etc / "logger.conf").write_text(
        f"[general]\ndateformat = %F %T.%3q\n[logfiles]\nmessages => {levels}\n"
    )


def udp_free(port: int, count: int = 1) -> bool:
    """Whether ``count`` UDP ports from ``port`` on 127.0.0.1 can be bound now."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(count)]
    try:
        for offset, each in enumerate(sockets):
            each.bind(("127.0.0.1", port + offset))
        return True
    except OSError:
        return False
    finally:
        for each in sockets:
            each.close()


def free_from(first: int, count: int = 1, step: int = 1) -> int:
    port = first
    while not udp_free(port, count):
        port += step
    return port


def slots(concurrency: int) -> list[tuple[int, int, int]]:
    """(SIP port, media port, control port) for each caller at once: SIPp binds its audio
    RTP and RTCP at the media port and its video's on the next two, so four in a row."""
    out: list[tuple[int, int, int]] = []
    sip, media, control = SIPP_SIP_FIRST, SIPP_MEDIA_FIRST, SIPP_CONTROL_FIRST
    for _ in range(concurrency):
        sip = free_from(sip)
        media = free_from(media, 4, 4)
        control = free_from(control)
        out.append((sip, media, control))
        sip, media, control = sip + 1, media + 4, control + 1
    return out


def start_asterisk(
    binary: Path, modules: Path, work: Path, amd_args: str
) -> tuple[subprocess.Popen[bytes], int, str]:
    """Asterisk in the foreground with the configuration written in ``work``, answering;
    its SIP port, and app_amd's defaults as it said them when it loaded."""
    port = free_from(ASTERISK_SIP_FIRST)
    conf = write_config(work, modules, peer.find_data(binary), port, amd_args)
    console = work / "console.log"
    with console.open("w") as out:
        # -f: in the foreground (no console: there is no -c), -C: this configuration only.
        server = subprocess.Popen(
            [str(binary), "-f", "-C", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 60.0
    while not peer.answers_options(port):
        if server.poll() is not None or time.monotonic() > deadline:
            stop_asterisk(server)
            raise SystemExit(f"Asterisk did not start: see {console} and {work / 'log'}")
        time.sleep(0.3)
    messages = work / "log" / "messages"
    log = messages.read_text(errors="replace") if messages.exists() else ""
    if "Registered application 'AMD'" not in log:
        stop_asterisk(server)
        raise SystemExit(f"Asterisk did not load app_amd: see {messages}")
    defaults = DEFAULTS_LINE.search(log)
    write_logger(conf.parent, CALL_LOG)
    reload = subprocess.run(
        [str(binary), "-C", str(conf), "-rx", "logger reload"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if reload.returncode != 0:
        stop_asterisk(server)
        raise SystemExit(f"asterisk -rx 'logger reload' failed: {reload.stdout}{reload.stderr}")
    return server, port, defaults.group(1) if defaults else "(not in the log)"


def stop_asterisk(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is not None:
        return
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def caller_scenario(extension: str, pcap: Path) -> str:
    """SIPp calls ``extension``, plays ``pcap`` once answered, and waits for the BYE."""
    return scenarios.scenario(
        scenarios.invite(extension),
        scenarios.ANSWERED,
        scenarios.PLAY.format(pcap=pcap),
        scenarios.BYE_FROM_SERVER.format(timeout_ms=30000),
    )


async def one_call(
    index: int,
    clip: Path,
    port: int,
    free: asyncio.Queue[tuple[int, int, int]],
    workdir: Path,
) -> tuple[bool, str]:
    """One clip as one call: whether SIPp's call succeeded, and its output if not."""
    sip_port, media_port, control_port = await free.get()
    extension = f"{index:04d}"
    pcap = workdir / f"clip-{extension}.pcap"
    scenario_path = workdir / f"caller-{extension}.xml"
    try:
        samples = classifyset.read_clip(clip)
        Stream(len(samples) / classifyset.FS).speech(samples, at=0.0).write_pcap(pcap)
        scenario_path.write_text(caller_scenario(extension, pcap))
        proc = await asyncio.create_subprocess_exec(
            str(scenarios.SIPP),
            "-sf",
            str(scenario_path),
            f"127.0.0.1:{port}",
            "-i",
            "127.0.0.1",
            "-p",
            str(sip_port),
            "-mi",
            "127.0.0.1",
            "-mp",
            str(media_port),
            *scenarios.control_socket(control_port),
            "-m",
            "1",
            "-nostdin",
            "-timeout",
            "60s",
            cwd=workdir,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        ok = proc.returncode == 0
        return ok, "" if ok else out.decode(errors="replace")[-2000:]
    finally:
        pcap.unlink(missing_ok=True)
        scenario_path.unlink(missing_ok=True)
        free.put_nowait((sip_port, media_port, control_port))


async def all_calls(
    directory: Path, labels: list[dict[str, Any]], port: int, concurrency: int, workdir: Path
) -> list[tuple[bool, str]]:
    free: asyncio.Queue[tuple[int, int, int]] = asyncio.Queue()
    for slot in slots(concurrency):
        free.put_nowait(slot)
    return await asyncio.gather(
        *(
            one_call(i, directory / label["file"], port, free, workdir)
            for i, label in enumerate(labels)
        )
    )


def stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def read_log(log: str, verdicts: list[Verdict]) -> None:
    """Each call's marks from the log: its verdict, and when."""
    marks: dict[tuple[str, int], tuple[float, str, str]] = {}
    for line in log.splitlines():
        m = MARK.match(line)
        if m:
            when, what, index, status, cause = m.groups()
            marks[(what, int(index))] = (stamp(when), status or "", cause or "")
    for i, verdict in enumerate(verdicts):
        result = marks.get(("AMDRESULT", i)) or marks.get(("AMDEND", i))
        if result is not None:
            verdict.status, verdict.cause = result[1], result[2]
        start, answer = marks.get(("AMDSTART", i)), marks.get(("AMDANSWER", i))
        if start is not None and ("AMDRESULT", i) in marks:
            verdict.seconds = marks[("AMDRESULT", i)][0] - start[0] + FIRST_PACKET
        if start is not None and answer is not None:
            verdict.answer_wait = start[0] - answer[0]


def run(
    directory: Path,
    labels: list[dict[str, Any]],
    binary: Path,
    modules: Path,
    amd_args: str = "",
    concurrency: int = 20,
) -> PeerRun:
    """Every clip of a set as a call to a new Asterisk running ``AMD(amd_args)``."""
    workdir = Path(tempfile.mkdtemp(prefix="callhook-amd-"))
    server, port, defaults = start_asterisk(binary, modules, workdir / "asterisk", amd_args)
    try:
        sampler = Sampler(server.pid)
        time.sleep(1.0)  # the modules' start-up work done
        idle = sampler.read()
        started = time.monotonic()
        time.sleep(IDLE_SECONDS)
        before = sampler.read()
        begun = time.monotonic()
        outcomes = asyncio.run(all_calls(directory, labels, port, concurrency, workdir))
        wall = time.monotonic() - begun
        after = sampler.read()
        time.sleep(0.5)  # the last lines reach the log
    finally:
        stop_asterisk(server)
    if idle is None or before is None or after is None:
        raise SystemExit(f"Asterisk went away during the calls: see {workdir}")
    log_path = workdir / "asterisk" / "log" / "messages"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    verdicts = [Verdict(label) for label in labels]
    read_log(log, verdicts)
    failures = []
    for verdict, (ok, output) in zip(verdicts, outcomes, strict=True):
        verdict.sipp_ok = ok
        if not ok:
            failures.append(f"{verdict.label['file']}: {output.strip()[-300:]}")
    return PeerRun(
        verdicts=verdicts,
        version=peer.asterisk_version(binary),
        amd_args=amd_args,
        defaults=defaults,
        per_call=Counter(CALL_LINE.findall(log)),
        concurrency=concurrency,
        cpu=after[0] - before[0],
        idle_rate=(before[0] - idle[0]) / (begun - started),
        wall=wall,
        workdir=workdir,
        failures=failures,
    )


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values``, nearest rank (the classify benchmarks')."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def p50_p95(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """p50 / p95 as the classify benchmarks print them (nearest rank)."""
    if not values:
        return "-"
    return f"{pct(values, 0.5) * scale:.{digits}f} / {pct(values, 0.95) * scale:.{digits}f}"


def decision_times(verdicts: list[Verdict], cls: str) -> list[float]:
    """Seconds from the answer to the verdict, of the right ones of class ``cls``."""
    return [
        v.seconds for v in verdicts if v.label["class"] == cls and v.right and v.seconds is not None
    ]


def cpu_figures(result: PeerRun) -> tuple[float, float, float, float]:
    """(ms per call, ms per call without the idle rate, ms per second of audio AMD read,
    the same without the idle rate)."""
    calls = len(result.verdicts)
    busy = result.cpu - result.idle_rate * result.wall
    audio = result.analysed_seconds or float("nan")
    return (
        result.cpu / calls * 1000,
        busy / calls * 1000,
        result.cpu / audio * 1000,
        busy / audio * 1000,
    )


def report(name: str, result: PeerRun, show: int = 10) -> None:
    """AMD's figures for one set, in the shape of bench/classify.py's."""
    verdicts = result.verdicts
    print(f"\n== {name}: the peer, Asterisk AMD(), {len(verdicts)} calls")
    print(
        f"  {result.version}, chan_sip on 127.0.0.1, {result.concurrency} calls at once "
        f"(SIPp plays each clip as the callee's RTP); {result.wall:.0f} s; its log in"
        f"\n  {result.workdir / 'asterisk' / 'log' / 'messages'}"
    )
    args = f"AMD({result.amd_args})" if result.amd_args else "AMD() with no arguments"
    print(f"  {args}; app_amd's defaults as it loaded them (amd.conf empty):")
    print(f"    {result.defaults}")
    for line, n in result.per_call.most_common():
        same = " (the same)" if line == result.defaults else ""
        print(f"  the parameters {n} calls ran with{same}:\n    {line}")
    print(
        "  AMD's verdicts as callhook's classes: HUMAN -> live, MACHINE -> answering_machine,\n"
        "  NOTSURE -> unknown, HANGUP or none -> error. AMD has no fax class: a fax clip counts\n"
        "  as what AMD said (wrong, whatever it said); nor one for silence: a silent line is\n"
        "  MACHINE (INITIALSILENCE) by design; NOTSURE there would count as right (unknown)."
    )
    # 1. accuracy per class, and by source / kind
    print(f"\n  {'class':9} {'right':>9} {'share':>7}   by source or kind")
    for cls in classifyset.CLASSES:
        of = [v for v in verdicts if v.label["class"] == cls]
        if not of:
            continue
        right = sum(v.right for v in of)
        groups: dict[str, list[Verdict]] = defaultdict(list)
        for v in of:
            e = v.label
            if cls == "machine":
                groups[e["source"]].append(v)
                groups[e["beep"]["kind"] if e["beep"] else "no beep"].append(v)
            elif cls == "live":
                groups[e["source"]].append(v)
                if e["second_answer"] is not None:
                    groups["2nd hello"].append(v)
        by = ", ".join(f"{k} {sum(v.right for v in g)}/{len(g)}" for k, g in groups.items())
        if cls in ("fax", "silence"):
            said = Counter(v.status or "none" for v in of)
            by = f"no {cls} class; said " + ", ".join(f"{k} {n}" for k, n in said.most_common())
        print(f"  {cls:9} {f'{right}/{len(of)}':>9} {right / len(of):>7.0%}   {by}")
    total = sum(v.right for v in verdicts)
    print(f"  {'all':9} {f'{total}/{len(verdicts)}':>9} {total / len(verdicts):>7.0%}")
    two = [v for v in verdicts if v.label["class"] in ("live", "machine")]
    if two:
        right = sum(v.right for v in two)
        print(
            f"  {'live+mach':9} {f'{right}/{len(two)}':>9} {right / len(two):>7.0%}"
            "   the live and machine clips only: the two classes AMD has"
        )
    person = sum(v.person_right for v in verdicts)
    print(
        f"  {'person?':9} {f'{person}/{len(verdicts)}':>9} {person / len(verdicts):>7.0%}"
        "   a person or not: HUMAN on live clips, anything else on the others"
    )
    # 2. confusion, by AMDSTATUS/AMDCAUSE
    print("\n  " + f"{'truth / said':13}" + "".join(f"{SHORT[c]:>13}" for c in COLUMNS))
    for cls in classifyset.CLASSES:
        counts = Counter(v.column for v in verdicts if v.label["class"] == cls)
        print(f"  {cls:13}" + "".join(f"{counts.get(c, 0):>13}" for c in COLUMNS))
    unknown = Counter(v.column for v in verdicts if v.column not in COLUMNS)
    print(
        "  (M/: MACHINE, NS/: NOTSURE, with AMDCAUSE's word; no verdict at all: "
        + (", ".join(f"{k} {n}" for k, n in unknown.items()) or "none")
        + ")"
    )
    # 3. time to a verdict
    print(
        "\n  time to a verdict, p50 / p95 (s of the clip from the answer: the log's clock from"
        "\n  AMD()'s start, + the first 20 ms packet)"
    )
    for cls, status in (("live", "HUMAN"), ("machine", "MACHINE")):
        hits = [
            v for v in verdicts if v.label["class"] == cls and v.right and v.seconds is not None
        ]
        times = [v.seconds for v in hits if v.seconds is not None]
        extra = ""
        if cls == "live":
            after = [v.seconds - v.label["speech_end"] for v in hits if v.seconds is not None]
            extra = f"   after the answer's end {p50_p95(after)}"
        print(f"  {cls:9} ({status}) {p50_p95(times)}{extra}")
    for cls in ("fax", "silence"):
        times = [v.seconds for v in verdicts if v.label["class"] == cls and v.seconds]
        print(f"  {cls:9} (any) {p50_p95(times)}")
    waits = [v.answer_wait for v in verdicts if v.answer_wait is not None]
    if waits:
        gave_up = sum(w >= 0.49 for w in waits)
        print(
            f"  check: Answer() waited for the first RTP packet p50 / max "
            f"{pct(waits, 0.5) * 1000:.0f} / {max(waits) * 1000:.0f} ms; it gave up (500 ms, "
            f"AMD then started before the audio) on {gave_up} calls"
        )
    late = sum(v.seconds is not None and v.seconds > v.label["seconds"] for v in verdicts)
    if late:
        print(f"  {late} verdicts came after their clip's end (the caller sent nothing more)")
    toolong = [
        (v.seconds, int(v.cause.split("-")[1]) / 1000)
        for v in verdicts
        if v.seconds is not None and re.fullmatch(r"TOOLONG-\d+", v.cause)
    ]
    if toolong:
        diff = [wall - audio for wall, audio in toolong]
        print(
            f"  check: {len(toolong)} TOOLONG verdicts: this time minus AMD's own count of the "
            f"audio it read p50 / max {pct(diff, 0.5) * 1000:+.0f} / {max(diff) * 1000:+.0f} ms"
        )
    # 4. CPU
    per_call, busy_call, per_s, busy_s = cpu_figures(result)
    print(
        f"\n  CPU, the whole asterisk process (SIP, RTP, µ-law to linear, dialplan, AMD, log):"
        f"\n  {per_call:.1f} ms per call, {per_s:.2f} ms per second of audio AMD read "
        f"({result.cpu:.2f} s over {result.wall:.0f} s, {result.analysed_seconds:.0f} s read);"
        f"\n  less its idle rate ({result.idle_rate * 1000:.2f} ms/s): {busy_call:.1f} ms per "
        f"call, {busy_s:.2f} ms per second"
    )
    failed = [v for v in verdicts if not v.sipp_ok]
    print(f"  calls SIPp counted as failed: {len(failed)}")
    for line in result.failures[:3]:
        print(f"    {line}")
    wrong = [v for v in verdicts if not v.right and v.label["class"] in ("live", "machine")]
    if wrong and show:
        print(f"\n  wrong live and machine clips ({len(wrong)}; first {min(show, len(wrong))}):")
        for v in wrong[:show]:
            e = v.label
            speech = (
                f" speech {e['speech_start']:.2f}-{e['speech_end']:.2f}" if e["speech_end"] else ""
            )
            at = f" at {v.seconds:.2f} s" if v.seconds is not None else ""
            print(
                f"    {e['file']} {e['class']} ({e['voice']}{speech}, noise "
                f"{e['noise_dbfs']:.0f} dBFS{', hum' if e['hum'] else ''}): "
                f"{v.status or '-'} {v.cause}{at}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=("small", "larger", "both"), default="both")
    parser.add_argument("--count", type=int, default=400, help="clips of the larger set")
    parser.add_argument("--seed", type=int, default=1, help="seed of the larger set")
    parser.add_argument("--asterisk", type=Path, help="the Asterisk 20 binary (chan_sip)")
    parser.add_argument("--modules", type=Path, help="its modules' directory")
    parser.add_argument("--amd-args", default="", help="AMD()'s arguments (default: none)")
    parser.add_argument("--concurrency", type=int, default=20, help="calls at once")
    parser.add_argument("--show", type=int, default=10, help="list this many wrong clips")
    args = parser.parse_args()
    found = locate(args.asterisk, args.modules)
    if isinstance(found, str):
        raise SystemExit(f"bench.classify_peer: {found}")
    binary, modules = found
    sets = []
    if args.set in ("small", "both"):
        small = Path(__file__).resolve().parent.parent / "tests" / "data" / "classify"
        sets.append(("tests/data/classify", small))
    if args.set in ("larger", "both"):
        larger = classifyset.larger_set(args.count, args.seed)
        sets.append((str(larger), larger))
    for name, directory in sets:
        labels = classifyset.load_labels(directory)
        report(
            name,
            run(directory, labels, binary, modules, args.amd_args, args.concurrency),
            args.show,
        )


if __name__ == "__main__":
    main()
