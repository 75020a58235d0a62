"""Telling systemd how serve is doing, under a unit of ``Type=notify`` (sd_notify(3)).

systemd names a datagram socket in ``NOTIFY_SOCKET``; serve sends ``READY=1`` once it
would answer ``/readyz`` with 200 (so ``systemctl start`` returns when calls can be
taken, and units ordered after callhook start then), ``RELOADING=1`` then ``READY=1``
around a reload, ``STOPPING=1`` when it begins to stop, and a ``STATUS=`` line that
``systemctl status`` shows. Without ``NOTIFY_SOCKET`` (not under systemd) nothing is
sent. The variable is taken out of the environment at once, as sd_notify's
``unset_environment`` does: serve's workers and its Kamailio are not the service's
main process and must not speak for it.
"""

from __future__ import annotations

import os
import socket


class ServiceManager:
    """The service manager's notification socket, or nothing (``address`` None)."""

    def __init__(self, address: str | None) -> None:
        # An abstract socket is written with a leading "@" (sd_notify(3)).
        if address and address.startswith("@"):
            address = "\0" + address[1:]
        self.address = address or None

    @classmethod
    def from_environment(cls) -> ServiceManager:
        """The socket systemd gave this process (``NOTIFY_SOCKET``), removed from the
        environment so that no child inherits it."""
        return cls(os.environ.pop("NOTIFY_SOCKET", None))

    def send(self, *fields: str) -> bool:
        """Send ``fields`` (``"READY=1"``, ``"STATUS=..."``) in one datagram; False if
        there is no socket or it could not be reached (systemd gone: nothing to tell)."""
        if self.address is None:
            return False
        message = "\n".join(fields).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(self.address)
                s.sendall(message)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def reloading(self) -> None:
        self.send("RELOADING=1", "STATUS=reloading the config")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping: calls in progress finish, new calls get 503")


#: Where nothing is to be told (tests; a worker).
SILENT = ServiceManager(None)
