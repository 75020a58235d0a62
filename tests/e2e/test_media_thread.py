"""The media thread keeps prompts and digits whole while serve's event loop is stalled.

SIPp calls ``callhook serve`` (one process, and workers behind Kamailio); the call's audio
comes to a socket of the test (``rtpsink``). While the prompt plays, the test stalls the
event loop of every serving process from outside, the way a busy machine does: the loop's
thread is pinned to one core while a busy ``SCHED_FIFO`` process holds that core, and the
media thread is pinned to the other. The loop then runs nothing for the stall (no tick,
no SIP, no page), and the media thread goes on alone: the caller must hear every frame of
the prompt, in order, with no silence between (the media thread plays the frames the
loop gave it ahead: the prompt's cover), also where a play list's second file begins
during a stall. A prompt the loop starts late begins with silence up to a slot the
thread has still to run (``Player.hold_start``); with one call, the loop catches up
before the prompt's start can run late, so that case is tested on the plane's virtual clock
(``tests/unit/edge/test_plane_cover.py``), not here.

The loop is stalled for 0.3 s at a time, within the cover (docs/architecture.md, "The 20 ms
media tick"). The counters in ``/api/stats`` show that the stalls did make the loop's frames
late (``stale_frames``) and that the thread sent the prompt's own in their place
(``covered``): without the cover, those slots would be silence and the prompt cut. The
prompt is followed by a hang-up: its last frames, queued ahead, go before the call's
socket is let go. Digits sent as RFC 4733 events go on the same way: the thread sends
each event's next packets as callhook would have, never audio in an event's middle, and
a digit due while the loop is behind waits for it, as a prompt's start does.

Recordings decide on the call's audio, not on the loop's clock: sixty callers each pause
between two words while the loop is stalled, and no recording ends in the pause, though
by the loop's clock its silence was over before the loop was back.
Solo: it takes a core from every other test for a few seconds.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from bench.report import thread_counters
from callhook.devtools.harness import AppServer
from callhook.media import g711, wav
from callhook.media.dtmf import Rfc4733Receiver
from tests.e2e import sipp
from tests.e2e.harness import (
    WORKERS,
    free_even_udp_port,
    free_udp_port,
    served,
    wait_for_request,
)
from tests.e2e.rtpsink import RtpSink
from tests.e2e.rtpstream import Stream
from tests.e2e.test_recordings import LATE, PREROLL, assert_holds_what_was_sent, clip

pytestmark = [
    pytest.mark.solo,
    pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed"),
    pytest.mark.skipif(
        len(os.sched_getaffinity(0)) < 2, reason="stalling one core needs another for the rest"
    ),
    pytest.mark.skipif(
        os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_RTPRIO)[0] < 1,
        reason="stalling the loop takes a SCHED_FIFO process (root or RLIMIT_RTPRIO)",
    ),
]

FRAME = 160  # samples of one 20 ms frame at 8 kHz
SECONDS = 1.6
JOIN = 30  # the prompt's frames in its first file
LOOP_CORE, MEDIA_CORE = sorted(os.sched_getaffinity(0))[:2]


def prompt_frames() -> list[bytes]:
    """The prompt's µ-law frames: noise, so that every frame differs from every other."""
    samples = np.random.default_rng(40).integers(-8000, 8000, int(8000 * SECONDS))
    encoded = g711.encode("ulaw", samples.astype(np.int16))
    return [encoded[i : i + FRAME] for i in range(0, len(encoded), FRAME)]


def write_prompt(data: Path, name: str, frames: list[bytes]) -> str:
    path = data / "media" / "default" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav.g711_file("ulaw", b"".join(frames)))
    return name


def serving_processes(root: int) -> list[int]:
    """``root`` and its descendants that run a media thread (serve's, or its workers')."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])

    def descends(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    return [pid for pid in parents if descends(pid) and media_thread(pid) is not None]


def media_thread(pid: int) -> int | None:
    """The thread id of ``pid``'s media thread (named ``callhook-media``), if any."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            if Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() == "callhook-media":
                return int(tid)
    except OSError:
        pass
    return None


#: A process that holds one core (its first argument) for the seconds its second says,
#: from the moment a line comes on its standard input (it says "ready" when it waits for
#: it, so that the stall begins when the test wants, not when a Python has started):
#: under SCHED_FIFO, nothing of the normal class runs on that core meanwhile.
BUSY = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "end = time.monotonic() + float(sys.argv[2])\n"
    "while time.monotonic() < end: pass\n"
)


async def stall(
    pids: list[int], seconds: float, cue: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Stall the event loop (each process's main thread) of ``pids`` for about
    ``seconds``, as soon as ``cue`` (if any) returns: the loop pinned to a core a busy
    SCHED_FIFO process holds, the media thread to another. (The kernel's real-time
    throttling leaves the normal class 5% of each second: a stall of well under a second
    is whole.)"""
    everywhere = os.sched_getaffinity(0)
    busy = subprocess.Popen(
        [sys.executable, "-c", BUSY, str(LOOP_CORE), str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert busy.stdin is not None and busy.stdout is not None
    medias: list[int] = []
    try:
        assert await asyncio.to_thread(busy.stdout.readline) == "ready\n"
        if cue is not None:
            await cue()
        medias = [tid for tid in (media_thread(pid) for pid in pids) if tid is not None]
        for tid in medias:
            os.sched_setaffinity(tid, {MEDIA_CORE})
        for tid in pids:
            os.sched_setaffinity(tid, {LOOP_CORE})
        busy.stdin.write("go\n")
        busy.stdin.flush()
        await asyncio.to_thread(busy.wait)
    finally:
        busy.kill()
        busy.wait()
        for tid in pids + medias:
            os.sched_setaffinity(tid, everywhere)


def same(frame: bytes) -> bytes:
    """µ-law's two zeros (0x7F and 0xFF) as one: the prompt is decoded and encoded again
    on its way, which gives 0xFF for both."""
    return frame.replace(b"\x7f", b"\xff")


def heard_whole(sink: RtpSink, frames: list[bytes], times: int = 2) -> tuple[bool, list[int]]:
    """Whether the prompt's frames came ``times`` times over, in order, one packet each,
    nothing between (and what came: each packet's frame index, -1 for anything else),
    by sequence number."""
    index = {same(f): i for i, f in enumerate(frames)}
    audio = [p for p in sink.packets if p.payload_type == 0]
    first = audio[0].sequence if audio else 0
    audio.sort(key=lambda p: (p.sequence - first) & 0xFFFF)
    marks = [index.get(same(p.payload), -1) for p in audio]
    if 0 not in marks:
        return False, marks
    start = marks.index(0)
    whole = list(range(len(frames))) * times
    return marks[start : start + len(whole)] == whole, marks


def runs(marks: list[int]) -> str:
    """``marks`` told briefly: each run of consecutive frames ``a..b``, of others ``-xN``."""
    out: list[str] = []
    start = 0
    for i in range(1, len(marks) + 1):
        if i < len(marks) and (
            marks[i] == marks[i - 1] + 1 >= 1 or (marks[i] < 0 and marks[i - 1] < 0)
        ):
            continue
        out.append(f"-x{i - start}" if marks[start] < 0 else f"{marks[start]}..{marks[i - 1]}")
        start = i
    return ", ".join(out)


async def stalled_call(
    tmp_path: Path,
    app: AppServer,
    workers: int,
    stalls: tuple[float, ...],
    offer: str | None = None,
    cue: Callable[[RtpSink], Awaitable[None]] | None = None,
) -> tuple[RtpSink, dict[str, float]]:
    """SIPp calls serve running ``app`` (hung up by serve); its loop is stalled for 0.3 s
    at each of ``stalls`` (seconds after the first page was asked for; then, with a
    ``cue``, as soon as it returns). What the caller heard, and the media threads'
    counters."""
    async with RtpSink() as sink, served(tmp_path, app, workers) as server:
        parts = [
            (offer or sipp.invite("ivr", "PCMU", True)).replace(
                "m=audio [media_port]", f"m=audio {sink.port}"
            ),
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
        ]
        running = asyncio.create_task(sipp.call(server.sip, tmp_path, *parts))
        assert await wait_for_request(app, "/start", timeout=30.0), server.output
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.sleep(min(stalls))
        assert server.proc is not None
        pids = serving_processes(server.proc.pid)  # (the thread starts with a first call)
        assert pids, server.output
        for at in stalls:
            await asyncio.sleep(max(0.0, began + at - loop.time()))
            await stall(pids, 0.3, None if cue is None else lambda: cue(sink))
        run = await running
        _, stats = await server.api("GET", "/api/stats")
    assert run.returncode == 0, run.output + run.errors + server.output
    thread = thread_counters(stats)
    # The stalls did make the loop's frames late, and the thread sent the call's own.
    assert thread["stale_frames"] > 0 and thread["covered"] > 0, str(thread)
    return sink, thread


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_prompt_is_heard_whole_while_the_event_loop_is_stalled(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    frames = prompt_frames()
    # A play list of two files, played twice: the second time both are in the audio
    # cache, so they are two segments joined as the second begins (the first time, the
    # files are read off the loop and their audio put end to end as it comes).
    names = [
        write_prompt(tmp_path / "data", "prompts/first.wav", frames[:JOIN]),
        write_prompt(tmp_path / "data", "prompts/second.wav", frames[JOIN:]),
    ]
    play = {
        "play": {
            "play_list": [{"file_to_play": name} for name in names],
            "barge_in_on_digit": False,
        }
    }
    app.page("/start", [play, play, {"hang_up": {}}])
    app.page("/final", None)
    # Stalls in the first play, then one from 0.2 s before the second play's join (at
    # 1.6 + 0.6 s, give or take the call's answer) until 0.1 s after it: frames beyond
    # the first file's end are needed before the loop is back.
    sink, _ = await stalled_call(tmp_path, app, workers, (0.4, 1.0, 2.05))
    whole, marks = heard_whole(sink, frames)
    assert whole, runs(marks)


#: The offer's payload types: the static ones, and PCMA and telephone-event on types of
#: the caller's choosing (kept in the answer, sip/offeranswer.py): the media thread tells
#: audio from an event by its size, and fills in with the call's own law's silence.
OFFERS = {
    "PCMU 0, events 101": (sipp.invite("ivr", "PCMU", True), 0, 101, 0xFF),
    "PCMA 97, events 90": (
        sipp.INVITE.format(
            user="ivr",
            formats="97 90",
            rtpmaps="a=rtpmap:97 PCMA/8000\na=rtpmap:90 telephone-event/8000\na=fmtp:90 0-16\n",
        ),
        97,
        90,
        0xD5,
    ),
}


@pytest.mark.parametrize("offer", list(OFFERS))
@pytest.mark.parametrize("workers", WORKERS)
async def test_digits_sent_as_events_go_on_whole_while_the_event_loop_is_stalled(
    tmp_path: Path, app: AppServer, workers: int, offer: str
) -> None:
    """Ten digits sent as RFC 4733 events (200 ms each: 7 event packets, 3 of silence),
    the loop stalled twice meanwhile: an event under way goes on as callhook sends it (its
    packets, then its end three times), with no audio in its middle, and a digit due while
    the loop is behind waits for it, then starts whole."""
    digits = "1234567890"
    app.page("/start", [{"play": {"play_list": [{"digits_to_play": digits}]}}, {"hang_up": {}}])
    app.page("/final", None)
    invite, audio, event, silence = OFFERS[offer]
    # Each stall begins as a digit's event does: the loop has sent its first frames ahead
    # (AHEAD), and the thread must go on with the rest. (A stall from a pause between
    # digits would leave the thread nothing of the call's own to send.)
    sink, _ = await stalled_call(tmp_path, app, workers, (0.5, 1.2), invite, event_begins)
    ordered = sorted(sink.packets, key=lambda p: (p.sequence - sink.packets[0].sequence) & 0xFFFF)
    assert {p.payload_type for p in ordered} == {audio, event}
    # Between the digits, silence in the call's law (Python's, or the thread's filler).
    assert {p.payload for p in ordered if p.payload_type == audio} == {bytes([silence]) * 160}
    kinds = "".join("e" if p.payload_type == event else "a" for p in ordered)
    # Each digit's event whole (7 packets), at least its 60 ms of silence after it (more
    # where the next digit waited for the loop to be back in time: hold_start).
    first, last = kinds.index("e"), kinds.rindex("e")
    assert re.fullmatch("(e{7}a{3,})*e{7}", kinds[first : last + 1]), kinds
    events = [p for p in ordered if p.payload_type == event]
    receiver = Rfc4733Receiver()
    got = [receiver.feed(p.payload, p.timestamp, p.arrived) for p in events]
    assert "".join(d for d in got if d is not None) == digits
    durations = [int.from_bytes(p.payload[2:4], "big") for p in events]
    assert durations == [160, 320, 480, 640, 800, 800, 800] * len(digits)


async def event_begins(sink: RtpSink) -> None:
    """Returns as the next RFC 4733 event's first packet (its marker: §2.4.2) comes."""
    seen = len(sink.packets)
    while True:
        await asyncio.sleep(0.002)
        came, seen = sink.packets[seen:], len(sink.packets)
        if any(p.marker and len(p.payload) == 4 for p in came):
            return


#: Calls at once in the recording test: enough that a backlog of their slots takes the
#: loop longer than one read of the thread's slots (edge/slots.py's BUDGET), so that timers
#: run in the middle of it, as on a busy server.
CALLS = 60


@pytest.mark.parametrize("workers", WORKERS)
async def test_recordings_end_on_the_callers_silence_not_on_a_stalled_loops_clock(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Each caller says a word, pauses 0.6 s and says another; each recording ends after
    0.6 s of silence (counted from the detector's end of the word, 0.3 s after it). The
    loop is stalled for 0.7 s from 0.35 s into the pause: when it is back, the silence's
    time is over by the loop's clock, and the loop works off the calls' backlog a part at
    a time, the runners' timers in between. By the calls' audio (the media clock:
    docs/architecture.md, "The actions' clock") every caller spoke again in time: each
    file holds both words and ends on the silence after the second, and its result says
    so. (On the loop's clock, the timers of calls whose backlog came late stopped them
    between the words.)"""
    first, second = clip("1_jackson_1.wav"), clip("2_jackson_2.wav")
    at = 1.0
    pause = 0.6
    again = at + len(first) / 8000 + pause
    done = again + len(second) / 8000
    stream = Stream(done + 4.0).speech(first, at).speech(second, again)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    record = {
        "milliseconds_max_silence": 600,
        "milliseconds_max_initial_silence": 5000,
        "seconds_max_duration": 20,
        "next_page": {"url": "/recorded"},
    }
    app.page("/start", [{"record": record}])
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/final", None)
    # (So many calls from one address at once would be a flood to the guard.)
    async with served(tmp_path, app, workers, "[security]\nrate = 100000\n") as server:
        text = sipp.scenario(
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.PLAY.format(pcap=pcap),
            sipp.BYE_FROM_SERVER.format(timeout_ms=30000),
        )
        # All the calls within 0.1 s: the stall falls in every caller's pause.
        rate = ("-m", str(CALLS), "-l", str(CALLS), "-r", str(CALLS), "-rp", "100")
        running = asyncio.create_task(
            sipp.run_sipp(
                text,
                server.sip,
                tmp_path,
                local_port=free_udp_port(),
                media_port=free_even_udp_port(),
                extra=rate,
            )
        )
        assert await wait_for_request(app, "/start", timeout=30.0), server.output
        loop = asyncio.get_running_loop()
        began = loop.time()  # (the callers' streams start with the answers, about now)
        await asyncio.sleep(at)
        assert server.proc is not None
        pids = serving_processes(server.proc.pid)
        assert pids, server.output
        await asyncio.sleep(max(0.0, began + at + len(first) / 8000 + 0.35 - loop.time()))
        await stall(pids, 0.7)
        run = await running
        assert run.returncode == 0, run.output + run.errors + server.output
        _, stats = await server.api("GET", "/api/stats")
    # The media thread took most of the recordings' packets itself (edge/_rx.h): the
    # quiet line before and between the words, and the words once the model confirmed
    # them; Python wrote them into the files. While Python worked off the stall's
    # backlog, behind the thread, the calls it had (the end of the first word is
    # Python's to say) went back to the thread through the packets it held for them
    # (twice a call in the runs that set this bound, in both modes).
    thread = thread_counters(stats)
    assert thread["rx_taken"] > CALLS * (done + 0.6) * 50 / 2, thread
    # The young collections ran between the ticks, counted with their time: a share of
    # the loop's CPU, each worker's own.
    for each in stats.get("workers") or [stats]:
        assert each["gc_passes"] > 0 and 0 < each["gc_seconds"] < each["cpu_loop_s"], each
    assert thread["rx_parks"] >= CALLS // 2, thread
    results = [body["action_result"]["result"] for body in app.bodies("/recorded")]
    assert len(results) == CALLS, server.output
    short = []
    for result in results:
        assert result["reason"] == "silence", result
        data = (tmp_path / "data" / "media" / "default" / result["filename"]).read_bytes()
        # The file is the caller's stream, bit for bit, from just before the first word...
        span = assert_holds_what_was_sent(data, stream.sent(), law="ulaw", sent_law="ulaw")
        assert at - PREROLL <= span.start <= at, span
        # ...to the silence after the second: 0.6 s of it and the detector's 0.3 s at most
        # (a stop may come a little late: the runner acts once the loop worked the tick).
        if not done + 0.6 - 0.02 <= span.end <= done + 0.6 + 0.3 + LATE:
            short.append(round(span.end, 2))
    assert not short, f"{len(short)} of {CALLS} ended elsewhere (s): {short}"
    # The call logs say when each word ended on the wire, whenever the runner got to it:
    # the ``voice off`` line and the ``timers`` line of the silence it starts are stamped
    # at the silence timer's start (media time), not the loop's (behind by the stall).
    logs = list((tmp_path / "data" / "media" / "default" / "logs").glob("*.log"))
    assert len(logs) == CALLS
    late = []
    for path in logs:
        previous = ""
        for line in path.read_text().splitlines():
            found = re.search(r"\+([\d.]+) timers .*(?<!initial )silence ([\d.]+)\.\.", line)
            if found is not None:
                stamp, start = found.group(1), f"{float(found.group(2)):.3f}"
                if not (stamp == start and previous.split()[1:] == [f"+{start}", "voice", "off"]):
                    late.append((previous[25:], line[25:]))
            previous = line
    assert not late, late[:4]
