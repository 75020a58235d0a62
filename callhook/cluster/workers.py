"""``serve --workers N``: N callhook processes behind Kamailio, and who listens where. Pure.

Theory of operation
-------------------
One callhook process runs its media tick, its SIP core and its call runners on
one core. To use every core, ``serve --workers N`` starts N *workers*, each a
whole callhook engine (``serve`` as it is with one worker) on its own SIP port
and its own slice of the RTP range, and puts Kamailio (an existing SIP proxy,
its ``dispatcher`` module) on the SIP address the outside world knows:

* an initial request goes to the next worker in turn (dispatcher algorithm 4,
  round robin); Kamailio Record-Routes dialogs, so every in-dialog request of
  a call (ACK, BYE, re-INVITE, INFO) reaches the worker that has the call
  (RFC 3261 §16.12: the route set), and the worker's own BYE goes back through
  the proxy; a caller that ignores Record-Route and sends its in-dialog requests
  to the proxy's address with no Route still reaches the call's worker: Kamailio
  keeps each call's worker by Call-ID (``htable``, until the BYE, at most
  :data:`CALL_AFFINITY_SECONDS`);
* the phones' REGISTERs go to worker 0 (the registrar of ``[users]``: it keeps the
  bindings in its memory and stores them; the other workers read them from the
  database before calling a user, and every second), or to the next worker while it
  does not answer; an INVITE answering a challenge goes to the worker that challenged
  it (its nonce), by Call-ID;
* Kamailio probes every worker with OPTIONS each :attr:`Layout.probe_seconds`;
  a worker that does not answer is skipped until it does again, and an INVITE
  sent to a worker that does not answer within :data:`WORKER_TIMEOUT_MS` (not
  even 100 Trying), or answers 503 (full), goes on to the next worker
  (``failure_route``); when every worker refused or none answered, the caller gets
  503 (not the 500 a proxy makes of a relayed 503, nor a 408);
* it relays nothing but calls to and from its workers: a request from outside
  "in a dialog" whose route leads anywhere but a worker gets 403;
* a worker sends every request to Kamailio (``sip/front.py``), but those to a peer it
  resolved over TLS (a trunk's: on its own connection, whose certificate it checks, which
  Kamailio's TLS client would not): a call or a trunk's REGISTER out names its next hop
  in ``X-Callhook-Destination``, followed for a worker's request only; Kamailio
  Record-Routes the call, so it leaves from and comes back to Kamailio's address (a
  provider's registered Contact; what a NAT forwards);
* on every request from outside, Kamailio writes its real source into
  ``X-Callhook-Source``, which a worker believes from Kamailio only (which trunk a
  call came through); neither header passes from outside;
* with ``[sip] external_address`` Kamailio advertises it (Record-Route, Via), and a
  request from outside to a worker's Contact there goes to the worker's own address;
* media does not pass through Kamailio: the caller's RTP goes straight to the
  worker's own port, named in its SDP;
* SIP over TLS ends at Kamailio (its ``tls`` module, with ``[sip]
  tls_certificate`` and ``tls_key``): it passes calls on to the workers over UDP
  on their host, Record-Routes both sides (the phone's with ``;transport=tls``),
  and sends requests for a phone back over the connection the phone opened
  (``nathelper``'s Contact alias: phones seldom listen for TLS).

Kamailio applies ``[security] allow`` and a per-source rate (its ``pike``
module, the same figure as ``[security] rate``; a source over it is banned for
``ban_seconds``; ``[sip] proxies`` are exempt) to what comes from outside,
because the workers see every request come from the proxy: they trust it (``serve``
adds its addresses to their ``[sip] proxies``) and keep their own checks for
anything that reaches them another way. Over TCP and TLS that is the requests, not the
connections: Kamailio accepts every one, with its own limits (none per source, no
deadline for a first message, pings answered), where one process closes one from a
source it would not answer at once (``sip/intake.py``); docs/scaling.md says so.

The workers share the data directory: recordings and notifications already
work across processes there (``store/database.py``: ``flock`` ownership; the
notifier lock passes to a survivor; the recordings of a dead worker are
finished by the first worker that looks, every 10 s, or by its successor at its
start). With ``[database] url`` they share PostgreSQL instead, as nodes on
several machines do (``store/postgres.py``).

This module only computes: the layout from the settings, Kamailio's
configuration and dispatcher list. ``serving/supervisor.py`` runs them.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from callhook.config.values import ConfigError
from callhook.sip.front import DESTINATION, SOURCE, Front
from callhook.sip.transport import Target, Transport

#: Where Debian's kamailio package puts its modules.
MODULE_DIRS = (
    Path("/usr/lib/x86_64-linux-gnu/kamailio/modules"),
    Path("/usr/lib/aarch64-linux-gnu/kamailio/modules"),
    Path("/usr/lib/kamailio/modules"),
    Path("/usr/local/lib64/kamailio/modules"),
)
#: The dispatcher set the workers are in.
SET = 1
#: How long Kamailio remembers a call's worker by its Call-ID (a BYE forgets it sooner).
CALL_AFFINITY_SECONDS = 4 * 3600
#: The environment variable the supervisor gives its workers their shared secret in: what
#: one worker asks another beyond questions about calls (a web client's call relayed,
#: telephony/webclients.py) must carry it.
WORKERS_TOKEN = "CALLHOOK_WORKERS_TOKEN"
#: And the first worker's SIP port, when the supervisor chose it (``[workers] first_port``
#: not given): every worker lays the ports out the same.
WORKERS_FIRST_PORT = "CALLHOOK_WORKERS_FIRST_PORT"
#: How long a source whose ban was lifted is not banned again by Kamailio's rate (its
#: count of the flood that got it banned cools down meanwhile).
LIFTED_SECONDS = 10
#: Kamailio's JSON-RPC socket, in the supervisor's run directory.
RPC_SOCKET = "kamailio_rpc.sock"
#: The workers' ports start this far above the SIP port when not configured.
FIRST_PORT_OFFSET = 40
#: A worker or Kamailio that ran this long before ending is replaced at once.
STEADY = 30.0
#: The longest pause between two starts of a process that keeps ending.
MAX_PAUSE = 30.0
#: Kamailio ending this soon after its first start did not start (its address is taken).
KAMAILIO_START = 5.0
#: A worker that does not answer an INVITE (not even 100 Trying) this long is skipped.
WORKER_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class Worker:
    """One worker process: its index (0-based), SIP port and RTP port range."""

    index: int
    sip_port: int
    rtp_ports: tuple[int, int]


@dataclass(frozen=True)
class Layout:
    """Where the front (Kamailio) and each worker listen."""

    #: The SIP address callers use: Kamailio's.
    host: str
    port: int
    #: The address put in Record-Route, Contact and SDP (the host's, or external_address).
    advertised: str
    #: Where Kamailio reaches the workers (loopback when they listen on every address).
    worker_host: str
    workers: tuple[Worker, ...]
    #: Kamailio's TCP port ([sip] tcp_port, by default the UDP port); None: no TCP.
    tcp_port: int | None
    #: Kamailio's TLS port and its certificate and key files; None: no TLS.
    tls: tuple[int, str, str] | None = None
    probe_seconds: int = 1
    #: ``[sip] external_address``: the public address (behind NAT) Kamailio advertises.
    external: str | None = None

    def worker(self, index: int) -> Worker:
        return self.workers[index]

    @property
    def public(self) -> str:
        """The address the outside world reaches Kamailio at."""
        return self.external or self.advertised

    def front(self) -> Front:
        """Kamailio as the workers see it (``sip/front.py``)."""
        ports: dict[Transport, int] = {"udp": self.port}
        if self.tcp_port is not None:
            ports["tcp"] = self.tcp_port
        if self.tls is not None:
            ports["tls"] = self.tls[0]
        return Front(
            Target(self.worker_host, self.port),
            frozenset(self.proxies),
            public_host=self.public,
            public_ports=ports,
        )

    @property
    def proxies(self) -> tuple[str, ...]:
        """The addresses the proxy's requests come from: what the workers trust."""
        return tuple(dict.fromkeys((self.worker_host, self.advertised, "127.0.0.1")))


def pause_before_restart(
    *, kamailio: bool, ready: bool, restarts: int, ran: float, pause: float
) -> float | None:
    """When a worker or Kamailio ends unasked: seconds to wait before starting another,
    or None to give up (it never started at all: nothing a retry would change).

    ``ready``: a worker had said it takes calls, Kamailio had answered SIP; ``restarts``:
    how many times it was replaced before; ``ran``: seconds it ran; ``pause``: the last
    pause. Replaced at once the first time and after a steady run; while it keeps ending
    within :data:`STEADY` seconds, the pause doubles from 1 s to :data:`MAX_PAUSE`.
    Kamailio that never answered gets :data:`KAMAILIO_START` seconds to have started
    (its probe may go unanswered for reasons of its configuration, ``[security] allow``).
    """
    if restarts == 0 and not ready and (ran < KAMAILIO_START if kamailio else True):
        return None
    if restarts == 0 or ran >= STEADY:
        return 0.0
    return min(MAX_PAUSE, max(1.0, pause * 2))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def kamailio_binary() -> str | None:
    """The kamailio executable, or None when it is not installed."""
    found = shutil.which("kamailio")
    if found:
        return found
    return "/usr/sbin/kamailio" if Path("/usr/sbin/kamailio").exists() else None


def kamailio_modules() -> Path | None:
    """Kamailio's module directory, or None."""
    for directory in MODULE_DIRS:
        if (directory / "dispatcher.so").exists():
            return directory
    return None


def plan(
    count: int,
    *,
    host: str,
    port: int,
    advertised: str,
    first_port: int,
    rtp_ports: tuple[int, int],
    tcp_port: int | None = None,
    tls: tuple[int, str, str] | None = None,
    external: str | None = None,
) -> Layout:
    """The layout of ``count`` workers; ConfigError when it cannot be laid out.

    Worker ``i`` takes SIP on ``first_port + i`` and the ``i``-th slice of the RTP
    range (even ports, RFC 3550 §11: each slice starts on one).
    """
    if count < 1:
        raise ConfigError(f"workers must be at least 1, got {count}")
    last_sip = first_port + count - 1
    if not first_port >= 1 or last_sip > 65535:
        raise ConfigError(f"[workers] first_port {first_port}: {count} workers go past 65535")
    if first_port <= port <= last_sip:
        raise ConfigError(
            f"[workers] first_port {first_port}: the workers' SIP ports "
            f"{first_port}-{last_sip} include the SIP port {port}"
        )
    first, last = rtp_ports
    if first <= last_sip and first_port <= last:
        raise ConfigError(
            f"[workers] first_port {first_port}: the workers' SIP ports overlap the RTP range"
        )
    start = first + (first & 1)
    pairs = (last - start + 1) // 2  # even ports, each with its RTCP port above it
    share = pairs // count
    if share < 2:
        raise ConfigError(
            f"rtp_ports {first}-{last}: too few ports for {count} workers (each needs some)"
        )
    workers = tuple(
        Worker(
            i,
            first_port + i,
            (start + 2 * share * i, start + 2 * share * (i + 1) - 1),
        )
        for i in range(count)
    )
    return Layout(
        host, port, advertised, host_of_workers(host), workers, tcp_port, tls, external=external
    )


def host_of_workers(host: str) -> str:
    """Where the workers listen when the front listens on ``host``: loopback when it is a
    wildcard (they are reached through Kamailio only), else the same address."""
    if host in ("0.0.0.0", "::", ""):
        return "::1" if ":" in host else "127.0.0.1"
    return host


def first_port_candidates(sip_port: int, count: int) -> range:
    """Where the workers' SIP ports may start when ``[workers] first_port`` is not given:
    from the SIP port + :data:`FIRST_PORT_OFFSET` up (5100 for the standard 5060); the
    caller takes the first run of ``count`` ports that is :func:`clear_of` the others and
    free."""
    return range(max(1024, sip_port + FIRST_PORT_OFFSET), 65536 - count + 1)


def default_first_port(sip_port: int, count: int, rtp_ports: tuple[int, int]) -> int:
    """The first of :func:`first_port_candidates` clear of the SIP port and the RTP range
    (whether its ports are free is the caller's to find out); ConfigError if none is."""
    for first in first_port_candidates(sip_port, count):
        if clear_of(first, count, sip_port, rtp_ports):
            return first
    raise ConfigError(f"no room for {count} workers' SIP ports: set [workers] first_port")


def clear_of(first_port: int, count: int, sip_port: int, rtp_ports: tuple[int, int]) -> bool:
    """Whether ``count`` ports from ``first_port`` miss the SIP port and the RTP range."""
    last = first_port + count - 1
    first_rtp, last_rtp = rtp_ports
    return not (first_port <= sip_port <= last) and (last < first_rtp or first_port > last_rtp)


def dispatcher_list(layout: Layout) -> str:
    """Kamailio's dispatcher list file: the workers, one set."""
    host = f"[{layout.worker_host}]" if ":" in layout.worker_host else layout.worker_host
    # Priority (higher first: Kamailio's algorithm 8) in worker order: the phones'
    # REGISTERs go to worker 0 while it answers, else to the next.
    count = len(layout.workers)
    lines = [
        f"{SET} sip:{host}:{w.sip_port} 0 {count - w.index} worker={w.index}"
        for w in layout.workers
    ]
    return "\n".join(lines) + "\n"


def _subnet_test(networks: tuple[str, ...]) -> str:
    """A Kamailio condition: the request's source is in one of ``networks``."""
    tests = []
    for text in networks:
        network = ipaddress.ip_network(text, strict=False)
        tests.append(f'is_in_subnet("$si", "{network}")')
    return " || ".join(tests) if tests else "0"


def kamailio_config(
    layout: Layout,
    *,
    modules: Path,
    dispatcher: Path,
    allow: tuple[str, ...],
    unknown: str,
    rate: float,
    ban_seconds: float,
    trusted: tuple[str, ...] = (),
    children: int = 2,
    rpc_socket: Path | None = None,
) -> str:
    """Kamailio's configuration for ``layout`` (see the module docstring).

    ``allow``: networks (``[security] allow``) that may send requests; ``unknown``:
    ``drop`` or ``reject`` (403) for other sources; ``trusted``: networks with no rate
    limit that may always send (``[sip] proxies``: a proxy in front of this one);
    ``rpc_socket``: where Kamailio answers JSON-RPC (a Unix datagram socket: the
    workers list and lift its bans there, cluster/frontbans.py).
    """
    rpc = ""
    if rpc_socket is not None:  # (transport 4: the datagram socket alone)
        rpc = f"""
loadmodule "jsonrpcs.so"
modparam("jsonrpcs", "transport", 4)
modparam("jsonrpcs", "dgram_socket", "{rpc_socket}")"""
    host = f"[{layout.host}]" if ":" in layout.host else layout.host
    advertise = ""
    if layout.host in ("0.0.0.0", "::", "") or layout.external is not None:
        # What Record-Route and Via name: behind NAT the public address.
        shown = f"[{layout.public}]" if ":" in layout.public else layout.public
        advertise = f" advertise {shown}:{layout.port}"
    listens = [f"listen=udp:{host}:{layout.port}{advertise}"]
    if layout.tcp_port is not None:
        tcp_advertise = advertise.replace(f":{layout.port}", f":{layout.tcp_port}")
        listens.append(f"listen=tcp:{host}:{layout.tcp_port}{tcp_advertise}")
    more = ""
    if layout.tls is not None:
        tls_port, certificate, key = layout.tls
        tls_advertise = advertise.replace(f":{layout.port}", f":{tls_port}")
        listens.append(f"listen=tls:{host}:{tls_port}{tls_advertise}")
        more = f"""loadmodule "tls.so"
modparam("tls", "tls_method", "TLSv1.2+")
modparam("tls", "certificate", "{certificate}")
modparam("tls", "private_key", "{key}")
modparam("tls", "verify_certificate", 0)
modparam("tls", "require_certificate", 0)"""
    streams = layout.tcp_port is not None or layout.tls is not None
    refuse = "exit;" if unknown == "drop" else 'sl_send_reply("403", "Forbidden"); exit;'
    # pike counts requests per source in units of 2 s and blocks a source over the density.
    density = max(2, round(rate * 2))
    ports = [w.sip_port for w in layout.workers]
    first, last = min(ports), max(ports)
    from_worker = f"({_subnet_test(layout.proxies)}) && $sp >= {first} && $sp <= {last}"
    # A worker's Contact names its own address (external_address behind NAT) and port.
    worker_names = dict.fromkeys((*layout.proxies, layout.public))
    to_worker_host = " || ".join(f'$var(host) == "{h}"' for h in worker_names)
    worker_host = f"[{layout.worker_host}]" if ":" in layout.worker_host else layout.worker_host
    trusted_test = _subnet_test(trusted)
    # A phone on TCP or TLS is reached over the connection it opened: its Contact gets an
    # alias of that connection's address (nathelper), used for the requests sent to it.
    alias = unalias = ""
    if streams:
        more += '\nloadmodule "nathelper.so"'
        alias = f"""
    if (!({from_worker}) && (proto == TCP || proto == TLS)
            && is_method("INVITE|SUBSCRIBE|UPDATE|REFER|NOTIFY|INFO")) {{
        add_contact_alias();
    }}"""
        # Only for a worker's request to a phone: from outside, an alias in the request
        # URI would choose where Kamailio sends it (a relay to anywhere).
        unalias = f"if ({from_worker}) {{ handle_ruri_alias(); }}"
    return f"""#!KAMAILIO
# Written by callhook serve (callhook/cluster/workers.py): SIP in front of {len(layout.workers)}
# callhook workers. It is written again at every start: edit the config, not this file.
debug=1
log_stderror=yes
log_prefix="kamailio: "
fork=yes
children={children}
{"tcp_children=" + str(children) if streams else "disable_tcp=yes"}
{"enable_tls=yes" if layout.tls is not None else ""}
{chr(10).join(listens)}
mpath="{modules}"
loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "textops.so"
loadmodule "siputils.so"
loadmodule "xlog.so"
loadmodule "ipops.so"
loadmodule "pike.so"
loadmodule "htable.so"
loadmodule "dispatcher.so"{rpc}
modparam("dispatcher", "list_file", "{dispatcher}")
modparam("dispatcher", "flags", 2)
modparam("dispatcher", "ds_ping_interval", {layout.probe_seconds})
modparam("dispatcher", "ds_probing_mode", 1)
modparam("dispatcher", "ds_probing_threshold", 1)
modparam("dispatcher", "ds_inactive_threshold", 1)
modparam("dispatcher", "ds_ping_from", "sip:dispatcher@{layout.advertised}")
modparam("pike", "sampling_time_unit", 2)
modparam("pike", "reqs_density_per_unit", {density})
modparam("pike", "remove_latency", 4)
# A banned source -> when it was banned (Unix seconds: the API's seconds_left); a source
# whose ban the operator lifted (cluster/frontbans.py), for a while.
modparam("htable", "htable", "ban=>size=8;autoexpire={max(1, round(ban_seconds))};")
modparam("htable", "htable", "lifted=>size=8;autoexpire={LIFTED_SECONDS};")
# Call-ID -> the worker of the call, for in-dialog requests that carry no Route.
modparam("htable", "htable", "calls=>size=14;autoexpire={CALL_AFFINITY_SECONDS};")
{more}

request_route {{
    if (!({from_worker}) && !({trusted_test})) {{
        # [security] rate and bans, per source (callhook's Guard does the same in one
        # process; the workers see only this proxy).
        if ($sht(ban=>$si) != $null) {{ exit; }}
        # (A source whose ban was just lifted through the API is let be while pike's
        # count of its flood cools down: lifted means answered now.)
        if (!pike_check_req() && $sht(lifted=>$si) == $null) {{
            $sht(ban=>$si) = $Ts;
            xlog("L_WARN", "banned $si for {ban_seconds:g} s: over {rate:g} SIP messages/s\\n");
            exit;
        }}
        # [security] allow: who may send requests.
        if (!({_subnet_test(allow)})) {{ {refuse} }}
    }}
    if (!mf_process_maxfwd_header("10")) {{ sl_send_reply("483", "Too Many Hops"); exit; }}{alias}
    # The workers see every request come from here: say who really sent it (believed
    # only from this proxy: callhook/sip/front.py). Neither header passes from outside.
    remove_hf("{SOURCE}");
    if (!({from_worker})) {{
        remove_hf("{DESTINATION}");
        append_hf("{SOURCE}: sip:$siz:$sp;transport=$pr\\r\\n");
    }}
    if (has_totag()) {{
        # In a dialog: the route set names the worker (or the caller) it belongs to.
        if (loose_route()) {{
            # From outside, only towards a worker: never a relay to anywhere else.
            if (!({from_worker})) {{
                if ($du != $null) {{
                    $var(host) = $(du{{uri.host}});
                    $var(port) = $(du{{uri.port}}{{s.int}});
                }} else {{
                    $var(host) = $rd;
                    $var(port) = $rp;
                }}
                if (!(({to_worker_host}) && $var(port) >= {first} && $var(port) <= {last})) {{
                    sl_send_reply("403", "Not a call of this server");
                    exit;
                }}
                # Where this proxy reaches the worker (not a NAT's public address).
                $du = "sip:{worker_host}:" + $var(port);
            }}
            if (is_method("BYE")) {{ $sht(calls=>$ci) = $null; }}
            {unalias}
            route(DESTINATION);
            t_relay();
            exit;
        }}
        if ({from_worker}) {{
            # A worker's, with no route set (a callee that did not echo Record-Route): to
            # the request-URI, or the flow the worker names (never back to a worker). An
            # ACK of a failed INVITE ends with t_check_trans() (absorbed: hop by hop).
            if (is_method("ACK")) {{ t_check_trans(); }}
            route(DESTINATION);
            t_relay();
            exit;
        }}
        # A phone that ignores Record-Route sends them here with no Route: the call's
        # worker, by its Call-ID.
        if ($sht(calls=>$ci) != $null) {{
            $du = $sht(calls=>$ci);
            if (is_method("BYE")) {{ $sht(calls=>$ci) = $null; }}
            t_relay();
            exit;
        }}
        # A callee of a worker's call that ignores Record-Route: to the worker its
        # request-URI (the worker's Contact) names, and to no one else.
        $var(host) = $rd;
        $var(port) = $rp;
        if (({to_worker_host}) && $var(port) >= {first} && $var(port) <= {last}) {{
            $du = "sip:{worker_host}:" + $var(port);
            t_relay();
            exit;
        }}
        if (is_method("ACK")) {{ if (t_check_trans()) {{ t_relay(); }} exit; }}
        sl_send_reply("404", "Not here");
        exit;
    }}
    if (is_method("CANCEL")) {{
        $sht(calls=>$ci) = $null;
        if (t_check_trans()) {{ t_relay(); }}
        exit;
    }}
    if ({from_worker}) {{
        # A worker's call or registration out: to the next hop it resolved, from this
        # proxy's address (the one a provider registered, and a NAT forwards).
        route(DESTINATION);
        if (is_method("INVITE|SUBSCRIBE")) {{ record_route(); }}
        t_relay();
        exit;
    }}
    if (is_method("INVITE|SUBSCRIBE")) {{ record_route(); }}
    if (is_method("INVITE") && $sht(calls=>$ci) != $null) {{
        # The same call again, answering a challenge: the worker that issued the nonce.
        $du = $sht(calls=>$ci);
        t_set_fr(0, {WORKER_TIMEOUT_MS});
        t_relay();
        exit;
    }}
    # The phones' REGISTERs to worker 0 (the registrar, one memory: the bindings it
    # stores, the others read), to the next while it does not answer; the rest in turn.
    if (is_method("REGISTER")) {{ $var(alg) = 8; }} else {{ $var(alg) = 4; }}
    if (!ds_select_dst("{SET}", "$var(alg)")) {{ sl_send_reply("503", "No worker"); exit; }}
    if (is_method("INVITE")) {{ $sht(calls=>$ci) = $du; }}
    t_on_failure("NEXT_WORKER");
    # A worker answers 100 Trying at once: one silent this long is taken for gone (only
    # here: requests to phones keep the standard timers).
    t_set_fr(0, {WORKER_TIMEOUT_MS});
    t_relay();
}}

route[DESTINATION] {{
    # Where a worker's request goes next, when the worker says (a call or a registration
    # out; in a call to a phone, the phone's flow). From outside it names nothing.
    if (({from_worker}) && is_present_hf("{DESTINATION}")) {{
        $du = $hdr({DESTINATION});
        remove_hf("{DESTINATION}");
    }}
}}

failure_route[NEXT_WORKER] {{
    if (t_is_canceled()) {{ $sht(calls=>$ci) = $null; exit; }}
    if (t_branch_timeout() && !t_branch_replied()) {{
        xlog("L_WARN", "worker $du did not answer $rm: trying the next\\n");
        ds_mark_dst("ip");
    }} else if (t_check_status("401|407")) {{
        exit;  # challenged: the answer goes to the same worker (its nonce)
    }} else if (!t_check_status("503")) {{
        $sht(calls=>$ci) = $null;  # refused: no dialog to remember
        exit;
    }}
    if (ds_next_dst()) {{
        if (is_method("INVITE")) {{ $sht(calls=>$ci) = $du; }}
        t_on_failure("NEXT_WORKER");
        t_set_fr(0, {WORKER_TIMEOUT_MS});
        t_relay();
        exit;
    }}
    $sht(calls=>$ci) = $null;
    # Every worker refused or none answered: this server is overloaded, so the caller
    # gets 503 (RFC 3261 §21.5.4: an upstream proxy then tries another server), not the
    # 500 a proxy makes of a relayed 503 (§16.7 step 6) nor a 408 of its own.
    if (t_branch_timeout() && !t_branch_replied()) {{
        t_reply("503", "Service Unavailable (no worker answered)");
    }} else {{
        t_reply("503", "Service Unavailable (every worker is full)");
    }}
}}
"""
