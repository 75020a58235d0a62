"""A call's speech recognition stream on a real call: the utterances its media session
cuts (:mod:`callhook.media.utterances`) decoded on the speech workers, one after another,
each answer a ``SpeechRecognised`` or ``SpeechRejected`` event for the running action.

The leg (telephony/leg.py) starts it on :class:`~callhook.events.StartRecognition` and
stops it on :class:`~callhook.events.StopRecognition`. A new start with other options,
or a stop, begins a new *generation*: answers for utterances of an earlier one are
dropped, since nobody wants them any more. Each answer is acted on before the next
utterance is decoded, so the utterances queued behind an answer that ended the action are
never decoded.

A recogniser that streams (:class:`~callhook.speech.asr.RecognitionStream`) is fed each
utterance while the caller says it: the media session hands out its pieces
(:class:`~callhook.media.utterances.UtterancePiece`), each goes to the engine as it
comes (:class:`~callhook.edge.speechstream.UtteranceStream`), and at the utterance's end
only its tail is left to hand over before the answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from opentelemetry.context import Context

from callhook.edge.speechworkers import RecognitionFailed, SpeechService, UtteranceStream
from callhook.events import (
    Phrase,
    RecognitionOptions,
    SpeechRecognised,
    SpeechRejected,
    SpeechUnavailable,
)
from callhook.media.utterances import PIECE_FRAMES, Utterance, UtterancePiece
from callhook.monitoring import tracing
from callhook.speech import languages
from callhook.telephony.mediaevents import MediaEvents

logger = logging.getLogger("callhook.call")


class Listening:
    """The recognition stream of the call whose media ``events`` these are (see the
    module docstring); ``label`` names the call in log lines."""

    def __init__(self, events: MediaEvents, speech: SpeechService | None, label: str) -> None:
        self.events = events
        self.speech = speech
        self.label = label
        self._warned = False
        self._languages_warned: set[str] = set()
        # Its options while it runs, and its generation.
        self._options: RecognitionOptions | None = None
        self._generation = 0
        # Utterances waiting for their answer, in order (with their stream, if streamed),
        # the utterance being streamed now, and the task that decodes them one by one.
        self._pending: deque[tuple[int, Utterance, UtteranceStream | None, Context]] = deque()
        self._streaming: tuple[int, UtteranceStream] | None = None
        self._decoder: asyncio.Task[None] | None = None

    def start(self, options: RecognitionOptions) -> None:
        """Hand the caller's utterances to the recogniser with ``options`` from now on."""
        session = self.events.session
        if self.speech is None or self.speech.recogniser is None:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "%s: no speech recogniser is configured: only digits count", self.label
                )
            return
        recogniser = self.speech.recogniser
        engine = f"{recogniser.name} {getattr(recogniser, 'model', '')}".strip()
        cause = languages.unsupported(options.language, recogniser.languages, engine)
        if cause is not None:
            # Only digits count (docs/speech.md): said once per call and language, in the
            # call log (an error the application's developer sees) and the server log.
            if options.language not in self._languages_warned:
                self._languages_warned.add(options.language)
                logger.warning("%s: %s", self.label, cause)
                self.events.inject(SpeechUnavailable(f"{cause}: only digits count"))
            self.stop()  # one in another language may be running
            return
        if options != self._options:
            self._new_generation()
        self._options = options
        session.start_recognition(PIECE_FRAMES if self.speech.streams else 0)

    def stop(self) -> None:
        """No more utterances; answers not given yet are dropped."""
        self._options = None
        self._new_generation()
        self.events.session.stop_recognition()

    def close(self) -> None:
        """The call is over: nothing more is decoded."""
        self._new_generation()
        if self._decoder is not None:
            self._decoder.cancel()

    def collect(self) -> None:
        """Take what the media session cut since the last look: pieces go to the streaming
        recogniser now, utterances wait for their answer in order."""
        utterances = self.events.session.utterances
        if not utterances:
            return
        while utterances:
            item = utterances.popleft()
            if isinstance(item, UtterancePiece):
                self._piece(item)
                continue
            stream = None
            if self._streaming is not None and self._streaming[0] == self._generation:
                stream = self._streaming[1]
            self._streaming = None
            # (With the span current now, its action's: its recognition's parent.)
            self._pending.append((self._generation, item, stream, tracing.current()))
        if self._pending and (self._decoder is None or self._decoder.done()):
            self._decoder = asyncio.get_running_loop().create_task(self._decode())

    def _piece(self, piece: UtterancePiece) -> None:
        if self._options is None or self.speech is None:
            return
        current = self._streaming
        if piece.first:
            if current is not None:
                current[1].cancel()  # (an utterance whose end never came: a stopped stream)
            current = self._streaming = (self._generation, self.speech.stream(self._options))
        elif current is None or current[0] != self._generation:
            # Its start went to a stream of other options (since replaced): the engine
            # gets this utterance whole when it ends.
            self._streaming = None
            return
        current[1].feed(piece.audio)

    def _new_generation(self) -> None:
        self._generation += 1
        if self._streaming is not None:
            self._streaming[1].cancel()
            self._streaming = None
        for _, _, stream, _ in self._pending:
            if stream is not None:
                stream.cancel()
        self._pending.clear()

    async def _decode(self) -> None:
        """Decode this call's utterances in order, one at a time."""
        assert self.speech is not None
        while self._pending:
            generation, utterance, stream, traced = self._pending.popleft()
            options = self._options
            if options is None or generation != self._generation:
                if stream is not None:
                    stream.cancel()
                continue
            cause: str | None = None
            attributes = {
                "callhook.audio_seconds": round(len(utterance.audio) / 8000, 3),
                "callhook.streamed": stream is not None,
            }
            with (
                tracing.resumed(traced),
                tracing.span("recognition", attributes=attributes) as span,
            ):
                try:
                    if stream is not None:
                        tail = utterance.audio[utterance.streamed :]
                        alternatives = await self.speech.finish(stream, tail)
                    else:
                        alternatives = await self.speech.recognise(utterance.audio, options)
                except RecognitionFailed as exc:
                    # Crashed, hung or restarting (issue 14): nothing recognised, the
                    # call goes on; the service logged the fault and restarts the engine.
                    alternatives, cause = (), str(exc)
                except Exception as exc:
                    logger.exception("%s: speech recognition failed", self.label)
                    alternatives, cause = (), f"speech recognition failed: {exc}"
                if cause is not None:
                    tracing.failed(span, cause)
                span.set_attribute("callhook.alternatives", len(alternatives))
                if alternatives:
                    span.set_attribute("callhook.confidence", alternatives[0].confidence)
            if generation != self._generation:
                continue  # the stream stopped meanwhile: nobody wants this any more
            if options.doubts(alternatives):
                self.events.inject(SpeechRejected(unsure=Phrase(alternatives)))
            elif alternatives:
                self.events.inject(SpeechRecognised(Phrase(alternatives)))
            else:
                self.events.inject(SpeechRejected(cause))
            # The runner acts on this answer before the next utterance is decoded: one
            # that ends the action stops the recognition (a new generation), and the
            # utterances queued behind it are dropped instead of decoded for nobody (a
            # decode is the scarce work on a busy machine). A runner waiting for its next
            # event was woken by this one, so it runs before this task does again.
            await asyncio.sleep(0)
