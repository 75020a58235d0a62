"""SIPVicious (``svmap``, ``svwar``, ``svcrack`` from the package registry, never with
``-R``) against a real ``serve`` on 127.0.0.1, scanning from 127.0.0.2, which the test
config leaves out of ``[security] allow`` (docs/security.md).

With the default ``unknown = "drop"`` the scanners get no answer at all: svmap finds
nothing, svwar's first probe times out, svcrack gives up after its first REGISTER (it
sends no second one, so there is nothing to ban). With ``unknown = "reject"`` every
request gets the same 403 whatever user it names (``sip:nosuchuser@`` and ``sip:demo@``
alike) and no Server header, so svmap lists a device it cannot fingerprint and svwar
enumerates nothing; svcrack, answered, hammers on and is banned after the guard's burst
(2 x ``rate``), which ``GET /api/bans`` shows.

sipvicious 0.3.8's svwar and svcrack read ``-b`` but never pass it to their scanner (svmap
does), so they are run through :data:`BIND_AS_TOLD`, which binds their socket to the
``-b`` address as the option says; everything else is the tools' own code and output.
Each scanner binds an ephemeral port (``-P 0``; its Via then says port 0, so the
answers it gets are the ones sent by rport, RFC 3581).
"""

from __future__ import annotations

import ast
import asyncio
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e.harness import Server

pytest.importorskip("sipvicious")

OUTSIDER = "127.0.0.2"
SVMAP = Path(sys.executable).parent / "sipvicious_svmap"
#: Runs ``sipvicious.<tool>.main()`` with sockets bound where ``-b`` says (see the docstring).
BIND_AS_TOLD = """
import importlib, socket, sys
tool = sys.argv.pop(1)
where = sys.argv[sys.argv.index("-b") + 1]
bind = socket.socket.bind
socket.socket.bind = lambda self, address: bind(self, (address[0] or where, *address[1:]))
sys.exit(importlib.import_module("sipvicious." + tool).main())
"""
#: Headers a response copies from its request (RFC 3261 §8.2.6.2): they name the user asked
#: for and the transaction, so they differ by construction; everything else must not.
ECHOED = {"via", "from", "to", "call-id", "cseq"}


@dataclass
class Scan:
    code: int
    out: str  # stdout: the result table, --debug dumps
    log: str  # stderr: the tool's logging lines
    seconds: float

    def table(self) -> list[list[str]]:
        """The rows of the result table the tool printed (none when it found nothing)."""
        rows = [
            [cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in self.out.splitlines()
            if line.startswith("|")
        ]
        return rows[1:]  # the first is the header

    def responses(self) -> list[bytes]:
        """The SIP messages the tool received, as its --debug printed them."""
        return [
            ast.literal_eval(line)
            for line in self.out.splitlines()
            if line.startswith(("b'", 'b"'))
        ]


async def scan(tool: str, server: Server, *args: str, timeout: float = 30.0) -> Scan:
    """Run ``tool`` from 127.0.0.2 against ``server``, bounded by ``timeout``."""
    common = ["-b", OUTSIDER, "-x", OUTSIDER, "-P", "0", "-p", str(server.sip_port)]
    if tool == "svmap":
        command = [str(SVMAP), *common, *args, "127.0.0.1"]
    else:
        command = [sys.executable, "-c", BIND_AS_TOLD, tool, *common, *args, "127.0.0.1"]
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{tool} {args} ran over {timeout} s") from None
    assert proc.returncode is not None
    result = Scan(proc.returncode, out.decode(), err.decode(), time.monotonic() - started)
    print(f"--- {tool} {' '.join(args)} ({result.seconds:.1f} s, exit {result.code})")
    print(result.out + result.log)
    return result


def shape(response: bytes) -> list[str]:
    """A response with the values of the headers it echoes from its request left out."""
    head = response.split(b"\r\n\r\n", 1)[0].decode()
    first, *lines = head.split("\r\n")
    return [first] + [
        line.partition(":")[0] if line.partition(":")[0].strip().lower() in ECHOED else line
        for line in lines
    ]


def config(tmp_path: Path, unknown: str) -> tuple[str, ...]:
    path = tmp_path / "callhook.toml"
    path.write_text(f'[security]\nallow = ["127.0.0.1/32"]\nunknown = "{unknown}"\n')
    return ("--config", str(path))


def words(tmp_path: Path, name: str, *users: str) -> str:
    path = tmp_path / name
    path.write_text("".join(f"{user}\n" for user in users))
    return str(path)


async def test_scanners_outside_allow_get_nothing_when_dropped(
    tmp_path: Path, app: AppServer
) -> None:
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    users = words(tmp_path, "users", "demo", "nosuchuser", "100", "1000", "ivr", "support")
    extra = config(tmp_path, "drop")
    async with Server.for_app(tmp_path / "data", app, extra=extra) as server:
        svmap, svwar, svcrack = await asyncio.gather(
            scan("svmap", server),
            scan("svwar", server, "-d", users),
            scan("svcrack", server, "-u", "demo", "-r", "1-9999", "--maximumtime", "1"),
        )
        status, bans = await server.api("GET", "/api/bans")
    assert svmap.table() == [] and "found nothing" in svmap.log
    assert svwar.table() == [] and "found nothing" in svwar.log
    assert "socket error: timed out" in svwar.log  # its first probe was never answered
    assert svcrack.table() == [] and "no server response" in svcrack.log
    # svcrack stops after one unanswered REGISTER: too few requests for a ban
    assert status == 200 and bans == []
    assert server.output.count(f"SIP from {OUTSIDER}: not in [security] allow (drop)") == 1
    assert app.bodies("/start") == []


async def test_rejected_scanners_learn_no_users_and_the_cracker_is_banned(
    tmp_path: Path, app: AppServer
) -> None:
    app.page("/start", [{"hang_up": {}}])
    app.page("/final", None)
    extra = config(tmp_path, "reject")
    async with Server.for_app(tmp_path / "data", app, extra=extra) as server:
        # svwar stops at the first answer that is neither its "no such user" answer nor
        # one it knows: one run per user, each with its random-extension probe first.
        svmap, demo, nosuchuser = await asyncio.gather(
            scan("svmap", server),
            *(
                scan("svwar", server, "-m", "INVITE", "--force", "--debug", "-d", dictionary)
                for dictionary in (
                    words(tmp_path, "demo", "demo"),
                    words(tmp_path, "nosuchuser", "nosuchuser"),
                )
            ),
        )
        svcrack = await scan(
            "svcrack", server, "-u", "demo", "-r", "1-99999", "--maximumtime", "1", "-vvv"
        )
        status, bans = await server.api("GET", "/api/bans")

    # svmap sees something answer on serve's port, and cannot fingerprint it: the
    # refusal names no server
    ((address, agent),) = ([row[0], row[1]] for row in svmap.table())
    assert address == f"127.0.0.1:{server.sip_port}"
    assert agent == "unknown"  # svmap's word for a device it cannot fingerprint

    # svwar: the same 403 for a random extension, for demo and for nosuchuser
    for run, user in ((demo, "demo"), (nosuchuser, "nosuchuser")):
        assert run.table() == [] and "found nothing" in run.log
        probe, named = run.responses()
        assert f"<sip:{user}@".encode() in named.split(b"\r\nTo:", 1)[0]  # the user's answer
        assert probe.startswith(b"SIP/2.0 403 Forbidden\r\n")
        assert b"\r\nServer:" not in probe
        assert shape(named) == shape(probe), (probe, named)
    assert shape(demo.responses()[1]) == shape(nosuchuser.responses()[1])

    # svcrack: answered 403 (no challenge, nothing to crack) until the burst is spent,
    # then banned: no answer more, it stops; the ban is listed with its reason
    answered = len(re.findall(r"Received response: SIP/2.0 403 Forbidden", svcrack.log))
    sent = len(re.findall(r"Sending REGISTER", svcrack.log)) + 1  # and its first one
    assert svcrack.table() == [] and "found nothing" in svcrack.log
    assert "since we last received a response - stopping" in svcrack.log
    # the burst is 2 x rate (40), plus the 20 a second it refills while svcrack spends it
    # (~0.25 s at its 200 a second on an idle machine, 0.65 s seen on a slow one: bounded
    # by the whole scan's time); then the ban: none of the rest was answered.
    # (svcrack sends for its second without answers at up to 200 a second: about 200 more
    # on an idle machine, 94 seen on a loaded one; with no ban it would send none unanswered.)
    refilled = 20 * svcrack.seconds
    assert 1 <= answered <= 40 + refilled + 1 and sent > answered + 40, (answered, sent, refilled)
    assert status == 200
    (ban,) = bans
    assert ban["address"] == OUTSIDER
    assert ban["reason"] == "more than 20 SIP messages a second"
    assert 580 <= ban["seconds_left"] <= 600
    assert server.output.count(f"SIP from {OUTSIDER}: banned for 600 s") == 1
    assert app.bodies("/start") == []
