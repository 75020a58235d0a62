"""Step 2 of the media tick: what every call received, decoded, measured and detected.

The frames the tick received are taken out of every session at once (in C:
:func:`callhook.media.gate.gather`), decoded, measured and (for calls that listen for
in-band DTMF) put through the tone detector's prefilter in one numpy call per law
(:mod:`callhook.media.frames`); each frame goes to its session's detectors
(:meth:`~callhook.media.session.MediaSession.detect`, where the speech model runs on the
windows it completes), except the usual frame (a voice-activity detector that is
paused, whose gate stays closed, or in an utterance the energy holds), which is taken in
C for every call in one call (:func:`callhook.media.gate.feed_all`). Sans-IO: the media
engine (:mod:`callhook.edge.mediaengine`) runs it each tick.
"""

from __future__ import annotations

from collections.abc import Callable

from callhook.media import frames, gate
from callhook.media.g711 import LAWS
from callhook.media.session import MediaSession


class Detection:
    """Each tick's received frames, every call's at once (see the module docstring).

    ``fault(session)``: a session's detection raised (a bug, contained to its call)."""

    def __init__(self, fault: Callable[[MediaSession], None]) -> None:
        self._fault = fault

    def run(self, sessions: list[MediaSession]) -> None:
        """The frames ``sessions`` hold (this tick's), every call's decoded and measured
        at once, then each frame to its call's detectors."""
        for law in LAWS:
            # The frames each session holds, taken out (in C: media/gate.py).
            group, payloads, counts, tones = gate.gather(sessions, law)
            if group:
                samples, powers, verdicts = frames.measure(law, payloads, tones=tones)
                self._deliver(group, counts, samples, powers, verdicts)

    def _deliver(
        self,
        group: list[MediaSession],
        counts: list[int],
        samples: list[frames.Samples],
        powers: list[float],
        verdicts: list[bool | None],
    ) -> None:
        """One law's frames to their calls' detectors: ``counts[i]`` rows of ``samples``
        (and of ``powers``, ``verdicts``) each for ``group[i]``, in order."""
        if len(samples) == len(group):  # one frame each: the usual tick
            self._feed(group, samples, powers, verdicts)
            return
        # Some calls got two frames or more (a burst after a late tick): the others'
        # one frame is taken as usual, and the bursts frame by frame (_bursts).
        alone: list[MediaSession] = []
        rows: list[frames.Samples] = []
        row_powers: list[float] = []
        row_verdicts: list[bool | None] = []
        bursts: list[tuple[MediaSession, int, int]] = []
        first = 0
        for session, count in zip(group, counts, strict=True):
            last = first + count
            if count == 1:
                alone.append(session)
                rows.append(samples[first])
                row_powers.append(powers[first])
                row_verdicts.append(verdicts[first])
            else:
                bursts.append((session, first, last))
            first = last
        self._feed(alone, rows, row_powers, row_verdicts)
        self._bursts(bursts, samples, powers, verdicts)

    def _bursts(
        self,
        bursts: list[tuple[MediaSession, int, int]],
        samples: list[frames.Samples],
        powers: list[float],
        verdicts: list[bool | None],
    ) -> None:
        """The calls that got frames ``samples[first:last]`` this tick (a burst after a
        late tick, frequent under load), in rounds of one frame each, every round fed as
        a tick's single frames are. A call's frames stay in order; one whose detection
        raised gets no more of its burst."""
        while bursts:
            rows = [first for _, first, _ in bursts]
            faulted = self._feed(
                [session for session, _, _ in bursts],
                [samples[row] for row in rows],
                [powers[row] for row in rows],
                [verdicts[row] for row in rows],
            )
            bursts = [
                (session, first + 1, last)
                for session, first, last in bursts
                if first + 1 < last and id(session) not in faulted
            ]

    def _feed(
        self,
        sessions: list[MediaSession],
        samples: list[frames.Samples],
        powers: list[float],
        verdicts: list[bool | None],
    ) -> set[int]:
        """Each of ``sessions``' one frame of the tick: the usual ones taken in C
        (media/gate.py), the others by their sessions. Returns the ``id`` of each session
        whose detection raised."""
        faulted: set[int] = set()
        if not sessions:
            return faulted
        for i in gate.feed_all(sessions, samples, powers):
            try:
                sessions[i].detect(samples[i : i + 1], powers[i : i + 1], verdicts[i : i + 1])
            except Exception:
                self._fault(sessions[i])
                faulted.add(id(sessions[i]))
        return faulted
