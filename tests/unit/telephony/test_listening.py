"""A call's recognition stream with a recogniser that streams (telephony/listening.py,
edge/speechstream.py): each utterance fed while the caller speaks, answered at its end.

The media session, the speech service and its threads are the real ones; the engine is a
stand-in that notes what it is fed (the real streaming engine, the example plug-in's
pocketsphinx, is exercised end to end in tests/e2e/test_speech_plugin.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from callhook.edge.speechworkers import SpeechService
from callhook.events import (
    Alternative,
    Phrase,
    RecognitionOptions,
    SpeechRecognised,
    SpeechRejected,
    StartRecognition,
    StopRecognition,
)
from callhook.media.session import MediaSession
from callhook.media.utterances import PIECE_FRAMES, Utterance, UtterancePiece
from callhook.ports import CallInfo
from callhook.store.files import MediaStore
from callhook.telephony.leg import SipLeg
from callhook.telephony.prompts import PromptAudio
from tests.unit.telephony.test_leg_speech import PEER, _nothing, until


class Stream:
    def __init__(self, engine: Streamer, options: RecognitionOptions) -> None:
        self.engine = engine
        self.options = options
        self.fed: list[int] = []
        self.finished = False
        self.cancelled = False

    def feed(self, audio: np.ndarray) -> None:
        self.engine.gate.wait(5)
        if self.engine.broken:
            raise RuntimeError("the line to the service dropped")
        self.fed.append(len(audio))

    def finish(self) -> tuple[Alternative, ...]:
        self.engine.gate.wait(5)
        self.finished = True
        return (Alternative(f"{sum(self.fed)} streamed", 0.8),)

    def cancel(self) -> None:
        self.cancelled = True


class Streamer:
    """A recogniser that streams: each stream notes the pieces it is fed."""

    name = "test"
    languages = frozenset({"en"})
    streaming = True

    def __init__(self) -> None:
        self.streams: list[Stream] = []
        self.whole: list[int] = []
        self.broken = False
        self.gate = threading.Event()
        self.gate.set()

    def warm_up(self) -> None:
        pass

    def recognise(self, audio: np.ndarray, options: RecognitionOptions) -> tuple[Alternative, ...]:
        self.whole.append(len(audio))
        return (Alternative(f"{len(audio)} whole", 0.9),)

    def stream(self, options: RecognitionOptions) -> Stream:
        stream = Stream(self, options)
        self.streams.append(stream)
        return stream


@pytest.fixture
async def call(tmp_path: Path) -> tuple[SipLeg, MediaSession, Streamer, SpeechService]:
    engine = Streamer()
    service = SpeechService(None, engine, workers=1)
    store = MediaStore(tmp_path)
    session = MediaSession("PCMU", 0, 101, PEER)
    the_leg = SipLeg(
        CallInfo("c1"),
        "app",
        session,
        PromptAudio(store, None),
        store,
        answer=_nothing,
        hang_up=lambda: "200",
        speech=service,
    )
    return the_leg, session, engine, service


def piece(samples: int, first: bool = False) -> UtterancePiece:
    return UtterancePiece(np.zeros(samples, np.int16), first)


def utterance(samples: int, streamed: int) -> Utterance:
    return Utterance(np.zeros(samples, np.int16), streamed=streamed)


async def next_event(the_leg: SipLeg) -> object:
    event, _ = await the_leg.next_event(asyncio.get_running_loop().time() + 5)
    return event


async def test_the_utterance_is_fed_while_spoken_and_answered_at_its_end(call):
    the_leg, session, engine, service = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    assert session.recognising and session.cutter.piece_frames == PIECE_FRAMES
    session.utterances.append(piece(1600, first=True))
    assert the_leg.take_pending() == []
    # Fed before the caller has finished: nothing waits for the utterance's end.
    await until(lambda: bool(engine.streams) and engine.streams[0].fed == [1600])
    session.utterances.extend([piece(800), utterance(1600 + 800 + 480, streamed=2400)])
    event = await next_event(the_leg)
    assert event == SpeechRecognised(Phrase((Alternative("2880 streamed", 0.8),)))
    (stream,) = engine.streams
    assert stream.fed == [1600, 800, 480] and stream.finished and not stream.cancelled
    assert engine.whole == []
    stats = service.snapshot()
    assert (stats["utterances"], stats["utterances_streamed"], stats["stream_pieces"]) == (1, 1, 3)


async def test_pieces_are_joined_while_the_engine_is_busy_and_the_tick_never_waits(call):
    the_leg, session, engine, _ = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    engine.gate.clear()  # the engine is slow to take the first piece
    session.utterances.append(piece(1600, first=True))
    the_leg.take_pending()
    await until(lambda: bool(engine.streams))
    for _ in range(3):
        session.utterances.append(piece(1600))
        assert the_leg.take_pending() == []  # (returns at once: nothing blocks)
    engine.gate.set()
    session.utterances.append(utterance(8000, streamed=6400))
    event = await next_event(the_leg)
    assert event == SpeechRecognised(Phrase((Alternative("8000 streamed", 0.8),)))
    # What came while the engine was busy (three pieces, then the tail: no await between
    # them here) went over in one go.
    assert engine.streams[0].fed == [1600, 4800 + 1600]


async def test_a_stopped_recognition_cancels_the_utterance_being_streamed(call):
    the_leg, session, engine, _ = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    session.utterances.append(piece(1600, first=True))
    the_leg.take_pending()
    await until(lambda: bool(engine.streams) and engine.streams[0].fed == [1600])
    the_leg.send([StopRecognition()])
    await until(lambda: engine.streams[0].cancelled)
    assert not engine.streams[0].finished and the_leg.take_pending() == []


async def test_an_utterance_begun_under_other_options_is_decoded_whole(call):
    the_leg, session, engine, _ = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    session.utterances.append(piece(1600, first=True))
    the_leg.take_pending()
    await until(lambda: bool(engine.streams) and engine.streams[0].fed == [1600])
    # The action listens again with other hints while the caller is speaking.
    the_leg.send([StartRecognition(RecognitionOptions(word_hints=("yes", "no")))])
    session.utterances.extend([piece(1600), utterance(4000, streamed=3200)])
    event = await next_event(the_leg)
    assert event == SpeechRecognised(Phrase((Alternative("4000 whole", 0.9),)))
    await until(lambda: engine.streams[0].cancelled)
    assert engine.whole == [4000] and len(engine.streams) == 1


async def test_an_utterance_too_short_for_a_piece_is_decoded_whole(call):
    the_leg, session, engine, _ = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    session.utterances.append(utterance(2400, streamed=0))
    event = await next_event(the_leg)
    assert event == SpeechRecognised(Phrase((Alternative("2400 whole", 0.9),)))
    assert engine.streams == []


async def test_an_answer_that_ends_the_input_leaves_the_utterances_queued_behind_it(call):
    """Two utterances ended while the engine was busy: the first's answer ends the action
    (it stops the recognition), and the second is never decoded, for nobody."""
    the_leg, session, engine, _ = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    session.utterances.extend([utterance(2400, streamed=0), utterance(3200, streamed=0)])
    event = await next_event(the_leg)
    assert event == SpeechRecognised(Phrase((Alternative("2400 whole", 0.9),)))
    the_leg.send([StopRecognition()])  # (as get_input does on its first answer)
    decoder = the_leg.listening._decoder
    assert decoder is not None
    await decoder
    assert engine.whole == [2400]


async def test_a_stream_that_fails_is_nothing_recognised_and_the_engine_restarts(call, caplog):
    the_leg, session, engine, service = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    engine.broken = True
    session.utterances.extend([piece(1600, first=True), utterance(2400, streamed=1600)])
    event = await next_event(the_leg)
    assert isinstance(event, SpeechRejected) and event.cause is not None
    assert "the test recogniser crashed: RuntimeError: the line to the service dropped" in (
        event.cause
    )
    assert service.faults == 1
    assert not engine.streams[0].finished  # (its tail was not fed: the stream had failed)
    # The next utterance goes to a stream of the restarted engine.
    engine.broken = False
    await until(lambda: service.supervisor.available(asyncio.get_running_loop().time()))
    session.utterances.extend([piece(1600, first=True), utterance(2400, streamed=1600)])
    event = await next_event(the_leg)
    assert event == SpeechRecognised(Phrase((Alternative("2400 streamed", 0.8),)))


async def test_a_call_that_ends_while_pieces_are_fed_lets_the_engines_stream_go(call):
    the_leg, session, engine, _ = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    session.utterances.append(piece(1600, first=True))
    the_leg.take_pending()
    await until(lambda: bool(engine.streams) and engine.streams[0].fed == [1600])
    engine.gate.clear()  # the engine is slow with the last piece
    session.utterances.extend([piece(1600), utterance(4000, streamed=3200)])
    the_leg.take_pending()
    await asyncio.sleep(0.05)
    the_leg.finish()  # the caller hung up while the answer was awaited
    engine.gate.set()
    await until(lambda: engine.streams[0].cancelled)
    assert not engine.streams[0].finished


async def test_a_call_that_ends_while_the_answer_is_due_still_finishes_the_engines_stream(
    call,
):
    the_leg, session, engine, service = call
    the_leg.send([StartRecognition(RecognitionOptions())])
    session.utterances.append(piece(1600, first=True))
    the_leg.take_pending()
    await until(lambda: bool(engine.streams) and engine.streams[0].fed == [1600])
    # The recognition thread is busy with other work: the finish waits in the queue.
    engine.gate.clear()
    busy = asyncio.ensure_future(service.run(lambda _: engine.gate.wait(5), 0.0))
    session.utterances.append(utterance(1600, streamed=1600))  # (no tail left)
    the_leg.take_pending()
    await asyncio.sleep(0.05)
    the_leg.finish()
    engine.gate.set()
    await busy
    # The engine's stream was finished (a stream's resources go back that way), once.
    await until(lambda: engine.streams[0].finished)
    await asyncio.sleep(0.05)
    assert not engine.streams[0].cancelled and the_leg.take_pending() == []
