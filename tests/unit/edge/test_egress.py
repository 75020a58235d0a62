"""The egress policy (callhook/edge/egresspolicy.py) and its socket factory and resolver
(edge/egress.py): where page, media and notification fetches may connect."""

from __future__ import annotations

import socket

import pytest

from callhook.edge.egress import Egress
from callhook.edge.egresspolicy import EgressPolicy, EgressRefused


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack metadata
        "169.254.0.1",
        "fe80::1",
        "fd00:ec2::254",  # AWS metadata over IPv6
        "100.100.100.200",  # Alibaba Cloud metadata
        "::ffff:169.254.169.254",  # the same, IPv4-mapped
        "64:ff9b::a9fe:a9fe",  # the same through NAT64
        "2002:a9fe:a9fe::1",  # the same through 6to4
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "240.0.0.1",
    ],
)
def test_never_link_local_metadata_or_non_unicast(address: str) -> None:
    policy = EgressPolicy(allow_private=True, app_endpoints=[(address, 80)])
    why = policy.refusal(address, 80)
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
        "fec0::1",  # site-local
        "100.64.0.1",
        "::ffff:10.1.2.3",
        "64:ff9b::a01:203",  # 10.1.2.3 through NAT64
        "2002:a01:203::1",  # 10.1.2.3 through 6to4
    ],
)
def test_private_and_loopback_only_for_application_endpoints(address: str) -> None:
    why = EgressPolicy().refusal(address, 8000)
    assert why is not None and "private or loopback" in why and "allow_private" in why
    assert EgressPolicy(allow_private=True).refusal(address, 8000) is None
    listed = EgressPolicy(app_endpoints=[(address, 8000)])
    assert listed.refusal(address, 8000) is None
    # The application's port only: its host's other services stay out of reach.
    assert listed.refusal(address, 2375) is not None


def test_public_addresses_are_allowed() -> None:
    policy = EgressPolicy()
    assert policy.refusal("93.184.216.34", 443) is None
    assert policy.refusal("2606:2800:220:1::1", 443) is None
    assert policy.refusal("64:ff9b::5db8:d822", 80) is None  # 93.184.216.34 via NAT64


def test_the_socket_factory_refuses_before_any_socket_and_logs_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    egress = Egress(EgressPolicy(), clock=lambda: now[0])
    info = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.9.8.7", 80))
    for t in (0.0, 30.0, 61.0):
        now[0] = t
        with pytest.raises(EgressRefused, match=r"10\.9\.8\.7 port 80 is a private"):
            egress(info)
    assert egress.refused == 3
    why = EgressPolicy().refusal("10.9.8.7", 80)
    assert why is not None
    assert [r.getMessage() for r in caplog.records].count(why) == 2
    public = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80))
    with egress(public) as sock:
        assert sock.family == socket.AF_INET


async def test_an_application_host_name_is_trusted_by_what_it_resolves_to() -> None:
    egress = Egress(EgressPolicy())
    egress.trust_url("http://LocalHost:8000/start")  # a name: trusted when resolved
    egress.trust_url("http://127.0.0.9:9000/final")  # an address: trusted at once
    egress.trust_url("https://10.0.0.5/page")  # https: port 443
    assert egress.policy.refusal("127.0.0.9", 9000) is None
    assert egress.policy.refusal("10.0.0.5", 443) is None
    assert egress.policy.refusal("127.0.0.1", 8000) is not None  # not resolved yet
    resolver = egress.resolver()
    try:
        other = await resolver.resolve("localhost", 8001)  # not an application's port
        assert egress.policy.refusal(other[0]["host"], 8001) is not None
        results = await resolver.resolve("localhost", 8000)
    finally:
        await resolver.close()
    assert results and egress.policy.refusal(results[0]["host"], 8000) is None
