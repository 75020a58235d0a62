"""RFC 4028 session timers, as a UAS: what the 2xx says and who refreshes.

Trunks often send ``Session-Expires``. callhook never needs a timer itself,
but it must answer correctly (RFC 4028 §9, Table 2) and, when the result
makes it the refresher, refresh the session before the interval runs out
(§10: at half the interval) or the far end may end the call.
"""

from __future__ import annotations

from dataclasses import dataclass

from callhook.sip.message import Request

#: The smallest interval callhook accepts (RFC 4028 §5: 90 s is the minimum).
MIN_SE = 90


@dataclass(frozen=True)
class SessionTimer:
    """The negotiated timer: its interval, and whether we (the UAS) refresh."""

    interval: int
    we_refresh: bool

    def headers(self) -> list[tuple[str, str]]:
        """The 2xx's Session-Expires (and Require: timer when the UAC refreshes)."""
        refresher = "uas" if self.we_refresh else "uac"
        extra = [("Session-Expires", f"{self.interval};refresher={refresher}")]
        if not self.we_refresh:
            extra.append(("Require", "timer"))
        return extra


class IntervalTooSmall(ValueError):
    """Session-Expires below :data:`MIN_SE`: answer 422 with Min-SE."""


def negotiate(request: Request) -> SessionTimer | None:
    """The session timer for an INVITE (None: it asked for none).

    Table 2 of RFC 4028: when the UAC supports the extension it may name the
    refresher (we keep its choice) or leave it to us (we let it refresh:
    ``uac``, with ``Require: timer``); when it does not support it, only we
    can refresh (``uas``).
    """
    value = request.headers.get("Session-Expires")
    if value is None:
        return None
    number, _, params = value.partition(";")
    try:
        interval = int(number.strip())
    except ValueError:
        raise IntervalTooSmall(f"Session-Expires {number.strip()!r} is not a number") from None
    if interval < MIN_SE:
        raise IntervalTooSmall(f"Session-Expires {interval} is below {MIN_SE}")
    refresher = ""
    for param in params.split(";"):
        name, _, val = param.partition("=")
        if name.strip().lower() == "refresher":
            refresher = val.strip().lower()
    options = {
        tag.strip().lower()
        for name in ("Supported", "Require")
        for header in request.headers.get_all(name)
        for tag in header.split(",")
    }
    if "timer" not in options:
        return SessionTimer(interval, we_refresh=True)
    return SessionTimer(interval, we_refresh=refresher == "uas")
