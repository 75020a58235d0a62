"""The egress policy (callhook/egress.py) and its socket factory (adapters/egress.py):
where page, media and notification fetches may connect."""

from __future__ import annotations

import socket

import pytest

from callhook.adapters.egress import Egress, url_hosts
from callhook.egress import EgressPolicy, EgressRefused


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack metadata
        "169.254.0.1",
        "fe80::1",
        "fd00:ec2::254",  # AWS metadata over IPv6
        "100.100.100.200",  # Alibaba Cloud metadata
        "::ffff:169.254.169.254",  # the same, IPv4-mapped
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "240.0.0.1",
    ],
)
def test_never_link_local_metadata_or_non_unicast(address: str) -> None:
    policy = EgressPolicy(allow_private=True, app_addresses=[address])
    why = policy.refusal(address)
    assert why is not None and why.startswith("refused by [egress]:")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.2",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "fd12::1",
        "100.64.0.1",
        "::ffff:10.1.2.3",
    ],
)
def test_private_and_loopback_only_for_application_hosts(address: str) -> None:
    why = EgressPolicy().refusal(address)
    assert why is not None and "private or loopback" in why and "allow_private" in why
    assert EgressPolicy(allow_private=True).refusal(address) is None
    listed = EgressPolicy(app_addresses=[address.removeprefix("::ffff:")])
    assert listed.refusal(address) is None


def test_public_addresses_are_allowed() -> None:
    policy = EgressPolicy()
    assert policy.refusal("93.184.216.34") is None
    assert policy.refusal("2606:2800:220:1::1") is None


def test_the_socket_factory_refuses_before_any_socket_and_logs_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    egress = Egress(EgressPolicy(), clock=lambda: now[0])
    info = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.9.8.7", 80))
    for t in (0.0, 30.0, 61.0):
        now[0] = t
        with pytest.raises(EgressRefused, match=r"10\.9\.8\.7 is a private"):
            egress(info)
    assert egress.refused == 3
    why = EgressPolicy().refusal("10.9.8.7")
    assert why is not None
    assert [r.getMessage() for r in caplog.records].count(why) == 2
    public = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80))
    with egress(public) as sock:
        assert sock.family == socket.AF_INET


def test_url_hosts() -> None:
    urls = ["http://127.0.0.1:8080/a", "https://App.example.com/x", None, "relative/page"]
    assert url_hosts(urls) == {"127.0.0.1", "app.example.com"}
