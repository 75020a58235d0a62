"""A call's usual frame through the voice-activity gate in C, no Python run for it. Sans-IO.

Every call's received frame goes through its voice-activity detector
(:mod:`callhook.media.vad`) every 20 ms, to track the noise floor even while nothing
listens. Almost every frame is the usual one: the detector paused (a prompt, digit
entry), listening to a quiet line with its gate closed, or in an utterance the speech
model confirmed, which the energy holds (no model run). In Python that frame cost
a tenth of a loaded serve's CPU (``MediaSession.detect``, ``VoiceActivityDetector.feed``,
profiled at 200 calls, issue 19). The native module ``_gate.c`` holds the detector's
fields in a C struct that is the base of the Python class
(:class:`~callhook.media.vad.VoiceActivityDetector` derives from :class:`GateCore`),
and :func:`feed_all` takes the usual frame of every call of a media tick in one call
(:mod:`callhook.edge.mediaengine`). Before that, :func:`gather` takes every call's
frames of the tick out of the sessions in one call, for the tick to measure at once.

As with :mod:`callhook.media.inlet`, Python is the reference: a frame is taken only
when every condition of that path holds there (no model run, no edge, no gain to
judge; a frame that completes a block of the noise floor is taken too, the floor
moved as Python moves it), exactly what Python would change is changed
(``tests/unit/media/test_gate.py`` compares them field by field), and any other frame is
left to :meth:`MediaSession.detect <callhook.media.session.MediaSession.detect>`.
Where the extension was not built (or ``_inlet``, whose session layout it reads, was
not), :class:`GateCore` is a plain class, :func:`feed_all` takes nothing and
:func:`gather` is :func:`gather_python`.
"""

from __future__ import annotations

from typing import Any

#: What :func:`gather` gives: the sessions that held frames of the law, all their
#: frames in order, how many each held, and whether any of them listens for in-band
#: digits.
Gathered = tuple[list[Any], list[bytes], list[int], bool]


def gather_python(sessions: list[Any], law: str) -> Gathered:
    """The frames of ``law`` that ``sessions`` hold for detection
    (:attr:`MediaSession.undetected <callhook.media.session.MediaSession.undetected>`),
    taken out of them: the media tick's step 2 measures them all at once. The
    reference of :func:`gather`, which does this in C."""
    picked: list[Any] = []
    payloads: list[bytes] = []
    counts: list[int] = []
    tones = False
    for session in sessions:
        held = session.undetected
        if not held or session.law != law:
            continue
        picked.append(session)
        counts.append(len(held))
        payloads += held
        tones = tones or session.tones is not None
        held.clear()  # (in place: a new list each tick is young garbage to collect)
    return picked, payloads, counts, tones


try:
    from callhook.media._gate import GateCore, feed_all, gather
except ImportError:  # no C compiler where callhook was installed
    gather = gather_python

    class GateCore:  # type: ignore[no-redef]
        """Where the extension is missing: a plain base, its fields in ``__dict__``."""

        def feed_usual(self, frame: Any, power: float) -> bool:
            return False

    def feed_all(sessions: list[Any], frames: list[Any], powers: list[float]) -> list[int]:
        """Where the extension is missing: nothing is taken, Python detects it all."""
        return list(range(len(sessions)))


def native() -> bool:
    """Whether the usual frame is taken in C (the extension was built)."""
    return GateCore.__module__ == "callhook.media._gate"


__all__ = ["GateCore", "Gathered", "feed_all", "gather", "gather_python", "native"]
