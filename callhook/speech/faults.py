"""Fault injection for the speech recogniser: how a test makes the real engine crash or hang.

``CALLHOOK_FAULT_RECOGNISER`` is read once, when ``serve`` builds its
recogniser (:func:`callhook.edge.speechworkers.build_recogniser`):

* ``crash``: the first engine instance raises on its first utterance and on
  every one after (a crashed engine is not to be trusted again);
* ``hang``: the first engine instance never returns from its first utterance
  (its thread stays blocked for good; it is a daemon thread, so it does not
  hold up the process's exit).

Loading the model (``warm_up``) is left alone, and the instances a restart
builds (:meth:`FaultyRecogniser.restarted`) are the real engine, untouched.
So the end-to-end tests (``tests/e2e/test_faults.py``) run the real engine
and see it replaced. It is a testing aid, documented in docs/behaviour.md;
``serve`` logs a warning at start when it is set. An environment variable
rather than a configuration key, so that no configuration file can turn it on
by mistake, and nothing else in callhook knows about it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Literal

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, RecognitionOptions
from callhook.speech.asr import Recogniser

logger = logging.getLogger("callhook.speech")

ENV = "CALLHOOK_FAULT_RECOGNISER"
Fault = Literal["crash", "hang"]


class InjectedCrash(RuntimeError):
    """What the broken engine raises."""


class FaultyRecogniser:
    """``engine`` with ``fault`` from its first utterance on (see the module docstring)."""

    def __init__(self, engine: Recogniser, fault: Fault) -> None:
        self.engine = engine
        self.fault = fault
        self.name = engine.name
        self.languages = engine.languages
        self._never = threading.Event()

    def warm_up(self) -> None:
        self.engine.warm_up()

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        if self.fault == "hang":
            self._never.wait()  # forever: only the supervisor's deadline ends the wait
        raise InjectedCrash(f"injected fault ({ENV}=crash): the {self.name} recogniser crashed")

    def restarted(self) -> Recogniser:
        """The real engine, fresh: what a restart builds."""
        fresh = getattr(self.engine, "restarted", None)
        engine: Recogniser = fresh() if fresh is not None else self.engine
        return engine


def inject(engine: Recogniser | None, environ: Mapping[str, str] = os.environ) -> Recogniser | None:
    """``engine``, broken as ``CALLHOOK_FAULT_RECOGNISER`` asks (unset: ``engine`` itself)."""
    value = environ.get(ENV, "").strip()
    if not value or engine is None:
        return engine
    if value not in ("crash", "hang"):
        raise ValueError(f"{ENV} must be 'crash' or 'hang', not {value!r}")
    fault: Fault = "crash" if value == "crash" else "hang"
    logger.warning(
        "%s=%s: the %s recogniser will %s on its first utterance (fault injection for tests)",
        ENV,
        value,
        engine.name,
        fault,
    )
    return FaultyRecogniser(engine, fault)
