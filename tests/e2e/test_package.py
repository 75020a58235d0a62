"""The Debian package as an administrator meets it, in a fresh Debian 12 system.

``scripts/build-deb`` builds the package (kept in ~/.cache/callhook/deb by the source's
hash: built once per change of what goes into it); ``debootstrap`` makes a minimal
Debian 12 root (kept in ~/.cache/callhook/bookworm, copied fresh for each run), which
``systemd-nspawn --boot`` boots with systemd as its init, in a network namespace of the
test's own (10.78.0.2, the test's side 10.78.0.1). Inside, ``apt-get install`` of the
.deb (its dependencies and Kamailio, which it recommends, fetched beforehand: the
container has no way out) runs the maintainer scripts under the running systemd, which
starts the unit; with nothing else done:

- serve runs as the ``callhook`` user, its default mode (workers behind Kamailio), and
  Debian's own ``kamailio.service`` stays off the SIP port it would take;
- a SIPp call from the test's side reaches the built-in demo and goes through it to its
  end (a number keyed, a choice, a message, goodbye): five pages in its call record;
- ``systemctl reload callhook`` applies a new application while that call is in
  progress; the new application (the test's own web server) takes a call, and the demo
  call still completes;
- upgraded (``apt-get install`` of the same package as a newer version) while a call is
  in progress: the old version drains (the call goes on to its end) and stops before
  the new one is unpacked, which then serves with the changed config, the data and the
  secret as they were, and takes calls;
- ``apt-get purge`` removes the unit and the user and keeps ``/var/lib/callhook``;
  installed again and purged with ``CALLHOOK_PURGE_DATA=yes``, the data goes too.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer, Received
from tests.e2e import sipp
from tests.e2e.harness import free_even_udp_port, free_udp_port

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "callhook"
#: What the fresh system has besides Debian's minimal base: systemd to boot it, and what
#: any Debian server has (apt's own, adduser, iproute2, procps).
INCLUDE = "systemd,systemd-sysv,dbus,python3,adduser,iproute2,procps"
HOST_IP, GUEST_IP = "10.78.0.1", "10.78.0.2"
PATH = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
#: The API key of the application added by the reload.
HELLO_KEY = "hello-application-api-key"

pytestmark = [
    pytest.mark.solo,  # the build and the install load both cores
    pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed"),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="debootstrap, systemd-nspawn and network namespaces need root"
    ),
]


def _run(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"{' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def deb() -> Path:
    """The package built from this checkout (the cached one when nothing in it changed)."""
    built = _run(str(ROOT / "scripts" / "build-deb"), "--cache", timeout=1800)
    return Path(built.stdout.strip().splitlines()[-1])


def newer(deb: Path, suffix: str) -> Path:
    """``deb`` as a newer version (its ``Version`` with ``suffix``), beside it: its control
    archive rewritten, its files' archive as it is (an upgrade's package, in a second)."""
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True,
                             check=True).stdout  # fmt: skip
    rewritten = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(control)) as old,
        tarfile.open(fileobj=rewritten, mode="w", format=tarfile.GNU_FORMAT) as new,
    ):
        for member in old.getmembers():
            content = old.extractfile(member) if member.isfile() else None
            data = content.read() if content is not None else b""
            if member.name in {"./control", "control"}:
                lines = data.decode().splitlines(keepends=True)
                data = "".join(
                    line.rstrip("\n") + suffix + "\n" if line.startswith("Version:") else line
                    for line in lines
                ).encode()
                member.size = len(data)
            new.addfile(member, io.BytesIO(data) if member.isfile() else None)
    # The package: an ar archive of debian-binary, the control archive, the files' one.
    with deb.open("rb") as source:
        assert source.read(8) == b"!<arch>\n"
        members: list[tuple[str, bytes]] = []
        while header := source.read(60):
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
            body = source.read(size)
            source.read(size % 2)
            members.append((name, body))
    package, version, arch = deb.stem.split("_")
    made = deb.with_name(f"{package}_{version}{suffix}_{arch}.deb")
    with made.open("wb") as out:
        out.write(b"!<arch>\n")
        for name, body in members:
            if name.startswith("control.tar"):
                name, body = "control.tar", rewritten.getvalue()
            out.write(
                f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode()
            )
            out.write(body + b"\n" * (len(body) % 2))
    return made


def _base_root() -> Path:
    """A debootstrapped Debian 12 with ``INCLUDE``, made once and kept."""
    base = CACHE / "bookworm" / INCLUDE.replace(",", "-")
    if not (base / "etc" / "debian_version").exists():
        if not shutil.which("debootstrap"):
            _run("apt-get", "install", "-y", "-q", "debootstrap", "systemd-container")
        shutil.rmtree(base, ignore_errors=True)
        base.parent.mkdir(parents=True, exist_ok=True)
        tmp = base.with_name(base.name + ".new")
        shutil.rmtree(tmp, ignore_errors=True)
        _run("debootstrap", "--variant=minbase", f"--include={INCLUDE}", "bookworm", str(tmp),
             "http://deb.debian.org/debian", timeout=900)  # fmt: skip
        tmp.rename(base)
    return base


def _runs_systemd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "systemd"
    except OSError:  # (gone meanwhile)
        return False


class Machine:
    """A booted Debian 12 container: ``run`` a command inside it, as its root."""

    def __init__(self, root: Path, netns: str) -> None:
        self.root = root
        self.netns = netns
        self.log = root.parent / "console.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.init_pid = 0

    def boot(self) -> None:
        with self.log.open("wb") as console:
            self.proc = subprocess.Popen(
                ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
                 "--console=read-only", f"--network-namespace-path=/run/netns/{self.netns}",
                 "--machine=callhook-test", "-D", str(self.root), "--boot"],
                stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not self.init_pid:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")
            assert time.monotonic() < deadline, "the container did not start"
            # The container's init: nspawn's child that runs systemd (not the short-lived
            # child that forks it, which nsenter would find gone).
            children = _run("pgrep", "-P", str(self.proc.pid), check=False).stdout.split()
            self.init_pid = next((int(c) for c in children if _runs_systemd(int(c))), 0)
            time.sleep(0.2)
        state = self.run("systemctl", "is-system-running", "--wait", check=False, timeout=120)
        assert state.stdout.strip() in {"running", "degraded"}, state.stdout + self.journal()

    def run(
        self, *args: str, check: bool = True, timeout: float = 300, env: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        return _run("nsenter", "-t", str(self.init_pid), "-a", "env", "-i", PATH, *env,
                    *args, check=check, timeout=timeout)  # fmt: skip

    def journal(self, unit: str = "callhook") -> str:
        return self.run("journalctl", "-u", unit, "--no-pager", "-o", "cat", check=False).stdout

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()  # nspawn asks the container's systemd to power off
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def machine(tmp_path: Path, deb: Path) -> Iterator[Machine]:
    """A fresh Debian 12 booted in its own network namespace, the package copied in and
    its dependencies fetched (the container itself reaches only the test's side)."""
    root = tmp_path / "root"
    _run("cp", "-a", str(_base_root()), str(root))
    shutil.copy(deb, root / "var" / "tmp" / deb.name)
    (root / "etc" / "hostname").write_text("callhook-test\n")
    # What apt will need, fetched through the host's network before the boot.
    prepare = ("systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "-D", str(root))
    _run(*prepare, "apt-get", "update", "-q")
    _run(*prepare, "apt-get", "install", "-y", "-q", "--download-only", f"/var/tmp/{deb.name}")
    netns = f"chpkg{os.getpid()}"
    host_if, guest_if = f"chh{os.getpid()}"[:15], f"chg{os.getpid()}"[:15]
    _run("ip", "netns", "add", netns)
    guest = Machine(root, netns)
    try:
        # Its loopback up, as on any host (the container's systemd, without CAP_NET_ADMIN
        # here, cannot: serve's workers listen on 127.0.0.1).
        _run("ip", "-n", netns, "link", "set", "lo", "up")
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", guest_if)
        _run("ip", "link", "set", guest_if, "netns", netns)
        _run("ip", "addr", "add", f"{HOST_IP}/24", "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        _run("ip", "-n", netns, "addr", "add", f"{GUEST_IP}/24", "dev", guest_if)
        _run("ip", "-n", netns, "link", "set", guest_if, "up")
        guest.boot()
        yield guest
    finally:
        guest.stop()
        _run("ip", "link", "del", host_if, check=False)
        _run("ip", "netns", "del", netns, check=False)
        shutil.rmtree(root, ignore_errors=True)


def http_get(guest: Machine, path: str, token: str | None = None) -> tuple[int, Any]:
    """GET ``path`` from serve's web server (127.0.0.1:8080 inside the container, as the
    packaged config has it), from the container's network namespace."""
    code = (
        "import json, sys, urllib.request, urllib.error\n"
        "req = urllib.request.Request(sys.argv[1])\n"
        "if sys.argv[2]: req.add_header('Authorization', 'Bearer ' + sys.argv[2])\n"
        "try:\n"
        "    r = urllib.request.urlopen(req, timeout=10)\n"
        "    print(r.status); print(r.read().decode())\n"
        "except urllib.error.HTTPError as e: print(e.code); print('null')\n"
        "except OSError as e: print(0); print('null')\n"
    )
    done = _run("ip", "netns", "exec", guest.netns, sys.executable, "-c", code,
                f"http://127.0.0.1:8080{path}", token or "")  # fmt: skip
    status, _, body = done.stdout.partition("\n")
    try:
        return int(status), json.loads(body)
    except ValueError:
        return int(status), body


async def call(workdir: Path, *parts: str, timeout: float = 90) -> sipp.SippRun:
    return await sipp.run_sipp(
        sipp.scenario(*parts),
        (GUEST_IP, 5060),
        workdir,
        local_port=free_udp_port(),
        media_port=free_even_udp_port(),
        timeout=timeout,
        extra=("-t", "u1"),
        local_ip=HOST_IP,
    )


async def in_progress(guest: Machine, key: str, caller: asyncio.Task[sipp.SippRun]) -> None:
    """Wait (20 s at most) until ``/api/v1/calls`` lists a call of ``key``'s application,
    ``caller``'s, still going on."""
    deadline = time.monotonic() + 20
    while not (await asyncio.to_thread(http_get, guest, "/api/v1/calls", key))[1]["calls"]:
        assert not caller.done() and time.monotonic() < deadline, guest.journal()
        await asyncio.sleep(0.2)


def digits(*keys: str, cseq: int = 2) -> str:
    return "".join(sipp.INFO.format(cseq=cseq + n, digit=key) for n, key in enumerate(keys))


@pytest.fixture
async def hello() -> AsyncIterator[AppServer]:
    """The application added by the reload: the test's web server on its side of the link."""
    async with AppServer(secret="package-test-app-secret", host=HOST_IP) as server:
        yield server


async def test_the_package_installs_serves_the_demo_reloads_and_purges(
    machine: Machine, hello: AppServer, tmp_path: Path
) -> None:
    guest = machine
    deb = next((guest.root / "var" / "tmp").glob("callhook_*.deb")).name
    installed = guest.run("apt-get", "install", "-y", "-q", f"/var/tmp/{deb}",
                          env=("DEBIAN_FRONTEND=noninteractive",))  # fmt: skip
    assert "warning" not in installed.stdout.lower() + installed.stderr.lower(), installed
    # Started by the install, which returned once it served (Type=notify: ready at once),
    # as the callhook user, behind its own Kamailio.
    assert http_get(guest, "/readyz")[0] == 200, guest.journal()
    assert guest.run("systemctl", "is-active", "callhook").stdout.strip() == "active"
    assert guest.run("systemctl", "is-active", "kamailio", check=False).stdout.strip() == "inactive"
    processes = guest.run("ps", "-eo", "user:20,args").stdout
    # The supervisor, the fork server and the two workers it forked (each shown with the
    # command it would have been started with).
    serving = [line for line in processes.splitlines() if "callhook serve" in line]
    assert len(serving) == 4 and all(line.startswith("callhook ") for line in serving), processes
    assert sum("serve --fork-server TERM --data-dir /var/lib/callhook" in line
               for line in serving) == 1, processes  # fmt: skip
    assert sorted(line.rsplit("--worker ", 1)[1].split()[0] for line in serving
                  if "--worker " in line) == ["0", "1"], processes  # fmt: skip
    assert any(line.startswith("callhook") and "kamailio -f /var/lib/callhook" in line
               for line in processes.splitlines()), processes  # fmt: skip
    config = guest.root / "etc" / "callhook" / "callhook.toml"
    assert oct(config.stat().st_mode & 0o777) == "0o640"
    secret = (guest.root / "var" / "lib" / "callhook" / "secret").read_text().strip()

    hello.page("/start", [{"sleep": {"seconds": 0.5}}, {"hang_up": {}}])
    hello.page("/final", None)
    # The demo from the start: its welcome, a number (4 2 #), a choice (1: sales), a
    # message after the beep (silence: none heard), then it says goodbye and hangs up.
    demo = asyncio.create_task(
        call(
            tmp_path,
            sipp.invite("demo"),
            sipp.ANSWERED,
            sipp.PAUSE.format(ms=2500),
            digits("4", "2", "#"),
            sipp.PAUSE.format(ms=4000),
            digits("1", cseq=5),
            sipp.BYE_FROM_SERVER.format(timeout_ms=60000),
        )
    )
    await in_progress(guest, secret, demo)
    # A new application, applied by systemctl reload while the demo call runs.
    text = config.read_text() + (
        f'\n[apps.hello]\nfirst_page = "{hello.url("/start")}"\n'
        f'final_page = "{hello.url("/final")}"\nsecret = "{hello.secret}"\n'
        f'api_key = "{HELLO_KEY}"\n'
    )
    config.write_text(text)
    await asyncio.to_thread(guest.run, "systemctl", "reload", "callhook")
    deadline = time.monotonic() + 20
    while guest.journal().count("SIGHUP: reloaded") < 2:  # both workers
        assert time.monotonic() < deadline, guest.journal()
        await asyncio.sleep(0.2)
    assert not demo.done()
    second = await call(
        tmp_path, sipp.invite("hello"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=20000)
    )
    assert second.returncode == 0, second.output + guest.journal()
    assert [r.path for r in hello.requests] == ["/start", "/final"]
    first = await demo
    assert first.returncode == 0, first.output + guest.journal()

    status, records = await asyncio.to_thread(http_get, guest, "/api/v1/calls/records", secret)
    assert status == 200, records
    by_app = {r["application"]: r for r in records["records"]}
    assert set(by_app) == {"demo", "hello"}, records
    assert by_app["demo"]["call_cause"] == by_app["hello"]["call_cause"] == "completed"
    assert by_app["demo"]["pages_requested"] == 5 and by_app["demo"]["pages_failed"] == 0
    # The demo call was in progress across the reload and the second call.
    assert by_app["demo"]["started"] < by_app["hello"]["started"] < by_app["demo"]["ended"]
    assert "Traceback" not in guest.journal()

    # Upgraded while a call is in progress (install.md, "Upgrade"): the call finishes
    # first, then the new version serves, with the config as changed and the data as left.
    upgrade = newer(guest.root / "var" / "tmp" / deb, "+upgrade1").name
    old_pid = guest.run("systemctl", "show", "-p", "MainPID", "--value", "callhook").stdout
    held = True  # the call goes on, a second at a time, until the old version drains

    def again(request: Received) -> list[dict[str, Any]]:
        if not held:
            return [{"hang_up": {}}]
        return [{"sleep": {"seconds": 1}}, {"redirect": {"next_page": {"url": "/again"}}}]

    hello.page("/start", again)
    hello.page("/again", again)
    during = asyncio.create_task(
        call(
            tmp_path,
            sipp.invite("hello"),
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=180000),
            timeout=240,  # (SIPp's own limit: past the unpacking, the drain and the start)
        )
    )
    await in_progress(guest, HELLO_KEY, during)  # (hello's own key sees its calls)
    upgrading = asyncio.create_task(
        asyncio.to_thread(
            guest.run,
            "apt-get",
            "install",
            "-y",
            "-q",
            f"/var/tmp/{upgrade}",
            env=("DEBIAN_FRONTEND=noninteractive",),
        )
    )
    # The upgrade stops the old version first: it drains (serve's line).
    deadline = time.monotonic() + 120
    while "for 1 call(s) to finish" not in guest.journal():
        assert not upgrading.done() and not during.done(), guest.journal()
        assert time.monotonic() < deadline, guest.journal()
        await asyncio.sleep(0.5)
    held = False
    # The call ends (it hangs up itself at its next page), then apt returns, once the new
    # version serves.
    ended, _ = await asyncio.wait({upgrading, during}, return_when=asyncio.FIRST_COMPLETED)
    assert during in ended, guest.journal()
    run = await during
    assert run.returncode == 0, run.output + guest.journal()
    upgraded = await upgrading
    assert "warning" not in upgraded.stdout.lower() + upgraded.stderr.lower(), upgraded
    version = guest.run("dpkg-query", "-W", "-f", "${Version}", "callhook").stdout
    assert version.endswith("+upgrade1"), version
    # Stopped before the new version's files were unpacked (never run on top of them).
    journal = guest.run("journalctl", "-u", "callhook", "-o", "short-unix", "--no-pager").stdout
    (stopped,) = [float(line.split()[0]) for line in journal.splitlines() if "Stopped " in line]
    dpkg_log = (guest.root / "var" / "log" / "dpkg.log").read_text().splitlines()
    unpacked = min(  # (dpkg says it more than once: the first, when its files are in)
        datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
        for line in dpkg_log
        if line.endswith(f"status unpacked callhook:{deb.split('_')[2][:-4]} {version}")
    )
    # (dpkg's log has whole seconds: its unpacking of 780 MB takes longer than one.)
    assert stopped <= unpacked, (stopped, unpacked, dpkg_log[-12:])
    assert guest.run("systemctl", "show", "-p", "MainPID", "--value", "callhook").stdout != old_pid
    assert http_get(guest, "/readyz")[0] == 200, guest.journal()
    assert config.read_text() == text  # the administrator's change, kept
    assert (guest.root / "var" / "lib" / "callhook" / "secret").read_text().strip() == secret
    hello.page("/start", [{"sleep": {"seconds": 0.5}}, {"hang_up": {}}])
    after = await call(
        tmp_path, sipp.invite("hello"), sipp.ANSWERED, sipp.BYE_FROM_SERVER.format(timeout_ms=20000)
    )
    assert after.returncode == 0, after.output + guest.journal()
    status, records = await asyncio.to_thread(http_get, guest, "/api/v1/calls/records", secret)
    assert status == 200, records
    hellos = [r for r in records["records"] if r["application"] == "hello"]
    assert len(records["records"]) == 4 and len(hellos) == 3, records
    # The call in progress was not cut short: it hung up itself, after the drain began.
    assert {r["call_cause"] for r in hellos} == {"completed"}, records
    assert "Traceback" not in guest.journal()

    # Purged: the unit and the user go, the data stays.
    guest.run("apt-get", "purge", "-y", "-q", "callhook", env=("DEBIAN_FRONTEND=noninteractive",))
    assert not (guest.root / "lib" / "systemd" / "system" / "callhook.service").exists()
    assert guest.run("getent", "passwd", "callhook", check=False).returncode == 2
    assert guest.run("getent", "group", "callhook", check=False).returncode == 2
    assert (guest.root / "var" / "lib" / "callhook" / "secret").exists()
    assert not (guest.root / "etc" / "callhook").exists()
    assert not (guest.root / "opt" / "venvs" / "callhook").exists()
    # Debian's kamailio.service is its own again.
    assert not (guest.root / "lib" / "systemd" / "system" / "kamailio.service.d").exists()
    # Installed again (the data found as it was left), and purged asking for the data too.
    guest.run("apt-get", "install", "-y", "-q", f"/var/tmp/{deb}",
              env=("DEBIAN_FRONTEND=noninteractive",))  # fmt: skip
    assert http_get(guest, "/readyz")[0] == 200, guest.journal()
    status, records = await asyncio.to_thread(http_get, guest, "/api/v1/calls/records", secret)
    assert status == 200 and len(records["records"]) == 4, records
    guest.run("apt-get", "purge", "-y", "-q", "callhook",
              env=("DEBIAN_FRONTEND=noninteractive", "CALLHOOK_PURGE_DATA=yes"))  # fmt: skip
    assert not (guest.root / "var" / "lib" / "callhook").exists()
