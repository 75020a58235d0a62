"""What the commands are handed to build their parts: :data:`callhook.app.ASSEMBLY`.

``serve`` and ``callhook test`` run above the telephony service but do not build it:
the composition root does (:mod:`callhook.app`), and passes itself in as an
:class:`Assembly`. So nothing below the root imports it, and a test can hand in its own.
"""

from __future__ import annotations

from typing import Protocol

from callhook.calls.services import Services
from callhook.config.settings import Settings
from callhook.telephony.service import SipService


class Assembly(Protocol):
    """Builds the long-lived parts of a process from its settings."""

    def services(self, settings: Settings) -> Services:
        """The parts every call shares (the store, pages, speech, database, journal)."""
        ...

    def sip_service(self, services: Services, host: str, port: int) -> SipService:
        """The telephony service on ``host``:``port`` (0: any free port)."""
        ...
