"""Where a loaded ``serve``'s event loop thread spends its CPU, function by function.

    .venv/bin/python -m bench.ivr_load --steps 200 --workers 1 --clocks /tmp/clocks
    .venv/bin/python -m bench.clocks show /tmp/clocks/clocks-200-1.json

``bench.ivr_load --clocks DIR`` runs each one-worker step's ``serve`` under this
module (``python -m bench.clocks run OUT serve ...``), which wraps the functions of
:data:`FUNCTIONS` and adds up, for each, the event loop thread's own CPU clock
(``time.thread_time``) while it runs: a coroutine's steps one by one, so the time it
waits is not counted (a coroutine counts once a run, when it ends), and a function's
callees with it (the figures are inclusive: nested rows overlap). Samples (py-spy) say
where the interpreter was, and cProfile's cost per call distorts small functions; these
are the thread's CPU, a few per cent more for the wrappers' own. The media tick's steps
are among them (``MediaEngine._work``'s: its socket writes, a C method of an object, are
what its total leaves beside the others).

It also counts, on the same clock: the collector's passes inside and outside the media
tick, and a probe: every fifth tick, the same SIP INVITE parsed four times in a row just
after the tick. The first parse is the code as the control plane meets it (caches
cold); the next ones, warm, are what an isolated benchmark measures. ``show`` prints it
all per call (the step's calls: the INVITEs the service took).
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib
import inspect
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any

#: ``module:Qualified.name`` of each function whose CPU is counted. Module-level functions
#: are replaced in the module that calls them (``callhook.calls.pageexchange:parse_response``).
FUNCTIONS = (
    "callhook.edge.mediaengine:MediaEngine._tick",
    "callhook.edge.mediaengine:MediaEngine._work",
    "callhook.edge.mediaengine:MediaEngine._receive",
    "callhook.media.inlet:take_all",
    "callhook.edge.detection:Detection.run",
    "callhook.media.gate:gather",
    "callhook.media.frames:measure",
    "callhook.edge.detection:Detection._feed",
    "callhook.media.gate:feed_all",
    "callhook.media.silero:SileroStream._run",
    "callhook.media.outlet:tick_all",
    "callhook.media.outlet:cover_all",
    "callhook.edge.mediaengine:MediaEngine._send",
    "callhook.media.outlet:due_all",
    "callhook.edge.mediaengine:MediaEngine._report",
    "callhook.telephony.service:_SipProtocol.datagram_received",
    "callhook.telephony.service:SipService._flush",
    "callhook.telephony.service:SipService._on_timer",
    "callhook.telephony.inbound:Inbound.incoming",
    "callhook.telephony.lifecycle:Lifecycle.run",
    "callhook.telephony.lifecycle:Lifecycle.answer",
    "callhook.telephony.lifecycle:Lifecycle.hang_up",
    "callhook.telephony.inbound:media_session",
    "callhook.sip.offeranswer:answer",
    "callhook.sip.sdp:parse",
    "callhook.sip.guard:Guard.admit",
    "callhook.sip.core:Core.receive",
    "callhook.sip.core:Core.handle_timer",
    "callhook.edge.mediaengine:MediaEngine.allocate",
    "callhook.edge.mediaengine:MediaEngine.open",
    "callhook.edge.mediaengine:MediaEngine.close",
    "callhook.media.session:MediaSession.__init__",
    "callhook.telephony.leg:SipLeg.send",
    "callhook.telephony.leg:SipLeg.next_event",
    "callhook.telephony.leg:SipLeg._start_prompt",
    "callhook.telephony.leg:SipLeg._start_recording",
    "callhook.telephony.leg:SipLeg.answer",
    "callhook.telephony.leg:SipLeg.hang_up",
    "callhook.calls.services:Services.runner",
    "callhook.calls.runner:CallRunner.run",
    "callhook.calls.runner:CallRunner._page",
    "callhook.calls.runner:CallRunner._final_page",
    "callhook.calls.runner:CallRunner._run_machine",
    "callhook.calls.runner:CallRunner._send",
    "callhook.calls.runner:CallRunner._observe",
    "callhook.calls.runner:CallRunner._note_timers",
    "callhook.calls.runner:CallRunner._answer",
    "callhook.calls.pageexchange:parse_response",
    "callhook.calls.runner:machine_for",
    "callhook.calls.calllog:CallLog.write",
    "callhook.calls.calllog:CallLog.__init__",
    "callhook.store.files:MediaStore.path",
    "callhook.store.wavfile:WavWriter.__init__",
    "callhook.store.wavfile:WavWriter.close",
    "callhook.store.journal:RecordingJournal._submit",
    "callhook.telephony.prompts:PromptAudio.ready",
    "callhook.edge.pages:HttpPages.fetch_status",
    "callhook.calls.reporting:RecordingReports.record_started",
    "aiohttp.client:ClientSession._request",
    "aiohttp.client_proto:ResponseHandler.data_received",
)

#: A request like the load kit's, for the probe (no body: the parse is what is timed).
PROBE = (
    b"INVITE sip:ivr@127.0.0.1:5070 SIP/2.0\r\n"
    b"Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-1-1-0\r\n"
    b"From: sipp <sip:sipp@127.0.0.1:5061>;tag=1SIPpTag001\r\n"
    b"To: ivr <sip:ivr@127.0.0.1:5070>\r\nCall-ID: 1-1@127.0.0.1\r\nCSeq: 1 INVITE\r\n"
    b"Contact: sip:sipp@127.0.0.1:5061\r\nMax-Forwards: 70\r\n"
    b"Content-Type: application/sdp\r\nContent-Length: 0\r\n\r\n"
)


class Clocks:
    """CPU seconds and calls of each counted thing, on one thread's clock."""

    def __init__(self, clock: Callable[[], float] = time.thread_time) -> None:
        self.thread = threading.get_ident()
        self.clock = clock
        self.counts: dict[str, list[float]] = {}  # name: [calls, seconds]
        #: The thread's CPU when the load began (the first media tick): start-up is not
        #: the calls' (set by the probe's tick; 0 until then).
        self.base = 0.0
        self._dumping = threading.Lock()

    def add(self, name: str, seconds: float, times: int = 1) -> None:
        """``seconds`` more CPU for ``name``, and ``times`` more runs of it (0: a step of
        a run that is not over)."""
        entry = self.counts.get(name)
        if entry is None:
            self.counts[name] = [times, seconds]
        else:
            entry[0] += times
            entry[1] += seconds

    def timed(self, function: Callable[..., Any], name: str) -> Callable[..., Any]:
        """``function`` (plain or a coroutine function) with its CPU counted as ``name``
        when it runs on the clock's thread."""
        clock, add, thread = self.clock, self.add, self.thread

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def coroutine(*args: Any, **kwargs: Any) -> Any:
                if threading.get_ident() != thread:
                    return await function(*args, **kwargs)
                return await _Steps(function(*args, **kwargs), name, self)

            return coroutine

        @functools.wraps(function)
        def plain(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != thread:
                return function(*args, **kwargs)
            start = clock()
            try:
                return function(*args, **kwargs)
            finally:
                add(name, clock() - start)

        return plain

    def thread_cpu(self) -> float:
        """The clock's thread's CPU seconds since :attr:`base` (any thread may ask)."""
        return time.clock_gettime(time.pthread_getcpuclockid(self.thread)) - self.base

    def dump(self, path: Path) -> None:
        """Write the counts (and the thread's CPU since the load began) to ``path``."""
        with self._dumping:  # (the periodic thread and the exit may both write)
            snapshot = {name: list(entry) for name, entry in list(self.counts.items())}
            snapshot["loop thread, since the first tick"] = [0, self.thread_cpu()]
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(snapshot))
            os.replace(temporary, path)


class _Steps:
    """Awaits a coroutine step by step, counting each step's CPU (not its waits)."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any], name: str, clocks: Clocks) -> None:
        self.coroutine, self.name, self.clocks = coroutine, name, clocks

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self.coroutine.__await__()
        clock, add, name = self.clocks.clock, self.clocks.add, self.name
        value: Any = None
        error: BaseException | None = None
        while True:
            start = clock()
            try:
                yielded = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as done:
                add(name, clock() - start)
                return done.value
            except BaseException:
                add(name, clock() - start)
                raise
            add(name, clock() - start, 0)  # a step: the run is counted when it ends
            try:
                value, error = (yield yielded), None
            except BaseException as exc:  # (thrown in: a cancellation) passed on
                value, error = None, exc


def resolve(spec: str) -> tuple[Any, str, Any]:
    """The owner (module or class), the attribute's name and the function of ``spec``
    (``module:Qualified.name``)."""
    module_name, _, qualified = spec.partition(":")
    owner: Any = importlib.import_module(module_name)
    *path, attribute = qualified.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, attribute, inspect.getattr_static(owner, attribute)


def install(clocks: Clocks, functions: tuple[str, ...] = FUNCTIONS) -> None:
    """Wrap ``functions``, the collector's passes and the probe."""
    for spec in functions:
        owner, attribute, function = resolve(spec)
        setattr(owner, attribute, clocks.timed(function, spec.partition(":")[2]))
    _count_collections_and_probe(clocks)


def _count_collections_and_probe(clocks: Clocks) -> None:
    from callhook.edge import mediaengine as media
    from callhook.sip.message import parse

    ticking = False
    started = 0.0

    def collections(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if threading.get_ident() != clocks.thread:
            return
        if phase == "start":
            started = time.thread_time()
        else:
            where = "in the tick" if ticking else f"outside it (gen {info['generation']})"
            clocks.add(f"collector: {where}", time.thread_time() - started)

    gc.callbacks.append(collections)
    tick = media.MediaEngine._tick
    ticks = 0

    def probed(engine: media.MediaEngine) -> None:
        nonlocal ticking, ticks
        if not ticks:  # the load begins: the thread's CPU is counted from here
            clocks.base = time.thread_time()
        ticking = True
        try:
            tick(engine)
        finally:
            ticking = False
        ticks += 1
        if ticks % 5 == 0 and engine.streams:
            for i in range(4):
                start = time.thread_time()
                parse(PROBE)
                spent = time.thread_time() - start
                clocks.add(f"probe: an INVITE parsed after a tick, run {i + 1}", spent)

    media.MediaEngine._tick = probed  # type: ignore[method-assign,assignment]


def run(out: Path, argv: list[str]) -> None:
    """``callhook`` with ``argv`` (``serve ...``), its loop thread's clocks kept in ``out``
    (every 5 s, and at exit)."""
    clocks = Clocks()
    install(clocks)

    def every_five_seconds() -> None:
        while True:
            time.sleep(5.0)
            clocks.dump(out)

    threading.Thread(target=every_five_seconds, daemon=True).start()
    atexit.register(clocks.dump, out)
    from callhook.cli import main

    sys.argv = ["callhook", *argv]
    main()


def table(path: Path, rows: int = 40) -> str:
    """The clocks of ``path`` per call: µs each time, ms per call, largest first."""
    counts = json.loads(path.read_text())
    # One a call the service took (its name before the inbound path left the service: a
    # file kept from an older run).
    taken = counts.get("Inbound.incoming") or counts.get("SipService._incoming", [0])
    calls = taken[0] or 1
    lines = [f"{'':58} {'times':>8} {'us each':>9} {'ms/call':>8}"]
    ordered = sorted(counts.items(), key=lambda item: -item[1][1])
    for name, (times, seconds) in ordered[:rows]:
        each = seconds / times * 1e6 if times else 0.0
        lines.append(f"{name:58} {int(times):8d} {each:9.1f} {seconds / calls * 1e3:8.3f}")
    lines.append(f"(calls: {calls})")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "show":
        print(table(Path(sys.argv[2])))
    elif len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(Path(sys.argv[2]), sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
