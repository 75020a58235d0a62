"""``callhook test FLOW.yaml ...``: call flows against applications, for their CI.

Each flow file (:mod:`callhook.devtools.flow`) is one call to its application, run in this
process on a virtual clock (:mod:`callhook.devtools.flowcaller`) with the real call
runner, page requests over HTTP and the configured speech engines. A line per flow
says whether it passed; a failed one says which step and what happened instead, then
shows the call's timeline. The exit status is 0 when every flow passed, 1 when one
failed, 2 when a flow file could not be read. ``--junit FILE`` writes JUnit XML (one
test case per flow) for CI systems.
"""

from __future__ import annotations

import asyncio
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from callhook.calls.services import Services
from callhook.config.settings import AppConfig, Serve, Settings
from callhook.devtools.flow import Flow, FlowError, load_flow
from callhook.devtools.flowcaller import FlowResult, run_flow
from callhook.events import StartRecording
from callhook.redact import redact

if TYPE_CHECKING:  # (built by the caller: see callhook.app)
    from callhook.telephony.assembly import Assembly


@dataclass
class Outcome:
    """One flow file's outcome: its result, or why it could not be run."""

    path: Path
    result: FlowResult | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.passed

    @property
    def name(self) -> str:
        return self.result.flow.name if self.result is not None else self.path.stem


def _app(flow: Flow, services: Services) -> AppConfig:
    if flow.app == "demo":
        return services.demo_app()
    app = AppConfig(
        name="flow",
        first_page=flow.app,
        secret=flow.secret or services.secret,
        error_page=flow.error_page,
        final_page=flow.final_page,
        application_parameters=flow.application_parameters,
    )
    services.trust_app_hosts(app)  # named by the flow: the developer's own application
    return app


def _silence(services: Services, app: AppConfig) -> Callable[[StartRecording, float], float]:
    def save(command: StartRecording, seconds: float) -> float:
        return services.record_silence(app, command, seconds)

    return save


async def run_files(
    paths: Sequence[Path],
    settings: Settings,
    out: TextIO,
    serve: Serve | None = None,
    jobs: int = 1,
    *,
    assembly: Assembly,
) -> list[Outcome]:
    """Run every flow file, reporting each on ``out`` (in order): in this process, or as
    real SIP calls to ``serve``, ``jobs`` of them at once."""
    services = assembly.services(settings)
    services.start_keeper()  # (a node sharing PostgreSQL beats, or others take it for gone)
    try:
        if serve is None:
            return await _in_process(paths, services, out)
        return await _over_sip(paths, services, out, serve, jobs, assembly)
    finally:
        await services.close()


def _load(path: Path, out: TextIO) -> Flow | Outcome:
    try:
        return load_flow(path)
    except FlowError as exc:
        out.write(f"ERROR {path}: {exc}\n")
        return Outcome(path, error=str(exc))


async def _in_process(paths: Sequence[Path], services: Services, out: TextIO) -> list[Outcome]:
    await services.start_web("127.0.0.1", 0)  # the demo application's pages
    outcomes: list[Outcome] = []
    for path in paths:
        flow = _load(path, out)
        if isinstance(flow, Outcome):
            outcomes.append(flow)
            continue
        app = _app(flow, services)
        result = await run_flow(
            flow,
            app,
            services.pages,
            timer=services.prompt_timer(app),
            speech=services.speech,
            log_dir=services.store.path(app.name, "logs"),
            new_recording_name=services.store.new_recording_name,
            recordings=services.journal,
            files=services.store,
            save_recording=_silence(services, app),
        )
        outcomes.append(Outcome(path, result))
        _report(path, result, out)
    return outcomes


async def _over_sip(
    paths: Sequence[Path],
    services: Services,
    out: TextIO,
    serve: Serve,
    jobs: int,
    assembly: Assembly,
) -> list[Outcome]:
    from callhook.devtools.sipflow import run_sip_flow

    host = serve.sip[0]
    loopback = host.startswith("127.") or host in ("::1", "localhost")
    sip = assembly.sip_service(services, "127.0.0.1" if loopback else "0.0.0.0", 0)
    await sip.start()
    running = asyncio.Semaphore(max(1, jobs))

    async def one(path: Path, flow: Flow) -> FlowResult:
        async with running:
            try:
                return await run_sip_flow(flow, sip, services, serve)
            except Exception as exc:  # this flow's call only: the others go on
                why = f"the call could not be made: {type(exc).__name__}: {exc}"
                return FlowResult(flow, why, "failed", 0.0, 0.0)

    try:
        flows = [(path, _load(path, out)) for path in paths]
        tasks = {
            path: asyncio.create_task(one(path, flow))
            for path, flow in flows
            if not isinstance(flow, Outcome)
        }
        outcomes: list[Outcome] = []
        for path, flow in flows:  # reported in the order given, each as soon as it can be
            if isinstance(flow, Outcome):
                outcomes.append(flow)
                continue
            result = await tasks[path]
            outcomes.append(Outcome(path, result))
            _report(path, result, out, via=f"sip:{flow.to}@{host}:{serve.sip[1]}")
        return outcomes
    finally:
        await sip.shutdown(0)


def _report(path: Path, result: FlowResult, out: TextIO, via: str | None = None) -> None:
    steps = len(result.flow.steps)
    where = f"{path} ({result.flow.name}: {via or redact(result.flow.app)})"
    timing = f"{result.call_seconds:.1f} s of call, {result.wall_seconds:.1f} s"
    if result.passed:
        out.write(f"PASS {where}: {steps} steps, call {result.cause}; {timing}\n")
        return
    out.write(f"FAIL {where}: {result.failure}\n  the call ({result.cause}; {timing}):\n")
    for line in result.timeline:
        out.write(f"    {line}\n")


def junit(outcomes: Sequence[Outcome]) -> bytes:
    """The outcomes as JUnit XML: a test suite, a test case per flow file."""
    failures = sum(1 for o in outcomes if o.result is not None and not o.passed)
    errors = sum(1 for o in outcomes if o.result is None)
    seconds = sum(o.result.wall_seconds for o in outcomes if o.result is not None)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="callhook flows",
        tests=str(len(outcomes)),
        failures=str(failures),
        errors=str(errors),
        time=f"{seconds:.3f}",
    )
    for o in outcomes:
        case = ET.SubElement(
            suite,
            "testcase",
            classname="callhook.flow",
            name=o.name,
            file=str(o.path),
            time=f"{o.result.wall_seconds:.3f}" if o.result is not None else "0",
        )
        if o.result is None:
            ET.SubElement(case, "error", message=o.error or "", type="FlowError")
        elif not o.passed:
            failure = ET.SubElement(case, "failure", message=o.result.failure or "")
            failure.text = "\n".join(o.result.timeline)
        if o.result is not None:
            ET.SubElement(case, "system-out").text = "\n".join(o.result.timeline)
    return bytes(ET.tostring(suites, encoding="utf-8", xml_declaration=True))


def serve_secret(data_dir: Path) -> str | None:
    """serve's installation secret for ``--sip`` (its calls' logs are read with it):
    ``CALLHOOK_SECRET``, else ``<data_dir>/secret``; None, said on standard error, if neither."""
    secret = os.environ.get("CALLHOOK_SECRET", "")
    path = data_dir / "secret"
    if not secret and path.exists():
        secret = path.read_text().strip()
    if not secret:
        print(
            "callhook test --sip: serve's call logs are read with its installation"
            f" secret: {path} does not exist (--data-dir: serve's; or CALLHOOK_SECRET)",
            file=sys.stderr,
        )
        return None
    return secret


def secret_origin(data_dir: Path) -> str:
    """Where :func:`serve_secret` reads the secret from: ``CALLHOOK_SECRET``, or the file."""
    if os.environ.get("CALLHOOK_SECRET", ""):
        return "CALLHOOK_SECRET"
    return str((data_dir / "secret").resolve())


async def test_command(
    paths: Sequence[Path],
    settings: Settings,
    junit_file: Path | None,
    out: TextIO = sys.stdout,
    serve: Serve | None = None,
    jobs: int = 1,
    *,
    assembly: Assembly,
) -> int:
    """Run the flows; the exit status (0 all passed, 1 one failed, 2 a file unreadable, or
    serve cannot be used: said in one line on standard error, before any call)."""
    if serve is not None:
        from callhook.devtools.sipflow import check_serve

        problem = await check_serve(serve, secret_origin(settings.data_dir))
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
    outcomes = await run_files(paths, settings, out, serve, jobs, assembly=assembly)
    if junit_file is not None:
        junit_file.write_bytes(junit(outcomes))
    passed = sum(o.passed for o in outcomes)
    out.write(f"{passed} of {len(outcomes)} flows passed\n")
    if any(o.result is None for o in outcomes):
        return 2
    return 0 if passed == len(outcomes) else 1
