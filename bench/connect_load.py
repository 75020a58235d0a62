"""The bridged-call load benchmark: the load kit's caller put through to a SIPp callee.

    .venv/bin/python -m bench.connect_load [--steps 100,200] [--kit ../shared/bench] [--no-ivr]

The IVR-kit variant of issue 15: the kit's own caller (``scenarios/ivr_uac.xml``,
unchanged but for the pcap's path: INVITE, ACK, replay ``caller_ivr_1234.pcap``, wait
for the server's BYE) calls one ``callhook serve``, whose application
(``bench/ivr_app.py``, ``/connect/PORT/``) answers with ``connect`` to
``sip:callee@127.0.0.1:PORT``. The callee is one SIPp UAS process for all the calls
(``-p 5090 -mp 7000``): it answers (180, 200 with PCMU + telephone-event), replays the
same pcap towards callhook, and hangs up (BYE) 14.3 s after the ACK, the length of the
kit's IVR call (ACK to BYE). callhook's far leg ends, ``next_page`` (``after``) hangs
the caller up: the caller's call is the IVR call's length too. Each call is two SIP
dialogs and two media sessions in serve, joined in the media tick.

For each step N (N calls at once, 5 x N in all, the kit's ramp: ``ivr_load.sipp_common``)
it prints, for the bridged calls: calls completed and failed (the caller's SIPp and the
callee's), connects that the application heard of as connected and their bridged
seconds, serve's CPU per *bridged call-second* (its CPU over the run / the sum of
``seconds_connected_duration``), % of one core while loaded, peak RSS, the gaps
between consecutive RTP packets serve sends on each leg (p50/p99/max; tcpdump on
loopback, one capture per leg told apart by destination port: the caller leg is RTP
to the caller's media port 6000, the callee leg RTP to the callee's 7000; ideal 20 ms),
late media ticks, and the audio's continuity across the bridge: on each leg, the
4.8 s of speech the other side's pcap holds is looked for in what serve sent (the
first 10 payload bytes of each packet, which the 64-byte capture keeps), frame by
frame: legs whose speech arrived whole, frames of it missing (dropped), quiet frames
of it missing (trimmed by the bridge's feed to shrink a backlog: unheard) and silent
frames inserted in it (the feed ran dry: an underrun). Then the kit's IVR call
(``ivr_load.run_step``) for the same N in the same run, for comparison.

Needs ``sipp`` and ``tcpdump`` and root, like :mod:`bench.ivr_load`.
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
from collections import defaultdict
from pathlib import Path

from bench import ivr_load
from bench.capture import quantiles, rtp_gaps
from bench.ivr_load import (
    KIT,
    ROOT,
    RTP_FIRST,
    RTP_LAST,
    SIP_PORT,
    Sampler,
    capture,
    check_kit,
    free_port,
    get_json,
    sipp_common,
    start_app,
)
from callhook.media.bridge import QUIET_CODES
from tests.e2e import sipp as scenarios

CALLER_MEDIA = 6000  # the kit's -mp
CALLEE_SIP, CALLEE_MEDIA = 5090, 7000
#: ACK to the callee's BYE: the kit's IVR call (ACK to BYE, its README).
BRIDGE_MS = 14300
PCAP = "pcap/caller_ivr_1234.pcap"
SILENCE = b"\xff" * 10  # PCMU silence, as much of it as the capture keeps
QUIET_ULAW = QUIET_CODES["ulaw"]


def load_config(workdir: Path, n: int) -> Path:
    """serve's config: the load kit's (``ivr_load.load_config``: the per-source rate raised
    so SIPp, one source sending hundreds of requests a second, is not banned), far legs
    to this host allowed, and more of them at once than the step has calls."""
    path = workdir / f"connect-{n}.toml"
    base = ivr_load.load_config(workdir).read_text()
    path.write_text(
        base + f'\n[outbound]\nallow = ["sip:*@127.0.0.1:*"]\nmax_calls_per_app = {4 * n + 10}\n'
    )
    return path


def callee_scenario(kit: Path) -> str:
    """The callee: answer, replay the kit's caller pcap, hang up BRIDGE_MS after the ACK."""
    return scenarios.scenario(
        scenarios.UAS_ANSWER.format(receive=scenarios.UAS_RECEIVE_REMEMBERING),
        scenarios.PLAY.format(pcap=(kit / PCAP).resolve()),
        scenarios.PAUSE.format(ms=BRIDGE_MS),
        scenarios.BYE_FROM_UAS,
    )


def caller_scenario(kit: Path) -> str:
    """The kit's caller, its pcap named by its full path (SIPp runs in the work dir)."""
    text = (kit / "scenarios" / "ivr_uac.xml").read_text()
    assert f"../{PCAP}" in text
    return text.replace(f"../{PCAP}", str((kit / PCAP).resolve()))


# --- the audio across the bridge --------------------------------------------------------


def speech_frames(kit: Path) -> list[bytes]:
    """The first 10 payload bytes of each audio packet of the kit's pcap, from its first
    packet of speech to its last: what the listening side should get, in order."""
    prefixes = [payload[:10] for payload in payloads(kit / PCAP, payload_type=0)[0]]
    spoken = [i for i, p in enumerate(prefixes) if p != SILENCE]
    return prefixes[spoken[0] : spoken[-1] + 1]


def payloads(pcap: Path, payload_type: int | None = None) -> dict[int, list[bytes]]:
    """RTP payloads (as much as captured) of each flow of a capture, by source port
    (0 for a file with one flow, such as the kit's), in capture order."""
    data = pcap.read_bytes()
    flows: dict[int, list[bytes]] = defaultdict(list)
    if len(data) < 24:
        return flows
    linktype = struct.unpack_from("<I", data, 20)[0]
    offset = {1: 14, 113: 16, 0: 4, 276: 20}.get(linktype, 14)
    pos = 24
    while pos + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if len(frame) < offset + 20:
            continue
        ihl = (frame[offset] & 0x0F) * 4
        udp = offset + ihl
        rtp = frame[udp + 8 :]
        if len(rtp) < 12 or (payload_type is not None and rtp[1] & 0x7F != payload_type):
            continue
        sport = struct.unpack_from("!H", frame, udp)[0]
        flows[sport if payload_type is None else 0].append(rtp[12:])
    return flows


def quiet(prefix: bytes) -> bool:
    """Whether a frame is quiet as far as its captured bytes say (a bridge's feed trims
    quiet frames unheard to shrink a backlog: ``callhook.media.bridge.QUIET``)."""
    return not prefix.translate(None, QUIET_ULAW)


def continuity(sent: list[bytes], speech: list[bytes]) -> tuple[int, int, int] | None:
    """(frames of ``speech`` missing, quiet ones of it missing, silent frames inserted in
    it) in what one leg was sent, or None when its speech is not there at all."""
    head = {f: i for i, f in reversed(list(enumerate(speech[:25]))) if f != SILENCE}
    at = next((i for i, frame in enumerate(sent) if frame in head), None)
    if at is None:
        return None
    j = head[sent[at]]  # its first frames may be the ones missing
    lost = speech[:j]
    inserted = 0
    for frame in sent[at:]:
        if j >= len(speech):
            break
        if frame == speech[j]:
            j += 1
        elif frame == SILENCE:
            inserted += 1
        else:
            ahead = speech[j + 1 : j + 25]
            skip = ahead.index(frame) + 1 if frame in ahead else 1  # skipped, or replaced
            lost += speech[j : j + skip]
            j += skip + (frame in ahead)
    lost += speech[j:]  # the leg ended before its speech did
    quiet_lost = sum(1 for f in lost if quiet(f))
    return len(lost) - quiet_lost, quiet_lost, inserted


def leg_audio(pcap: Path, speech: list[bytes]) -> dict[str, int]:
    """The continuity of the speech on each flow of one leg's capture, summed: legs whose
    speech came whole (no frame of it but quiet ones missing, no silence inserted)."""
    whole = cut = missing = trimmed = inserted = 0
    for flow in payloads(pcap).values():
        found = continuity([p[:10] for p in flow], speech)
        if found is None:
            continue
        intact = found[0] == 0 and found[2] == 0
        whole += intact
        cut += not intact
        missing += found[0]
        trimmed += found[1]
        inserted += found[2]
    return {
        "whole": whole,
        "cut": cut,
        "missing": missing,
        "trimmed": trimmed,
        "inserted": inserted,
    }


# --- one step ----------------------------------------------------------------------------


def sipp_count(screen: str, label: str) -> int:
    found = re.findall(rf"{label}\s*\|\s*\d+\s*\|\s*(\d+)", screen)
    return int(found[-1]) if found else -1


def run_connect(n: int, kit: Path, app_base: str, workdir: Path) -> dict[str, object]:
    """One step of bridged calls: N at once, 5 x N in all; the figures of one line."""
    label = f"connect-{n}"
    data = workdir / f"data-{label}"
    data.mkdir(parents=True, exist_ok=True)
    (workdir / "callee.xml").write_text(callee_scenario(kit))
    (workdir / "caller.xml").write_text(caller_scenario(kit))
    base = f"{app_base}/connect/{CALLEE_SIP}"
    http = free_port()
    log_path = workdir / f"callhook-{label}.log"
    log = log_path.open("w")
    server = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "callhook"),
            "serve",
            "--workers",
            "1",
            "--config",
            str(load_config(workdir, n)),
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
    callee = subprocess.Popen(
        [
            "sipp",
            "-sf",
            "callee.xml",
            "-i",
            "127.0.0.1",
            "-p",
            str(CALLEE_SIP),
            "-mi",
            "127.0.0.1",
            "-mp",
            str(CALLEE_MEDIA),
            "-m",
            str(5 * n),
            "-nostdin",
            "-trace_err",
        ],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(1.5)
    urllib.request.urlopen(urllib.request.Request(f"{app_base}/stats/reset", method="POST"))
    pcaps = {leg: workdir / f"rtp-{label}-{leg}.pcap" for leg in ("caller", "callee")}
    dumps = [capture(pcaps["caller"], CALLER_MEDIA), capture(pcaps["callee"], CALLEE_MEDIA)]
    time.sleep(1.0)
    sampler = Sampler(server.pid)
    sampler.start()
    started = time.monotonic()
    caller = subprocess.run(
        ["sipp", "-sf", "caller.xml", *sipp_common(n), "-mp", str(CALLER_MEDIA)],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - started
    time.sleep(2.0)  # the last pages and packets
    sampler.stop.set()
    sampler.join()
    for dump in dumps:
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=10)
    try:
        callee_screen, _ = callee.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        callee.send_signal(signal.SIGTERM)
        callee_screen, _ = callee.communicate(timeout=10)
    secret = (data / "secret").read_text().strip()
    stats = get_json(f"http://127.0.0.1:{http}/api/stats", secret)
    app = get_json(f"{app_base}/stats")
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)
    log.close()

    caller_screen = caller.stdout + caller.stderr
    (workdir / f"sipp-{label}-caller.out").write_text(caller_screen)
    (workdir / f"sipp-{label}-callee.out").write_text(callee_screen)
    server_log = log_path.read_text(errors="replace")
    problems = [
        line
        for line in server_log.splitlines()
        if re.search(r"Traceback|ERROR|Exception|WARNING", line)
    ]

    cpu_total, pct, rss_mb = sampler.figures()
    connects = app.get("connects", [])
    connected = [c for c in connects if c[0]]
    bridged_seconds = sum(float(c[2] or 0) for c in connected)
    speech = speech_frames(kit)
    legs: dict[str, object] = {}
    for leg, pcap in pcaps.items():
        legs[f"{leg}_gaps"] = quantiles(rtp_gaps(pcap))
        legs[f"{leg}_audio"] = leg_audio(pcap, speech)
        pcap.unlink(missing_ok=True)
    ok = sipp_count(caller_screen, "Successful call")
    return {
        "n": n,
        "ok": ok,
        "failed": sipp_count(caller_screen, "Failed call"),
        "callee_ok": sipp_count(callee_screen, "Successful call"),
        "callee_failed": sipp_count(callee_screen, "Failed call"),
        "connected": len(connected),
        "connects": len(connects),
        "not_connected": sorted({str(c[1]) for c in connects if not c[0]}),
        "bridged_seconds": bridged_seconds,
        "bridge_lengths": quantiles([float(c[2]) for c in connected if c[2] is not None]),
        "cpu_ms_per_bridged_s": (
            cpu_total * 1000 / bridged_seconds if bridged_seconds else float("nan")
        ),
        "cpu_pct": pct,
        "rss_mb": rss_mb,
        "late_ticks": stats.get("media_late_ticks"),
        "tick": stats.get("media_tick", {}),
        "gc": stats.get("gc_pauses", {}),
        "page": stats.get("page_latency", {}),
        "final": app["final"],
        "errors": app.get("errors", 0),
        "problems": problems,
        "elapsed": elapsed,
        **legs,
    }


# --- the table ---------------------------------------------------------------------------


def gaps(values: object) -> str:
    assert isinstance(values, tuple)
    return f"{values[0]:4.1f} / {values[1]:4.1f} / {values[2]:4.0f}"


def audio(values: object) -> str:
    assert isinstance(values, dict)
    legs = values["whole"] + values["cut"]
    return (
        f"{values['whole']:4}/{legs:<4} {values['missing']:3} {values['trimmed']:4} "
        f"{values['inserted']:3}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="100,200")
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--no-ivr", action="store_true", help="the bridged calls only")
    args = parser.parse_args()
    check_kit(args.kit)
    workdir = Path(tempfile.mkdtemp(prefix="callhook-bench-connect-"))
    app, app_base = start_app()
    print(f"callhook bridged-call load benchmark; kit {args.kit}; work dir {workdir}")
    print(
        "   N | call   |   ok | fail | callee ok/fail | connected (bridge p50 s) "
        "| CPU ms/call-s | % core | RSS MB | RTP gap p50/p99/max ms: caller leg "
        "| callee leg | speech whole/legs, frames missing, quiet trimmed, silence inserted: "
        "caller leg | callee leg "
        "| late ticks"
    )
    try:
        for n in (int(x) for x in args.steps.split(",")):
            r = run_connect(n, args.kit, app_base, workdir)
            lengths = r["bridge_lengths"]
            assert isinstance(lengths, tuple)
            print(
                f"{n:4d} | bridge | {r['ok']:4} | {r['failed']:4} "
                f"| {r['callee_ok']:5} / {r['callee_failed']:<5} "
                f"| {r['connected']:4}/{r['connects']:<4} ({lengths[0]:4.1f})     "
                f"| {r['cpu_ms_per_bridged_s']:13.2f} | {r['cpu_pct']:6.1f} "
                f"| {r['rss_mb']:6.0f} | {gaps(r['caller_gaps'])} | {gaps(r['callee_gaps'])} "
                f"| {audio(r['caller_audio'])} | {audio(r['callee_audio'])} "
                f"| {r['late_ticks']}",
                flush=True,
            )
            tick = r["tick"]
            assert isinstance(tick, dict)
            if tick:
                print(
                    f"       tick lateness (last minute) p50/p99/max: {tick['late_p50_ms']:.1f} / "
                    f"{tick['late_p99_ms']:.1f} / {tick['late_max_ms']:.1f} ms; tick took "
                    f"{tick['took_p50_ms']:.1f} / {tick['took_p99_ms']:.1f} / "
                    f"{tick['took_max_ms']:.1f} ms; gc pauses {r['gc']}",
                    flush=True,
                )
            print(
                f"       bridged {r['bridged_seconds']:.0f} call-s in {r['elapsed']:.0f} s; "
                f"final causes {r['final']}; not connected {r['not_connected']}; "
                f"error pages {r['errors']}",
                flush=True,
            )
            problems = r["problems"]
            assert isinstance(problems, list)
            if problems:
                print(f"       serve logged {len(problems)} warnings/errors, first:", flush=True)
                for line in problems[:5]:
                    print(f"         {line}", flush=True)
            if args.no_ivr:
                continue
            i = ivr_load.run_step(n, args.kit, app_base, workdir)
            print(
                f"{n:4d} | IVR    | {i['ok']:4} | {i['failed']:4} |                "
                f"| digits {i['digits_right']}/{i['digits_calls']}"
                f"{'':>{max(0, 14 - len(str(i['digits_right'])) - len(str(i['digits_calls'])))}} "
                f"| {i['cpu_ms_per_call_s']:13.2f} | {i['cpu_pct']:6.1f} "
                f"| {i['rss_mb']:6.0f} | {i['gap_p50']:4.1f} / {i['gap_p99']:4.1f} / "
                f"{i['gap_max']:4.0f} |                    |                     "
                f"|                     | {i['late_ticks']}",
                flush=True,
            )
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
