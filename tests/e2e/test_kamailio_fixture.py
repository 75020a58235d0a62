"""The Kamailio provider fixture (tests/e2e/kamailio.py) on its own, without callhook.

SIPp registers with digest authentication and takes calls for a dialled number;
a few lines of Python speak SIP over TCP and TLS (verifying the provider's
certificate with the test CA) and compute SHA-256 digests, which SIPp cannot.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import socket
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import escape

import pytest

from tests.e2e import sipp
from tests.e2e.harness import free_even_udp_port, free_udp_port
from tests.e2e.kamailio import (  # noqa: F401 (fixtures)
    Provider,
    make_provider_fixture,
    provider_fixture,
    tls_provider_fixture,
)

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

DID = "+441234567890"
SDP = """v=0
o=ua 1 1 IN IP4 127.0.0.1
s=-
c=IN IP4 127.0.0.1
t=0 0
m=audio 40000 RTP/AVP 0
a=rtpmap:0 PCMU/8000
"""
MakeProvider = Callable[..., Provider]

# -- SIPp scenarios -----------------------------------------------------------------------

REGISTER = """
  <send retrans="500"><![CDATA[
REGISTER sip:{domain} SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: <sip:{user}@{domain}>;tag=[pid]SIPpReg[call_number]
To: <sip:{user}@{domain}>
Call-ID: [call_id]
CSeq: {cseq} REGISTER
Contact: {contact}
Expires: {expires}
Max-Forwards: 70
{auth}Content-Length: 0

]]></send>
"""


def register_scenario(
    provider: Provider,
    *,
    contact: str,
    password: str | None = None,
    expires: int = 120,
    expect: str = "200",
    check: str | None = None,
) -> str:
    """REGISTER, answer the 401 with SIPp's own digest, expect ``expect`` (and ``check`` in it)."""
    fill = {"domain": provider.domain, "user": provider.username, "contact": contact}
    secret = password or provider.password
    auth = f"[authentication username={provider.username} password={secret}]\n"
    regexp = escape(check or "")
    ereg = f'<ereg regexp="{regexp}" search_in="msg" check_it="true" assign_to="seen"/>'
    action = f"<action>{ereg}</action>" if check else ""
    return sipp.scenario(
        REGISTER.format(cseq=1, expires=expires, auth="", **fill),
        '  <recv response="401" auth="true"/>\n',
        REGISTER.format(cseq=2, expires=expires, auth=auth, **fill),
        f'  <recv response="{expect}">{action}</recv>\n',
        '  <Reference variables="seen"/>\n' if check else "",
    )


CALLEE_HANGS_UP = """
  <pause milliseconds="200"/>
  <send retrans="500"><![CDATA[
BYE [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: [$callee];tag=[pid]SIPpCallee[call_number]
To: [$caller]
[routes]
Call-ID: [call_id]
CSeq: 1 BYE
Max-Forwards: 70
Content-Length: 0

]]></send>
  <recv response="200"/>
"""


def callee_scenario(*, ruri: str, to: str, hang_up: bool = False) -> str:
    """A UAS: checks where the INVITE is addressed, answers (with Record-Route), then takes
    a BYE, or sends one along the route set (``hang_up``)."""
    checks = "".join(
        f'<ereg regexp="{escape(regexp)}" search_in="msg" check_it="true" assign_to="{name}"/>'
        for name, regexp in (("ruri", ruri), ("to", to))
    )
    keep = (  # From and To of the INVITE, for a BYE of the callee's own
        '<ereg regexp=".*" search_in="hdr" header="From:" assign_to="caller"/>'
        '<ereg regexp=".*" search_in="hdr" header="To:" assign_to="callee"/>'
    )
    answer = f"""
  <recv request="INVITE" rrs="true"><action>{checks}{keep}</action></recv>
  <Reference variables="ruri,to,caller,callee"/>
  <send retrans="500"><![CDATA[
SIP/2.0 200 OK
[last_Via:]
[last_Record-Route:]
[last_From:]
[last_To:];tag=[pid]SIPpCallee[call_number]
[last_Call-ID:]
[last_CSeq:]
Contact: <sip:callee@[local_ip]:[local_port]>
Content-Type: application/sdp
Content-Length: [len]

v=0
o=callee 1 1 IN IP4 [local_ip]
s=-
c=IN IP4 [media_ip]
t=0 0
m=audio [media_port] RTP/AVP 0
a=rtpmap:0 PCMU/8000
]]></send>
  <recv request="ACK"/>
"""
    end = CALLEE_HANGS_UP if hang_up else sipp.BYE_FROM_SERVER.format(timeout_ms=10000)
    return sipp.scenario(answer, end)


def re_escape(text: str) -> str:
    return re.escape(text).replace("\\ ", " ")


async def register_with_sipp(
    provider: Provider,
    tmp_path: Path,
    *,
    contact: str,
    password: str | None = None,
    expires: int = 120,
    expect: str = "200",
    check: str | None = None,
) -> sipp.SippRun:
    """One SIPp REGISTER (see ``register_scenario``) from a free port."""
    scenario = register_scenario(
        provider, contact=contact, password=password, expires=expires, expect=expect, check=check
    )
    return await sipp.run_sipp(
        scenario,
        provider.udp,
        tmp_path,
        local_port=free_udp_port(),
        media_port=free_even_udp_port(),
        timeout=10,
    )


# -- a few lines of SIP in Python (TCP, TLS, SHA-256) ---------------------------------------


@dataclass
class Message:
    first_line: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @property
    def status(self) -> int:
        return int(self.first_line.split()[1]) if self.first_line.startswith("SIP/2.0") else 0

    def get(self, name: str) -> str | None:
        values = self.all(name)
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


def parse(data: bytes) -> Message:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
    return Message(lines[0], headers, body)


def digest(
    challenge: str, *, method: str, uri: str, username: str, password: str
) -> tuple[str, str]:
    """RFC 2617/8760 digest credentials (qop=auth if offered) for ``challenge``; its algorithm."""
    params = {k: a or b for k, a, b in re.findall(r'(\w+)=(?:"([^"]*)"|([^\s,]+))', challenge)}
    algorithm = params.get("algorithm", "MD5")
    hash_ = hashlib.sha256 if algorithm.upper() == "SHA-256" else hashlib.md5

    def h(text: str) -> str:
        return hash_(text.encode()).hexdigest()

    ha1 = h(f"{username}:{params['realm']}:{password}")
    ha2 = h(f"{method}:{uri}")
    fields = [
        f'username="{username}"',
        f'realm="{params["realm"]}"',
        f'nonce="{params["nonce"]}"',
        f'uri="{uri}"',
        f"algorithm={algorithm}",
    ]
    if "auth" in params.get("qop", "").split(","):
        cnonce = uuid.uuid4().hex[:16]
        response = h(f"{ha1}:{params['nonce']}:00000001:{cnonce}:auth:{ha2}")
        fields += ["qop=auth", "nc=00000001", f'cnonce="{cnonce}"']
    else:
        response = h(f"{ha1}:{params['nonce']}:{ha2}")
    fields.append(f'response="{response}"')
    if "opaque" in params:
        fields.append(f'opaque="{params["opaque"]}"')
    return "Digest " + ", ".join(fields), algorithm


class UA:
    """A blocking SIP user agent on one socket: UDP, or a TCP/TLS connection to the provider."""

    def __init__(self, provider: Provider, transport: Literal["udp", "tcp", "tls"] = "udp") -> None:
        self.provider = provider
        self.transport = transport
        self.remote = provider.address(transport)
        self.sock: socket.socket
        if transport == "udp":
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.bind(("127.0.0.1", 0))
        else:
            raw = socket.create_connection(self.remote, timeout=3)
            if transport == "tls":
                raw = provider.ssl_context().wrap_socket(raw, server_hostname="localhost")
            self.sock = raw
        self.sock.settimeout(3)
        self.local = self.sock.getsockname()[:2]
        # the port in Contact: a TCP/TLS client's listening port is not its connection's
        self.contact_port: int = self.local[1]
        self.buffer = b""
        self.call_id = f"{uuid.uuid4().hex}@127.0.0.1"
        self.cseq = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, text: str) -> None:
        data = text.encode()
        if self.transport == "udp":
            self.sock.sendto(data, self.remote)
        else:
            self.sock.sendall(data)

    def recv(self) -> Message:
        if self.transport == "udp":
            return parse(self.sock.recv(65535))
        while b"\r\n\r\n" not in self.buffer:
            self._read()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        found = re.search(rb"(?im)^(?:content-length|l)\s*:\s*(\d+)", head)
        length = int(found.group(1)) if found else 0
        while len(rest) < length:
            self._read()
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
        self.buffer = rest[length:]
        return parse(head + b"\r\n\r\n" + rest[:length])

    def _read(self) -> None:
        chunk = self.sock.recv(65535)
        if not chunk:
            raise ConnectionError("the provider closed the connection")
        self.buffer += chunk

    def response(self) -> Message:
        """The next final response (provisional ones skipped)."""
        while True:
            message = self.recv()
            if message.status >= 200:
                return message

    def register(
        self,
        *,
        expires: int = 120,
        username: str | None = None,
        password: str | None = None,
        authorization: str | None = None,
    ) -> Message:
        """One REGISTER (with ``authorization`` if given); the final response."""
        user = username or self.provider.username
        self.cseq += 1
        proto = self.transport.upper()
        host, port = self.local
        uri = f"sip:{self.provider.domain}"
        extra = f"Authorization: {authorization}\r\n" if authorization else ""
        self.send(
            f"REGISTER {uri} SIP/2.0\r\n"
            f"Via: SIP/2.0/{proto} {host}:{port};branch=z9hG4bK{uuid.uuid4().hex};rport\r\n"
            f"From: <sip:{user}@{self.provider.domain}>;tag=ua{self.cseq}\r\n"
            f"To: <sip:{user}@{self.provider.domain}>\r\n"
            f"Call-ID: {self.call_id}\r\nCSeq: {self.cseq} REGISTER\r\n"
            f"Contact: <sip:{user}@{host}:{self.contact_port};transport={self.transport}>\r\n"
            f"Expires: {expires}\r\nMax-Forwards: 70\r\n{extra}Content-Length: 0\r\n\r\n"
        )
        return self.response()

    def register_with_auth(
        self, *, password: str | None = None, expires: int = 120, username: str | None = None
    ) -> tuple[Message, Message]:
        """REGISTER, answer the 401 with a digest of ``password``: (the 401, the final response)."""
        user = username or self.provider.username
        challenge = self.register(expires=expires, username=user)
        assert challenge.status == 401, challenge
        header = challenge.get("WWW-Authenticate")
        assert header is not None
        credentials, _ = digest(
            header,
            method="REGISTER",
            uri=f"sip:{self.provider.domain}",
            username=user,
            password=password or self.provider.password,
        )
        return challenge, self.register(expires=expires, username=user, authorization=credentials)

    def reply(self, request: Message, status: int, reason: str, sdp: str = "") -> None:
        lines = [f"SIP/2.0 {status} {reason}"]
        for name, value in request.headers:
            if name.lower() in ("via", "record-route", "from", "call-id", "cseq"):
                lines.append(f"{name}: {value}")
            elif name.lower() == "to":
                lines.append(f"{name}: {value}" + ("" if "tag=" in value else ";tag=ua-callee"))
        if request.first_line.startswith("INVITE"):
            host = self.local[0]
            lines.append(f"Contact: <sip:ua@{host}:{self.contact_port};transport={self.transport}>")
        if sdp:
            lines.append("Content-Type: application/sdp")
        body = sdp.replace("\n", "\r\n")
        self.send("\r\n".join([*lines, f"Content-Length: {len(body)}", "", body]))


# -- the tests -----------------------------------------------------------------------------


async def test_sipp_registers_with_digest_and_the_contact_is_listed(
    tmp_path: Path, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    assert provider.registered() == []
    contact = "<sip:callhook@127.0.0.1:5099>"
    run = await register_with_sipp(
        provider, tmp_path, contact=contact, expires=120, check=";expires=120"
    )
    assert run.returncode == 0, run.output + run.errors + provider.log_text()
    assert provider.registered() == ["sip:callhook@127.0.0.1:5099"]
    (registration,) = provider.contacts()
    assert registration["AoR"] == provider.username
    assert 110 <= registration["Expires"] <= 120
    assert await provider.wait_registered() == ["sip:callhook@127.0.0.1:5099"]


@pytest.mark.parametrize("wrong_password", [401, 403])
async def test_a_wrong_password_is_refused(
    tmp_path: Path, make_provider: MakeProvider, wrong_password: Literal[401, 403]
) -> None:
    provider = make_provider(wrong_password=wrong_password)
    run = await register_with_sipp(
        provider,
        tmp_path,
        contact="<sip:callhook@127.0.0.1:5099>",
        password="not-the-password",
        expect=str(wrong_password),
    )
    assert run.returncode == 0, run.output + run.errors + provider.log_text()
    assert provider.registered() == []
    if wrong_password == 401:  # a fresh challenge, as after no credentials at all
        ua = UA(provider)
        try:
            _, second = ua.register_with_auth(password="still-wrong")
            assert second.status == 401 and second.get("WWW-Authenticate") is not None
        finally:
            ua.close()
    assert "auth failed (-2)" in provider.log_text()


async def test_only_the_account_may_register(provider: Provider) -> None:
    ua = UA(provider)
    try:  # the right password with another username: the digest is good, the user is not
        _, other = ua.register_with_auth(username="intruder")
        assert other.status == 403, other
        assert provider.registered() == []
    finally:
        ua.close()


async def test_expires_is_granted_within_min_and_max(make_provider: MakeProvider) -> None:
    provider = make_provider(min_expires=60, max_expires=300)
    ua = UA(provider)
    try:
        _, ok = ua.register_with_auth(expires=1000)
        assert ok.status == 200, ok
        assert ";expires=300" in (ok.get("Contact") or ""), ok  # capped at max_expires
        _, brief = ua.register_with_auth(expires=10)
        assert brief.status == 423, brief
        assert brief.get("Min-Expires") == "60"
        _, exact = ua.register_with_auth(expires=90)
        assert ";expires=90" in (exact.get("Contact") or ""), exact
        assert provider.contacts()[0]["Expires"] <= 90
        _, gone = ua.register_with_auth(expires=0)  # unregister
        assert gone.status == 200 and provider.registered() == []
    finally:
        ua.close()


@pytest.mark.parametrize("did_in", ["ruri", "contact"])
async def test_a_call_to_the_did_reaches_the_registered_ua(
    tmp_path: Path, make_provider: MakeProvider, did_in: str
) -> None:
    provider = make_provider(did_in=did_in)
    callee_port = free_udp_port()
    run = await register_with_sipp(
        provider, tmp_path, contact=f"<sip:callhook@127.0.0.1:{callee_port}>"
    )
    assert run.returncode == 0, run.output + run.errors + provider.log_text()
    # the dialled number in the request-URI, or the registered contact there and the number in To
    ruri_user = re_escape(DID) if did_in == "ruri" else "callhook"
    callee = await sipp.start_sipp(
        callee_scenario(
            ruri=f"INVITE sip:{ruri_user}@127\\.0\\.0\\.1:{callee_port} SIP/2\\.0",
            to=f"To: <sip:{re_escape(DID)}@",
            hang_up=did_in == "contact",
        ),
        tmp_path,
        local_port=callee_port,
        media_port=free_even_udp_port(),
    )
    try:
        await asyncio.sleep(0.3)  # the callee's socket is bound
        caller = await sipp.call(
            provider.udp,
            tmp_path,
            sipp.invite(DID),
            sipp.ANSWERED,
            *(
                (sipp.BYE_FROM_SERVER.format(timeout_ms=10000),)
                if did_in == "contact"  # this time the callee hangs up
                else (sipp.PAUSE.format(ms=200), sipp.BYE_FROM_CALLER.format(cseq=2))
            ),
        )
        callee_out, _ = await asyncio.wait_for(callee.communicate(), 15)
    finally:
        if callee.returncode is None:
            callee.kill()
            await callee.wait()
    log = provider.log_text()
    assert caller.returncode == 0, caller.output + caller.errors + log
    assert callee.returncode == 0, callee_out.decode(errors="replace") + log
    # the BYE followed the Record-Route, from whichever side hung up
    bye_from = callee_port if did_in == "contact" else None
    assert "in-dialog BYE from 127.0.0.1:" + (str(bye_from) if bye_from else "") in log, log


async def test_a_call_when_nobody_is_registered_gets_480(
    provider: Provider, tmp_path: Path
) -> None:
    failing = sipp.invite(DID) + sipp.REFUSED.format(status=480, user=DID)
    run = await sipp.call(provider.udp, tmp_path, failing)
    assert run.returncode == 0, run.output + run.errors + provider.log_text()


async def test_the_tcp_listener_challenges_a_register(provider: Provider) -> None:
    assert provider.tcp[1] == provider.udp[1]  # one port number, as providers have
    ua = UA(provider, "tcp")
    try:
        challenge, ok = ua.register_with_auth()
        assert 'qop="auth"' in (challenge.get("WWW-Authenticate") or ""), challenge
        assert ok.status == 200, ok
        (registration,) = provider.contacts()
        assert registration["Received"] == f"sip:127.0.0.1:{ua.local[1]};transport=tcp"
    finally:
        ua.close()


async def test_tls_verifies_with_the_ca_and_calls_come_back_over_the_connection(
    tmp_path: Path, tls_provider: Provider
) -> None:
    provider = tls_provider
    assert provider.tls is not None and provider.ca_file is not None
    # the certificate is for localhost and for 127.0.0.1: either name verifies
    for name in ("localhost", "127.0.0.1"):
        with (
            socket.create_connection(provider.tls, timeout=3) as raw,
            provider.ssl_context().wrap_socket(raw, server_hostname=name) as tls,
        ):
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    with (  # without the test CA the handshake fails
        pytest.raises(ssl.SSLCertVerificationError),
        socket.create_connection(provider.tls, timeout=3) as raw,
        ssl.create_default_context().wrap_socket(raw, server_hostname="localhost"),
    ):
        pass

    ua = UA(provider, "tls")
    ua.contact_port = free_udp_port()  # nothing listens there: all must come over the connection
    try:
        challenge, ok = ua.register_with_auth()
        assert challenge.status == 401 and ok.status == 200, (challenge, ok)
        (contact,) = await provider.wait_registered()
        assert contact.endswith(";transport=tls")
        caller = asyncio.create_task(
            sipp.call(
                provider.udp,
                tmp_path,
                sipp.invite(DID),
                sipp.ANSWERED,
                sipp.PAUSE.format(ms=100),
                sipp.BYE_FROM_CALLER.format(cseq=2),
            )
        )
        invite = await asyncio.to_thread(ua.recv)  # over the registered TLS connection
        assert invite.first_line.startswith(f"INVITE sip:{DID}@127.0.0.1:{ua.contact_port}")
        assert f"<sip:{DID}@" in (invite.get("To") or "")
        assert invite.all("Record-Route"), invite
        ua.reply(invite, 200, "OK", sdp=SDP)
        # the caller's ACK and BYE: routed by the alias of this UA's Contact, over the connection
        ack = await asyncio.to_thread(ua.recv)
        assert ack.first_line.startswith(f"ACK sip:ua@127.0.0.1:{ua.contact_port}"), ack
        bye = await asyncio.to_thread(ua.recv)
        assert bye.first_line.startswith("BYE "), bye
        ua.reply(bye, 200, "OK")
        run = await asyncio.wait_for(caller, 20)
        assert run.returncode == 0, run.output + run.errors + provider.log_text()
    finally:
        ua.close()


async def test_sha256_digest(make_provider: MakeProvider) -> None:
    provider = make_provider(algorithm="SHA-256")
    ua = UA(provider)
    try:
        challenge, ok = ua.register_with_auth()
        assert "algorithm=SHA-256" in (challenge.get("WWW-Authenticate") or ""), challenge
        assert ok.status == 200, ok
        _, wrong = ua.register_with_auth(password="wrong")
        assert wrong.status == 401, wrong
        # an MD5 digest of the right password does not do either
        fresh = ua.register().get("WWW-Authenticate") or ""
        md5 = fresh.replace("algorithm=SHA-256", "algorithm=MD5")
        credentials, algorithm = digest(
            md5,
            method="REGISTER",
            uri=f"sip:{provider.domain}",
            username=provider.username,
            password=provider.password,
        )
        assert algorithm == "MD5"
        assert ua.register(authorization=credentials).status == 401
    finally:
        ua.close()


async def test_the_account_calls_out_after_a_407(
    tmp_path: Path, make_provider: MakeProvider
) -> None:
    pstn_port = free_udp_port()
    provider = make_provider(outbound=("127.0.0.1", pstn_port))
    number = "+15551234567"
    pstn = await sipp.start_sipp(
        callee_scenario(
            ruri=f"INVITE sip:{re_escape(number)}@", to=f"To: <sip:{re_escape(number)}@"
        ),
        tmp_path,
        local_port=pstn_port,
        media_port=free_even_udp_port(),
    )
    account = f"{provider.username}@{provider.domain}"
    invite = sipp.invite(number).replace(
        "From: sipp <sip:sipp@[local_ip]:[local_port]>", f"From: <sip:{account}>"
    )
    credentials = f"[authentication username={provider.username} password={provider.password}]"
    authenticated = invite.replace("CSeq: 1 INVITE", "CSeq: 2 INVITE").replace(
        "Max-Forwards: 70", f"Max-Forwards: 70\n{credentials}"
    )
    challenged = f"""
  <recv response="100" optional="true"/>
  <recv response="407" auth="true"/>
  <send><![CDATA[
ACK sip:{number}@[remote_ip]:[remote_port] SIP/2.0
[last_Via:]
From: <sip:{account}>;tag=[pid]SIPpTag00[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: 1 ACK
Max-Forwards: 70
Content-Length: 0

]]></send>
"""
    answered = sipp.ANSWERED.replace("CSeq: 1 ACK", "CSeq: 2 ACK").replace(
        "From: sipp <sip:sipp@[local_ip]:[local_port]>", f"From: <sip:{account}>"
    )
    bye = sipp.BYE_FROM_CALLER.format(cseq=3).replace(
        "From: sipp <sip:sipp@[local_ip]:[local_port]>", f"From: <sip:{account}>"
    )
    try:
        await asyncio.sleep(0.3)
        parts = (invite, challenged, authenticated, answered, bye)
        run = await sipp.call(provider.udp, tmp_path, *parts)
        pstn_out, _ = await asyncio.wait_for(pstn.communicate(), 15)
    finally:
        if pstn.returncode is None:
            pstn.kill()
            await pstn.wait()
    log = provider.log_text()
    assert run.returncode == 0, run.output + run.errors + log
    assert pstn.returncode == 0, pstn_out.decode(errors="replace") + log


async def test_restart_keeps_the_ports_and_loses_the_registrations(
    make_provider: MakeProvider,
) -> None:
    provider = make_provider(tls=True)
    ports = (provider.udp, provider.tcp, provider.tls)
    ua = UA(provider)
    try:
        assert ua.register_with_auth()[1].status == 200
        assert len(provider.registered()) == 1
        old_pid = provider.pid
        assert old_pid is not None
        provider.restart()
        assert (provider.udp, provider.tcp, provider.tls) == ports
        assert provider.pid != old_pid
        assert provider.registered() == []
        # the old Kamailio and all its children are gone
        with pytest.raises(ProcessLookupError):
            os.killpg(old_pid, 0)
        assert ua.register_with_auth()[1].status == 200  # same socket, same ports
        assert len(provider.registered()) == 1
    finally:
        ua.close()
    tls = UA(provider, "tls")  # the certificate survived the restart
    tls.close()
    pid = provider.pid
    assert pid is not None
    provider.stop()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
