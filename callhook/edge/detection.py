"""Step 2 of the media tick: what every call received, decoded, measured and detected.

The frames the tick received are taken out of every session at once (in C:
:func:`callhook.media.gate.gather`), decoded, measured and (for calls that listen for
in-band DTMF) put through the tone detector's prefilter in one numpy call per law
(:mod:`callhook.media.frames`); the speech model's windows they complete are run for
every call whose gate is open in one run (:func:`callhook.media.vad.start_ahead`), on
the model's own thread while the other calls' frames are fed, those calls' after it;
each frame goes to its session's detectors
(:meth:`~callhook.media.session.MediaSession.detect`), except the usual frame (a
voice-activity detector that is paused, whose gate stays closed, or in an utterance the
energy holds), which is taken in C for every call in one call
(:func:`callhook.media.gate.feed_all`). Sans-IO: the media engine
(:mod:`callhook.edge.mediaengine`) runs it each tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from callhook.media import frames, gate, vad
from callhook.media.g711 import LAWS
from callhook.media.session import MediaSession

logger = logging.getLogger("callhook.media")


_Measured = tuple[
    list[MediaSession], list[int], list["frames.Samples"], list[float], list["bool | None"]
]


def _rows(measured: _Measured, keep: Callable[[MediaSession], bool]) -> _Measured:
    """``measured`` (one law's sessions, their counts of frames, the frames' rows) with
    only the sessions ``keep`` keeps, and their rows."""
    group, counts, samples, powers, verdicts = measured
    kept: list[MediaSession] = []
    kept_counts: list[int] = []
    picked: list[int] = []
    first = 0
    for session, count in zip(group, counts, strict=True):
        if keep(session):
            kept.append(session)
            kept_counts.append(count)
            picked.extend(range(first, first + count))
        first += count
    return (
        kept,
        kept_counts,
        [samples[i] for i in picked],
        [powers[i] for i in picked],
        [verdicts[i] for i in picked],
    )


class Detection:
    """Each tick's received frames, every call's at once (see the module docstring).

    ``fault(session)``: a session's detection raised (a bug, contained to its call), or,
    with None, the batched speech model's run did (each model then runs its own window)."""

    def __init__(self, fault: Callable[[MediaSession | None], None]) -> None:
        self._fault = fault
        #: Batched speech model runs that raised (logged the first time).
        self.ahead_faults = 0

    def run(self, sessions: list[MediaSession]) -> None:
        """The frames ``sessions`` hold (this tick's), every call's decoded and measured
        at once; the speech model's windows they complete, every call's whose gate is open
        in one run; then each frame to its call's detectors."""
        measured = []  # each law's sessions, their counts of frames, the frames measured
        listening = []
        for law in LAWS:
            # The frames each session holds, taken out (in C: media/gate.py).
            group, payloads, counts, tones, ahead = gate.gather(sessions, law)
            if not group:
                continue
            samples, powers, verdicts = frames.measure(law, payloads, tones=tones)
            measured.append((group, counts, samples, powers, verdicts))
            listening += [(detector, samples[row]) for detector, row in ahead]
        if not listening:
            for item in measured:
                self._deliver(*item)
            return
        waiting = {id(detector) for detector, _ in listening}

        def others() -> None:
            for item in measured:
                self._deliver(*_rows(item, lambda s: id(s.vad) not in waiting))

        def theirs() -> None:
            for item in measured:
                self._deliver(*_rows(item, lambda s: id(s.vad) in waiting))

        self._around_batch(listening, others, theirs)

    def _around_batch(
        self,
        listening: list[tuple[vad.VoiceActivityDetector, frames.Samples]],
        others: Callable[[], object],
        theirs: Callable[[], object],
    ) -> None:
        """The model's batched run of ``listening``'s windows on its own thread
        (media/modelthread.py), ``others`` (the calls that do not wait for it) fed
        meanwhile, then ``theirs`` once it is over. A run that raises (a bug) is counted
        and logged once, and each model runs its own window as before."""
        try:
            batch, _ = vad.start_ahead(listening)
        except Exception:
            self._ahead_failed()
            batch = None
        others()
        if batch is not None:
            try:
                batch.finish()
            except Exception:
                self._ahead_failed()
        theirs()

    def _ahead_failed(self) -> None:
        self._fault(None)
        self.ahead_faults += 1
        if self.ahead_faults == 1:  # (it may fail every tick: logged once)
            logger.exception("running the speech model for every call at once failed")

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
        late tick, frequent under load), in rounds of one frame each, every round worked
        as a tick's single frames are (:meth:`_round`). A call's frames stay in order;
        one whose detection raised gets no more of its burst."""
        while bursts:
            rows = [first for _, first, _ in bursts]
            faulted = self._round(
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

    def _round(
        self,
        sessions: list[MediaSession],
        samples: list[frames.Samples],
        powers: list[float],
        verdicts: list[bool | None],
    ) -> set[int]:
        """One frame each for ``sessions``: as :meth:`run` does for a tick's, the speech
        model's windows they complete run for every call whose model decides in one run
        on the model's thread while the other calls are fed, those calls after it. (Each
        window run alone would make the event loop wait on the model's thread once a
        window: a loop that fell behind, whose calls all come in bursts, would fall
        further behind.) Returns the ``id`` of each session whose detection raised."""
        listening = [
            (session.vad, samples[i])
            for i, session in enumerate(sessions)
            if session.vad.model_decides
        ]
        if not listening:
            return self._feed(sessions, samples, powers, verdicts)
        waiting = {id(detector) for detector, _ in listening}
        faulted: set[int] = set()

        def feed(wait: bool) -> None:
            rows = [i for i, s in enumerate(sessions) if (id(s.vad) in waiting) == wait]
            faulted.update(
                self._feed(
                    [sessions[i] for i in rows],
                    [samples[i] for i in rows],
                    [powers[i] for i in rows],
                    [verdicts[i] for i in rows],
                )
            )

        self._around_batch(listening, lambda: feed(False), lambda: feed(True))
        return faulted

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
