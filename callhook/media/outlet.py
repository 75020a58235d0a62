"""A call's usual outgoing RTP packet made in C, with no Python run for it. Sans-IO.

Every 20 ms the media tick (:mod:`callhook.edge.mediaengine`) asks every call's session
for its packet (:meth:`MediaSession.tick <callhook.media.session.MediaSession.tick>`).
Almost every one is the usual packet: the prompt's next 20 ms (not its last) or
silence, in plain RTP, with nothing else due on the call (no bridge, no recording of
both sides, no transcription, no digit being sent, nothing held for reordering, the
peer neither silent nor dead). In Python that cost ``MediaSession.tick``,
``Player.next_frame`` and ``RtpSender.frame``: about a sixteenth of a loaded serve's
CPU (profiled at 200 calls, issue 19). The native module ``_outlet.c`` keeps
:class:`~callhook.media.rtp.RtpSender`'s fields in a C struct that is its base
(:class:`SenderCore`), and :class:`~callhook.media.player.Player`'s in another
(:class:`PlayerCore`); it reads the session's from the session's struct
(:mod:`callhook.media.inlet`); and :func:`tick_all` makes the usual packet of every
call in one call. After the tick has sent, :func:`due_all` tells which calls have anything
more to do (an RTCP report due, news to wake the call's leg for): most have none, and
are not visited in Python at all.

For the media thread (:mod:`callhook.edge.plane`), :func:`cover_all` gives each playing
call's coming prompt audio, some frames beyond the one made this tick: the thread sends it
in a slot whose frame Python made too late, instead of silence, so a prompt plays
on while Python catches up. It is topped up a few frames at a time, and withdrawn
when the prompt stops or another begins. Where the audio playing ends within its reach
and the prompt's next segment is audio (a play list's next file), that segment is joined
to it then, as the player would join it once the audio ran out, so the cover runs on
across it (the frames made are the same bytes); where the thread could not take some of it,
:func:`uncover` makes the next :func:`cover_all` withdraw and give it all again.

As with :mod:`callhook.media.inlet` and :mod:`callhook.media.gate`, Python is the
reference: a packet is made in C only when every condition of that path holds, exactly
what Python would change is changed (``tests/unit/media/test_outlet.py`` compares the two
packet by packet, field by field), and any other call is left to ``MediaSession.tick``.
Where the extension was not built (or ``_inlet`` was not), :class:`SenderCore` and
:class:`PlayerCore` are plain classes and :func:`tick_all` makes nothing.
"""

from __future__ import annotations

from typing import Any

try:
    from callhook.media._outlet import (
        PlayerCore,
        SenderCore,
        cover_all,
        due_all,
        tick_all,
        uncover,
    )
except ImportError:  # no C compiler where callhook was installed

    class SenderCore:  # type: ignore[no-redef]
        """Where the extension is missing: a plain base, its fields in ``__dict__``."""

    class PlayerCore:  # type: ignore[no-redef]
        """Where the extension is missing: a plain base, its fields in ``__dict__``."""

    def tick_all(
        calls: list[tuple[Any, int]], now: float
    ) -> tuple[list[tuple[int, bytes, tuple[str, int]]], list[int]]:
        """Where the extension is missing: nothing is made, Python makes every packet."""
        return [], list(range(len(calls)))

    def due_all(calls: list[tuple[Any, bool]], now: float) -> list[int]:
        """Where the extension is missing: every call goes to the tick's ``_report``."""
        return list(range(len(calls)))

    def cover_all(calls: list[tuple[Any, int]], horizon: int) -> list[tuple[int, int, bool, bytes]]:
        """Where the extension is missing: no cover (silence where Python is late)."""
        return []

    def uncover(calls: list[tuple[Any, int]]) -> None:
        """Where the extension is missing: no cover to forget."""


def native() -> bool:
    """Whether the usual packet is made in C (the extension was built)."""
    return SenderCore.__module__ == "callhook.media._outlet"


__all__ = ["PlayerCore", "SenderCore", "cover_all", "due_all", "native", "tick_all", "uncover"]
