"""A SIP provider for the end-to-end tests: Kamailio (Debian ``kamailio``) as registrar and proxy.

One account (``username``/``password``, digest authentication with qop=auth, MD5 or
SHA-256) registers with the provider; any INVITE that does not come from the account
is a call to a dialled number (DID) and goes to whoever registered the account, with
the dialled number in the callee's request-URI (``did_in="ruri"``, the default) or only
in To (``did_in="contact"``: the request-URI is the registered Contact, RFC 3261 style).
Callers need no authentication. The provider Record-Routes, so in-dialog requests
pass through it. INVITEs *from* the account (From user = username) are challenged
with 407 and, when ``outbound`` is set, relayed there: a PSTN for outgoing calls.

Kamailio runs in the foreground as a child process, on free ports of 127.0.0.1 (UDP
and TCP on the same port number, TLS on another when ``tls=True``, with a server
certificate for ``localhost``/``127.0.0.1`` from a test CA made by trustme: clients
verify with ``ca_file``). Registrations live in memory: ``restart()`` keeps the ports
and loses them. ``registered()`` asks Kamailio (``ul.dump`` over its JSON-RPC socket)
which contacts are registered now. Everything Kamailio says goes to ``log``.

    with Provider(tmp_path / "provider", tls=True) as provider:
        ...  # callhook registers to provider.udp / provider.tls as provider.username
        await provider.wait_registered()

or the ``provider`` / ``tls_provider`` / ``make_provider(**options)`` pytest fixtures below
(import ``provider_fixture`` etc. into the test module). Any INVITE whose From user is
not the account's goes to the registered account unauthenticated (every caller here is
on 127.0.0.1); REGISTER always needs the digest, and only the account's username (403
otherwise). TCP/TLS registrations are saved with their source address as ``received``
and requests for them carry Contact aliases, so calls and in-dialog requests go back
over the UA's own connection (a client need not listen).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.e2e.harness import free_tcp_port, free_udp_port

KAMAILIO = shutil.which("kamailio") or (
    "/usr/sbin/kamailio" if Path("/usr/sbin/kamailio").exists() else None
)
TEMPLATE = Path(__file__).with_name("kamailio.cfg")


def _modules_dir() -> Path | None:
    for candidate in [
        *sorted(glob.glob("/usr/lib/*/kamailio/modules")),
        "/usr/lib/kamailio/modules",
        "/usr/local/lib/kamailio/modules",
    ]:
        if Path(candidate, "registrar.so").exists():
            return Path(candidate)
    return None


MODULES = _modules_dir()


def free_udp_tcp_port() -> int:
    """A port number free on 127.0.0.1 for both UDP and TCP (a provider's one SIP port)."""
    return free_udp_port()


def _free_tcp_port() -> int:
    return free_tcp_port()


class Provider:
    """Kamailio as a SIP provider (registrar + proxy) for one account; see the module doc."""

    def __init__(
        self,
        workdir: Path,
        *,
        username: str = "callhook",
        password: str = "provider-secret",
        domain: str = "127.0.0.1",
        realm: str | None = None,
        tls: bool = False,
        min_expires: int = 60,
        max_expires: int = 3600,
        default_expires: int | None = None,
        algorithm: Literal["", "MD5", "SHA-256"] = "",
        qop: bool = True,
        wrong_password: Literal[401, 403] = 401,
        did_in: Literal["ruri", "contact"] = "ruri",
        outbound: tuple[str, int] | None = None,
        debug: int = 2,
    ) -> None:
        for name, value in (("username", username), ("password", password), ("domain", domain)):
            if not value or any(c in value for c in '"\\{}\r\n'):
                raise ValueError(f"{name} {value!r} cannot go into the Kamailio config")
        if not 0 < min_expires <= max_expires:
            raise ValueError("need 0 < min_expires <= max_expires")
        self.workdir = workdir
        self.username = username
        self.password = password
        self.domain = domain
        self.realm = realm or domain
        self.min_expires = min_expires
        self.max_expires = max_expires
        self.default_expires = min(max(default_expires or 3600, min_expires), max_expires)
        self.algorithm = algorithm
        self.qop = qop
        self.wrong_password = wrong_password
        self.did_in = did_in
        self.outbound = outbound
        self.debug = debug
        port = free_udp_tcp_port()
        self.udp: tuple[str, int] = ("127.0.0.1", port)
        self.tcp: tuple[str, int] = ("127.0.0.1", port)
        self.tls: tuple[str, int] | None = ("127.0.0.1", _free_tcp_port()) if tls else None
        self.ca_file: Path | None = None  # the test CA (PEM) a TLS client verifies with
        self.cert_file: Path | None = None
        self.key_file: Path | None = None
        self.config = workdir / "kamailio.cfg"
        self.log = workdir / "kamailio.log"
        # unix socket paths must stay short (108 bytes): not under pytest's tmp_path
        self._rundir = Path(tempfile.mkdtemp(prefix="kam-"))
        self.rpc_socket = self._rundir / "rpc.sock"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: Any = None
        self.starts = 0

    # -- life cycle ---------------------------------------------------------------

    @property
    def aor(self) -> str:
        return f"sip:{self.username}@{self.domain}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def address(self, transport: Literal["udp", "tcp", "tls"] = "udp") -> tuple[str, int]:
        if transport == "tls":
            if self.tls is None:
                raise ValueError("this provider has no TLS listener (tls=False)")
            return self.tls
        return self.tcp if transport == "tcp" else self.udp

    def uri(self, transport: Literal["udp", "tcp", "tls"] = "udp") -> str:
        """The provider's SIP URI on ``transport``, e.g. ``sip:127.0.0.1:5060;transport=tcp``."""
        host, port = self.address(transport)
        return f"sip:{host}:{port}" + ("" if transport == "udp" else f";transport={transport}")

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts the provider's certificate (and checks it is for it)."""
        if self.ca_file is None:
            raise ValueError("this provider has no TLS listener (tls=False)")
        return ssl.create_default_context(cafile=str(self.ca_file))

    def start(self) -> None:
        if KAMAILIO is None or MODULES is None:
            raise RuntimeError("kamailio (Debian package kamailio) is not installed")
        if self.running:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        defines: list[str] = []
        if self.tls is not None:
            if not (MODULES / "tls.so").exists():
                raise RuntimeError(
                    "Kamailio's TLS module is missing: apt-get install kamailio-tls-modules"
                )
            self._make_certificates()
            defines += ["-A", "WITH_TLS"]
        if self.outbound is not None:
            defines += ["-A", "WITH_OUTBOUND"]
        self.config.write_text(self._render())
        with contextlib.suppress(FileNotFoundError):
            self.rpc_socket.unlink()
        self._log_handle = self.log.open("ab")
        self.starts += 1
        self._log_handle.write(f"==== provider start {self.starts} ====\n".encode())
        self._log_handle.flush()
        self._proc = subprocess.Popen(
            [
                KAMAILIO,
                "-DD",  # foreground, no daemon; children are its own
                "-E",  # log to stderr (our log file)
                "-f",
                str(self.config),
                "-P",
                str(self._rundir / "kamailio.pid"),
                "-Y",
                str(self._rundir),
                *defines,
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            cwd=self._rundir,
            start_new_session=True,  # its own process group: stop() can always end it all
        )
        try:
            self._wait_ready(10.0)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to the whole process group after 5 s; always reaps."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
            # children Kamailio left behind (it waits for them; this is the safety net)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                try:
                    os.killpg(proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def restart(self) -> None:
        """Stop and start again on the same ports; registrations are lost (in-memory usrloc)."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._rundir, ignore_errors=True)

    def __enter__(self) -> Provider:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    # -- registrations --------------------------------------------------------------

    def rpc(self, method: str, *params: object, timeout: float = 3.0) -> Any:
        """One JSON-RPC command to Kamailio (jsonrpcs over its unix datagram socket)."""
        request = {"jsonrpc": "2.0", "method": method, "params": list(params), "id": 1}
        reply_path = self._rundir / f"rpc-{uuid.uuid4().hex[:8]}.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind(str(reply_path))
            try:
                s.settimeout(timeout)
                s.sendto(json.dumps(request).encode(), str(self.rpc_socket))
                data = s.recv(1 << 20)
            finally:
                reply_path.unlink(missing_ok=True)
        reply = json.loads(data)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result")

    def contacts(self) -> list[dict[str, Any]]:
        """The account's registered contacts as ul.dump has them (Address, Expires, Received...)."""
        result = self.rpc("ul.dump")
        found: list[dict[str, Any]] = []
        for domain in (result or {}).get("Domains", []):
            for aor in domain.get("Domain", {}).get("AoRs", []) or []:
                info = aor.get("Info", {})
                for contact in info.get("Contacts", []) or []:
                    found.append(dict(contact.get("Contact", {}), AoR=info.get("AoR")))
        return found

    def registered(self) -> list[str]:
        """The contact URIs registered now (empty when nobody is)."""
        return [str(c["Address"]) for c in self.contacts()]

    async def wait_registered(self, count: int = 1, timeout: float = 5.0) -> list[str]:
        """Wait until at least ``count`` contacts are registered; their URIs."""
        deadline = time.monotonic() + timeout
        while True:
            contacts = self.registered()
            if len(contacts) >= count:
                return contacts
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{count} registration(s) expected, have {contacts}\n{self.log_text()}"
                )
            await asyncio.sleep(0.05)

    # -- internals --------------------------------------------------------------------

    def _render(self) -> str:
        assert MODULES is not None
        values = {
            "DEBUG": str(self.debug),
            "DOMAIN": self.domain,
            "REALM": self.realm,
            "USERNAME": self.username,
            "PASSWORD": self.password,
            "UDP_PORT": str(self.udp[1]),
            "TCP_PORT": str(self.tcp[1]),
            "TLS_PORT": str(self.tls[1]) if self.tls else "0",
            "TLS_CERT": str(self.cert_file or ""),
            "TLS_KEY": str(self.key_file or ""),
            "MODULES": str(MODULES),
            "RPC_SOCKET": str(self.rpc_socket),
            "MIN_EXPIRES": str(self.min_expires),
            "MAX_EXPIRES": str(self.max_expires),
            "DEFAULT_EXPIRES": str(self.default_expires),
            "ALGORITHM": self.algorithm,
            "QOP_FLAGS": "1" if self.qop else "0",
            "WRONG_PASSWORD": str(self.wrong_password),
            "DID_IN": self.did_in,
            "OUTBOUND": f"{self.outbound[0]}:{self.outbound[1]}" if self.outbound else "",
        }
        text = TEMPLATE.read_text()
        for name, value in values.items():
            text = text.replace("{{" + name + "}}", value)
        if "{{" in text:
            rest = text[text.index("{{") :][:40]
            raise AssertionError(f"unfilled placeholder in {TEMPLATE}: {rest}")
        return text

    def _make_certificates(self) -> None:
        if self.ca_file is not None:
            return  # made at the first start; a restart keeps them
        import trustme

        ca = trustme.CA()
        server = ca.issue_cert("localhost", "127.0.0.1")
        self.ca_file = self.workdir / "provider-ca.pem"
        self.cert_file = self.workdir / "provider-cert.pem"
        self.key_file = self.workdir / "provider-key.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        self.cert_file.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
        server.private_key_pem.write_to_path(str(self.key_file))

    def _wait_ready(self, timeout: float) -> None:
        """Until Kamailio answers OPTIONS on UDP, accepts on TCP (and TLS) and answers RPC."""
        deadline = time.monotonic() + timeout
        pending: list[Literal["udp", "tcp", "tls", "rpc"]] = ["udp", "tcp", "rpc"]
        if self.tls:
            pending.append("tls")
        while pending:
            if self._proc is None or self._proc.poll() is not None:
                raise RuntimeError(f"kamailio exited at start:\n{self.log_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kamailio not ready ({pending} pending):\n{self.log_text()}")
            check = pending[0]
            try:
                if check == "udp":
                    ok = self._options_ping()
                elif check == "rpc":
                    ok = bool(self.rpc("core.version", timeout=0.5))
                else:
                    with socket.create_connection(self.address(check), timeout=0.5):
                        ok = True
            except OSError:
                ok = False
            if ok:
                pending.pop(0)
            else:
                time.sleep(0.05)

    def _options_ping(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            s.settimeout(0.3)
            port = s.getsockname()[1]
            host, provider_port = self.udp
            s.sendto(
                (
                    f"OPTIONS sip:{host}:{provider_port} SIP/2.0\r\n"
                    f"Via: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bK{uuid.uuid4().hex};rport\r\n"
                    f"From: <sip:ready@127.0.0.1>;tag={uuid.uuid4().hex[:8]}\r\n"
                    f"To: <sip:{host}:{provider_port}>\r\n"
                    f"Call-ID: {uuid.uuid4().hex}@127.0.0.1\r\n"
                    "CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
                ).encode(),
                self.udp,
            )
            try:
                data = s.recv(65535)
            except TimeoutError:
                return False
            return data.startswith(b"SIP/2.0 200")


# -- pytest fixtures ---------------------------------------------------------------------
# Registered as ``make_provider``, ``provider`` and ``tls_provider``; a test module makes them
# available by importing the functions (their own names differ, so ruff sees no redefinition):
#     from tests.e2e.kamailio import provider_fixture  (with a noqa for F401)


def _require_kamailio() -> None:
    if KAMAILIO is None or MODULES is None:
        pytest.skip("kamailio is not installed (Debian package kamailio)")


@pytest.fixture(name="make_provider")
def make_provider_fixture(tmp_path: Path) -> Iterator[Callable[..., Provider]]:
    """A factory: ``make_provider(tls=True, min_expires=120, ...)`` starts one; all end after."""
    _require_kamailio()
    made: list[Provider] = []

    def make(**options: Any) -> Provider:
        provider = Provider(tmp_path / f"provider{len(made) or ''}", **options)
        made.append(provider)
        provider.start()
        return provider

    try:
        yield make
    finally:
        for provider in made:
            provider.close()


@pytest.fixture(name="provider")
def provider_fixture(make_provider: Callable[..., Provider]) -> Provider:
    """A provider on UDP and TCP with the default account."""
    return make_provider()


@pytest.fixture(name="tls_provider")
def tls_provider_fixture(make_provider: Callable[..., Provider]) -> Provider:
    """A provider on UDP, TCP and TLS (``ca_file`` verifies its certificate)."""
    return make_provider(tls=True)
