"""A real call as the call runner sees it: :class:`SipLeg` (implements ``call.Leg``).

It turns the actions' media commands into work for the call's
:class:`~callhook.media.session.MediaSession` (prompt audio, recording files)
and hands the session's events to the runner, waking it when something
happens or a deadline comes, both on the media's clock
(:class:`~callhook.telephony.mediaevents.MediaEvents`). Signalling goes through the
SIP service that owns it (answer, hang up); the service tells it when the far end hangs
up.

Speech goes through the process's :class:`~callhook.edge.speechworkers.SpeechService`
(worker threads): text whose sentences are not cached yet is synthesised
while the prompt plays (one task per prompt, cancelled when the prompt is
stopped or replaced), and the utterances the session cuts are decoded one
after another by one task per call; a result for a recognition stream that
has stopped since (a new generation) is dropped.

(Past 600 lines: the one place where every action's media commands become a real
call's work; split by command, the call's state would be split with it.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

from opentelemetry.trace import Span

from callhook.config.tables import RecordingsSettings
from callhook.edge.speechworkers import SpeechService
from callhook.events import (
    Aborted,
    CallCallee,
    CalleeEnded,
    CallEnded,
    ClassifyFarEnd,
    ClassifyOptions,
    DetectVoice,
    DropCallee,
    JoinCallee,
    JoinRoom,
    LeaveRoom,
    MediaCommand,
    MediaEvent,
    PlayFile,
    PlayUrl,
    PromptFinished,
    PromptItem,
    PromptNote,
    RecordCall,
    RecorderFailed,
    Refer,
    ReferAnswered,
    RoomDigit,
    RoomRefused,
    RunCallee,
    SayText,
    SecondaryPages,
    StartPrompt,
    StartRecognition,
    StartRecording,
    StopPrompt,
    StopRecognition,
    StopRecording,
    StopTranscribing,
    Transcribe,
)
from callhook.media.callrecording import CallRecording
from callhook.media.player import PromptError
from callhook.media.session import MediaSession
from callhook.monitoring import tracing
from callhook.ports import CallInfo
from callhook.speech.tts import SynthesisError
from callhook.store.crypto import Key
from callhook.store.diskspace import check_room
from callhook.store.files import MediaStore
from callhook.store.journal import RecordingJournal
from callhook.store.wavfile import WavWriter, Written
from callhook.telephony.listening import Listening
from callhook.telephony.mediaevents import MediaEvents
from callhook.telephony.prompts import PromptAudio
from callhook.telephony.transcribing import LiveTranscription, ResultPoster

logger = logging.getLogger("callhook.call")


class FarLegs(Protocol):
    """The far legs of the call's ``connect`` (telephony/connecting.py)."""

    def place(self, attempt: int, destination: str, call_from: str | None) -> None: ...
    def drop(self, attempt: int) -> None: ...
    def join(self, attempt: int, early: bool) -> None: ...
    def run(self, attempt: int, pages: SecondaryPages) -> None: ...
    def classify(self, attempt: int, options: ClassifyOptions | None) -> None: ...


class Referrer(Protocol):
    """The call's way to send a REFER in its dialog (a ``transfer``: telephony/referring.py)."""

    def refer(self, destination: str, referred_by: str | None) -> None: ...


class ConferencePort(Protocol):
    """The call's way to the conference rooms (``connect_to_conference``:
    telephony/conferences.py)."""

    def join(self, command: JoinRoom) -> None: ...

    def digit(self, digit: str) -> None: ...

    def leave(self) -> None: ...


class SipLeg:
    """One SIP call's signalling and media, for the call runner."""

    #: What places this call's far legs (set by the SIP service; None: it cannot).
    far: FarLegs | None = None
    #: What sends this call's REFERs (set by the SIP service; None: it cannot).
    referrer: Referrer | None = None
    #: What puts this call in conference rooms (set by the SIP service; None: it cannot).
    conference: ConferencePort | None = None
    #: Where a live transcription's results go (set by the SIP service; None: nowhere).
    transcripts: ResultPoster | None = None

    def __init__(
        self,
        info: CallInfo,
        app_name: str,
        session: MediaSession,
        prompts: PromptAudio,
        store: MediaStore,
        *,
        answer: Callable[[], Awaitable[None]],
        hang_up: Callable[[], str],
        dead: Callable[[], object] | None = None,
        max_recording_bytes: int | None = None,
        min_free_bytes: int = 0,
        speech: SpeechService | None = None,
        journal: RecordingJournal | None = None,
    ) -> None:
        self.info = info
        self.app_name = app_name
        self.events = MediaEvents(session, f"call {info.call_id}")
        self.prompts = prompts
        self.store = store
        self._answer = answer
        self._hang_up = hang_up
        self._dead = dead  # the SIP service's hang-up of a call whose RTP stopped
        self._dead_reported = False
        self.max_recording_bytes = max_recording_bytes
        self.min_free_bytes = min_free_bytes
        self.loop = asyncio.get_running_loop()
        self._ended: asyncio.Future[CallEnded] = self.loop.create_future()
        self._prompt_errors: dict[int, str] = {}
        self._recorders: dict[str, WavWriter] = {}
        self._recording_spans: dict[str, Span] = {}  # (the call's trace)
        self._call_recording: str | None = None  # the file of a connect's call recording
        self._recorded: dict[str, float] = {}  # seconds written to each stopped recording
        self.journal = journal
        self.speech = speech
        self._voice_notes: set[str] = set()  # voice choices warned about, once each
        # Prompts whose speech is being synthesised while they play.
        self._streaming: dict[int, asyncio.Task[None]] = {}
        self.listening = Listening(self.events, speech, f"call {info.call_id}")
        self._transcription: LiveTranscription | None = None
        self.answered = False

    @property
    def session(self) -> MediaSession:
        """The call's media session (its events' too)."""
        return self.events.session

    @session.setter
    def session(self, session: MediaSession) -> None:
        # (An outbound call's is replaced once the callee's answer is known: dialling.py.)
        self.events.session = session

    # --- from the SIP service and the media engine ----------------------------------------

    def now(self) -> float:
        """The call's media time, which the runner acts at (:class:`MediaEvents`)."""
        return self.events.now()

    def media_time(self) -> float:
        return self.events.clock()

    def wake(self) -> None:
        # (The events note what the media noted: here at the end, and before any event
        # the hang-up of a dead call injects, which comes after them.)
        if self.session.timed_out and not self._dead_reported:
            self._dead_reported = True
            if self._dead is not None:
                self._dead()
        if self._transcription is not None:
            self._transcription.collect()
        self.events.wake()

    def _transcribe(self, command: Transcribe) -> None:
        """Start a live transcription, replacing any running (Aculab: one at a time)."""
        if self._transcription is not None:
            self._transcription.stop()
            self._transcription = None
        if self.speech is None or not self.speech.can_hear or self.transcripts is None:
            logger.warning(
                "call %s: start_transcription: this call cannot transcribe (no speech "
                "recogniser, or nowhere to post results); nothing is sent",
                self.info.call_id,
            )
            return
        self._transcription = LiveTranscription(
            command, self.session, self.speech, self.transcripts
        )

    def far_end_ended(self, ended: CallEnded) -> None:
        """The caller hung up (or the call dropped)."""
        if not self._ended.done():
            self._ended.set_result(ended)
            self.inject(ended)

    def abort(self, reason: str) -> None:
        """callhook is ending the call itself (shutdown): the running action stops now."""
        self.inject(Aborted(reason))

    def inject(self, event: MediaEvent) -> None:
        self.events.inject(event)

    # --- call.Leg -------------------------------------------------------------------------

    def send(self, commands: Sequence[MediaCommand]) -> None:
        # (A recording started and stopped in one go is the empty file of an action that
        # heard nothing: no pre-roll is caught up for it.)
        stopped = {c.filename for c in commands if isinstance(c, StopRecording)}
        for command in commands:
            if isinstance(command, StartPrompt):
                self._start_prompt(command)
            elif isinstance(command, StopPrompt):
                self._cancel_stream(command.prompt_id)
                self.session.stop_prompt(command.prompt_id)
            elif isinstance(command, StartRecording):
                self._start_recording(command, command.filename not in stopped)
            elif isinstance(command, RecordCall):
                self._record_call(command)
            elif isinstance(command, StopRecording):
                if command.filename == self._call_recording:
                    self._call_recording = None
                    self.session.stop_call_recording()
                else:
                    self.session.stop_recording(self.events.clock())
                writer = self._recorders.pop(command.filename, None)
                if writer is not None:
                    self._recorded[command.filename] = writer.seconds
                    self._recording_ended(command.filename)
            elif isinstance(command, DetectVoice):
                self.session.detect_voice(command.on)
            elif isinstance(command, StartRecognition):
                self.listening.start(command.options)
            elif isinstance(command, StopRecognition):
                self.listening.stop()
            elif isinstance(command, CallCallee):
                if self.far is None:
                    logger.error("call %s: this call cannot place far legs", self.info.call_id)
                    self.inject(CalleeEnded(command.attempt, "failed", ""))
                else:
                    self.far.place(command.attempt, command.destination, command.call_from)
            elif isinstance(command, DropCallee) and self.far is not None:
                self.far.drop(command.attempt)
            elif isinstance(command, JoinCallee) and self.far is not None:
                self.far.join(command.attempt, command.early)
            elif isinstance(command, RunCallee) and self.far is not None:
                self.far.run(command.attempt, command.pages)
            elif isinstance(command, ClassifyFarEnd):
                self._classify(command)
            elif isinstance(command, Transcribe):
                self._transcribe(command)
            elif isinstance(command, StopTranscribing) and self._transcription is not None:
                self._transcription.stop()
                self._transcription = None
            elif isinstance(command, Refer):
                if self.referrer is None:
                    # As a peer that does not do REFER answers (RFC 3261 §8.2.1).
                    logger.warning("call %s: this call cannot be transferred", self.info.call_id)
                    self.inject(ReferAnswered(501))
                else:
                    self.referrer.refer(command.destination, command.referred_by)
            elif isinstance(command, JoinRoom):
                if self.conference is None:
                    logger.warning("call %s: this call cannot join a conference", self.info.call_id)
                    self.inject(RoomRefused("failed", "this call cannot join a conference"))
                else:
                    self.conference.join(command)
            elif isinstance(command, RoomDigit) and self.conference is not None:
                self.conference.digit(command.digit)
            elif isinstance(command, LeaveRoom) and self.conference is not None:
                self.conference.leave()

    def _classify(self, command: ClassifyFarEnd) -> None:
        """Who answered: this call (an outbound call's answer) or a far leg of its connect."""
        if command.attempt is not None:
            if self.far is not None:
                self.far.classify(command.attempt, command.options)
        elif command.options is not None:
            self.session.classify(command.options)
        else:
            self.session.stop_classifying()

    # --- prompts --------------------------------------------------------------------------

    def _start_prompt(self, command: StartPrompt) -> None:
        for prompt_id in list(self._streaming):
            self._cancel_stream(prompt_id)  # a new prompt replaces the one playing
        items = command.items
        self._note_voices(items)
        segments, done, error = self.prompts.ready(self.app_name, items, self.session.law)
        if error is not None or done == len(items):
            if error is not None:
                self._prompt_errors[command.prompt_id] = error
            if not segments and error is not None:
                self.inject(PromptFinished(command.prompt_id, error))
            else:
                self.session.play_segments(command.prompt_id, segments)
            return
        # Text to synthesise, a file to read or decrypt, a file to fetch: play what is
        # ready, the rest follows sentence by sentence, item by item.
        self.session.play_segments(command.prompt_id, segments, more=True)
        task = self.loop.create_task(self._stream_prompt(command.prompt_id, items[done:]))
        self._streaming[command.prompt_id] = task

    def _note_voices(self, items: tuple[PromptItem, ...]) -> None:
        synthesiser = self.prompts.synthesiser
        if synthesiser is None:
            return
        for item in items:
            if isinstance(item, SayText):
                note = self.prompts.choose(self.app_name, item).note
                if note is not None and note not in self._voice_notes:
                    self._voice_notes.add(note)
                    # The call's log (where the application's developer looks) and the
                    # server's: the prompt plays in another voice than the one asked for.
                    self.inject(PromptNote(note))

    async def _stream_prompt(self, prompt_id: int, items: tuple[PromptItem, ...]) -> None:
        law = self.session.law
        error: str | None = None
        item: PromptItem | None = None
        try:
            for item in items:
                synthesiser = self.prompts.synthesiser
                if isinstance(item, SayText) and self.speech and synthesiser:
                    spoken = self.prompts.speech(
                        self.app_name, item, law, self.speech.pieces, self._prompt_note
                    )
                    async for audio_bytes in spoken:
                        self.session.append_prompt(prompt_id, audio_bytes)
                elif isinstance(item, PlayFile):  # read and decoded off the event loop
                    audio_bytes = await asyncio.to_thread(
                        self.prompts.encoded_item, self.app_name, item, law
                    )
                    self.session.append_prompt(prompt_id, audio_bytes)
                elif isinstance(item, PlayUrl):
                    audio_bytes = await self.prompts.remote_audio(item, law)
                    self.session.append_prompt(prompt_id, audio_bytes)
                else:  # audio from the store or a cache, or digits to send
                    segment = self.prompts.segment(self.app_name, item, law)
                    self.session.append_prompt(prompt_id, segment)
        except (PromptError, SynthesisError) as exc:
            error = str(exc)
            if isinstance(item, SayText) and item.private:
                # An engine's message may quote the text: text_is_private keeps it out.
                error = f"a private text could not be spoken ({type(exc).__name__})"
            # (Not logged here: the runner logs the prompt's failure once per cause, in
            # the call log and the server log, when its PromptFinished arrives.)
        except Exception as exc:  # a bug must end the prompt, not leave it open forever
            error = f"internal error: {type(exc).__name__}: {exc}"
            logger.exception("call %s: prompt %d failed", self.info.call_id, prompt_id)
        finally:
            if self._streaming.get(prompt_id) is asyncio.current_task():
                del self._streaming[prompt_id]
            if error is not None:
                self._prompt_errors[prompt_id] = error
            self.session.close_prompt(prompt_id)

    def _prompt_note(self, note: str) -> None:
        self.inject(PromptNote(note))  # (the call's log, and the server's)

    def _cancel_stream(self, prompt_id: int) -> None:
        task = self._streaming.pop(prompt_id, None)
        if task is not None:
            task.cancel()

    def _start_recording(self, command: StartRecording, catch_up: bool = True) -> None:
        law = command.format or self.session.law
        writer = self._open(
            command.filename,
            lambda path, durable: WavWriter.for_recording(
                path, law, command, self.max_recording_bytes, on_durable=durable
            ),
        )
        if writer is None:
            return
        if not catch_up:
            # Started and stopped in one go: the empty file of an action that heard nothing
            # (nothing of the pre-roll, and no silence for a caller who sends none).
            writer.close()
            return
        # The runner decided at the media time of its event; the media has been worked on
        # since (the loop was behind): what came meanwhile is in the pre-roll too.
        self.session.start_recording(writer, law, command.preroll, self.events.acting_at)

    def _record_call(self, command: RecordCall) -> None:
        """A connect's whole-call recording: both directions, from the bridge on."""
        law = self.session.law
        channels = 2 if command.mode == "separate" else 1
        writer = self._open(
            command.filename,
            lambda path, durable: WavWriter(
                path,
                law,
                self.max_recording_bytes,
                key=Key.from_cipher(command.cipher) if command.cipher else None,
                on_durable=durable,
                channels=channels,
            ),
        )
        if writer is not None:
            self._call_recording = command.filename
            self.session.start_call_recording(
                CallRecording(writer, law, command.mode, eliminate_dtmf=command.eliminate_dtmf)
            )

    def _open(
        self,
        filename: str,
        make: Callable[[Path, Callable[[Written], object] | None], WavWriter],
    ) -> WavWriter | None:
        """A recording's file (its journal told when it is safe on disk), or None when it
        cannot be made (RecorderFailed for the action, the journal forgets it)."""
        app, journal = self.app_name, self.journal
        durable = None if journal is None else lambda w: journal.durable(app, filename, w.length)
        try:
            path = self.store.path(app, filename)
            check_room(path, self.min_free_bytes)  # (refused now, not failing mid-call)
            writer = make(path, durable)
        except (OSError, ValueError) as exc:  # OutsideNamespace is a ValueError
            why = f"cannot create {filename}: {exc}"
            with tracing.span("recording", attributes={"callhook.filename": filename}) as span:
                tracing.failed(span, why)
            if journal is not None:
                journal.failed(app, filename, why)
            self.inject(RecorderFailed("error", why))
            return None
        self._recorders[filename] = writer
        # (A child of the span current now: its action's.)
        attributes = {"callhook.filename": filename}
        self._recording_spans[filename] = tracing.TRACER.start_span(
            "recording", attributes=attributes
        )
        return writer

    def _prompt_error(self, event: MediaEvent) -> MediaEvent:
        """A prompt that finished with an error noted here (its audio failed) says so."""
        if isinstance(event, PromptFinished) and event.error is None:
            error = self._prompt_errors.pop(event.prompt_id, None)
            if error is not None:
                return PromptFinished(event.prompt_id, error)
        return event

    async def next_event(self, deadline: float | None) -> tuple[MediaEvent | None, float]:
        return await self.events.next_event(deadline, self.listening.collect, self._prompt_error)

    def take_pending(self) -> list[MediaEvent]:
        return self.events.take_pending(self.listening.collect, self._prompt_error)

    async def answer(self) -> None:
        if not self.answered:
            self.answered = True
            await self._answer()
            self.session.expect_rtp(self.events.clock())  # the dead-call clock starts

    async def hang_up(self) -> str:
        self.finish()
        return self._hang_up()

    async def wait_ended(self) -> CallEnded:
        return await asyncio.shield(self._ended)

    def recorded_seconds(self, filename: str) -> float | None:
        return self._recorded.get(filename)

    def finish(self) -> None:
        """The call is over: make sure no recording is left open, stop speech work."""
        self.events.close()
        for prompt_id in list(self._streaming):
            self._cancel_stream(prompt_id)
        self.listening.close()
        if self._transcription is not None:
            # Its last phrase and the completed result still go out (they do not need
            # the call, only the recogniser and the outbox).
            self._transcription.stop()
            self._transcription = None
        if self._recorders:
            self.session.stop_recording(self.events.clock())
            self.session.stop_call_recording()
            self._call_recording = None
            for filename, writer in self._recorders.items():
                self._recorded[filename] = writer.seconds
                self._recording_ended(filename)
            self._recorders.clear()

    def _recording_ended(self, filename: str) -> None:
        span = self._recording_spans.pop(filename, None)
        if span is not None:
            span.end()


class _RecordingLimit(Protocol):
    @property
    def recordings(self) -> RecordingsSettings: ...


class LegServices(Protocol):
    """What a leg takes from the process (:class:`callhook.calls.services.Services`)."""

    @property
    def store(self) -> MediaStore: ...
    def speech_for(self, app: str) -> SpeechService: ...
    @property
    def journal(self) -> RecordingJournal: ...
    @property
    def settings(self) -> _RecordingLimit: ...


def new_leg(
    services: LegServices,
    info: CallInfo,
    app_name: str,
    session: MediaSession,
    prompts: PromptAudio,
    *,
    answer: Callable[[], Awaitable[None]],
    hang_up: Callable[[], str],
    dead: Callable[[], object] | None = None,
) -> SipLeg:
    """A call's leg over ``session`` with the process's store, speech and journal
    (``answer``, ``hang_up``, ``dead``: its signalling, whatever carries it)."""
    return SipLeg(
        info,
        app_name,
        session,
        prompts,
        services.store,
        answer=answer,
        hang_up=hang_up,
        dead=dead,
        speech=services.speech_for(app_name),
        journal=services.journal,
        max_recording_bytes=services.settings.recordings.max_bytes,
        min_free_bytes=services.settings.recordings.min_free_bytes,
    )
