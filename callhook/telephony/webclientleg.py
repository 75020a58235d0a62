"""A ``connect`` far leg that is a web client (``webrtc:ID``): the page rings, answers,
rejects or hangs up (telephony/webclients.py carries the messages).

Once the page answers, the leg gets a :class:`~callhook.media.session.MediaSession`
that takes part in the media tick with no socket (:meth:`MediaEngine.attach
<callhook.edge.mediaengine.MediaEngine.attach>`): the page's RTP packets go into it, what
it sends goes to the page. From then on it is joined, recorded and ended like a SIP far
leg. How it ends (docs/behaviour.md, "connect to a web client"):

* not signed in: ``unobtainable``, 404; ringing for another call: ``busy``, 486;
* rejected (or hung up while it rings): the page's SIP cause (486 when it gives none),
  as a SIP callee's final response would be reported;
* the page hangs up, or goes away once answered: ``hung_up``, ``BYE``; goes away while
  ringing: ``no_answer``, 480;
* callhook hangs it up (another destination answered, the caller hung up, the time
  limit): the cause it gives; the page is told ``ended``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from callhook.edge.mediaengine import MediaEngine
from callhook.media.session import MediaSession
from callhook.sip.responses import cause_of
from callhook.telephony.webclients import Channel
from callhook.telephony.wsprotocol import PCMU, TELEPHONE_EVENT

logger = logging.getLogger("callhook.webclients")

#: Where the page's packets are said to come from (no socket: nothing latches onto it).
SOURCE = ("127.0.0.1", 0)


class WebClientLeg:
    """One call to a web client (see the module docstring).

    ``ended(cause, raw_cause)`` is called exactly once, whatever happened.
    """

    def __init__(
        self,
        media: MediaEngine,
        label: str,
        *,
        ringing: Callable[[], None],
        answered: Callable[[MediaSession, int], None],
        ended: Callable[[str, str], None],
        wake: Callable[[MediaSession], None],
    ) -> None:
        self.media = media
        self.label = label
        self._ringing = ringing
        self._answered = answered
        self._ended = ended
        self._wake = wake
        self.channel: Channel | None = None
        self.session: MediaSession | None = None
        self.key: int | None = None
        self.over = False

    def rung(self, channel: Channel, local: bool) -> None:
        """The page rings (``local``: on this process; else its worker says when)."""
        if self.over:
            channel.close()
            return
        self.channel = channel
        if local:
            self._ringing()

    def failed(self, cause: str, raw_cause: str) -> None:
        """The client could not be rung."""
        self._end(cause, raw_cause)

    # --- what the page says (telephony/webclients.py Line) -----------------------------------

    def to_caller(self, message: str | bytes) -> None:
        if self.over:
            return
        if isinstance(message, bytes):
            if self.key is not None:
                self.media.deliver(self.key, message, SOURCE)
            return
        try:
            data = json.loads(message)
        except ValueError:
            return
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "ringing":
            self._ringing()
        elif kind == "answer" and self.session is None:
            self._answer()
        elif kind == "reject":
            status = data.get("cause")
            status = status if isinstance(status, int) and 400 <= status <= 699 else 486
            self._end(cause_of(status), str(status))
        elif kind == "busy":
            self._end("busy", "486")
        elif kind == "absent":  # signed out on its worker as the call came
            self._end("unobtainable", "404")
        elif kind == "hangup":
            self._end("hung_up", "BYE")

    def gone(self, why: str) -> None:
        if self.over:
            return
        logger.info("%s: the web client went away: %s", self.label, why)
        if self.session is not None:
            self._end("hung_up", "BYE")
        else:
            self._end("no_answer", "480")

    def _answer(self) -> None:
        session = MediaSession("PCMU", PCMU, TELEPHONE_EVENT, SOURCE, label=self.label)
        self.session = session
        self.key = self.media.attach(session, self._send, lambda: self._wake(session))
        self._answered(session, self.key)

    def _send(self, packet: bytes) -> None:
        if self.channel is not None:
            self.channel.to_client(packet)

    # --- callhook's end ---------------------------------------------------------------------

    def hang_up(self, cause: str) -> None:
        """callhook ends the call (the page is told ``ended``); reported at once."""
        self._end(cause, "")

    def _end(self, cause: str, raw_cause: str) -> None:
        if self.over:
            return
        self.over = True
        if self.channel is not None:
            self.channel.close()
        self._ended(cause, raw_cause)
