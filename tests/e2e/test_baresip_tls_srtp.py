"""A real softphone calls ``callhook serve`` over SIP/TLS with mandatory SRTP (SDES keys).

baresip 1.0 (headless, as in test_baresip.py) dials callhook's TLS listener
with ``;transport=tls`` (it does not know the ``sips:`` scheme: it would make
``sip:sips:...`` of it and send it over UDP), and its account insists on SRTP
(``mediaenc=srtp-mand``: an RTP/SAVP offer with a=crypto, no call without
it). callhook's BYE goes back over baresip's own connection (in-dialog
requests reuse the connection the call came on). (baresip 1.0 loads
``sip_cafile`` but does not check the server's certificate against it: it has
no ``sip_verify_server`` yet; callhook's own TLS client check against
``tls_ca`` is tested with Kamailio, tests/e2e/test_trunks.py.)

The application plays a 440 Hz prompt, then takes three keys that baresip
sends as RFC 4733 events, inside SRTP. While the call runs, ``tcpdump``
captures callhook's RTP port range on the loopback interface, and the test
shows from the wire that:

* callhook's packets left its RTP port (the check cannot pass on nothing),
  each 10 bytes longer than a 20 ms PCMU packet: the SRTP tag;
* no payload of them sounds like the prompt (a Goertzel filter at 440 Hz on the
  μ-law-decoded bytes after the RTP header), whereas the same analysis finds
  the tone in callhook's plaintext packets of the prompt;
* they *are* the prompt, encrypted: decrypted with the key of callhook's SDP
  answer (read from baresip's SIP trace: the SDP itself crossed the wire only
  inside TLS) they are 440 Hz again; and baresip's packets, decrypted with
  baresip's key, carry the RFC 4733 events of the keys the application got.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import signal
import socket
import struct
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trustme

from callhook.devtools.harness import AppServer
from callhook.media import g711, tones, wav
from callhook.media.srtp import TAG_LENGTH, Crypto, SrtpContext, new_key
from tests.e2e.harness import (
    Server,
    free_even_udp_port,
    free_tcp_port,
    free_udp_port,
    wait_for_request,
)
from tests.e2e.test_baresip import (
    BARESIP,
    PROMPT,
    TONE_HZ,
    _pcm16_wav,
    baresip_config,
    command,
    started,
)

TCPDUMP = shutil.which("tcpdump")
pytestmark = [
    pytest.mark.skipif(BARESIP is None, reason="baresip is not installed"),
    pytest.mark.skipif(TCPDUMP is None, reason="tcpdump is not installed"),
]

#: A 20 ms PCMU packet: the RTP header and 160 samples.
PCMU_PACKET = 12 + 160


@pytest.mark.parametrize("workers", [1, 2])
async def test_baresip_calls_over_tls_with_srtp_and_no_plaintext_audio_is_on_the_wire(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """With ``--workers 2`` TLS ends at the Kamailio in front of the workers; the call,
    its SRTP and callhook's BYE over baresip's own connection are the same."""
    data = tmp_path / "data"
    prompt = data / "media" / "default" / PROMPT
    prompt.parent.mkdir(parents=True)
    prompt_codes = g711.encode("ulaw", tones.tone(TONE_HZ, 2.0))
    prompt.write_bytes(wav.g711_file("ulaw", prompt_codes))
    app.page(
        "/start",
        [
            {"play": {"play_list": [{"file_to_play": PROMPT}], "barge_in_on_digit": False}},
            {"get_number": {"digit_count": 3, "next_page": {"url": "/number"}}},
        ],
    )
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)

    tls_port, sip_port, ctrl_port = free_tcp_port(), _free_port_pair(), free_tcp_port()
    pki = _certificates(tmp_path)
    config = tmp_path / "callhook.toml"
    config.write_text(
        f'[sip]\ntls_port = {tls_port}\ntls_certificate = "{pki["callhook"]}"\n'
        f'tls_key = "{pki["callhook_key"]}"\ntls_ca = "{pki["ca"]}"\n'
        f"[workers]\ncount = {workers}\nfirst_port = {free_even_udp_port()}\n"
        "[speech]\npreload = false\n"
    )
    phone_dir = tmp_path / "baresip"
    phone_dir.mkdir()
    microphone = tmp_path / "mic.wav"  # 30 s of quiet: longer than the call
    microphone.write_bytes(_pcm16_wav(np.zeros(8000 * 30, dtype=np.int16)))
    baresip_config(phone_dir, sip_port, ctrl_port, microphone)
    with (phone_dir / "config").open("a") as f:
        # No sip_certificate: like most phones, baresip has no TLS listener, so callhook's
        # BYE must come back over the connection baresip opened.
        f.write(f"sip_cafile\t\t{pki['ca']}\nmodule\t\t\tsrtp.so\n")
    (phone_dir / "accounts").write_text(
        "<sip:bob@127.0.0.1>;regint=0;answermode=auto;audio_codecs=PCMU;mediaenc=srtp-mand\n"
    )

    pcap = tmp_path / "rtp.pcap"
    output: list[str] = []
    server = Server.for_app(data, app, extra=("--config", str(config), "--workers", str(workers)))
    server.start_timeout = 150.0  # two workers load at once: slow on a loaded machine
    async with server:
        assert f"SIP: tls 127.0.0.1:{tls_port}" in server.output, server.output
        if workers == 2:  # TLS is Kamailio's; the workers listen on UDP only
            assert "with 2 workers behind Kamailio" in server.output, server.output
        async with (
            capture(pcap, server.rtp_ports),
            traced_baresip(phone_dir, ctrl_port, output) as phone,
        ):
            await command(phone.writer, "dial", f"sip:ivr@127.0.0.1:{tls_port};transport=tls")
            answered = await phone.event({"CALL_ESTABLISHED", "CALL_CLOSED"}, timeout=10)
            closed = answered
            if answered.get("type") == "CALL_ESTABLISHED":
                await asyncio.sleep(3.0)  # the prompt plays for 2 s, then get_number waits
                await command(phone.writer, "sndcode", "531")
                closed = await phone.event({"CALL_CLOSED"}, timeout=15)
                await wait_for_request(app, "/final", timeout=5)
        log = server.output
    transcript = output[0]
    # (baresip 1.0 closes the call with "Function not implemented" when the 200 OK's
    # Contact is a sips: URI: its SIP stack routes requests to sip: URIs only.)
    assert answered.get("type") == "CALL_ESTABLISHED", f"{answered}\n{transcript}\n{log}"
    assert re.search(r"(?m)^ACK sip:ivr@", transcript), f"baresip sent no ACK\n{transcript}"

    # The signalling went over TLS, and the SDP agreed on SRTP with SDES keys.
    assert re.search(r"(?m)^Via: SIP/2\.0/TLS ", transcript), transcript
    invite, answer = _sdp_of(transcript, "INVITE sip:ivr@"), _sdp_of(transcript, "SIP/2.0 200 OK")
    assert re.search(r"(?m)^m=audio \d+ RTP/SAVP ", invite), invite
    audio_port = int(re.search(r"(?m)^m=audio (\d+) RTP/SAVP 0 ", answer).group(1))  # type: ignore[union-attr]
    assert server.rtp_ports[0] <= audio_port <= server.rtp_ports[1], answer
    (baresip_key,) = (Crypto.parse(c) for c in re.findall(r"(?m)^a=crypto:(.+?)\r?$", invite))
    (callhook_key,) = (Crypto.parse(c) for c in re.findall(r"(?m)^a=crypto:(.+?)\r?$", answer))
    assert callhook_key.tag == baresip_key.tag and callhook_key.suite == baresip_key.suite
    assert "SRTP is Enabled" in transcript, transcript

    # The keys, sent as RFC 4733 events inside SRTP, reached the application.
    (number,) = app.bodies("/number")
    assert number["action_result"]["result"] == {"entered_number": "531"}, transcript
    assert app.bodies("/final")[0]["this_call"]["call_cause"] == "completed"
    # callhook hung up: its BYE reached baresip (over a TLS connection to baresip's
    # listener), and baresip did not have to send one of its own.
    assert re.search(r"(?m)^BYE sip:bob", transcript), f"{closed}\n{transcript}\n{log}"
    assert not re.search(r"(?m)^BYE sip:ivr", transcript), f"{closed}\n{transcript}\n{log}"

    # baresip heard the prompt.
    heard = [p for p in (phone_dir / "heard").glob("*.wav") if "dec" in p.name]
    assert heard, f"baresip wrote no recording: {list((phone_dir / 'heard').iterdir())}"
    audio = wav.decode_to_8k(heard[0].read_bytes()).astype(np.float64)
    assert len(audio[np.abs(audio) > 500]) > 8000, "the prompt was not heard (less than 1 s)"
    assert tone_share(audio[: 8000 * 4]) > 0.5

    # The wire: callhook's packets, PCMU by their (clear) RTP header, SRTP-sized.
    datagrams = read_pcap(pcap.read_bytes())
    sent = [
        d.payload
        for d in datagrams
        if d.source_port == audio_port and len(d.payload) > 12 and d.payload[1] & 0x7F == 0
    ]
    assert len(sent) > 100, f"{len(sent)} RTP packets from callhook's port {audio_port}"
    tag = TAG_LENGTH[callhook_key.suite]
    assert {len(p) for p in sent} == {PCMU_PACKET + tag}, "not 20 ms PCMU packets with an SRTP tag"
    # No packet sounds like the prompt, whereas callhook's plaintext packets of it do.
    plaintext = [bytes(12) + prompt_codes[i : i + 160] for i in range(0, len(prompt_codes), 160)]
    assert tone_packets(plaintext) >= 95  # the control: 100 packets of 440 Hz
    assert tone_packets(sent) == 0, "440 Hz audio in the clear on the wire"
    # And they are the prompt: decrypted with the key of callhook's answer, 2 s of 440 Hz.
    from_callhook = SrtpContext(new_key(callhook_key.suite), callhook_key)
    decrypted = [rtp for p in sent if (rtp := from_callhook.unprotect(p)) is not None]
    assert len(decrypted) == len(sent), f"{len(sent) - len(decrypted)} packets did not decrypt"
    assert tone_packets(decrypted) >= 90

    # baresip's packets: SRTP too, and decrypted with baresip's key, the keys' RFC 4733 events.
    received = [d.payload for d in datagrams if d.destination_port == audio_port]
    from_baresip = SrtpContext(new_key(baresip_key.suite), baresip_key)
    events = [
        rtp[12]
        for p in received
        if (rtp := from_baresip.unprotect(p)) is not None and rtp[1] & 0x7F == 101
    ]
    assert "".join(str(e) for e in dict.fromkeys(events)) == "531", events


def goertzel_share(samples: npt.NDArray[np.float64], hz: float = TONE_HZ) -> float:
    """How much of the energy of ``samples`` (8 kHz) a Goertzel filter at ``hz`` finds:
    near 1 for a pure tone of ``hz``, about 2/len(samples) for white noise."""
    x = samples - np.mean(samples)
    energy = float(np.sum(x * x))
    if energy == 0.0:
        return 0.0
    n = np.arange(len(x))
    spectrum = complex(np.sum(x * np.exp(-2j * np.pi * hz / 8000 * n)))
    return abs(spectrum) ** 2 / (len(x) / 2 * energy)


def tone_packets(packets: list[bytes], hz: float = TONE_HZ) -> int:
    """How many of the RTP ``packets`` carry a tone of ``hz``: the bytes after the
    12-byte header, μ-law-decoded, have more than half their energy at ``hz``."""
    return sum(
        goertzel_share(g711.decode("ulaw", p[12:]).astype(np.float64), hz) > 0.5
        for p in packets
        if len(p) > 12
    )


def tone_share(samples: npt.NDArray[np.float64], hz: float = TONE_HZ) -> float:
    """The fraction of the energy of ``samples`` (8 kHz, DC removed) within ±15 Hz of ``hz``."""
    x = samples - np.mean(samples)
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / 8000)
    total = float(np.sum(power))
    return float(np.sum(power[np.abs(freqs - hz) <= 15])) / total if total else 0.0


def _sdp_of(transcript: str, start_line: str) -> str:
    """The SDP body of the first SIP message in baresip's trace that starts with
    ``start_line``: the ``x=...`` lines from its ``v=0`` on."""
    at = transcript.find(start_line)
    assert at >= 0, f"no {start_line!r} in baresip's SIP trace:\n{transcript}"
    body = re.compile(r"^v=0\r?$(?:\n[a-z]=.*$)*", re.M).search(transcript, at)
    assert body is not None, transcript[at:]
    return body.group(0)


def _certificates(tmp_path: Path) -> dict[str, Path]:
    """A test CA's PEM, and the certificate it issued callhook for 127.0.0.1 (chain, key)."""
    ca = trustme.CA()
    files = {
        "ca": tmp_path / "ca.pem",
        "callhook": tmp_path / "callhook.pem",
        "callhook_key": tmp_path / "callhook.key",
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    callhook = ca.issue_cert("127.0.0.1", "localhost")
    callhook.private_key_pem.write_to_path(str(files["callhook_key"]))
    files["callhook"].write_bytes(b"".join(blob.bytes() for blob in callhook.cert_chain_pems))
    return files


def _free_port_pair() -> int:
    """A port free for UDP and TCP whose next port is free for TCP (baresip's TLS)."""
    for _ in range(100):
        port = free_udp_port()
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no two free ports in a row")


@dataclass
class Phone:
    """baresip's control connection: commands go to ``writer``; its netstring-framed
    JSON (command responses and events) is read from ``reader`` into ``seen``."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def event(self, types: Collection[str], timeout: float) -> dict[str, Any]:
        """The next event of one of ``types`` (CALL_ESTABLISHED, CALL_CLOSED, ...);
        ``{"type": "timeout", ...}`` if none came in time."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    length = int((await self.reader.readuntil(b":"))[:-1])
                    message = json.loads((await self.reader.readexactly(length + 1))[:-1])
                    self.seen.append(message)
                    if message.get("event") and message.get("type") in types:
                        return dict(message)
        except (TimeoutError, asyncio.IncompleteReadError) as exc:
            return {"type": "timeout", "waited_for": sorted(types), "error": repr(exc)}


@contextlib.asynccontextmanager
async def traced_baresip(
    phone_dir: Path, ctrl_port: int, output: list[str]
) -> AsyncIterator[Phone]:
    """baresip on the config in ``phone_dir`` with its SIP trace on (``-s``: every SIP
    message it sends and receives, SDP and all, in the clear); yields its control
    connection, and appends what it printed to ``output`` when it has stopped."""
    # One try: its SIP ports are a TCP and TLS pair that new_listen_ports does not deal.
    process, (reader, writer) = await started(phone_dir, ctrl_port, "-s", "-t", "30", tries=1)
    try:
        yield Phone(reader, writer)
        writer.close()
    finally:
        out = await _stop(process)
        output.append(out.decode(errors="replace"))


async def _stop(process: asyncio.subprocess.Process) -> bytes:
    """Stop baresip: SIGTERM, a second one (it may wait for its SIP transactions
    after the first), then SIGKILL; returns what it printed."""
    assert process.stdout is not None
    reading = asyncio.ensure_future(process.stdout.read())
    for stop in (process.terminate, process.terminate, process.kill):
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 3)
            break
    await process.wait()
    return await reading


@contextlib.asynccontextmanager
async def capture(pcap: Path, ports: tuple[int, int]) -> AsyncIterator[None]:
    """``tcpdump`` writes the UDP packets of ``ports`` on the loopback interface to ``pcap``."""
    assert TCPDUMP is not None
    dump = await asyncio.create_subprocess_exec(
        TCPDUMP,
        "-U",  # each packet written when it is captured,
        "--immediate-mode",  # and captured when it arrives: none are left behind at SIGINT
        "-n",
        "-i",
        "lo",
        "-w",
        str(pcap),
        f"udp and portrange {ports[0]}-{ports[1]}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert dump.stderr is not None
    try:
        line = await asyncio.wait_for(dump.stderr.readline(), 10)
        assert b"listening on" in line, line  # the capture has begun
        yield
    finally:
        if dump.returncode is None:
            dump.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(dump.communicate(), 10)
        except TimeoutError:
            dump.kill()
            await dump.wait()


@dataclass(frozen=True)
class Datagram:
    source_port: int
    destination_port: int
    payload: bytes


def read_pcap(data: bytes) -> list[Datagram]:
    """The IPv4 UDP datagrams of a pcap file (link types Ethernet, Linux cooked v1 and v2,
    BSD loopback and raw IP; micro- or nanosecond, either byte order)."""
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        order = ">"
    else:
        raise ValueError(f"not a pcap file: magic {magic.hex()}")
    (link_type,) = struct.unpack(order + "I", data[20:24])
    datagrams = []
    at = 24
    while at + 16 <= len(data):
        (captured,) = struct.unpack(order + "I", data[at + 8 : at + 12])
        frame = data[at + 16 : at + 16 + captured]
        at += 16 + captured
        packet = _ip_packet(link_type & 0xFFFF, frame)
        if packet is not None and (datagram := _udp(packet)) is not None:
            datagrams.append(datagram)
    return datagrams


def _ip_packet(link_type: int, frame: bytes) -> bytes | None:
    """The IPv4 packet in a link-layer frame, None for anything else."""
    if link_type == 1:  # DLT_EN10MB: 14-byte Ethernet header, EtherType at 12
        ethertype, start = frame[12:14], 14
    elif link_type == 113:  # LINUX_SLL: 16-byte header, protocol at 14
        ethertype, start = frame[14:16], 16
    elif link_type == 276:  # LINUX_SLL2: 20-byte header, protocol at 0
        ethertype, start = frame[0:2], 20
    elif link_type == 0:  # DLT_NULL: 4-byte address family in the capturer's byte order
        family = int.from_bytes(frame[:4], "little") or int.from_bytes(frame[:4], "big")
        return frame[4:] if family == socket.AF_INET else None
    elif link_type in (12, 101):  # raw IP
        return frame if frame[:1] and frame[0] >> 4 == 4 else None
    else:
        raise ValueError(f"unsupported pcap link type {link_type}")
    return frame[start:] if ethertype == b"\x08\x00" else None


def _udp(packet: bytes) -> Datagram | None:
    """The UDP datagram in an unfragmented IPv4 packet, None for anything else."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != 17:
        return None
    if struct.unpack("!H", packet[6:8])[0] & 0x3FFF:  # a fragment (MF set, or an offset)
        return None
    header = (packet[0] & 0x0F) * 4
    (total,) = struct.unpack("!H", packet[2:4])
    udp = packet[header:total]
    if len(udp) < 8:
        return None
    source, destination, length = struct.unpack("!HHH", udp[:6])
    return Datagram(source, destination, udp[8:length])
