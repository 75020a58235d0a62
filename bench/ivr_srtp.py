"""The IVR load benchmark with SRTP off and on: the kit's call as an SRTP-capable SIPp makes it.

    .venv/bin/python -m bench.ivr_srtp [--steps 200,400] [--modes off,on] [--sipp PATH]

Debian's SIPp has no SRTP, and SIPp's SRTP only works with ``rtp_stream`` (not
``play_pcap_audio``), so the kit's call (``../shared/bench/README.md``) is made
here as: INVITE offering PCMU + telephone-event (``RTP/AVP``, or ``RTP/SAVP`` with
one ``a=crypto`` AES_CM_128_HMAC_SHA1_80 SDES key when SRTP is on), ACK,
``rtp_stream`` of the kit's caller audio (the PCMU payloads of the kit's pcap,
its RFC 2833 packets replaced by µ-law silence: 17 s), the digits 1234 as SIP
INFO (``application/dtmf-relay``) at 4.5 / 5.0 / 5.5 / 6.0 s after the ACK
(when the kit sends its RFC 2833 events), then wait for callhook's BYE. Both
modes run the same scenario text but for the m= line and the crypto line.

The IVR application, the callhook command line, the capture and every figure
are those of :mod:`bench.ivr_load` (same helpers); one more column, "pkt B",
is the commonest UDP payload size of the packets callhook sent (172 bytes for
PCMU RTP, 182 for SRTP with its 10-byte auth tag), which shows that SRTP really
flowed on the loaded run.

SIPp must be v3.7+ built with ``-DUSE_SSL=1 -DUSE_PCAP=1``. Stock SIPp 3.7.7
keeps one process-wide SRTP context that only ``rtp_stream="apattern"`` sets,
so concurrent SRTP calls need a SIPp with per-call contexts for file playback
(the local patch /opt/sipp-srtp/per-call-file-srtp.patch).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.ivr_load import KIT, prepare_data, run_load, sipp_common, start_app

SIPP = Path("/opt/sipp-srtp/sipp")
DIGITS = "1234"
DIGIT_TIMES = (4.5, 5.0, 5.5, 6.0)  # s after the ACK (the kit's make_caller_pcap.py)
SILENCE = b"\xff" * 160

CRYPTO = (
    "a=crypto:[cryptotag1audio] [cryptosuiteaescm128sha1801audio] inline:[cryptokeyparams1audio]"
    "\n      "
)


def caller_audio(kit: Path, out: Path) -> float:
    """The kit's caller RTP (PCMU payloads, digits as silence) as raw µ-law; its length in s."""
    data = (kit / "pcap" / "caller_ivr_1234.pcap").read_bytes()
    linktype = struct.unpack_from("<I", data, 20)[0]
    offset = {1: 14, 113: 16, 0: 4, 276: 20}.get(linktype, 14)
    frames: list[bytes] = []  # 160-byte payloads, in order
    pos = 24
    while pos + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        ihl = (frame[offset] & 0x0F) * 4
        rtp = frame[offset + ihl + 8 :]
        frames.append(rtp[12:] if rtp[1] & 0x7F == 0 else SILENCE)
    # one packet per 20 ms; events take the place of audio packets in the kit's stream
    raw = b"".join(frames)
    out.write_bytes(raw)
    return len(raw) / 8000


def scenario(srtp: bool, audio: Path) -> str:
    """The SIPp scenario: the kit's ivr_uac.xml with rtp_stream and SIP INFO digits."""
    profile = "RTP/SAVP" if srtp else "RTP/AVP"
    crypto = CRYPTO if srtp else ""
    from_ = (
        '      From: "ivrbench" <sip:caller[call_number]@[local_ip]:[local_port]>'
        ";tag=[pid]SIPpTag00[call_number]\n"
    )
    dialog = (
        from_ + "      To: <sip:ivr@[remote_ip]:[remote_port]>[peer_tag_param]\n"
        "      Call-ID: [call_id]\n"
    )
    digits = []
    previous = 0.0
    for i, (digit, at) in enumerate(zip(DIGITS, DIGIT_TIMES, strict=True)):
        digits.append(
            f"""  <pause milliseconds="{round((at - previous) * 1000)}"/>
  <send retrans="500">
    <![CDATA[

      INFO sip:ivr@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
{dialog}      CSeq: {i + 2} INFO
      Contact: <sip:caller[call_number]@[local_ip]:[local_port];transport=[transport]>
      Max-Forwards: 70
      Content-Type: application/dtmf-relay
      Content-Length: [len]

      Signal={digit}
      Duration=100

    ]]>
  </send>
  <recv response="200"/>
"""
        )
        previous = at
    return f"""<?xml version="1.0" encoding="ISO-8859-1" ?>
<!DOCTYPE scenario SYSTEM "sipp.dtd">
<scenario name="IVR caller ({"SRTP" if srtp else "RTP"}): PCMU + SIP INFO 1234 + speech">
  <send retrans="500" start_rtd="setup">
    <![CDATA[

      INVITE sip:ivr@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
{from_}      To: <sip:ivr@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 INVITE
      Contact: <sip:caller[call_number]@[local_ip]:[local_port];transport=[transport]>
      Max-Forwards: 70
      Subject: IVR benchmark
      Content-Type: application/sdp
      Content-Length: [len]

      v=0
      o=ivrbench 53655765 2353687637 IN IP[local_ip_type] [local_ip]
      s=ivrbench
      c=IN IP[media_ip_type] [media_ip]
      t=0 0
      m=audio [rtpstream_audio_port] {profile} 0 101
      a=rtpmap:0 PCMU/8000
      a=rtpmap:101 telephone-event/8000
      a=fmtp:101 0-16
      a=ptime:20
      {crypto}a=sendrecv

    ]]>
  </send>

  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="183" optional="true"/>
  <recv response="200" rtd="setup" crlf="true"/>

  <send start_rtd="ivr">
    <![CDATA[

      ACK sip:ivr@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
{dialog}      CSeq: 1 ACK
      Contact: <sip:caller[call_number]@[local_ip]:[local_port];transport=[transport]>
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>

  <nop>
    <action>
      <exec rtp_stream="{audio},1,0,PCMU/8000"/>
    </action>
  </nop>

{"".join(digits)}
  <label id="wait_bye"/>
  <recv response="100" optional="true" timeout="25000" next="wait_bye"/>
  <recv request="BYE" timeout="25000" rtd="ivr"/>

  <send>
    <![CDATA[

      SIP/2.0 200 OK
      [last_Via:]
      [last_From:]
      [last_To:]
      [last_Call-ID:]
      [last_CSeq:]
      Contact: <sip:caller[call_number]@[local_ip]:[local_port];transport=[transport]>
      Content-Length: 0

    ]]>
  </send>

  <ResponseTimeRepartition value="10, 20, 50, 100, 200, 500, 1000, 2000"/>
  <CallLengthRepartition value="13000, 14000, 14500, 15000, 16000, 18000, 20000, 25000"/>
</scenario>
"""


def packet_sizes(pcap: Path) -> collections.Counter[int]:
    """UDP payload sizes of the even-port (RTP/SRTP) packets of a tcpdump capture on lo."""
    data = pcap.read_bytes()
    sizes: collections.Counter[int] = collections.Counter()
    if len(data) < 24:
        return sizes
    linktype = struct.unpack_from("<I", data, 20)[0]
    offset = {1: 14, 113: 16, 0: 4, 276: 20}.get(linktype, 14)
    pos = 24
    while pos + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if len(frame) < offset + 28:
            continue
        ihl = (frame[offset] & 0x0F) * 4
        sport, _, length = struct.unpack_from("!HHH", frame, offset + ihl)
        if not sport & 1:
            sizes[length - 8] += 1
    return sizes


def run_step(
    n: int, srtp: bool, kit: Path, sipp_bin: Path, app_base: str, workdir: Path
) -> dict[str, object]:
    """:func:`bench.ivr_load.run_step` with this module's SIPp and scenario."""
    mode = "srtp" if srtp else "rtp"
    data = workdir / f"data-{mode}-{n}"
    prepare_data(data, kit)
    xml = workdir / f"ivr_uac_{mode}.xml"
    xml.write_text(scenario(srtp, workdir / "caller.ulaw"))
    ports = ["-min_rtp_port", "6000", "-max_rtp_port", "19998"]
    sipp = [str(sipp_bin), "-sf", str(xml), *sipp_common(n), *ports]

    def packet_bytes(pcap: Path) -> dict[str, object]:
        sizes = packet_sizes(pcap)
        return {"packet_bytes": sizes.most_common(1)[0][0] if sizes else 0}

    result = run_load(
        n, data, f"{mode}-{n}", app_base, workdir, sipp, workdir,
        digits=DIGITS, from_capture=packet_bytes,
    )  # fmt: skip
    return {**result, "srtp": srtp}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="200,400")
    parser.add_argument("--modes", default="off,on", help="SRTP off, on, or both (in this order)")
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--sipp", type=Path, default=SIPP)
    args = parser.parse_args()
    if not (args.kit / "pcap" / "caller_ivr_1234.pcap").exists():
        sys.exit(f"the load kit is not at {args.kit} (pass --kit)")
    if not args.sipp.exists():
        sys.exit(f"no SIPp with SRTP at {args.sipp} (pass --sipp)")
    if shutil.which("tcpdump") is None:
        sys.exit("tcpdump is not installed")
    modes = [m.strip() == "on" for m in args.modes.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="callhook-bench-srtp-"))
    seconds = caller_audio(args.kit, workdir / "caller.ulaw")
    version = subprocess.run([str(args.sipp), "-v"], capture_output=True, text=True).stdout
    app, app_base = start_app()
    print(
        f"callhook IVR load benchmark, SRTP off/on; kit {args.kit}; "
        f"{version.strip().splitlines()[0].rstrip('.') if version else args.sipp}; "
        f"caller audio {seconds:.1f} s; work dir {workdir}"
    )
    print(
        "SRTP |    N |   ok | fail | digits ok | rec ok (p50 s) | CPU ms/call-s | % core "
        "| RSS MB | pkt B | RTP gap p50/p99/max ms | page p50/p99 ms | late ticks"
    )
    nan = float("nan")
    try:
        for n in (int(x) for x in args.steps.split(",")):
            for srtp in modes:
                r = run_step(n, srtp, args.kit, args.sipp, app_base, workdir)
                page = r["page"] or {}
                assert isinstance(page, dict)
                lengths = r["recording_lengths"]
                assert isinstance(lengths, tuple)
                print(
                    f"{'on' if srtp else 'off':>4} | {n:4d} | {r['ok']:4} | {r['failed']:4} "
                    f"| {r['digits_right']:4}/{r['digits_calls']:<4} "
                    f"| {r['recordings_right']:4}/{r['recordings']:<4} ({lengths[0]:.1f}) "
                    f"| {r['cpu_ms_per_call_s']:13.2f} | {r['cpu_pct']:6.1f} "
                    f"| {r['rss_mb']:6.0f} | {r['packet_bytes']:5} "
                    f"| {r['gap_p50']:5.1f} / {r['gap_p99']:5.1f} / {r['gap_max']:5.0f} "
                    f"| {page.get('p50_ms', nan):5.1f} / {page.get('p99_ms', nan):5.1f} "
                    f"| {r['late_ticks']}",
                    flush=True,
                )
                tick = r["tick"]
                assert isinstance(tick, dict)
                if tick:
                    print(
                        f"            tick lateness p50/p99/max: {tick['late_p50_ms']:.1f} / "
                        f"{tick['late_p99_ms']:.1f} / {tick['late_max_ms']:.1f} ms; tick took "
                        f"{tick['took_p50_ms']:.1f} / {tick['took_p99_ms']:.1f} / "
                        f"{tick['took_max_ms']:.1f} ms; gc pauses {r['gc']}; "
                        f"final {r['final']}",
                        flush=True,
                    )
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
