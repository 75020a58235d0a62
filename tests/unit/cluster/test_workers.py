"""``serve --workers N``: the layout, Kamailio's configuration (checked by Kamailio itself),
the config keys, and what a worker's settings become."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest
import trustme

from callhook.cluster.workers import (
    Layout,
    dispatcher_list,
    kamailio_binary,
    kamailio_config,
    kamailio_modules,
    pause_before_restart,
    plan,
)
from callhook.config.settings import ConfigError, Settings, load
from callhook.config.tables import SipSettings
from callhook.dialplan.trunks import Trunk
from callhook.serving.workerplan import become_worker, layout_of

KAMAILIO = kamailio_binary()
MODULES = kamailio_modules()


def two(**kw: object) -> Layout:
    args: dict[str, object] = {
        "host": "127.0.0.1",
        "port": 5060,
        "advertised": "127.0.0.1",
        "first_port": 5100,
        "rtp_ports": (20000, 29999),
    }
    args.update(kw)
    return plan(2, **args)  # type: ignore[arg-type]


def test_each_worker_has_its_sip_port_and_an_even_slice_of_the_rtp_range() -> None:
    layout = plan(
        3,
        host="0.0.0.0",
        port=5060,
        advertised="192.0.2.10",
        first_port=5100,
        rtp_ports=(20001, 29999),
    )
    assert [w.sip_port for w in layout.workers] == [5100, 5101, 5102]
    slices = [w.rtp_ports for w in layout.workers]
    assert slices[0][0] == 20002  # the first even port of the range
    for (first, last), (following, _) in itertools.pairwise(slices):
        assert first % 2 == 0 and last == following - 1  # contiguous, each from an even port
    assert slices[-1][1] <= 29999
    # Workers listen on every address, so the proxy reaches them on loopback; they trust
    # what comes from it, on loopback or on the advertised address.
    assert layout.worker_host == "127.0.0.1"
    assert set(layout.proxies) == {"127.0.0.1", "192.0.2.10"}
    # Priorities in worker order: the REGISTERs' choice (worker 0 first).
    assert dispatcher_list(layout).splitlines() == [
        "1 sip:127.0.0.1:5100 0 3 worker=0",
        "1 sip:127.0.0.1:5101 0 2 worker=1",
        "1 sip:127.0.0.1:5102 0 1 worker=2",
    ]


@pytest.mark.parametrize(
    ("kw", "problem"),
    [
        ({"first_port": 5059}, "include the SIP port 5060"),
        ({"first_port": 65535}, "go past 65535"),
        ({"first_port": 20000}, "overlap the RTP range"),
        ({"rtp_ports": (20000, 20006)}, "too few ports for 2 workers"),
    ],
)
def test_a_layout_that_cannot_work_is_refused_with_the_reason(
    kw: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        two(**kw)


def test_the_config_keys_are_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[workers]\ncount = 4\nfirst_port = 6000\n[sip]\nproxies = ["10.1.2.3"]\n')
    settings = load(path)
    assert (settings.workers.count, settings.workers.first_port) == (4, 6000)
    assert settings.sip.proxies == ("10.1.2.3",)
    assert load(tmp_path / "c.toml").workers.count == 4
    path.write_text("")
    assert (load(path).workers.count, load(path).workers.first_port) == (None, None)  # auto, free
    path.write_text('[workers]\ncount = "auto"\n')
    assert load(path).workers.count is None
    for text, problem in [
        ("[workers]\ncount = 0\n", "count must be 1 to 256"),
        ('[workers]\ncount = "many"\n', "count must be a whole number"),
        ("[workers]\nfirst_port = 80\n", "first_port must be a port above 1023"),
        ("[workers]\nprocesses = 2\n", r"\[workers\] unknown keys: processes"),
        ('[sip]\nproxies = ["kamailio.lan"]\n', "'kamailio.lan' is not an address"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=problem):
            load(path)


def test_the_workers_ports_start_from_the_sip_port_clear_of_it_and_of_rtp() -> None:
    from callhook.cluster.workers import default_first_port

    assert default_first_port(5060, 2, (20000, 29999)) == 5100  # as it always was
    assert default_first_port(6999, 2, (20000, 29999)) == 7039
    assert default_first_port(0, 2, (20000, 29999)) == 1024  # any port: from 1024 up
    # The SIP port + 40 in the RTP range: past it.
    assert default_first_port(19980, 4, (20000, 29999)) == 30000


def test_serve_chooses_free_ports_for_its_workers_a_second_serve_the_next() -> None:
    """Two ``serve`` on one machine: the second's workers do not take the first's ports
    (they used to bind a fixed 5100 and die at start)."""
    import socket

    from callhook.cluster.workerports import choose_first_port

    def taken_run(start: int) -> list[socket.socket]:
        held = []
        for port in (start, start + 1):
            for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                s = socket.socket(socket.AF_INET, kind)
                s.bind(("127.0.0.1", port))
                held.append(s)
        return held

    settings = Settings(sip=SipSettings(host="127.0.0.1", port=41000, rtp_ports=(20000, 29999)))
    first = choose_first_port(settings, 2)
    assert first >= 41040
    held = taken_run(first)
    try:
        second = choose_first_port(settings, 2)
        assert second >= first + 2  # past the ports the first one holds
    finally:
        for s in held:
            s.close()
    settings.workers.first_port = 6000  # configured: taken as it is (a clash says so later)
    assert choose_first_port(settings, 2) == 6000


def test_workers_that_cannot_bind_their_host_are_refused_with_the_cause() -> None:
    """An address the machine does not have (a loopback interface down does the same to
    127.0.0.1): the OS's reason, not "no free ports"."""
    from callhook.cluster.workerports import choose_first_port

    settings = Settings(sip=SipSettings(host="192.0.2.1", port=41000, rtp_ports=(20000, 29999)))
    with pytest.raises(ConfigError, match=r"cannot listen on 192\.0\.2\.1: Cannot assign"):
        choose_first_port(settings, 2)


def test_a_worker_takes_its_slice_and_trusts_the_proxy() -> None:
    settings = Settings(sip=SipSettings(host="127.0.0.1", port=5060, proxies=("10.0.0.9",)))
    become_worker(settings, 1, 2)
    assert settings.sip.port == 5101
    assert settings.sip.rtp_ports == (25000, 29999)
    assert (settings.sip.tcp_port, settings.sip.tls_port) == (0, 0)  # Kamailio takes TCP
    assert "10.0.0.9" in settings.sip.proxies and "127.0.0.1" in settings.sip.proxies
    # Its requests go through Kamailio, which it believes about their sources; only
    # worker 0 registers the trunks.
    front = settings.workers.front
    assert front is not None and front.target == ("127.0.0.1", 5060, "udp")
    assert front.sources == {"127.0.0.1"} and front.public_host == "127.0.0.1"
    assert front.contact_port("tcp") == 5060 and not settings.workers.lead
    first = Settings(sip=SipSettings(host="0.0.0.0", tcp_port=5090, external_address="203.0.113.7"))
    become_worker(first, 0, 2)
    assert first.workers.lead and first.workers.front is not None
    assert first.workers.front.public_host == "203.0.113.7"  # behind NAT: what a registrar gets
    assert first.workers.front.contact_port("tcp") == 5090
    assert first.workers.front.contact_port("tls") == 5060
    assert first.sip.external_address == "203.0.113.7"  # the workers' SDP names it too
    with pytest.raises(ConfigError, match="there are 2 workers"):
        become_worker(Settings(sip=SipSettings(host="127.0.0.1")), 2, 2)


def test_what_workers_do_not_support_yet_is_refused_by_name(tmp_path: Path) -> None:
    from callhook.config.settings import UserConfig

    # SIP over TLS ends at Kamailio, with callhook's certificate and key.
    tls = layout_of(
        Settings(
            sip=SipSettings(host="127.0.0.1", tls_certificate=tmp_path / "c.pem", tls_port=5071)
        ),
        2,
    ).tls
    assert tls == (5071, str(tmp_path / "c.pem"), str(tmp_path / "c.pem"))
    # Behind NAT, and trunks over UDP and TCP: through Kamailio.
    settings = Settings(sip=SipSettings(host="127.0.0.1", external_address="203.0.113.7"))
    settings.trunks = {
        "pbx": Trunk("pbx", registrar="pbx.example"),
        "carrier": Trunk("carrier", registrar="carrier.example", transport="tcp"),
    }
    assert layout_of(settings, 2).external == "203.0.113.7"
    # Registered users too (worker 0 their registrar).
    settings.users = {"alice": UserConfig("alice", "a long password")}
    assert layout_of(settings, 2).workers
    # A TLS trunk: each worker on its own connection, past Kamailio (sip/front.py).
    settings.trunks["secure"] = Trunk("secure", registrar="s.example", transport="tls")
    assert layout_of(settings, 2).workers
    # Not yet: a TCP trunk when Kamailio has no TCP.
    settings.sip.tcp_port = 0
    with pytest.raises(ConfigError) as refused:
        layout_of(settings, 2)
    assert "trunk carrier over tcp" in str(refused.value)
    for fine in ("pbx", "alice", "secure"):
        assert fine not in str(refused.value)
    # TCP on its own port ([sip] tcp_port), or none.
    assert layout_of(Settings(sip=SipSettings(host="127.0.0.1", tcp_port=5090)), 2).tcp_port == 5090
    assert layout_of(Settings(sip=SipSettings(host="127.0.0.1", tcp_port=0)), 2).tcp_port is None
    assert layout_of(Settings(sip=SipSettings(host="127.0.0.1", port=5070)), 2).tcp_port == 5070


@pytest.mark.skipif(KAMAILIO is None or MODULES is None, reason="kamailio is not installed")
@pytest.mark.parametrize("unknown", ["drop", "reject"])
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_kamailio_accepts_the_configuration(tmp_path: Path, unknown: str, host: str) -> None:
    assert KAMAILIO is not None and MODULES is not None
    # With TCP and TLS on the wildcard host; UDP only on loopback.
    tls = None
    if host == "0.0.0.0":
        pem = trustme.CA().issue_cert("localhost")
        pem.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "callhook.pem"))
        tls = (5063, str(tmp_path / "callhook.pem"), str(tmp_path / "callhook.pem"))
    # Behind NAT on the loopback one: Kamailio names the public address.
    external = "203.0.113.7" if host == "127.0.0.1" else None
    layout = two(
        host=host, tcp_port=5062 if host == "0.0.0.0" else None, tls=tls, external=external
    )
    dispatcher = tmp_path / "dispatcher.list"
    dispatcher.write_text(dispatcher_list(layout))
    config = tmp_path / "kamailio.cfg"
    config.write_text(
        kamailio_config(
            layout,
            modules=MODULES,
            dispatcher=dispatcher,
            allow=("127.0.0.0/8", "10.0.0.0/8", "::1/128"),
            unknown=unknown,
            rate=20.0,
            ban_seconds=600.0,
            trusted=("10.9.9.9",),
        )
    )
    # kamailio -c parses the whole configuration and loads its modules.
    check = subprocess.run(
        [KAMAILIO, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
    text = config.read_text()
    assert ('sl_send_reply("403", "Forbidden")' in text) == (unknown == "reject")
    assert ("listen=tcp:" in text) == (layout.tcp_port is not None)
    if layout.tcp_port is not None:
        assert "listen=tcp:0.0.0.0:5062 advertise 127.0.0.1:5062" in text
        assert "listen=tls:0.0.0.0:5063 advertise 127.0.0.1:5063" in text
        assert "enable_tls=yes" in text
        # The alias of a phone's connection is followed for a worker's requests only.
        (line,) = [x for x in text.splitlines() if "handle_ruri_alias" in x]
        assert line.strip().startswith("if ((is_in_subnet") and "$sp >= 5100" in line
    assert ("advertise 127.0.0.1:5060" in text) == (host == "0.0.0.0")
    assert ("listen=udp:127.0.0.1:5060 advertise 203.0.113.7:5060" in text) == bool(external)
    # The real source, written for the workers only on what comes from outside; where a
    # worker's request goes, taken from a worker only.
    (source,) = [x for x in text.splitlines() if "append_hf" in x]
    assert "X-Callhook-Source: sip:$siz:$sp;transport=$pr" in source
    assert text.count('remove_hf("X-Callhook-Source")') == 1
    assert text.count("$du = $hdr(X-Callhook-Destination)") == 1
    (follow,) = [x for x in text.splitlines() if 'is_present_hf("X-Callhook-Destination")' in x]
    assert "$sp >= 5100" in follow  # a worker's only: from outside it would be a relay
    assert 'is_in_subnet("$si", "10.0.0.0/8")' in text
    assert '"reqs_density_per_unit", 40' in text  # 20 a second, in units of 2 s


def test_auto_is_one_worker_per_core_when_it_can_be(monkeypatch: pytest.MonkeyPatch) -> None:
    from callhook.serving import workerplan

    settings = Settings(sip=SipSettings(host="127.0.0.1"))
    assert workerplan.workers_for(settings, 3) == (3, None)  # --workers wins
    settings.workers.count = 2
    assert workerplan.workers_for(settings, None) == (2, None)  # then [workers] count
    settings.workers.count = None  # "auto"
    monkeypatch.setattr(workerplan, "cores", lambda: 4)
    monkeypatch.setattr(workerplan, "memory_for_workers", lambda: 8)
    monkeypatch.setattr(workerplan, "kamailio_binary", lambda: "/usr/sbin/kamailio")
    monkeypatch.setattr(workerplan, "kamailio_modules", lambda: Path("/modules"))
    assert workerplan.workers_for(settings, None) == (4, None)
    monkeypatch.setattr(workerplan, "kamailio_binary", lambda: None)
    assert workerplan.workers_for(settings, None) == (
        1,
        "Kamailio is not installed (apt install kamailio)",
    )
    monkeypatch.setattr(workerplan, "kamailio_binary", lambda: "/usr/sbin/kamailio")
    settings.trunks = {"pbx": Trunk("pbx", registrar="pbx.example", transport="tcp")}
    settings.sip.tcp_port = 0
    count, why = workerplan.workers_for(settings, None)
    assert count == 1 and why is not None and "trunk pbx over tcp" in why
    settings.sip.tcp_port = None
    settings.trunks = {}
    monkeypatch.setattr(workerplan, "memory_for_workers", lambda: 3)  # memory for 3 only
    assert workerplan.workers_for(settings, None) == (3, None)
    monkeypatch.setattr(workerplan, "cores", lambda: 1)
    count, why = workerplan.workers_for(Settings(), None)
    assert count == 1 and why is not None and "one core" in why


def test_a_process_that_keeps_ending_is_restarted_ever_more_slowly() -> None:
    def pause(ran: float, restarts: int, last: float, kamailio: bool = False) -> float | None:
        return pause_before_restart(
            kamailio=kamailio, ready=True, restarts=restarts, ran=ran, pause=last
        )

    # The first replacement is immediate; then, while each ends within 30 s of its start,
    # 1 s, 2 s, 4 s ... up to 30 s; after a steady run, immediate again.
    pauses, last = [], 0.0
    for restarts in range(8):
        got = pause(ran=3.0, restarts=restarts, last=last)
        assert got is not None
        pauses.append(got)
        last = got
    assert pauses == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert pause(ran=30.0, restarts=7, last=30.0) == 0.0
    # Never started at all: give up (a worker that never said it takes calls; Kamailio
    # ending within 5 s of its first start, its address taken).
    assert pause_before_restart(kamailio=False, ready=False, restarts=0, ran=1.0, pause=0) is None
    assert pause_before_restart(kamailio=True, ready=False, restarts=0, ran=1.0, pause=0) is None
    assert pause_before_restart(kamailio=True, ready=False, restarts=0, ran=60, pause=0) == 0.0
    # Kamailio killed a moment after it answered SIP: replaced at once, it had started.
    assert pause(ran=1.0, restarts=0, last=0.0, kamailio=True) == 0.0
    # A replacement that fails before it is ready is retried (it took calls once).
    assert pause_before_restart(kamailio=False, ready=False, restarts=1, ran=1.0, pause=0) == 1.0
