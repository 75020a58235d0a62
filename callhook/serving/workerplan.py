"""Which workers ``serve`` runs: how many (one per core where it can), the layout they
have with the settings (:mod:`callhook.cluster.workers` plans it), and what a worker's
own settings become. No processes: the supervisor (:mod:`callhook.serving.supervisor`)
starts them, and a worker (``serve --worker I``) takes its settings from here.
"""

from __future__ import annotations

from pathlib import Path

from callhook.cluster.workers import (
    Layout,
    cores,
    default_first_port,
    kamailio_binary,
    kamailio_modules,
    plan,
)
from callhook.config.settings import ConfigError, Settings
from callhook.edge.localaddress import local_address


def layout_of(settings: Settings, count: int) -> Layout:
    """The layout ``count`` workers would have with ``settings``; ConfigError, naming what,
    if more than one worker cannot serve them yet (docs/scaling.md)."""
    refused = []
    tls = None
    if settings.sip.tls_certificate is not None and settings.sip.tls_port:
        modules = kamailio_modules()
        if modules is not None and not (modules / "tls.so").exists():
            refused.append(
                "SIP over TLS without Kamailio's TLS module (apt install kamailio-tls-modules)"
            )
        tls = (
            settings.sip.tls_port,
            str(settings.sip.tls_certificate.resolve()),
            str((settings.sip.tls_key or settings.sip.tls_certificate).resolve()),
        )
    tcp = settings.sip.tcp_port != 0
    for trunk in settings.trunks.values():
        # Trunks go through Kamailio (sip/front.py), over the transports it listens on
        # (over TLS, past it: each worker holds its own connection).
        if trunk.transport == "tcp" and not tcp:
            refused.append(f"trunk {trunk.name} over {trunk.transport}")
    if refused:
        raise ConfigError(
            f"more than one worker does not support {'; '.join(refused)} yet: use --workers 1"
        )
    first_port = settings.workers.first_port
    if first_port is None:  # (serve chooses free ones: choose_first_port)
        first_port = default_first_port(settings.sip.port, count, settings.sip.rtp_ports)
    return plan(
        count,
        host=settings.sip.host,
        port=settings.sip.port,
        advertised=local_address(settings.sip.host),
        first_port=first_port,
        rtp_ports=settings.sip.rtp_ports,
        tcp_port=None if settings.sip.tcp_port == 0 else settings.sip.tcp_port or settings.sip.port,
        tls=tls,
        external=settings.sip.external_address,
    )


#: What a worker needs with the embedded speech models (measured: 400-550 MB under load).
WORKER_MEMORY = 600 * 2**20


def memory_for_workers() -> int:
    """How many workers the memory available now holds (each loads its own models)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return max(1, int(line.split()[1]) * 1024 // WORKER_MEMORY)
    except (OSError, ValueError, IndexError):
        pass
    return 1


def workers_for(settings: Settings, asked: int | None) -> tuple[int, str | None]:
    """How many workers ``serve`` runs, and why only one when it chose so.

    ``asked`` (``--workers``), else ``[workers] count``; when neither is given
    ("auto"), one per core (as many as the available memory holds), if Kamailio is
    installed and the configuration can be served by several workers; else one.
    """
    count = asked if asked is not None else settings.workers.count
    if count is not None:
        return count, None
    available = min(cores(), memory_for_workers())
    if available < 2:
        return 1, "this machine has one core, or memory for one worker (about 600 MB each)"
    if kamailio_binary() is None or kamailio_modules() is None:
        return 1, "Kamailio is not installed (apt install kamailio)"
    try:
        layout_of(settings, available)
    except ConfigError as exc:
        return 1, str(exc)
    return available, None


def become_worker(settings: Settings, index: int, count: int) -> Layout:
    """Change ``settings`` into those of worker ``index`` of ``count``; the layout."""
    layout = layout_of(settings, count)
    if not 0 <= index < count:
        raise ConfigError(f"--worker {index}: there are {count} workers (0 to {count - 1})")
    worker = layout.worker(index)
    settings.sip.port = worker.sip_port
    settings.sip.rtp_ports = worker.rtp_ports
    settings.sip.tcp_port = 0  # Kamailio takes TCP and TLS and passes requests on over UDP
    settings.sip.tls_port = 0
    settings.sip.proxies = (*settings.sip.proxies, *layout.proxies)
    settings.workers.front = layout.front()
    # One registration per trunk for all the workers: worker 0's, naming Kamailio as the
    # Contact (over TLS its own: sip/front.py); a provider's calls come to Kamailio, which
    # hands each to any worker. And worker 0 is the phones' registrar while it runs
    # (Kamailio sends it every REGISTER).
    settings.workers.lead = index == 0
    settings.workers.index = index
    return layout
