"""Speech engines off the event loop: synthesis and recognition on worker threads.

The engines block (a Whisper decode takes a few hundred milliseconds, a piper
sentence as long), so the event loop, which times every call's RTP, never
runs them: :class:`SpeechService` hands them to two small thread pools, one
for synthesis and one for recognition, so a burst of new prompts cannot delay
a caller's answer and the other way round. The engines release the GIL while
they compute (onnxruntime, CTranslate2, pocketsphinx's C code).

The recogniser is supervised (:mod:`callhook.speech.supervisor`, issue 14): a
decode that raises (a crash) or runs past its deadline (a hang) fails with
:class:`RecognitionFailed` naming the cause, which the call takes as "nothing
recognised"; the engine is then rebuilt (``restarted()``, a fresh instance
with its model loaded anew) on a fresh pool of threads. A hung thread is
abandoned: the recognition pool's threads are daemon threads, so one that
never returns does not hold up the process's exit. Decodes still queued move
to the new pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from callhook.config.speechengines import RemoteEngine
from callhook.edge import cpupressure
from callhook.edge.daemonpool import DaemonPool
from callhook.edge.remotespeech import remote_recogniser, remote_voice
from callhook.edge.speechstream import RecognitionFailed, UtteranceStream
from callhook.edge.threaditer import iterate
from callhook.events import Alternative, RecognitionOptions
from callhook.media import vad
from callhook.media.utterances import cut_utterances
from callhook.monitoring import prometheus
from callhook.speech import faults
from callhook.speech.asr import Recogniser
from callhook.speech.remote import RemoteSpeechError
from callhook.speech.supervisor import RecogniserSupervisor
from callhook.speech.synthesis import Synthesiser, VoiceChoice
from callhook.speech.tts import SpeechEngine

logger = logging.getLogger("callhook.speech")

T = TypeVar("T")

__all__ = ["DaemonPool", "RecognitionFailed", "SpeechService", "UtteranceStream"]

#: The soonest a running decode's deadline is looked at again (seconds).
RECHECK = 0.1
#: How long closing waits for the recogniser's running work (a model load takes seconds).
CLOSE_TIMEOUT = 30.0
#: How long a decode waits for the engine to load (at start or after a restart) before it
#: fails (nothing heard).
READY_TIMEOUT = 60.0
#: How long a caller's utterance may wait for its answer in all: queued behind other calls'
#: speech, behind a model that loads, and decoding. Past it the call hears "nothing
#: recognised" and goes on; a caller is not kept in silence longer than this.
ANSWER_TIMEOUT = 20.0


@dataclass
class SpeechStats:
    """Counters for ``/api/stats``."""

    utterances: int = 0
    recognise_seconds: float = 0.0
    #: Utterances a streaming recogniser was fed as they were spoken, and in how many pieces.
    streamed: int = 0
    pieces: int = 0
    sentences: int = 0
    synthesis_seconds: float = 0.0


class SpeechService:
    """The speech engines of a callhook process and the threads they run on."""

    def __init__(
        self,
        synthesiser: Synthesiser | None,
        recogniser: Recogniser | None,
        *,
        workers: int = 2,
        supervisor: RecogniserSupervisor | None = None,
    ) -> None:
        self.synthesiser = synthesiser
        self.recogniser = recogniser
        self.stats = SpeechStats()
        #: The model loads under way (warm_up), for whoever waits for them.
        self.warming: list[Future[None]] = []
        self.workers = workers
        self._tts_pool = ThreadPoolExecutor(workers, thread_name_prefix="tts")
        self._asr_pool = DaemonPool(workers, "asr")
        self.supervisor = supervisor or RecogniserSupervisor()
        #: Restarts of the recogniser so far (``/api/stats``).
        self.restarts = 0
        self.faults = 0
        self._jobs = itertools.count()
        self._running: dict[int, Future[Any]] = {}
        #: Decodes submitted and not begun (behind other calls' on the recognition threads).
        self._queued: set[int] = set()
        self._watch: asyncio.TimerHandle | None = None
        self._restart: asyncio.TimerHandle | None = None
        # Cleared while a fresh engine loads: decodes on the new pool wait for it.
        self._ready = threading.Event()
        self._ready.set()
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The recogniser's model was asked to load (warm_up, or the first decode).
        self._loading = False
        #: When the load under way began (``time.monotonic``): one past READY_TIMEOUT hung.
        self._load_started = 0.0

    def warm_up(self) -> None:
        """Load the models in the background, so the first call does not wait for them."""
        # The voice-activity model's weights too: read on the loop at the first call that
        # listens, they would hold every call's work up for a fifth of a second.
        self.warming.append(self._tts_pool.submit(vad.warm_up))
        if self.synthesiser is not None:
            self.warming.append(
                self._tts_pool.submit(self._warm, self.synthesiser.warm_up, "text-to-speech")
            )
        if self.recogniser is not None:
            self.warming.append(self._load_recogniser())

    def _load_recogniser(self) -> Future[None]:
        """The recogniser's model loads on the recognition threads; decodes wait for it as
        after a restart (a decode blocked on the model's load would count the load against
        its own deadline, and a load slowed by a busy machine would be taken for a hung
        engine). At start-up (``[speech] preload``), else before the first decode."""
        assert self.recogniser is not None
        self._loading = True
        self._ready.clear()
        self._load_started = time.monotonic()
        return self._asr_pool.submit(self._warm_recogniser, self.recogniser)

    def _warm_recogniser(self, engine: Recogniser) -> None:
        try:
            self._warm(engine.warm_up, "speech recognition", engine.name)
        finally:
            self._ready.set()

    @staticmethod
    def _warm(load: Callable[[], None], what: str, engine: str = "") -> None:
        started = time.monotonic()
        try:
            load()
        except RemoteSpeechError as exc:  # a server that is down: its cause, no traceback
            logger.error("the %s engine is not there: %s", what, exc)
        except Exception:
            logger.exception("loading the %s model failed", what)
        else:
            took = f"{engine}, " if engine else ""
            logger.info("the %s model is ready (%s%.1f s)", what, took, time.monotonic() - started)

    async def sentence(
        self, choice: VoiceChoice, text: str, rate: float = 1.0
    ) -> npt.NDArray[np.int16]:
        """One sentence spoken by ``choice`` at ``rate`` times its speed (8 kHz); raises
        SynthesisError."""
        pieces = [piece async for piece in self.pieces(choice, text, rate)]
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int16)

    async def pieces(
        self, choice: VoiceChoice, text: str, rate: float = 1.0
    ) -> AsyncIterator[npt.NDArray[np.int16]]:
        """The sentence's audio piece by piece as it is made (one piece unless the voice
        streams: :meth:`Synthesiser.chunks`), on the synthesis threads; SynthesisError."""
        assert self.synthesiser is not None
        loop = asyncio.get_running_loop()
        start = loop.time()
        async for piece in iterate(self._tts_pool, self.synthesiser.chunks(choice, text, rate)):
            yield piece
        self.stats.sentences += 1
        self.stats.synthesis_seconds += loop.time() - start

    async def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        """What the recogniser makes of one utterance (8 kHz).

        Raises :class:`RecognitionFailed` (with the cause) when the engine
        crashed or hung on it, or is being restarted after such a fault, or when
        no answer came within :data:`ANSWER_TIMEOUT` (busy, or still loading).
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        with self._timed(loop):
            result: tuple[Alternative, ...] = await self.run(
                lambda engine: engine.recognise(audio, options), len(audio) / 8000
            )
        self.stats.utterances += 1
        self.stats.recognise_seconds += loop.time() - start
        return result

    @contextlib.contextmanager
    def _timed(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        """An utterance's answer into ``/metrics``' recognition histogram (its engine, and
        whether it failed)."""
        engine = self.recogniser.name if self.recogniser is not None else "none"
        start = loop.time()
        try:
            yield
        except asyncio.CancelledError:  # nobody waits for it any more: not an answer
            raise
        except Exception:
            prometheus.RECOGNITIONS.labels(engine, "failed").observe(loop.time() - start)
            raise
        prometheus.RECOGNITIONS.labels(engine, "ok").observe(loop.time() - start)

    @property
    def streams(self) -> bool:
        """Whether the recogniser takes an utterance as it is spoken (:meth:`stream`)."""
        return bool(getattr(self.recogniser, "streaming", False))

    def stream(self, options: RecognitionOptions) -> UtteranceStream:
        """An utterance for the streaming recogniser, fed while the caller speaks."""
        return UtteranceStream(self.run, options)

    async def finish(
        self, stream: UtteranceStream, tail: npt.NDArray[np.int16]
    ) -> tuple[Alternative, ...]:
        """A streamed utterance ended with ``tail``: the engine's answer (as
        :meth:`recognise`'s, and its failures)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        with self._timed(loop):
            result = await stream.finish(tail)
        self.stats.utterances += 1
        self.stats.streamed += 1
        self.stats.pieces += stream.pieces
        self.stats.recognise_seconds += loop.time() - start
        return result

    async def run(self, work: Callable[[Recogniser], T], seconds: float) -> T:
        """``work(engine)`` on a recognition thread, supervised as a decode of ``seconds``
        of audio (its deadline; a fault restarts the engine). Raises
        :class:`RecognitionFailed`, as :meth:`recognise`."""
        assert self.recogniser is not None
        loop = self._loop = asyncio.get_running_loop()
        if (
            self._loading
            and not self._ready.is_set()
            and time.monotonic() - self._load_started > READY_TIMEOUT
        ):
            # A load that never ends is a hang like a decode's: a fresh engine, a fresh pool.
            name = self.recogniser.name
            self._fault(f"the {name} recogniser's model did not load within {READY_TIMEOUT:g} s")
        if not self.supervisor.available(loop.time()):
            raise RecognitionFailed("the speech recogniser is being restarted after a fault")
        if not self._loading:  # ([speech] preload false: loaded now, the decode waits)
            self._load_recogniser()
        job = next(self._jobs)
        gave_up = threading.Event()  # (set when the caller stops waiting: nothing to decode)
        future = self._asr_pool.submit(self._decode, loop, job, seconds, work, gave_up)
        self._running[job] = future
        self._queued.add(job)
        try:
            result: T = await asyncio.wait_for(asyncio.wrap_future(future), ANSWER_TIMEOUT)
        except RecognitionFailed:
            raise
        except TimeoutError:
            # Not a fault of the engine: a decode that runs on is still watched (a hang
            # is a hang); one still queued is cancelled and never runs, and one waiting
            # for a load gives up when the load is done.
            gave_up.set()
            raise RecognitionFailed(
                f"no answer from the speech recogniser within {ANSWER_TIMEOUT:g} s"
                " (busy with other calls' speech, or still loading)"
            ) from None
        except RemoteSpeechError as exc:  # a server down, slow or garbled: not a crash
            cause = f"the {self.recogniser.name} recogniser failed: {exc}"
            self._fault(cause)
            raise RecognitionFailed(cause) from exc
        except Exception as exc:
            cause = f"the {self.recogniser.name} recogniser crashed: {type(exc).__name__}: {exc}"
            self._fault(cause)
            raise RecognitionFailed(cause) from exc
        finally:
            self._running.pop(job, None)
            self._queued.discard(job)
        return result

    def _decode(
        self,
        loop: asyncio.AbstractEventLoop,
        job: int,
        seconds: float,
        work: Callable[[Recogniser], T],
        gave_up: threading.Event,
    ) -> T:
        """On a recognition thread: wait for a fresh engine if one loads, then decode."""
        if not self._ready.wait(READY_TIMEOUT):
            # A restart that hangs must not hang every call's get_input behind it.
            raise RecognitionFailed(
                f"the speech recogniser is still loading after {READY_TIMEOUT:g} s"
            )
        if self._closing:
            raise RecognitionFailed("callhook is shutting down")
        if gave_up.is_set():
            raise RecognitionFailed("nobody waits for this utterance any more")
        engine = self.recogniser
        if engine is None:
            raise RecognitionFailed("no speech recogniser could be started")
        # Time queued behind other calls' decodes does not count: the deadline runs from now.
        loop.call_soon_threadsafe(self._started, job, seconds)
        try:
            return work(engine)
        finally:
            loop.call_soon_threadsafe(self._finished, job)

    # --- the supervisor's side (on the event loop) ------------------------------------------

    @property
    def queued(self) -> int:
        """Utterances waiting for a recognition thread (``/metrics``)."""
        return len(self._queued)

    def _started(self, job: int, seconds: float) -> None:
        # Watched even if its caller gave up (the call ended): a hang is a hang.
        assert self._loop is not None
        self._queued.discard(job)
        timeout = getattr(self.recogniser, "timeout", 0.0)
        stall = cpupressure.stalled_seconds()
        self.supervisor.started(
            job,
            self._loop.time(),
            seconds,
            engine_timeout=timeout if isinstance(timeout, int | float) else 0.0,
            stall=stall,
        )
        self._arm(stall)

    def _finished(self, job: int) -> None:
        self.supervisor.finished(job)
        self._arm(cpupressure.stalled_seconds())

    def _arm(self, stall: float) -> None:
        """One timer, at the earliest deadline of a running decode (``stall``: the
        machine's CPU stall figure, read now)."""
        assert self._loop is not None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        deadline = self.supervisor.next_deadline(stall)
        if deadline is not None:
            # (Not sooner than RECHECK from now: a deadline the CPU stall keeps moving on
            # is looked at again, not in a tight loop.)
            at = max(deadline, self._loop.time() + RECHECK)
            self._watch = self._loop.call_at(at, self._check)

    def _check(self) -> None:
        assert self._loop is not None
        self._watch = None
        stall = cpupressure.stalled_seconds()
        late = self.supervisor.expired(self._loop.time(), stall)
        if late:
            name = self.recogniser.name if self.recogniser else "speech"
            cause = f"the {name} recogniser hung: no answer within its deadline (thread abandoned)"
            for job in late:
                future = self._running.get(job)
                if future is not None:
                    with contextlib.suppress(InvalidStateError):
                        future.set_exception(RecognitionFailed(cause))
            self._fault(cause)
        self._arm(stall)

    def _fault(self, cause: str) -> None:
        """The engine crashed or hung: every decode still running fails, a restart is due."""
        if self._restart is not None:
            return  # already being replaced
        loop = self._loop
        assert loop is not None
        self.faults += 1
        now = loop.time()
        stuck = self.supervisor.running
        at = self.supervisor.fault(now)
        for job in stuck:  # they run on the broken engine; queued ones move to the new one
            future = self._running.get(job)
            if future is not None:
                with contextlib.suppress(InvalidStateError):
                    future.set_exception(RecognitionFailed(cause))
        logger.error(
            "speech recognition fault: %s; the engine restarts %s",
            cause,
            "now" if at <= now else f"in {at - now:.0f} s (it failed repeatedly)",
        )
        if at <= now:
            self._restart_engine()  # now, before any other decode reaches the broken engine
        else:
            self._restart = loop.call_at(at, self._restart_engine)

    def _restart_engine(self) -> None:
        """A fresh engine on a fresh pool; the old pool's threads are left (a hung one forever)."""
        self._restart = None
        old_pool, old_engine = self._asr_pool, self.recogniser
        queued = old_pool.take_queued()
        old_pool.shutdown(wait=False)
        self._ready.clear()
        self._asr_pool = DaemonPool(self.workers, "asr")
        self._load_started = time.monotonic()
        self._asr_pool.submit(self._rebuild, old_engine)  # first: the others wait for it
        for job in queued:
            self._asr_pool.put(job)
        self.restarts += 1
        self.supervisor.restarted()

    def _rebuild(self, old: Recogniser | None) -> None:
        """On the new pool: build and load the fresh engine, then let decodes run."""
        try:
            fresh = getattr(old, "restarted", None)
            engine: Recogniser | None = fresh() if fresh is not None else old
            if engine is not None:
                engine.warm_up()
            self.recogniser = engine
            logger.warning("speech recogniser restarted (%s)", engine.name if engine else "none")
        except RemoteSpeechError as exc:
            logger.error("the speech recogniser could not be restarted: %s", exc)
        except Exception:
            logger.exception("the speech recogniser could not be restarted")
        finally:
            self._ready.set()

    def snapshot(self) -> dict[str, Any]:
        """Counters for ``/api/stats``: work done, time taken, the sentence cache."""
        stats = self.stats
        out: dict[str, Any] = {
            "recogniser": self.recogniser.name if self.recogniser else None,
            "recogniser_faults": self.faults,
            "recogniser_restarts": self.restarts,
            "utterances": stats.utterances,
            "recognise_seconds": round(stats.recognise_seconds, 3),
            "utterances_streamed": stats.streamed,
            "stream_pieces": stats.pieces,
            "sentences_synthesised": stats.sentences,
            "synthesis_seconds": round(stats.synthesis_seconds, 3),
        }
        if self.synthesiser is not None:
            out["default_voice"] = self.synthesiser.default.label
            out["sentence_cache_hits"] = self.synthesiser.hits
            out["sentence_cache_misses"] = self.synthesiser.misses
            # Remote voices: whether each is being skipped after failing, and how often.
            remote = {
                name: engine.snapshot()
                for name, engine in self.synthesiser.engines.items()
                if getattr(engine, "remote", False) and hasattr(engine, "snapshot")
            }
            if remote:
                out["remote_voices"] = remote
        return out

    async def hear(
        self, text: str, options: RecognitionOptions
    ) -> tuple[float, tuple[Alternative, ...]]:
        """``text`` spoken by the default voice and heard by the recogniser as on a call.

        The terminal phone's ``say``: the words are synthesised, put on a quiet
        line, through G.711 and the call's VAD and utterance cutter, and the
        recogniser's answer comes back with the speech's length in seconds.
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._asr_pool, self._hear, text, options)

    async def hear_audio(
        self, speech: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[float, tuple[Alternative, ...]]:
        """A recording (8 kHz) spoken into the call and heard as :meth:`hear` hears words
        (``callhook test``'s ``play`` step)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._asr_pool, self._heard, speech, options, 0)

    def _hear(
        self, text: str, options: RecognitionOptions
    ) -> tuple[float, tuple[Alternative, ...]]:
        assert self.synthesiser is not None
        return self._heard(self.synthesiser.speak(text), options, len(text))

    def _heard(
        self, speech: npt.NDArray[np.int16], options: RecognitionOptions, seed: int
    ) -> tuple[float, tuple[Alternative, ...]]:
        assert self.recogniser is not None
        rng = np.random.default_rng(seed)
        quiet = np.zeros(4000, dtype=np.int16)
        line = np.concatenate([quiet, speech, quiet, quiet]).astype(np.float64)
        line += rng.normal(0.0, 32768 * 10 ** (-60 / 20), line.size)  # a quiet phone line
        samples = np.clip(line, -32768, 32767).astype(np.int16)
        phrases = [
            self.recogniser.recognise(u, options) for u in cut_utterances(samples, law="ulaw")
        ]
        phrases = [p for p in phrases if p]
        seconds = len(speech) / 8000
        if not phrases:
            return seconds, ()
        if len(phrases) == 1:
            return seconds, phrases[0]
        # Several utterances (pauses between words): one phrase of their best texts.
        joined = " ".join(p[0].text for p in phrases)
        return seconds, (Alternative(joined, min(p[0].confidence for p in phrases)),)

    @property
    def can_hear(self) -> bool:
        """Whether both engines are there for :meth:`hear`."""
        return self.synthesiser is not None and self.recogniser is not None

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop both pools: queued work is cancelled; running work (a model still loading,
        a decode) is waited for up to ``timeout`` s, because native code the interpreter's
        exit interrupts aborts the process (``terminate called without an active
        exception``); a recogniser hung longer than that is abandoned. Blocks."""
        self._closing = True
        self._ready.set()  # decodes waiting for a restart give up now (see _decode)
        self._tts_pool.shutdown(wait=False, cancel_futures=True)
        self._asr_pool.shutdown(wait=False, cancel_futures=True)
        if not self._asr_pool.join(time.monotonic() + timeout):
            logger.warning("speech recognition still busy after %g s at exit: abandoned", timeout)


def build_synthesiser(
    default_voice: str, remote: Sequence[RemoteEngine] = ()
) -> Synthesiser | None:
    """The installed TTS engines and the ``remote`` ones behind one :class:`Synthesiser`,
    or None if none loads. A remote voice that fails is replaced by the first embedded
    engine's default voice (:meth:`Synthesiser.fallback_for`)."""
    engines: list[SpeechEngine] = []
    try:
        from callhook.speech.piper import PiperEngine

        engines.append(PiperEngine())
    except Exception as exc:  # the package or its voice is missing
        logger.warning("piper text-to-speech is not available: %s", exc)
    try:
        from callhook.speech.espeak import EspeakEngine

        engines.append(EspeakEngine())
    except Exception as exc:
        logger.warning("espeak-ng text-to-speech is not available: %s", exc)
    embedded = [f"{e.name}:{e.voice_for('en-US') or next(iter(e.voices()))}" for e in engines]
    engines += [voice for voice in map(remote_voice, remote) if voice is not None]
    if not engines:
        logger.error("no text-to-speech engine: text prompts cannot be spoken")
        return None
    # The voice that speaks when a remote one fails: the default voice if it is embedded.
    remote_default = default_voice.split(":")[0] in {server.name for server in remote}
    fallback = next(iter(embedded), None) if remote_default else default_voice
    try:
        return Synthesiser(engines, default_voice, fallback_voice=fallback)
    except ValueError as exc:
        voice = fallback or f"{engines[0].name}:{next(iter(engines[0].voices()))}"
        logger.error("%s; using %s", exc, voice)
        return Synthesiser(engines, voice, fallback_voice=fallback)


def build_recogniser(
    name: str, model: str = "tiny.en", remote: Sequence[RemoteEngine] = ()
) -> Recogniser | None:
    """The configured recogniser engine (``whisper``, with its ``model``: ``tiny.en``,
    ``base``, ``small``, or a cascade ``tiny.en+base``; ``sphinx``; ``none``: digits only;
    or one of the ``remote`` engines by its name)."""
    if name == "none":
        return None
    for server in remote:
        if server.name == name:
            return remote_recogniser(server)
    if name not in ("whisper", "sphinx"):
        raise ValueError(f"unknown speech recogniser {name!r} (whisper, sphinx or none)")
    engine: Recogniser
    try:
        if name == "whisper":
            from callhook.speech.models import model_path
            from callhook.speech.whisper import WhisperRecogniser

            # Found (and, once, put together) now: a model not installed is said at
            # start-up, not by every call's first utterance.
            whispers = [WhisperRecogniser(model_path(m), model=m) for m in model.split("+")]
            if len(whispers) == 2:
                from callhook.speech.cascade import CascadeRecogniser

                engine = CascadeRecogniser(whispers[0], whispers[1])
            else:
                (engine,) = whispers
        else:
            from callhook.speech.sphinx import SphinxRecogniser

            engine = SphinxRecogniser()
    except Exception as exc:
        logger.error("speech recogniser %r is not available: %s: only digits count", name, exc)
        return None
    # A test's way to make the real engine crash or hang (callhook.speech.faults).
    return faults.inject(engine)
