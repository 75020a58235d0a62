"""A call's media counts, added to the Prometheus families when its media ends.

Until then they are the media thread's (it keeps the receive's counts of the usual
packets itself: :meth:`MediaSession.reclaim <callhook.media.session.MediaSession.reclaim>`),
so they are read once, after the engine took them back.
"""

from __future__ import annotations

from callhook.media.session import MediaSession
from callhook.monitoring import prometheus


def count_ended(session: MediaSession) -> None:
    """Add ``session``'s packets received, lost and dropped (by cause) and its key presses
    (by transport) to the Prometheus counters."""
    receiver = session.receiver
    if receiver.received:
        prometheus.RTP_RECEIVED.inc(receiver.received)
    # Sequence numbers that never came: RFC 3550's cumulative lost (A.3) counts a repeat
    # as received, hiding a loss (§6.4.1); here the repeats are taken out.
    lost = receiver.expected - (receiver.received - receiver.duplicates)
    if lost > 0:
        prometheus.RTP_LOST.inc(lost)
    dropped = {
        "late": receiver.late,
        "duplicate": receiver.duplicates,
        "other_ssrc": receiver.foreign,
        "wrong_source": session.foreign_dropped,
        "flood": session.flood_dropped,
        "malformed": session.malformed,
        "srtp_failed": session.srtp.dropped if session.srtp is not None else 0,
    }
    for cause, count in dropped.items():
        if count:
            prometheus.PACKETS_DROPPED.labels("rtp", cause).inc(count)
    for transport, count in session.digits_by.items():
        prometheus.DTMF_DIGITS.labels(transport).inc(count)
