"""callhook behind a real NAT: network namespaces, a Linux router, SIPp on the "internet".

The test builds, and always removes, three network namespaces joined by veth pairs
(names carry the test's pid, so parallel runs do not clash)::

    lan 10.77.0.2/24 ──veth── 10.77.0.1  rtr  198.51.100.1/24 ──veth── 198.51.100.2 wan
    callhook serve               ip_forward=1                          SIPp (the caller),
    default route via .1         MASQUERADE out of the wan side        Kamailio; no route
                                 DNAT udp 5060 + the RTP range → .2    to 10.77.0.0/24

That is the documented setup (docs/telephony.md, NAT): the SIP port and the RTP
range forwarded to callhook, which is told its public address with ``[sip]
external_address``. SIPp calls ``sip:ivr@198.51.100.1:5060``; nothing in ``wan`` can
reach 10.77.0.2 except through the router's forwards, so the call completes only if
callhook advertises the public address: the 200 OK's Contact (where SIPp sends its
ACK and BYE), the SDP's o=/c= (where SIPp sends its RTP with RFC 4733 digits) and the
Via of callhook's own BYE. The control case runs without ``external_address``:
callhook then names 10.77.0.2, which the caller cannot reach, and the call fails.

The third test takes the SIP port forward away: callhook registers (through the
masquerade) with Kamailio on the public side, and a call to its number comes back
through the NAT binding that REGISTER opened (what the 25 s keep-alives hold open).

callhook's application server (the ``app`` fixture) listens on 127.0.0.1 of the root
namespace, which ``lan`` cannot reach: the test opens a listening socket *inside*
``lan`` on 127.0.0.1 with the same port (setns(2) in a short-lived thread; a socket
keeps the namespace it was made in) and relays each connection to the app, so the
app's URLs work unchanged from callhook's side. Nothing touches the root namespace's
addresses or routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import harness, kamailio, sipp
from tests.e2e.harness import Server
from tests.e2e.kamailio import Provider
from tests.e2e.rtpstream import Stream
from tests.e2e.test_sip_calls import get_number, write_prompt

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

LAN_IP = "10.77.0.2"
ROUTER_LAN_IP = "10.77.0.1"
PUBLIC_IP = "198.51.100.1"  # the router's "public" address (RFC 5737 TEST-NET-2)
CALLER_IP = "198.51.100.2"
SIP_PORT = 5060
RTP_PORTS = (20000, 20100)  # callhook's range, forwarded as it is
CALLER_SIP_PORT = 5070
CALLER_MEDIA_PORT = 6000

CLONE_NEWNET = 0x40000000
T = TypeVar("T")

#: The caller in ``wan`` has a public address: [security] allow must name it.
ALLOW_CALLER = f'[security]\nallow = ["{CALLER_IP}/32"]\n'


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=15, check=False)


def _check(*args: str) -> str:
    done = _run(*args)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


@dataclass
class Nat:
    """The three namespaces' names, and the router's nat rules by their comment."""

    lan: str
    rtr: str
    wan: str
    rules: dict[str, list[str]] = field(default_factory=dict)

    @staticmethod
    def exec(netns: str) -> list[str]:
        return ["ip", "netns", "exec", netns]

    def delete(self, comment: str) -> None:
        """Remove one of the router's rules (e.g. the SIP port forward)."""
        _check(*self.exec(self.rtr), "iptables", "-t", "nat", "-D", *self.rules.pop(comment))

    def add(self, comment: str, rule: list[str]) -> None:
        """Add a rule to the router's nat table, known by ``comment``."""
        rule = [*rule[:-2], "-m", "comment", "--comment", comment, *rule[-2:]]
        _check(*self.exec(self.rtr), "iptables", "-t", "nat", "-I", *rule)
        self.rules[comment] = rule

    def counters(self) -> dict[str, int]:
        """Packets that matched each commented nat rule of the router (iptables-save -c)."""
        text = _check(*self.exec(self.rtr), "iptables-save", "-c", "-t", "nat")
        found: dict[str, int] = {}
        for line in text.splitlines():
            match = re.match(r"\[(\d+):\d+\] .*--comment \"?([\w-]+)\"?", line)
            if match:
                found[match.group(2)] = int(match.group(1))
        return found


def _remove(nat: Nat) -> None:
    """Kill whatever still runs in the namespaces (started by this test), then delete them."""
    for name in (nat.lan, nat.rtr, nat.wan):
        pids = _run("ip", "netns", "pids", name).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _run("ip", "netns", "del", name)  # the veths go with them


@pytest.fixture
def nat() -> Iterator[Nat]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces and iptables need root")
    for tool in ("ip", "iptables", "iptables-save"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install iproute2 iptables)")
    pid = os.getpid()
    topology = Nat(lan=f"chk-lan-{pid}", rtr=f"chk-rtr-{pid}", wan=f"chk-wan-{pid}")
    _remove(topology)  # leftovers of a killed run with the same pid
    try:
        try:
            for name in (topology.lan, topology.rtr, topology.wan):
                _check("ip", "netns", "add", name)
        except RuntimeError as error:
            pytest.skip(f"ip netns cannot be used here: {error}")
        lan, rtr, wan = topology.lan, topology.rtr, topology.wan
        # veth ends are made directly in their namespaces: no name in the root namespace
        _check("ip", "link", "add", "lan0", "netns", lan, "type", "veth",
               "peer", "name", "rlan0", "netns", rtr)  # fmt: skip
        _check("ip", "link", "add", "wan0", "netns", wan, "type", "veth",
               "peer", "name", "rwan0", "netns", rtr)  # fmt: skip
        for netns, device, address in (
            (lan, "lan0", f"{LAN_IP}/24"),
            (rtr, "rlan0", f"{ROUTER_LAN_IP}/24"),
            (rtr, "rwan0", f"{PUBLIC_IP}/24"),
            (wan, "wan0", f"{CALLER_IP}/24"),
        ):
            _check("ip", "-n", netns, "addr", "add", address, "dev", device)
            _check("ip", "-n", netns, "link", "set", device, "up")
        for netns in (lan, rtr, wan):
            _check("ip", "-n", netns, "link", "set", "lo", "up")
        _check("ip", "-n", lan, "route", "add", "default", "via", ROUTER_LAN_IP)
        _check(*topology.exec(rtr), "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        first, last = RTP_PORTS
        topology.rules = {
            "masquerade": ["POSTROUTING", "-o", "rwan0", "-m", "comment", "--comment",
                           "masquerade", "-j", "MASQUERADE"],
            "sip": ["PREROUTING", "-i", "rwan0", "-p", "udp", "--dport", str(SIP_PORT),
                    "-m", "comment", "--comment", "sip", "-j", "DNAT", "--to-destination", LAN_IP],
            "rtp": ["PREROUTING", "-i", "rwan0", "-p", "udp", "--dport", f"{first}:{last}",
                    "-m", "comment", "--comment", "rtp", "-j", "DNAT", "--to-destination", LAN_IP],
        }  # fmt: skip
        for rule in topology.rules.values():
            try:
                _check(*topology.exec(rtr), "iptables", "-t", "nat", "-A", *rule)
            except RuntimeError as error:
                pytest.skip(f"iptables cannot be used here: {error}")
        yield topology
    finally:
        _remove(topology)


def in_netns(netns: str, function: Callable[[], T]) -> T:
    """``function()`` run by a thread that entered namespace ``netns`` (setns(2)).

    What it makes keeps the namespace: sockets, and child processes it starts. The
    thread ends with its pool, so no thread of this process stays in the namespace.
    """

    def run() -> T:
        libc = ctypes.CDLL(None, use_errno=True)
        with open(f"/run/netns/{netns}") as handle:
            if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"setns({netns}): {os.strerror(error)}")
        return function()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


def _listen_in(netns: str, host: str, port: int) -> socket.socket:
    """A TCP listening socket of namespace ``netns``."""

    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(16)
        sock.setblocking(False)
        return sock

    return in_netns(netns, make)


@contextlib.asynccontextmanager
async def app_reachable_from(netns: str, app: AppServer) -> AsyncIterator[None]:
    """Relay 127.0.0.1:<app.port> of ``netns`` to the app on the root namespace's loopback."""

    writers: set[asyncio.StreamWriter] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        app_reader, app_writer = await asyncio.open_connection("127.0.0.1", app.port)
        await asyncio.gather(pipe(reader, app_writer), pipe(app_reader, writer))

    server = await asyncio.start_server(relay, sock=_listen_in(netns, "127.0.0.1", app.port))
    try:
        yield
    finally:
        server.close()
        for writer in writers:  # callhook's keep-alive connections to the app
            writer.close()
        await server.wait_closed()


@dataclass
class Caller:
    """How a SIPp run in ``wan`` went: its exit status, output, errors and <log> lines."""

    returncode: int
    output: str
    errors: str
    logs: str

    @property
    def report(self) -> str:
        return f"{self.output}\n{self.errors}\n{self.logs}"


async def sipp_in(
    netns: str,
    scenario_text: str,
    workdir: Path,
    *,
    timeout: int,
    target: tuple[str, int] = (PUBLIC_IP, SIP_PORT),
) -> Caller:
    """One SIPp call from ``CALLER_IP`` in ``netns``, to the router's public SIP port."""
    assert sipp.SIPP is not None
    path = workdir / "scenario.xml"
    path.write_text(scenario_text)
    errors, logs = workdir / "sipp-errors.log", workdir / "sipp-logs.log"
    proc = await asyncio.create_subprocess_exec(
        *Nat.exec(netns), sipp.SIPP, "-sf", str(path), f"{target[0]}:{target[1]}",
        "-i", CALLER_IP, "-p", str(CALLER_SIP_PORT),
        "-mi", CALLER_IP, "-mp", str(CALLER_MEDIA_PORT),
        "-m", "1", "-nostdin", "-t", "u1", "-timeout", f"{timeout}s",
        "-trace_err", "-error_file", str(errors), "-trace_logs", "-log_file", str(logs),
        cwd=workdir, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout + 10)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    return Caller(
        proc.returncode or 0,
        out.decode(errors="replace"),
        errors.read_text(errors="replace") if errors.exists() else "",
        logs.read_text(errors="replace") if logs.exists() else "",
    )


def serve_in_lan(
    nat: Nat,
    monkeypatch: pytest.MonkeyPatch,
    data_dir: Path,
    app: AppServer,
    config: Path,
    workers: int = 1,
) -> Server:
    """``callhook serve`` run inside ``lan`` on 10.77.0.2:5060 with the forwarded RTP range."""
    monkeypatch.setattr(harness, "CALLHOOK", [*nat.exec(nat.lan), sys.executable, "-m", "callhook"])
    # Later options win (argparse): the harness's 127.0.0.1 ports give way to these.
    extra = (
        "--config", str(config),
        "--sip", f"{LAN_IP}:{SIP_PORT}",
        "--rtp-ports", f"{RTP_PORTS[0]}-{RTP_PORTS[1]}",
        "--workers", str(workers),
    )  # fmt: skip
    return Server.for_app(data_dir, app, extra=extra)


def _escaped(ip: str) -> str:
    return ip.replace(".", "\\.")


def answered_naming(ip: str, contact_port: str = str(SIP_PORT)) -> str:
    """SIPp's 200 OK handling with checks that Contact, o= and c= name ``ip`` (the Contact
    with ``contact_port``, a regular expression), then ACK."""
    return f"""
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="200" rrs="true">
    <action>
      <ereg regexp="c=IN IP4 {_escaped(ip)}" search_in="body" check_it="true" assign_to="c"/>
      <ereg regexp="o=[^\\r\\n]* IN IP4 {_escaped(ip)}" search_in="body" check_it="true"
            assign_to="o"/>
      <ereg regexp="sip:[^@>]*@{_escaped(ip)}:{contact_port}" search_in="hdr" header="Contact:"
            check_it="true" assign_to="contact"/>
      <log message="advertised: [$c] | [$o] | [$contact]"/>
    </action>
  </recv>
""" + sipp.ANSWERED.split('<recv response="200" rrs="true"/>', 1)[1]


BYE_FROM_PUBLIC_ADDRESS = f"""
  <recv request="BYE" timeout="{{timeout_ms}}">
    <action>
      <ereg regexp="SIP/2.0/UDP {_escaped(PUBLIC_IP)}:{SIP_PORT};[^\\r\\n]*{{via_ends}}"
            search_in="hdr" header="Via:" check_it="true" assign_to="via"/>
    </action>
  </recv>
  <Reference variables="via"/>
""" + sipp.BYE_FROM_SERVER.split("/>", 1)[1]


@pytest.mark.parametrize("workers", [1, 2])
async def test_call_through_a_real_nat(
    tmp_path: Path, app: AppServer, nat: Nat, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """The call works only if callhook names the public address: one process, or two
    workers behind Kamailio (which then names it in Record-Route and its Via; the
    workers in their Contact, with their own port, reached through Kamailio's route)."""
    if workers > 1 and (kamailio.KAMAILIO is None or kamailio.MODULES is None):
        pytest.skip("kamailio is not installed (Debian package kamailio)")
    data = tmp_path / "data"
    write_prompt(data)
    app.page("/start", [get_number(digit_count=4)])
    app.page("/number", [{"hang_up": {}}])  # callhook's BYE goes to the caller through the NAT
    app.page("/final", None)
    config = tmp_path / "callhook.toml"
    config.write_text(
        f'[sip]\nexternal_address = "{PUBLIC_IP}"\n' + ALLOW_CALLER + "[speech]\npreload = false\n"
    )
    pcap = Stream(6.0).rfc4733("2580", at=1.0).write_pcap(tmp_path / "caller.pcap")
    scenario = sipp.scenario(
        sipp.invite("ivr"),
        answered_naming(PUBLIC_IP, str(SIP_PORT) if workers == 1 else "51[0-9][0-9]"),
        sipp.PLAY.format(pcap=pcap),
        # Kamailio's own Via carries no rport: what matters is the public address.
        BYE_FROM_PUBLIC_ADDRESS.format(timeout_ms=10000, via_ends="rport" if workers == 1 else ""),
    )
    server = serve_in_lan(nat, monkeypatch, data, app, config, workers)
    server.start_timeout = 150.0 if workers > 1 else server.start_timeout
    async with app_reachable_from(nat.lan, app), server:
        run = await sipp_in(nat.wan, scenario, tmp_path, timeout=15)
    report = run.report + server.output
    assert run.returncode == 0, report
    assert f"advertised: c=IN IP4 {PUBLIC_IP} |" in run.logs, report
    assert f"advertising {PUBLIC_IP} in Contact, Via and SDP" in server.output
    if workers > 1:
        assert "with 2 workers behind Kamailio" in server.output, report
    (number,) = app.bodies("/number")  # the RFC 4733 digits came in through the RTP forward
    assert number["action_result"]["result"] == {"entered_number": "2580"}, report
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "completed"  # callhook's BYE was answered
    # It did go through the router: the SIP forward opened the dialog's flow, and the RTP
    # flow was opened by the forward (caller first) or by masquerading (callhook first).
    counters = nat.counters()
    assert counters["sip"] >= 1 and counters["rtp"] + counters["masquerade"] >= 1, counters


async def test_without_external_address_the_call_fails_behind_nat(
    tmp_path: Path, app: AppServer, nat: Nat, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: same topology and call, no ``external_address``: callhook names
    10.77.0.2, which the caller cannot reach, so its ACK and its RTP go nowhere."""
    data = tmp_path / "data"
    write_prompt(data)
    app.page("/start", [get_number(digit_count=4, seconds_timeout=3)])
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)
    config = tmp_path / "callhook.toml"
    config.write_text("[sip]\n" + ALLOW_CALLER)
    pcap = Stream(3.0).rfc4733("2580", at=0.5).write_pcap(tmp_path / "caller.pcap")
    scenario = sipp.scenario(
        sipp.invite("ivr"),
        answered_naming(LAN_IP),  # passes: the private address is what callhook advertises
        sipp.PLAY.format(pcap=pcap),
        sipp.BYE_FROM_SERVER.format(timeout_ms=3500),
    )
    async with (
        app_reachable_from(nat.lan, app),
        serve_in_lan(nat, monkeypatch, data, app, config) as server,
    ):
        run = await sipp_in(nat.wan, scenario, tmp_path, timeout=10)
    report = run.report + server.output
    assert f"advertised: c=IN IP4 {LAN_IP} |" in run.logs, report
    assert "Network is unreachable" in run.report, report  # SIPp's ACK and RTP to 10.77.0.2
    assert run.returncode != 0, report  # no BYE from callhook: its application got nothing
    assert app.bodies("/number") == [], report  # no digits reached callhook


# --- registration through the NAT ---------------------------------------------------------

REGISTRAR_PORT = 5080
DID = "+441234567890"


class WanProvider(Provider):
    """tests/e2e/kamailio.py's provider listening on the caller's side (``wan``)."""

    def _render(self) -> str:
        text = super()._render()
        for transport in ("udp", "tcp"):
            text = text.replace(
                f"listen={transport}:127.0.0.1:", f"listen={transport}:{CALLER_IP}:"
            )
        return text


@pytest.mark.parametrize(
    ("port_moves", "workers"),
    [(False, 1), (True, 1), (False, 2)],
    ids=["same-port", "nat-moves-port", "two-workers"],
)
async def test_registration_and_a_call_through_the_nat_binding(
    tmp_path: Path,
    app: AppServer,
    nat: Nat,
    monkeypatch: pytest.MonkeyPatch,
    port_moves: bool,
    workers: int,
) -> None:
    """callhook registers with Kamailio on the public side through the masquerade; a call to
    its number comes back through the binding that REGISTER opened: the router does
    not forward the SIP port here (only the RTP range). When the NAT gives callhook's
    SIP socket another port (``port_moves``), callhook learns it from the Via of the 2xx
    (``received``/``rport``, RFC 3581) and registers that address instead. With two
    workers, worker 0 registers through Kamailio: the REGISTER leaves from Kamailio's
    port, and the call comes back there through the binding, to either worker."""
    if kamailio.KAMAILIO is None or kamailio.MODULES is None:
        pytest.skip("kamailio is not installed (Debian package kamailio)")
    nat.delete("sip")
    if port_moves:  # SIP from callhook leaves from a port in 40000-40100, not 5060
        nat.add(
            "sipmove",
            ["POSTROUTING", "-o", "rwan0", "-p", "udp", "--sport", str(SIP_PORT),
             "-j", "MASQUERADE", "--to-ports", "40000-40100"],
        )  # fmt: skip
    data = tmp_path / "data"
    write_prompt(data, seconds=0.5)
    app.page("/support", [get_number(digit_count=2)])
    app.page("/number", [{"hang_up": {}}])
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    provider = WanProvider(tmp_path / "provider", domain=CALLER_IP)
    provider.udp = provider.tcp = (CALLER_IP, REGISTRAR_PORT)  # wan's own ports: all free
    config = tmp_path / "callhook.toml"
    config.write_text(
        f"""[sip]
external_address = "{PUBLIC_IP}"
[speech]
preload = false
[trunks.provider]
registrar = "{CALLER_IP}:{REGISTRAR_PORT}"
username = "{provider.username}"
password = "{provider.password}"
[apps.support]
first_page = "{app.url("/support")}"
final_page = "{app.url("/final")}"
secret = "{app.secret}"
numbers = ["{DID}"]
"""
    )
    pcap = Stream(3.5).rfc4733("47", at=1.0).write_pcap(tmp_path / "caller.pcap")
    scenario = sipp.scenario(
        sipp.invite(DID),
        sipp.ANSWERED,
        sipp.PLAY.format(pcap=pcap),
        sipp.BYE_FROM_SERVER.format(timeout_ms=8000),
    )
    try:
        in_netns(nat.wan, provider.start)  # Kamailio is started from inside wan
        server = serve_in_lan(nat, monkeypatch, data, app, config, workers)
        server.start_timeout = 150.0 if workers > 1 else server.start_timeout
        async with app_reachable_from(nat.lan, app), server:
            await provider.wait_registered(timeout=10)
            run = await sipp_in(
                nat.wan, scenario, tmp_path, timeout=12, target=(CALLER_IP, REGISTRAR_PORT)
            )
            # The binding now: when the NAT moves the port, callhook registers again with
            # the port it learns from the first 200 (a few ms later; the first REGISTER's
            # contact may be what wait_registered saw).
            (contact,) = provider.registered()
        log = provider.log_text()
        report = run.report + server.output + log
        if port_moves:
            host, port = contact.split("@")[1].split(";")[0].split(":")
            assert host == PUBLIC_IP and 40000 <= int(port) <= 40100, report
            assert "trunk provider: registered: behind NAT: registering" in server.output
        else:
            assert contact.startswith(f"sip:{provider.username}@{PUBLIC_IP}:{SIP_PORT}"), report
            # The REGISTER reached Kamailio from the router's public address: masqueraded.
            assert f"by {provider.username} from {PUBLIC_IP}:{SIP_PORT}/udp done" in log, report
        assert run.returncode == 0, report
        (number,) = app.bodies("/number")
        assert number["action_result"]["result"] == {"entered_number": "47"}, report
        assert DID in number["this_call"]["call_to"]
        assert provider.registered() == []  # the unREGISTER at shutdown got through too
        if workers > 1:
            assert "with 2 workers behind Kamailio" in server.output, report
            assert server.output.count("trunk provider: registered") == 1, report
    finally:
        provider.close()
    counters = nat.counters()
    assert counters["sipmove" if port_moves else "masquerade"] >= 1, counters
    assert "sip" not in counters, counters
