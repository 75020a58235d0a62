"""Reloading the config on SIGHUP (``systemctl reload callhook``) without dropping a call.

The file ``serve`` was started with (``--config``) is read again. A config with an error
is refused whole, with the error in the log, and the running one stays. Otherwise what
can change while calls run takes effect for the calls that begin from then on: the
applications (``[apps.*]``, their numbers and keys, the default application), the users
of phones that register, ``[security]``, ``[outbound]``, ``[retention]``,
``[recordings]`` and the trunks (one removed or changed is unregistered, one added or
changed registered). A call in progress finishes with the application it began with
(and its trunk's dialog). What is bound at the start (the addresses and ports, workers,
the database, the speech engines, media, notifications, ...) keeps its running value;
the log names each such table that changed, to be applied at the next restart.

With ``serve --workers`` the supervisor checks the file first and passes SIGHUP on to
every worker, each of which reloads itself.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from callhook.calls.services import Services
from callhook.config.settings import ConfigError, Settings, load
from callhook.dialplan import numbers
from callhook.dialplan.outbound import OutboundPolicy, check_pattern
from callhook.dialplan.trunks import Trunk
from callhook.httpserver.keys import KeyRing
from callhook.sip.guard import Guard, networks

logger = logging.getLogger("callhook.server")

#: The settings a reload applies (the rest waits for a restart).
LIVE = frozenset(
    {
        "apps", "numbers", "default_app", "users", "security", "outbound", "retention",
        "recordings", "trunk", "trunks",
    }
)  # fmt: skip
#: Not compared: what serve's own flags and the workers' layout set.
_IGNORED = frozenset({"data_dir"})


class Reloader:
    """Re-reads ``path`` into the running ``settings`` and the parts made from them."""

    def __init__(
        self,
        path: Path | None,
        settings: Settings,
        services: Services,
        *,
        keys: KeyRing,
        make_keys: Callable[[Settings], KeyRing],
        guard: Guard | None,
        outbound: OutboundPolicy | None,
        flags: Callable[[Settings], object] = lambda settings: None,
        trunks: Callable[[dict[str, Trunk]], Awaitable[list[str]]] | None = None,
    ) -> None:
        """``make_keys``: the REST API's keys of a config (ConfigError: refused);
        ``flags``: puts serve's command-line applications (``--app-url``) into a new
        config as they were put into the first."""
        self.path = path
        self.settings = settings
        self.services = services
        self.keys = keys
        self.make_keys = make_keys
        self.guard = guard
        self.outbound = outbound
        self.flags = flags
        self.trunks = trunks
        self._reloading: set[asyncio.Task[None]] = set()
        # What the file said at the start (before serve's flags changed the settings):
        # what a new reading is compared with, to name what waits for a restart.
        self._read = load(path) if path is not None else None

    def reload(self) -> bool:
        """Read the file again and apply it (see the module docstring); False when it was
        refused or there is no file."""
        if self.path is None:
            logger.warning("SIGHUP: serve was started without --config: nothing to reload")
            return False
        try:
            new = load(self.path)
            read = copy.deepcopy(new)
            new.data_dir = self.settings.data_dir
            self.flags(new)
            keys = self.make_keys(new)
        except (ConfigError, OSError) as exc:
            logger.error("SIGHUP: the config is refused; the running one stays: %s", exc)
            return False
        waiting = self._waiting(new)
        self._apply(new, keys)
        self._read = read
        apps = ", ".join(sorted(new.apps)) or "(none)"
        text = f"SIGHUP: reloaded {self.path}: applications {apps}"
        if waiting:
            text += f"; changed, applied at the next restart: {', '.join(waiting)}"
        logger.info("%s", text)
        return True

    def _waiting(self, new: Settings) -> list[str]:
        """The tables that changed and wait for a restart."""
        if self._read is None:
            return []
        out = []
        for item in dataclasses.fields(Settings):
            name = item.name
            if name in LIVE or name in _IGNORED:
                continue
            if getattr(new, name) != getattr(self._read, name):
                out.append(f"[{name}]" if name != "page_timeout" else "page_timeout")
        return out

    def _apply(self, new: Settings, keys: KeyRing) -> None:
        settings = self.settings
        # In place: the dialler and others hold these dicts.
        settings.apps.clear()
        settings.apps.update(new.apps)
        settings.numbers.clear()
        settings.numbers.update(new.numbers)
        settings.users.clear()
        settings.users.update(new.users)
        settings.default_app = new.default_app
        self.services.trust_app_hosts(*new.apps.values())
        self.keys.replace(keys)
        settings.security = new.security
        if self.guard is not None:
            security = new.security
            self.guard.allow = networks(security.allow)
            self.guard.unknown = "reject" if security.unknown == "reject" else "drop"
            self.guard.rate = security.rate
            self.guard.burst = 2 * security.rate
            self.guard.ban_seconds = security.ban_seconds
        settings.outbound = new.outbound
        if self.outbound is not None:
            own = [t.caller_id for t in new.trunks.values() if t.caller_id]
            self.outbound.allow = tuple(check_pattern(p) for p in new.outbound.allow)
            self.outbound.own_numbers = tuple(
                n for n in (numbers.canonical(x) for x in (*own, *new.numbers)) if n
            )
            self.outbound.max_calls_per_app = new.outbound.max_calls_per_app
        settings.retention = new.retention
        settings.recordings = new.recordings
        settings.trunk = new.trunk
        if self.trunks is not None and new.trunks != settings.trunks:
            task = asyncio.get_running_loop().create_task(self._trunks(new.trunks))
            self._reloading.add(task)
            task.add_done_callback(self._reloading.discard)

    async def _trunks(self, trunks: dict[str, Trunk]) -> None:
        """The trunks registered again as the new config has them (in the background: a
        registrar's name may take a while to resolve)."""
        assert self.trunks is not None
        try:
            changed = await self.trunks(trunks)
        except Exception:
            logger.exception("SIGHUP: the trunks could not be reloaded")
            return
        if changed:
            logger.info("SIGHUP: trunks reloaded: %s", ", ".join(changed))
