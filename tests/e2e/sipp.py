"""SIPp scenarios for the end-to-end tests, and running SIPp (Debian ``sip-tester``).

Scenarios are built from small pieces so each test says what its caller does:
``caller(...)`` is a UAC that calls, sends its RTP stream (a pcap), does the
test's middle part (INFO digits, a BYE, ...) and answers callhook's BYE.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

SIPP = shutil.which("sipp")

HEADER = '<?xml version="1.0" encoding="ISO-8859-1" ?>\n<!DOCTYPE scenario SYSTEM "sipp.dtd">\n'

INVITE = """
  <send retrans="500"><![CDATA[
INVITE sip:{user}@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
To: <sip:{user}@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 INVITE
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Type: application/sdp
Content-Length: [len]

v=0
o=sipp 1 1 IN IP4 [local_ip]
s=-
c=IN IP4 [media_ip]
t=0 0
m=audio [media_port] RTP/AVP {formats}
{rtpmaps}a=ptime:20
]]></send>
"""

ANSWERED = """
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="200" rrs="true"/>
  <send><![CDATA[
ACK [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
[routes]
Call-ID: [call_id]
CSeq: 1 ACK
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Length: 0

]]></send>
"""

PLAY = """
  <nop><action><exec play_pcap_audio="{pcap}"/></action></nop>
"""

PAUSE = """
  <pause milliseconds="{ms}"/>
"""

INFO = """
  <send retrans="500"><![CDATA[
INFO [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
[routes]
Call-ID: [call_id]
CSeq: {cseq} INFO
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Type: application/dtmf-relay
Content-Length: [len]

Signal={digit}
Duration=160
]]></send>
  <recv response="200"/>
"""

BYE_FROM_CALLER = """
  <send retrans="500"><![CDATA[
BYE [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
[routes]
Call-ID: [call_id]
CSeq: {cseq} BYE
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Length: 0

]]></send>
  <recv response="200"/>
"""

BYE_FROM_SERVER = """
  <recv request="BYE" timeout="{timeout_ms}"/>
  <send><![CDATA[
SIP/2.0 200 OK
[last_Via:]
[last_From:]
[last_To:]
[last_Call-ID:]
[last_CSeq:]
Content-Length: 0

]]></send>
"""

CANCEL = """
  <recv response="100" optional="true"/>
  <recv response="180"/>
  <send><![CDATA[
CANCEL sip:{user}@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch-3]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
To: <sip:{user}@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 CANCEL
Max-Forwards: 70
Content-Length: 0

]]></send>
  <recv response="200"/>
  <recv response="487"/>
  <send><![CDATA[
ACK sip:{user}@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch-6]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: 1 ACK
Max-Forwards: 70
Content-Length: 0

]]></send>
"""

#: The INVITE refused with ``{status}``, and its ACK (hop by hop: the INVITE's Via, §17.1.1.3).
REFUSED = """
  <recv response="100" optional="true"/>
  <recv response="{status}"/>
  <send><![CDATA[
ACK sip:{user}@[remote_ip]:[remote_port] SIP/2.0
[last_Via:]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: 1 ACK
Max-Forwards: 70
Content-Length: 0

]]></send>
"""

END = """
  <timewait milliseconds="200"/>
</scenario>
"""

CODECS = {
    "PCMU": ("0", "a=rtpmap:0 PCMU/8000\n"),
    "PCMA": ("8", "a=rtpmap:8 PCMA/8000\n"),
}
TELEPHONE_EVENT = ("101", "a=rtpmap:101 telephone-event/8000\na=fmtp:101 0-16\n")


def invite(user: str = "ivr", codec: str = "PCMU", telephone_event: bool = True) -> str:
    fmt, rtpmap = CODECS[codec]
    formats, rtpmaps = [fmt], rtpmap
    if telephone_event:
        formats.append(TELEPHONE_EVENT[0])
        rtpmaps += TELEPHONE_EVENT[1]
    return INVITE.format(user=user, formats=" ".join(formats), rtpmaps=rtpmaps)


def scenario(*parts: str) -> str:
    return HEADER + '<scenario name="callhook e2e">\n' + "".join(parts) + END


@dataclass
class SippRun:
    returncode: int
    output: str
    errors: str
    #: SIPp's own log of the messages it sent and received (``-trace_msg``), when asked for.
    messages: str = ""

    def message_times(self) -> list[tuple[float, str, str]]:
        """``(time, "sent" or "received", first line)`` of each message in :attr:`messages`,
        the time on SIPp's own wall clock (epoch seconds): a reference that does not share
        the path under test."""
        found: list[tuple[float, str, str]] = []
        for block in self.messages.split("----------------------------------------------- ")[1:]:
            head, _, rest = block.partition("\n")
            when = " ".join(head.split())  # SIPp separates the date and time with a tab
            stamp = datetime.strptime(when, "%Y-%m-%d %H:%M:%S.%f").timestamp()
            direction = "sent" if " sent " in rest.partition("\n")[0] else "received"
            first = next(line for line in rest.split("\n")[1:] if line.strip())
            found.append((stamp, direction, first.strip()))
        return found

    def seconds_answered(self) -> float:
        """How long SIPp held the call up by its own clock: from the first ``200 OK`` it
        received to the ``BYE`` it sent."""
        times = self.message_times()
        answered = next(t for t, way, line in times if way == "received" and " 200 " in line)
        bye = next(t for t, way, line in times if way == "sent" and line.startswith("BYE "))
        return bye - answered


def control_socket(port: int) -> tuple[str, ...]:
    """SIPp's options for its UDP control socket on loopback at ``port``. Left alone it
    binds 0.0.0.0:8888 (or the next port free), inside the span of media ports the
    harness deals to a pytest-xdist worker (``harness.free_even_udp_port``): another
    worker's SIPp, given a media port there, then fails to bind it (errno 98, "Unable to
    bind audio RTP socket (IP=127.0.0.1, port=8888)", seen once in a full run)."""
    return ("-ci", "127.0.0.1", "-cp", str(port))


async def call(
    server: tuple[str, int],
    workdir: Path,
    *parts: str,
    transport: str = "udp",
    trace_messages: bool = False,
) -> SippRun:
    """One SIPp call made of scenario ``parts``, from free local ports, over ``transport``
    (``udp`` or ``tcp``: SIPp's ``-t u1`` / ``-t t1``, one socket); with
    ``trace_messages``, SIPp's timestamped log of its messages comes back in
    :attr:`SippRun.messages`."""
    from tests.e2e.harness import free_even_udp_port, free_udp_port

    local_port = free_udp_port()
    extra: tuple[str, ...] = ("-t", {"udp": "u1", "tcp": "t1"}[transport])
    log = workdir / f"sipp-{local_port}-messages.log"
    if trace_messages:
        extra += ("-trace_msg", "-message_file", str(log))
    run = await run_sipp(
        scenario(*parts),
        server,
        workdir,
        local_port=local_port,
        media_port=free_even_udp_port(),
        extra=extra,
    )
    if trace_messages and log.exists():
        run.messages = log.read_text(errors="replace")
    return run


async def run_sipp(
    scenario_text: str,
    server: tuple[str, int],
    workdir: Path,
    *,
    local_port: int,
    media_port: int,
    timeout: float = 60.0,
    extra: tuple[str, ...] = (),
    local_ip: str = "127.0.0.1",
) -> SippRun:
    """Run one SIPp call of ``scenario_text`` against ``server``, bounded by ``timeout``,
    from ``local_ip`` (SIP and media)."""
    from tests.e2e.harness import free_udp_port

    assert SIPP is not None, "SIPp (Debian package sip-tester) is not installed"
    path = workdir / f"scenario-{local_port}.xml"
    path.write_text(scenario_text)
    errors = workdir / f"sipp-{local_port}-errors.log"
    proc = await asyncio.create_subprocess_exec(
        SIPP,
        "-sf",
        str(path),
        f"{server[0]}:{server[1]}",
        "-i",
        local_ip,
        "-p",
        str(local_port),
        "-mi",
        local_ip,
        "-mp",
        str(media_port),
        *control_socket(free_udp_port()),
        "-m",
        "1",
        "-nostdin",
        "-trace_err",
        "-error_file",
        str(errors),
        "-timeout",
        f"{int(timeout)}s",
        *extra,
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout + 10)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    error_text = errors.read_text(errors="replace") if errors.exists() else ""
    return SippRun(proc.returncode or 0, out.decode(errors="replace"), error_text)


UAS_CHALLENGE = """
  <recv request="INVITE"/>
  <send><![CDATA[
SIP/2.0 401 Unauthorized
[last_Via:]
[last_From:]
[last_To:];tag=[pid]SIPpTag01[call_number]
[last_Call-ID:]
[last_CSeq:]
WWW-Authenticate: Digest realm="trunk.example", nonce="6a2d3c0e9f1b4e7a", qop="auth"
Content-Length: 0

]]></send>
  <recv request="ACK"/>
  <recv request="INVITE">
    <action><verifyauth assign_to="authvalid" username="{username}" password="{password}"/></action>
  </recv>
  <nop test="authvalid" next="goodauth"/>
  <send><![CDATA[
SIP/2.0 403 Forbidden
[last_Via:]
[last_From:]
[last_To:];tag=[pid]SIPpTag01[call_number]
[last_Call-ID:]
[last_CSeq:]
Content-Length: 0

]]></send>
  <recv request="ACK" next="end"/>
  <label id="goodauth"/>
"""


def uas_response(status: int, reason: str, *, sdp: bool, retrans: bool = False) -> str:
    """A callee's response to the INVITE it received (its To tag fixed for the call), with
    its SDP (our media address; PCMU and telephone-event) when ``sdp``."""
    body = (
        "Content-Type: application/sdp\nContent-Length: [len]\n\n"
        "v=0\no=sipp 1 1 IN IP4 [local_ip]\ns=-\nc=IN IP4 [media_ip]\nt=0 0\n"
        "m=audio [media_port] RTP/AVP 0 101\na=rtpmap:0 PCMU/8000\n"
        "a=rtpmap:101 telephone-event/8000\na=fmtp:101 0-16\na=ptime:20\n"
        if sdp
        else "Content-Length: 0\n\n"
    )
    send = '  <send retrans="500">' if retrans else "  <send>"
    return (
        f"{send}<![CDATA[\n"
        f"SIP/2.0 {status} {reason}\n"
        "[last_Via:]\n[last_From:]\n[last_To:];tag=[pid]SIPpTag01[call_number]\n"
        "[last_Call-ID:]\n[last_CSeq:]\n"
        "Contact: <sip:[local_ip]:[local_port];transport=[transport]>\n"
        f"{body}]]></send>\n"
    )


UAS_ANSWER = (
    "\n{receive}\n"
    + uas_response(180, "Ringing", sdp=False).replace("{", "{{").replace("}", "}}")
    + uas_response(200, "OK", sdp=True, retrans=True).replace("{", "{{").replace("}", "}}")
    + '  <recv request="ACK"/>\n'
)

#: A callee that remembers the INVITE's From, To and Contact, to hang up itself (BYE_FROM_UAS).
UAS_RECEIVE_REMEMBERING = """
  <recv request="INVITE">
    <action>
      <ereg regexp=".*" search_in="hdr" header="From:" check_it="true" assign_to="caller"/>
      <ereg regexp=".*" search_in="hdr" header="To:" check_it="true" assign_to="callee"/>
      <ereg regexp="sips?:[^>;]*" search_in="hdr" header="Contact:" check_it="true"
            assign_to="contact"/>
    </action>
  </recv>
"""

BYE_FROM_UAS = """
  <send retrans="500"><![CDATA[
BYE [$contact] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: [$callee];tag=[pid]SIPpTag01[call_number]
To: [$caller]
Call-ID: [call_id]
CSeq: 1 BYE
Contact: <sip:[local_ip]:[local_port];transport=[transport]>
Max-Forwards: 70
Content-Length: 0

]]></send>
  <recv response="200"/>
"""

UAS_BYE = (
    BYE_FROM_SERVER
    + """  <label id="end"/>
"""
)


def uas(*, play: str | None = None, username: str | None = None, password: str = "") -> str:
    """A callee that answers (after a digest challenge when ``username`` is given)."""
    parts = []
    if username is not None:
        parts.append(UAS_CHALLENGE.format(username=username, password=password))
        parts.append(UAS_ANSWER.format(receive=""))
    else:
        parts.append(UAS_ANSWER.format(receive='  <recv request="INVITE"/>'))
    if play is not None:
        parts.append(PLAY.format(pcap=play))
    parts.append(UAS_BYE.format(timeout_ms=30000))
    return scenario(*parts)


async def start_sipp(
    scenario_text: str, workdir: Path, *, local_port: int, media_port: int
) -> asyncio.subprocess.Process:
    """Start SIPp as a server (UAS) for one call; wait on the process for its result."""
    from tests.e2e.harness import free_udp_port

    assert SIPP is not None, "SIPp (Debian package sip-tester) is not installed"
    path = workdir / f"uas-{local_port}.xml"
    path.write_text(scenario_text)
    return await asyncio.create_subprocess_exec(
        SIPP,
        "-sf",
        str(path),
        "-i",
        "127.0.0.1",
        "-p",
        str(local_port),
        "-mi",
        "127.0.0.1",
        "-mp",
        str(media_port),
        *control_socket(free_udp_port()),
        "-m",
        "1",
        "-nostdin",
        "-trace_err",
        "-timeout",
        "60s",
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


REINVITE = """
  <send retrans="500"><![CDATA[
INVITE [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
[routes]
Call-ID: [call_id]
CSeq: {cseq} INVITE
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Type: application/sdp
Content-Length: [len]

v=0
o=sipp 1 {version} IN IP4 [local_ip]
s=-
c=IN IP4 [media_ip]
t=0 0
m=audio [media_port] RTP/AVP 0 101
a=rtpmap:0 PCMU/8000
a=rtpmap:101 telephone-event/8000
a={direction}
]]></send>
  <recv response="100" optional="true"/>
  <recv response="200">
    <action>
      <ereg regexp="a={expect}" search_in="body" check_it="true" assign_to="dir{cseq}"/>
    </action>
  </recv>
  <Reference variables="dir{cseq}"/>
  <send><![CDATA[
ACK [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
[routes]
Call-ID: [call_id]
CSeq: {cseq} ACK
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Length: 0

]]></send>
"""
