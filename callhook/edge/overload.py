"""When the media runs behind: new calls are refused, so the calls already up keep their
audio. Sans-IO: the media tick reports how late each tick began, at a time it gives.

Every tick more than ``max_lag`` behind the wire for :data:`HOLD` seconds makes the
server :attr:`Overload.overloaded`: the inbound path answers new calls 503 (a front,
``serve --workers``, tries another worker). Every tick within ``max_lag`` for
:data:`CALM` seconds, or the last call ending, takes calls again. Each change is one
log line; the calls refused meanwhile are counted. A spike alone changes nothing.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("callhook.media")

#: Seconds every tick must run over ``max_lag`` behind before new calls get 503 ...
HOLD = 0.5
#: ... and within it before they are taken again.
CALM = 1.0


class Overload:
    """Whether the media runs too far behind to take another call (the module docstring)."""

    def __init__(self, max_lag: float) -> None:
        """``max_lag``: seconds behind the wire a tick may begin (0: never overloaded)."""
        self.max_lag = max_lag
        #: New calls are refused (503).
        self.overloaded = False
        self.refused = 0  # calls refused while overloaded (counted by the inbound path)
        self._behind_since: float | None = None  # every tick since then was behind
        self._calm_since: float | None = None  # and since then, none was

    def tick(self, lag: float, now: float) -> None:
        """One tick began ``lag`` seconds behind the wire, at ``now``."""
        if not self.max_lag:
            return
        if lag > self.max_lag:
            self._calm_since = None
            if self._behind_since is None:
                self._behind_since = now
            if not self.overloaded and now - self._behind_since >= HOLD:
                self.overloaded = True
                logger.warning(
                    "the media runs %.0f ms behind: new calls get 503 until it catches up "
                    "([media] max_lag_ms = %.0f)",
                    lag * 1000,
                    self.max_lag * 1000,
                )
            return
        self._behind_since = None
        if not self.overloaded:
            return
        if self._calm_since is None:
            self._calm_since = now
        elif now - self._calm_since >= CALM:
            self.calm()

    def calm(self) -> None:
        """Take calls again (the last call ended: no call is left to be behind for)."""
        if self.overloaded:
            logger.warning("the media caught up: taking new calls again (%d refused)", self.refused)
        self.overloaded = False
        self._behind_since = self._calm_since = None
