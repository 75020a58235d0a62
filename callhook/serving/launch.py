"""What ``callhook serve`` does before it knows what this process is: the command line's
settings applied, the REST API's keys checked, the number of workers chosen.

Then the process is one of three: the supervisor of ``serve --workers``
(:mod:`callhook.serving.supervisor`: Kamailio and the workers, no calls), a worker, or
the one process that serves alone (:mod:`callhook.serving.serve`). Deciding it here,
with nothing of the call-handling stack loaded, keeps the supervisor small: it never
imports the speech, media, actions or web server modules its workers run.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from callhook.config.settings import ConfigError, Settings, check_api_key, data_secret
from callhook.httpserver.keys import KeyRing, key_ring
from callhook.serving.supervisor import supervise
from callhook.serving.systemd import ServiceManager
from callhook.serving.workerplan import workers_for


def host_port(text: str, default_port: int) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``), or a host alone with ``default_port``."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclass
class Launch:
    """The settled start of ``serve``: the service manager that started it (systemd's, if
    any), the REST API's keys, and how many workers serve."""

    manager: ServiceManager
    keys: KeyRing
    workers: int

    def supervises(self, args: argparse.Namespace) -> bool:
        """Whether this process is the supervisor of several workers."""
        return args.worker is None and self.workers > 1


def launch(args: argparse.Namespace, settings: Settings) -> Launch:
    """Apply ``serve``'s command line to ``settings``, check the keys (ConfigError: before
    anything starts) and choose the number of workers."""
    # systemd's, when it runs serve: taken before any child starts (a worker has none).
    manager = ServiceManager.from_environment()
    if args.sip:
        settings.sip.host, settings.sip.port = host_port(args.sip, 5060)
    if args.rtp_ports:
        first, _, last = args.rtp_ports.partition("-")
        settings.sip.rtp_ports = (int(first), int(last))
    if args.max_calls is not None:
        settings.sip.max_calls = args.max_calls
    if args.shutdown_grace is not None:
        settings.sip.shutdown_grace = args.shutdown_grace
    keys = api_keys(args, settings)  # first: a bad key stops us before anything starts
    count, why = workers_for(settings, args.workers)
    if why is not None:
        logging.getLogger("callhook.workers").info("one worker: %s (docs/scaling.md)", why)
    return Launch(manager, keys, count)


def api_keys(args: argparse.Namespace, settings: Settings) -> KeyRing:
    """The REST API's keys: each configured application's ``api_key``, and one more.

    That one (``--api-key``, else the installation secret) is the key of the
    application given with ``--app-url``, or of the built-in demo when it is
    the default application. Raises ConfigError for a weak or shared key.
    """
    key = check_api_key(args.api_key, "--api-key") or data_secret(settings.data_dir)
    default = None
    if args.app_url:
        default = ("default", key)
    elif settings.default_app is None:
        default = ("demo", key)
    try:
        return key_ring(settings.apps, default)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


async def supervised(args: argparse.Namespace, settings: Settings, start: Launch) -> int:
    """Run ``start.workers`` workers behind Kamailio until stopped (this process takes no
    calls: :mod:`callhook.serving.supervisor`)."""
    http = host_port(args.http or f"{settings.http.host}:{settings.http.port}", 8080)
    config = Path(args.config) if getattr(args, "config", None) else None
    return await supervise(settings, start.workers, args.argv, http, config, start.manager)
