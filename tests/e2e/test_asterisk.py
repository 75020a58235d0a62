"""The Asterisk recipe of docs/trunks.md on a real Asterisk: callhook registers with
Asterisk (chan_sip, digest authentication) as the peer ``callhook``; a SIPp caller, a
guest of Asterisk, dials the DID; Asterisk's dialplan ``Dial(SIP/callhook/${EXTEN})``
sends the call to callhook, where the application that owns the number answers and
hangs up, and Asterisk passes the BYE on to the caller.

Asterisk runs in the foreground as a child process with its whole configuration in
the test's directory (asterisk.conf points every writable directory there; modules
are Asterisk's own, loaded one by one) and SIP on a free UDP port of 127.0.0.1. The
test asks it what it knows with ``asterisk -C <conf> -rx <command>``.

Debian 12 ships no Asterisk package: the test skips unless an ``asterisk`` binary is
found (``CALLHOOK_ASTERISK``, PATH, or ``/opt/asterisk/sbin/asterisk``, where a build
from source with ``--prefix=/opt/asterisk`` puts it), or when that Asterisk has no
chan_sip (Asterisk 21 removed it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import Server, free_udp_port, wait_for_request
from tests.e2e.test_trunks import trunk_states

DID = "+441234567890"


def find_asterisk() -> str | None:
    """CALLHOOK_ASTERISK if set, else ``asterisk`` on PATH, else the source build's."""
    configured = os.environ.get("CALLHOOK_ASTERISK")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    found = shutil.which("asterisk")
    if found:
        return found
    built = Path("/opt/asterisk/sbin/asterisk")
    return str(built) if os.access(built, os.X_OK) else None


ASTERISK = find_asterisk()

pytestmark = [
    pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed"),
    pytest.mark.skipif(
        ASTERISK is None,
        reason=f"CALLHOOK_ASTERISK={os.environ['CALLHOOK_ASTERISK']} is not an executable"
        if os.environ.get("CALLHOOK_ASTERISK")
        else "Asterisk is not installed (no asterisk on PATH, no /opt/asterisk/sbin/asterisk, "
        "CALLHOOK_ASTERISK unset; Debian 12 has no package: build it from source)",
    ),
]

# Only what the call needs; autoload = no keeps everything else out.
MODULES = [
    "res_timing_timerfd",
    "res_rtp_asterisk",
    "codec_ulaw",
    "codec_alaw",
    "bridge_simple",
    "bridge_native_rtp",
    "pbx_config",
    "app_dial",
    "chan_sip",
]


class Asterisk:
    """Asterisk with one SIP peer, ``callhook``, that registers with digest authentication,
    and guests (any other caller) whose calls to the DID are dialled to that peer."""

    def __init__(self, workdir: Path, *, username: str = "callhook", password: str = "") -> None:
        assert ASTERISK is not None
        self.binary = ASTERISK
        self.workdir = workdir
        self.username = username
        self.password = password or "asterisk-secret-7f3a"
        self.sip: tuple[str, int] = ("127.0.0.1", free_udp_port())
        # the control socket's path must stay short (108 bytes): not under pytest's tmp_path
        self.rundir = Path(tempfile.mkdtemp(prefix="ast-"))
        self.conf = workdir / "etc" / "asterisk.conf"
        self.log = workdir / "asterisk.out"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: Any = None

    def write_config(self) -> None:
        etc = self.conf.parent
        dirs = {
            "astetcdir": etc,
            "astvarlibdir": self.workdir / "lib",
            "astdbdir": self.workdir / "lib",
            "astkeydir": self.workdir / "lib",
            "astspooldir": self.workdir / "spool",
            "astcachedir": self.workdir / "cache",
            "astlogdir": self.workdir / "log",
            "astrundir": self.rundir,
        }
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        files = {
            "asterisk.conf": [
                "[directories]",
                *(f"{key} => {path}" for key, path in dirs.items()),
                "[options]",
                "verbose = 3",
                "nocolor = yes",
            ],
            "logger.conf": ["[logfiles]", "messages.log => notice,warning,error,verbose"],
            "modules.conf": ["[modules]", "autoload = no", *(f"load => {m}.so" for m in MODULES)],
            "rtp.conf": ["[general]", "rtpstart = 10000", "rtpend = 20000"],
            "sip.conf": [
                "[general]",
                f"udpbindaddr = {self.sip[0]}:{self.sip[1]}",
                "tcpenable = no",
                "srvlookup = no",
                "sipdebug = yes",  # the SIP messages go to the log, for failures
                "allowguest = yes",  # the SIPp caller: no account, ...
                "context = from-pstn",  # ... its calls start here
                "directmedia = no",  # Asterisk stays in the media path: no re-INVITEs
                "disallow = all",
                "allow = ulaw,alaw",
                "",
                f"[{self.username}]",
                "type = friend",
                "host = dynamic",  # it REGISTERs
                f"secret = {self.password}",
                "context = from-callhook",
                "directmedia = no",
                "disallow = all",
                "allow = ulaw,alaw",
            ],
            "extensions.conf": [
                "[general]",
                "static = yes",
                "writeprotect = yes",
                "[from-pstn]",
                f"exten => {DID},1,Dial(SIP/{self.username}/${{EXTEN}},20)",
                " same => n,Hangup()",
                "[from-callhook]",
            ],
        }
        for name, lines in files.items():
            (etc / name).write_text("\n".join(lines) + "\n")

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        self.write_config()
        self._log_handle = self.log.open("ab")
        self._proc = subprocess.Popen(
            [self.binary, "-f", "-n", "-C", str(self.conf)],  # foreground, no console
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() can always end it all
        )
        deadline = time.monotonic() + 15
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"asterisk exited at start:\n{self.log_text()}")
            code, _ = await self.cli("core waitfullybooted", timeout=5)
            if code == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"asterisk did not boot:\n{self.log_text()}")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to the process group after 5 s; always reaps."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        shutil.rmtree(self.rundir, ignore_errors=True)

    def log_text(self) -> str:
        parts = [self.log, *sorted((self.workdir / "log").glob("*"))]
        return "\n".join(p.read_text(errors="replace") for p in parts if p.is_file())

    # -- asking Asterisk ----------------------------------------------------------

    async def cli(self, command: str, timeout: float = 5.0) -> tuple[int, str]:
        """``asterisk -rx command`` against this Asterisk: (exit code, output)."""
        proc = await asyncio.create_subprocess_exec(
            self.binary, "-C", str(self.conf), "-rx", command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            out, _ = await proc.communicate()
        return proc.returncode or 0, out.decode(errors="replace")

    async def contact(self) -> str | None:
        """The Contact the peer is registered at now (``sip show peer``), else None.

        chan_sip keeps showing the last ``Reg. Contact`` after a binding is removed or
        expires; the peer's address (``Addr->IP``) is what goes back to ``(null)``."""
        code, out = await self.cli(f"sip show peer {self.username}")
        assert code == 0, out
        address = re.search(r"Addr->IP\s*:\s*(\S+)", out)
        contact = re.search(r"Reg\. Contact\s*:\s*(\S+)", out)
        if address is None or not re.fullmatch(r"[0-9.]+:\d+", address.group(1)):
            return None
        return contact.group(1) if contact else None

    async def wait_registered(self, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while (contact := await self.contact()) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"callhook did not register:\n{self.log_text()}")
            await asyncio.sleep(0.1)
        return contact


@pytest.fixture
async def asterisk(tmp_path: Path) -> AsyncIterator[Asterisk]:
    pbx = Asterisk(tmp_path / "asterisk")
    try:
        await pbx.start()
        _, out = await pbx.cli("module show like chan_sip.so")
        if not re.search(r"^chan_sip\.so\s.*\bRunning\b", out, re.MULTILINE):
            pytest.skip(f"this Asterisk has no chan_sip (removed in Asterisk 21):\n{out}")
        yield pbx
    finally:
        pbx.stop()


def config(tmp_path: Path, app: AppServer, pbx: Asterisk) -> Path:
    """The callhook side of the recipe: a trunk that registers with Asterisk."""
    host, port = pbx.sip
    path = tmp_path / "callhook.toml"
    path.write_text(
        "\n".join(
            [
                "[trunks.asterisk]",
                f'registrar = "{host}:{port}"',
                f'username = "{pbx.username}"',
                f'password = "{pbx.password}"',
                "[apps.support]",
                f'first_page = "{app.url("/support")}"',
                f'final_page = "{app.url("/final")}"',
                f'secret = "{app.secret}"',
                f'numbers = ["{DID}"]',
            ]
        )
        + "\n"
    )
    return path


async def test_callhook_registers_with_asterisk_and_a_call_to_the_did_runs_its_application(
    tmp_path: Path, app: AppServer, asterisk: Asterisk
) -> None:
    app.page("/support", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    data = tmp_path / "data"
    cfg = config(tmp_path, app, asterisk)
    async with Server.for_app(data, app, extra=("--config", str(cfg))) as server:
        contact = await asterisk.wait_registered(timeout=10)
        assert f"@127.0.0.1:{server.sip_port}" in contact, contact
        (state,) = await trunk_states(server)
        assert state["name"] == "asterisk" and state["state"] == "registered", state
        # The caller dials the DID at Asterisk; callhook's application hangs up, and
        # Asterisk sends the caller the BYE.
        parts = [sipp.invite(DID), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=15000)]
        run = await sipp.call(asterisk.sip, tmp_path, *parts)
        assert run.returncode == 0, run.output + run.errors + server.output + asterisk.log_text()
        assert await wait_for_request(app, "/final")
    assert "trunk asterisk: registered" in server.output
    assert "from trunk asterisk" in server.output  # the call came through the trunk
    (support,) = app.bodies("/support")
    assert DID in support["this_call"]["call_to"], support["this_call"]
    assert "sip:sipp@" in support["this_call"]["call_from"]  # Asterisk passed the caller on
    assert app.bodies("/start") == []
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"
    # Shutdown removed the binding (Expires: 0): Asterisk has no contact for the peer.
    assert await asterisk.contact() is None, asterisk.log_text()
