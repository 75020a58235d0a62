"""A circuit breaker for a remote speech engine: after a failure, the engine is not asked
again until a back-off has passed, so that calls do not each wait for a server that is
down (a connect timeout per sentence) and a server coming back is not flooded. Sans-IO:
the caller says what time it is.

Closed (the engine is asked) → a failure opens it for ``base`` seconds → the first
request after that is a trial (half open): success closes it, failure opens it again for
twice as long, up to ``ceiling``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Breaker:
    """When a remote engine may be asked (see the module docstring)."""

    base: float = 1.0
    ceiling: float = 60.0
    #: Failures in a row (0: closed).
    failures: int = 0
    #: Until when it is open (monotonic seconds).
    open_until: float = 0.0
    #: Why it opened last, for the log and ``/api/stats``.
    cause: str = ""
    #: Failures and refusals (asked while open) so far.
    failed: int = 0
    refused: int = 0

    def allow(self, now: float) -> bool:
        """Whether the engine may be asked now (closed, or a trial after the back-off)."""
        if self.failures and now < self.open_until:
            self.refused += 1
            return False
        return True

    def success(self) -> None:
        self.failures = 0
        self.cause = ""

    def failure(self, now: float, cause: str) -> float:
        """The engine failed: open for the next back-off; returns its length (s)."""
        self.failures += 1
        self.failed += 1
        self.cause = cause
        wait = min(self.ceiling, self.base * 2.0 ** (self.failures - 1))
        self.open_until = now + wait
        return wait

    @property
    def is_open(self) -> bool:
        return self.failures > 0
