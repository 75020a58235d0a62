"""``[trunks.NAME]`` and ``[trunk]`` in the config file, outbound routes through a trunk, the
trunk a call came from, and ``callhook trunks``' table."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from callhook.config.settings import ConfigError, load
from callhook.dialplan.trunks import RouteError
from callhook.serving.remote import trunk_table
from callhook.sip.transport import Target
from callhook.telephony.trunking import Trunks


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "callhook.toml"
    path.write_text(f'data_dir = "{tmp_path}"\n' + text)
    return path


PROVIDER = """
[trunks.provider]
registrar = "127.0.0.1:5090"
transport = "tcp"
username = "me"
password = "secret"
expires = 600
caller_id = "+441234567890"
srtp = "offer"
addresses = ["198.51.100.0/24", "203.0.113.9"]
"""


def test_a_trunk_table_is_read_and_checked(tmp_path: Path) -> None:
    settings = load(config(tmp_path, PROVIDER))
    trunk = settings.trunks["provider"]
    assert (trunk.registrar, trunk.transport, trunk.username, trunk.expires) == (
        "127.0.0.1:5090",
        "tcp",
        "me",
        600,
    )
    assert "secret" not in repr(trunk)
    spec = trunk.registration()
    assert spec is not None and spec.registrar == "127.0.0.1:5090" and spec.transport == "tcp"
    assert [str(n) for n in trunk.addresses] == ["198.51.100.0/24", "203.0.113.9/32"]


def test_the_older_trunk_table_is_the_trunk_named_trunk(tmp_path: Path) -> None:
    settings = load(config(tmp_path, '[trunk]\nusername = "u"\npassword = "p"\n'))
    legacy = settings.trunks["trunk"]
    assert legacy.registration() is None and legacy.username == "u"
    assert settings.trunk.username == "u"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('transport = "sctp"', "transport must be udp, tcp or tls"),
        ('srtp = "maybe"', "srtp must be off, offer or require"),
        ('registrar = "bad host!"', "registrar"),
        ('registrar = "sip.example"', "a registrar needs a username"),
        ("expires = 0", "expires must be 1 to 86400"),
        ('addresses = ["not-an-ip"]', "not an address or CIDR block"),
        ('colour = "blue"', "unknown keys: colour"),
        ('caller_id = "+44 1234"', "caller_id must be a SIP user part"),
        ('username = "me>\\r\\nX-Evil: 1"', "username must be a SIP user part"),
    ],
)
def test_a_bad_trunk_is_a_config_error_naming_it(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load(config(tmp_path, f"[trunks.p]\n{table}\n"))
    assert "[trunks.p]" in str(info.value)


def test_trunk_and_trunks_trunk_together_are_refused(tmp_path: Path) -> None:
    text = '[trunk]\nusername = "a"\n[trunks.trunk]\nusername = "b"\n'
    with pytest.raises(ConfigError, match="the same trunk"):
        load(config(tmp_path, text))


def routes(tmp_path: Path, text: str) -> Trunks:
    return Trunks(load(config(tmp_path, text)).trunks, lambda: None)


def test_a_number_through_a_trunk_goes_to_its_domain_with_its_caller_id(tmp_path: Path) -> None:
    trunks = routes(tmp_path, PROVIDER)
    route = trunks.route("+442071234567", "provider")
    assert route.uri == "sip:+442071234567@127.0.0.1"
    assert route.address == Target("127.0.0.1", 5090, "tcp")
    assert route.from_user == "+441234567890" and route.from_host == "127.0.0.1"
    assert route.credentials is not None and route.credentials.username == "me"
    assert route.srtp == "offer" and route.trunk == "provider"
    assert trunks.route("*21#", "provider").uri == "sip:*21%23@127.0.0.1"  # '#' escaped
    # A URI goes as given, still through the trunk's proxy.
    assert trunks.route("sip:bob@example.com", "provider").uri == "sip:bob@example.com"


def test_a_tls_trunk_calls_numbers_with_sips(tmp_path: Path) -> None:
    trunks = routes(tmp_path, PROVIDER.replace('"tcp"', '"tls"'))
    route = trunks.route("1000", "provider")
    assert route.uri == "sips:1000@127.0.0.1"
    assert route.address == Target("127.0.0.1", 5090, "tls")


def test_outbound_proxy_is_the_next_hop(tmp_path: Path) -> None:
    trunks = routes(tmp_path, PROVIDER + 'outbound_proxy = "127.0.0.2:5070"\n')
    assert trunks.route("1000", "provider").address == Target("127.0.0.2", 5070, "tcp")
    asyncio.run(trunks.start(lambda: None, register=False))  # resolves both hosts
    assert trunks.route("1000", "provider").address == Target("127.0.0.2", 5070, "tcp")
    assert trunks.of_source(Target("127.0.0.2", 5060)) is trunks.config["provider"]
    assert trunks.of_source(Target("127.0.0.1", 5060)) is trunks.config["provider"]


@pytest.mark.parametrize(
    ("to", "trunk", "status", "message"),
    [
        ("+4412", None, 400, "must be a sip: URI"),
        ("+4412", "nobody", 404, "no trunk named 'nobody'"),
        ("call me", "provider", 400, "a phone number"),
        ("sip:bad uri", None, 400, "not a valid SIP URI"),
        # (CR LF in a URI would end the To header it goes into: header injection)
        ("sip:100@192.168.1.5;x=\r\nX:1", None, 400, "control character"),
        ("sip:+441234567890@h;x=\nY", "provider", 400, "control character"),
        ("sip:100@192.168.1.5;transport=sctp", None, 400, "unsupported SIP transport"),
    ],
)
def test_routes_that_cannot_be(
    tmp_path: Path, to: str, trunk: str | None, status: int, message: str
) -> None:
    with pytest.raises(RouteError, match=message) as info:
        routes(tmp_path, PROVIDER).route(to, trunk)
    assert info.value.status == status


def test_without_a_trunk_the_older_credentials_answer_challenges(tmp_path: Path) -> None:
    trunks = routes(tmp_path, '[trunk]\nusername = "u"\npassword = "p"\n')
    route = trunks.route("sip:bob@192.0.2.5", None)
    assert route.credentials is not None and route.credentials.username == "u"
    assert route.address is None and route.trunk is None


def test_a_call_from_a_listed_block_is_from_that_trunk(tmp_path: Path) -> None:
    trunks = routes(tmp_path, PROVIDER)
    assert trunks.of_source(Target("198.51.100.77", 5060)) is trunks.config["provider"]
    assert trunks.of_source(Target("203.0.113.9", 5060)) is trunks.config["provider"]
    assert trunks.of_source(Target("192.0.2.1", 5060)) is None


def test_a_static_trunk_status_and_the_table(tmp_path: Path) -> None:
    trunks = routes(tmp_path, '[trunks.pbx]\naddresses = ["10.0.0.0/8"]\n' + PROVIDER)
    status = trunks.status(0.0)
    assert status[0] == {
        "name": "pbx",
        "state": "static",
        "reason": "",
        "expires_in": None,
        "next_try_in": None,
    }
    assert status[1]["state"] == "registering"
    status[1] |= {"state": "failing", "reason": "403 Forbidden", "next_try_in": 60}
    lines = trunk_table(status).splitlines()
    assert lines[0].split() == ["NAME", "STATE", "EXPIRES", "IN", "NEXT", "TRY", "IN", "REASON"]
    assert lines[1].split() == ["pbx", "static", "-", "-"]
    assert lines[2].split() == ["provider", "failing", "-", "60", "s", "403", "Forbidden"]
    assert trunk_table([]) == "no trunks configured"


def test_a_call_on_the_connection_opened_to_a_tls_trunk_is_from_that_trunk(
    tmp_path: Path,
) -> None:
    """Over TLS the connection is opened to the registrar's name (the certificate names
    it): a call that comes back on it is from that trunk, and follows its srtp."""
    text = PROVIDER.replace('"127.0.0.1:5090"', '"localhost:5090"').replace('"tcp"', '"tls"')
    trunks = routes(tmp_path, text)
    asyncio.run(trunks.start(lambda: None, register=False))
    connection = Target("localhost", 5090, "tls")
    assert trunks.route("1000", "provider").address == connection
    assert trunks.of_source(connection) is trunks.config["provider"]
    assert trunks.of_source(Target("localhost", 5090, "tcp")) is None


def test_a_number_through_a_trunk_with_no_domain_is_a_clear_400(tmp_path: Path) -> None:
    trunks = routes(tmp_path, '[trunk]\nusername = "u"\n')
    with pytest.raises(RouteError, match="call a sip: URI") as info:
        trunks.route("123", "trunk")
    assert info.value.status == 400


def test_the_registered_phones_as_a_table() -> None:
    from callhook.serving.remote import user_table

    assert user_table([]) == "no phones registered"
    table = user_table(
        [
            {
                "user": "alice",
                "contact": "<sip:alice@192.0.2.7:5062>",
                "transport": "udp",
                "source": "198.51.100.4:40112",
                "expires_in": 3541,
            }
        ]
    ).splitlines()
    assert table[0].split() == ["USER", "FROM", "EXPIRES", "IN", "CONTACT"]
    assert table[1].split() == [
        "alice", "udp", "198.51.100.4:40112", "3541", "s", "<sip:alice@192.0.2.7:5062>",
    ]  # fmt: skip


async def test_a_reload_unregisters_the_trunks_gone_and_registers_the_new(tmp_path: Path) -> None:
    """Trunks reloaded (serving/reload.py): the one left out gets REGISTER Expires: 0 and
    is forgotten; the one added registers; one unchanged sends nothing."""
    from callhook.sip.agent import Agent
    from tests.unit.sip.test_sip_registrations import answer, sent_requests

    agent = Agent("127.0.0.1", 5060)
    first = (
        '[trunks.provider]\nregistrar = "127.0.0.1:5090"\nusername = "me"\npassword = "s"\n'
        '[trunks.static]\noutbound_proxy = "127.0.0.1:5094"\n'
    )
    trunks = Trunks(load(config(tmp_path, first)).trunks, lambda: agent)
    changes: list[int] = []
    await trunks.start(lambda: changes.append(1))
    ((register, registrar),) = sent_requests(agent)  # provider's REGISTER
    assert registrar.port == 5090
    answer(agent, register, 200, asyncio.get_running_loop().time())  # registered
    assert agent.registrations.by_name["provider"].state == "registered"

    second = (
        '[trunks.static]\noutbound_proxy = "127.0.0.1:5094"\n'
        '[trunks.office]\nregistrar = "127.0.0.1:5092"\nusername = "me"\npassword = "s"\n'
    )
    held = trunks.config
    changed = await trunks.reload(load(config(tmp_path, second)).trunks, lambda: changes.append(1))
    assert changed == ["provider removed", "office added"]
    assert trunks.config is held and set(held) == {"static", "office"}
    out = sent_requests(agent)
    assert [(m.headers.get("Expires"), target.port) for m, target in out] == [
        ("0", 5090),  # provider's binding removed
        ("300", 5092),  # office registers
    ]
    assert set(agent.registrations.by_name) == {"office"}
    assert [t["name"] for t in trunks.status(0.0)] == ["static", "office"]
    route = trunks.route("+441234", "office")
    assert (route.trunk, route.address) == ("office", Target("127.0.0.1", 5092, "udp"))
    with pytest.raises(RouteError, match="no trunk named 'provider'"):
        trunks.route("+441234", "provider")
