"""Dead calls: a call whose RTP stopped for ``[sip] rtp_timeout`` is taken for dead.

The media session decides (sans-IO, on the times it is given); the SIP service
then hangs up and the runner's final page says ``dropped``. Every rule on a
virtual clock: the clock starts at the answer, each packet restarts it, a call
on hold is never dead, resuming restarts it, 0 means never.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from callhook.config.settings import ConfigError, load
from callhook.media import g711
from callhook.media.rtp import RtpSender
from callhook.media.session import MediaSession

PEER = ("192.0.2.10", 40000)


def session(timeout: float = 2.0) -> MediaSession:
    s = MediaSession("PCMU", 0, 101, PEER, label="call t")
    s.rtp_timeout = timeout
    return s


class Peer:
    """The far end's RTP stream, one 20 ms packet at a time."""

    def __init__(self) -> None:
        self.sender = RtpSender(0)

    def packet(self) -> bytes:
        return self.sender.frame(g711.silence("ulaw", 160))


def ticks(s: MediaSession, start: float, end: float, peer: Peer | None = None) -> float | None:
    """Tick every 20 ms from ``start`` to ``end`` (the peer sending, if given); when it died."""
    t = start
    while t < end - 1e-9:
        if peer is not None:
            s.receive(peer.packet(), PEER, t)
        s.tick(t)
        if s.timed_out:
            return round(t, 2)
        t += 0.02
    return None


def test_no_rtp_after_the_answer_is_dead_after_the_timeout() -> None:
    s = session()
    s.expect_rtp(1.0)
    assert ticks(s, 1.0, 5.0) == 3.0


def test_each_packet_restarts_the_clock() -> None:
    s, peer = session(), Peer()
    s.expect_rtp(0.0)
    assert ticks(s, 0.0, 10.0, peer) is None  # ten seconds of RTP: alive
    assert ticks(s, 10.0, 20.0) == pytest.approx(11.98, abs=0.03)  # 2 s after the last one


def test_before_the_answer_nothing_is_timed() -> None:
    s = session()
    assert ticks(s, 0.0, 10.0) is None


def test_on_hold_a_call_is_never_dead_and_resuming_restarts_the_clock() -> None:
    s = session()
    s.expect_rtp(0.0)
    s.expect_rtp(1.0, expects=False)  # re-INVITE: the peer holds the call (sendonly)
    assert ticks(s, 1.0, 60.0) is None
    s.expect_rtp(60.0, expects=True)  # resumed
    assert ticks(s, 60.0, 70.0) == 62.0


def test_zero_means_never() -> None:
    s = session(timeout=0.0)
    s.expect_rtp(0.0)
    assert ticks(s, 0.0, 120.0) is None


def test_the_config_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[sip]\nrtp_timeout = 12.5\n")
    assert load(path).sip.rtp_timeout == 12.5
    path.write_text("")
    assert load(path).sip.rtp_timeout == 30.0  # the default
    path.write_text("[sip]\nrtp_timeout = -1\n")
    with pytest.raises(ConfigError, match="rtp_timeout must be 0"):
        load(path)
