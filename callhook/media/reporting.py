"""One call's RTCP (RFC 3550 §6): when its reports go, what they say, where they go,
and what the peer's reports say of our stream. Sans-IO.

The call's :class:`~callhook.media.session.MediaSession` owns one and keeps what is the
call's: SRTCP (its SRTP keys), whether it sends at all (hold), the checks on a packet's
source, and the count of malformed packets. Reports are compound SR (or RR, before we
have sent anything) + SDES CNAME packets, about every :data:`RTCP_INTERVAL` seconds,
randomised by 0.5-1.5 (§6.3.1) with a per-call sequence instead of an RNG.
"""

from __future__ import annotations

from callhook.media import rtcp
from callhook.media.rtp import RtpReceiver, RtpSender

Address = tuple[str, int]
#: What went out on the wire, where the media thread sends (``Plane.tally``): RTP packets,
#: their payload octets, the last one's RTP timestamp and when it went (Unix time).
Wire = tuple[int, int, int, float]
#: The RTP clock of the call's audio (G.711, RFC 3551 §4.5.14).
CLOCK_RATE = 8000

#: RTCP report interval (RFC 3550 §6.2: 5 s minimum), randomised by 0.5-1.5 (§6.3.1).
RTCP_INTERVAL = 5.0


class CallReports:
    """The RTCP of the call whose RTP ``sender`` sends and ``receiver`` receives."""

    def __init__(self, sender: RtpSender, receiver: RtpReceiver) -> None:
        self.sender = sender
        self.receiver = receiver
        self.cname = f"callhook-{sender.ssrc:08x}"
        #: Where the peer's RTCP comes from (symmetric RTCP, like RTP), once it has.
        self.remote: Address | None = None
        #: The peer's latest report block on our stream (loss, jitter as it sees them).
        self.peer_report: rtcp.ReportBlock | None = None
        #: When the next report is due (media time; None until the first tick asks).
        self.due: float | None = None
        self._phase = (sender.ssrc % 1000) / 1000  # a per-call offset, no RNG

    def report(
        self, now: float, wall: float, sending: bool, wire: Wire | None = None
    ) -> bytes | None:
        """The compound report to send now, in the clear, if one is due (None otherwise,
        and while the call does not send). ``wall`` is the Unix time, for the SR's NTP
        timestamp. ``wire``: what the media thread sent for the call, which its SR
        says (what Python made in time, and what the thread filled in where Python was
        late); None: what the sender made, all of which went."""
        if self.due is None:
            self.due = now + RTCP_INTERVAL * (0.5 + self._phase)
            return None
        if now < self.due or not sending:
            return None
        self._phase = (self._phase * 7.31 + 0.137) % 1.0
        self.due = now + RTCP_INTERVAL * (0.5 + self._phase)
        block = self.receiver.report_block(now)
        blocks = (block,) if block is not None else ()
        first: rtcp.SenderReport | rtcp.ReceiverReport
        if wire is not None and wire[0]:
            # §6.4.1: the RTP timestamp of the same instant as the NTP one, from the
            # last packet sent and the time since.
            packets, octets, stamp, at = wire
            now_stamp = (stamp + round((wall - at) * CLOCK_RATE)) & 0xFFFFFFFF
            first = rtcp.SenderReport(
                self.sender.ssrc, rtcp.ntp_timestamp(wall), now_stamp, packets, octets, blocks
            )
        elif wire is None and self.sender.packets:
            first = self.sender.sender_report(rtcp.ntp_timestamp(wall), blocks)
        else:
            first = rtcp.ReceiverReport(self.sender.ssrc, blocks)
        return rtcp.report(first, self.cname)

    def destination(self, rtp_remote: Address | None) -> Address | None:
        """Where reports go: where the peer's RTCP comes from, else its RTP port + 1
        (RFC 3550 §11)."""
        if self.remote is not None:
            return self.remote
        if rtp_remote is None:
            return None
        return (rtp_remote[0], rtp_remote[1] + 1)

    def received(self, packets: list[rtcp.RtcpPacket], source: Address, now: float) -> None:
        """The peer's compound packet, parsed: its SR (for our reports' round trip) and
        its report block on our stream."""
        self.remote = source
        for packet in packets:
            if isinstance(packet, rtcp.SenderReport):
                self.receiver.on_sender_report(packet.ssrc, packet.ntp_timestamp, now)
            if isinstance(packet, rtcp.SenderReport | rtcp.ReceiverReport):
                for block in packet.reports:
                    if block.ssrc == self.sender.ssrc:
                        self.peer_report = block
