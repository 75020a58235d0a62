"""A real call's leg with speech (telephony/leg.py): streamed prompts and recognition results.

The media session is the real one (sans-IO, ticked here); the engines are small
stand-ins, since this tests the leg's plumbing alone: sentence-by-sentence
prompts, a failing engine, utterances decoded in order, results of a stopped
stream dropped. The real engines are exercised end to end in tests/e2e.
"""

from __future__ import annotations

import asyncio
import threading
import wave
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from callhook.edge.speechworkers import SpeechService
from callhook.events import (
    Alternative,
    PromptFinished,
    PromptNote,
    RecognitionOptions,
    SayText,
    SpeechRecognised,
    SpeechRejected,
    SpeechUnavailable,
    StartPrompt,
    StartRecognition,
    StopPrompt,
    StopRecognition,
)
from callhook.media import g711
from callhook.media.session import MediaSession
from callhook.media.utterances import Utterance
from callhook.ports import CallInfo
from callhook.speech.synthesis import Synthesiser
from callhook.speech.tts import SynthesisError
from callhook.store.files import MediaStore
from callhook.telephony.leg import SipLeg
from callhook.telephony.prompts import PromptAudio

PEER = ("192.0.2.10", 40000)


class Engine:
    """Speaks each sentence as a constant tone level; 'slow' waits for a gate; 'bad' fails."""

    name = "test"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.done = 0  # sentences synthesised

    def voices(self) -> Sequence[str]:
        return ["v"]

    def voice_for(self, language: str) -> str | None:
        return "v"

    def warm_up(self) -> None:
        pass

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> np.ndarray:
        if text.startswith("Bad"):
            raise SynthesisError("test:v cannot say that")
        if text.startswith("Secret"):
            raise SynthesisError(f"test:v could not speak {text!r}")  # as piper and espeak do
        if text.startswith("Slow"):
            self.gate.wait(5)
        level = 1000 * (len(text) % 7 + 1)
        self.done += 1
        return np.full(320, level, dtype=np.int16)  # 40 ms: two frames


class Recogniser:
    name = "test"
    languages = frozenset({"en", "es"})

    def __init__(self) -> None:
        self.heard: list[int] = []
        self.waiting = False
        self.gate = threading.Event()
        self.gate.set()

    def warm_up(self) -> None:
        pass

    def recognise(self, audio: np.ndarray, options: RecognitionOptions) -> tuple[Alternative, ...]:
        self.waiting = not self.gate.is_set()
        self.gate.wait(5)
        self.heard.append(len(audio))
        if len(audio) == 160:
            return ()
        return (Alternative(f"{len(audio)} samples", 0.9),)


def leg(tmp_path: Path) -> tuple[SipLeg, MediaSession, Engine, Recogniser]:
    engine, recogniser = Engine(), Recogniser()
    synthesiser = Synthesiser([engine], "test:v")
    service = SpeechService(synthesiser, recogniser, workers=1)
    store = MediaStore(tmp_path)
    session = MediaSession("PCMU", 0, 101, PEER)
    the_leg = SipLeg(
        CallInfo("c1"),
        "app",
        session,
        PromptAudio(store, synthesiser),
        store,
        answer=_nothing,
        hang_up=lambda: "200",
        speech=service,
    )
    return the_leg, session, engine, recogniser


async def _nothing() -> None:
    return None


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for work on the worker threads to reach a state (not a fixed sleep)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def payloads(session: MediaSession, ticks: int, start: float = 0.0) -> list[bytes]:
    out = []
    for i in range(ticks):
        packet = session.tick(start + i * 0.02)
        assert packet is not None
        out.append(packet[12:])
    return out


async def test_a_prompt_plays_sentence_by_sentence_while_the_rest_is_synthesised(tmp_path):
    the_leg, session, engine, _ = leg(tmp_path)
    the_leg.send([StartPrompt(1, (SayText("First one. Slow second."),))])
    # The first sentence reaches the prompt; the second waits for the engine.
    await until(
        lambda: session.player._prompt is not None and len(session.player._prompt.audio) == 320
    )
    played = payloads(session, 4)
    first = g711.encode("ulaw", np.full(160, 1000 * (len("First one.") % 7 + 1), np.int16))
    silence = g711.silence("ulaw", 160)
    assert played == [first, first, silence, silence]  # waiting for sentence two, in silence
    assert session.underruns == 2
    assert the_leg.take_pending() == []  # not finished: more is coming
    engine.gate.set()
    await until(lambda: not the_leg._streaming)  # both sentences are in the prompt
    played = payloads(session, 3, start=0.08)
    assert played[0] != silence and played[1] != silence and played[2] == silence
    assert the_leg.take_pending() == [PromptFinished(1)]
    # Played again, it comes from the cache at once: no task, no silence first.
    the_leg.send([StartPrompt(2, (SayText("First one. Slow second."),))])
    assert payloads(session, 1, start=1.0) == [first]


async def test_a_sentence_the_engine_cannot_say_ends_the_prompt_with_the_error(tmp_path):
    the_leg, session, _, _ = leg(tmp_path)
    the_leg.send([StartPrompt(3, (SayText("Good start. Bad words. Never said."),))])
    await until(lambda: not the_leg._streaming)
    payloads(session, 4)
    (finished,) = the_leg.take_pending()
    assert isinstance(finished, PromptFinished) and finished.prompt_id == 3
    assert finished.error == "test:v cannot say that"


async def test_a_private_text_the_engine_cannot_say_is_not_quoted(tmp_path, caplog):
    the_leg, session, _, _ = leg(tmp_path)
    the_leg.send([StartPrompt(4, (SayText("Secret code 4321.", private=True),))])
    await until(lambda: not the_leg._streaming)
    payloads(session, 2)
    (finished,) = the_leg.take_pending()
    assert isinstance(finished, PromptFinished) and finished.prompt_id == 4
    assert finished.error == "a private text could not be spoken (SynthesisError)"
    assert "4321" not in caplog.text
    # The same failure of a text that is not private says what the engine said.
    the_leg.send([StartPrompt(5, (SayText("Secret code 4321."),))])
    await until(lambda: not the_leg._streaming)
    payloads(session, 2, start=1.0)
    (finished,) = the_leg.take_pending()
    assert isinstance(finished, PromptFinished) and finished.error and "4321" in finished.error


async def test_a_stopped_prompt_stops_its_synthesis(tmp_path):
    the_leg, session, engine, _ = leg(tmp_path)
    the_leg.send([StartPrompt(4, (SayText("Slow one. Two."),))])
    await asyncio.sleep(0)  # the stream task starts and waits for the first sentence
    the_leg.send([StopPrompt(4)])
    assert not the_leg._streaming  # its task is cancelled
    engine.gate.set()
    await until(lambda: engine.done == 1)  # the worker finishes the sentence it had begun
    assert payloads(session, 3) == [g711.silence("ulaw", 160)] * 3
    assert the_leg.take_pending() == []  # a stopped prompt never reports finishing


async def test_utterances_are_decoded_in_order_and_a_stopped_streams_results_dropped(tmp_path):
    the_leg, session, _, recogniser = leg(tmp_path)
    the_leg.send([StartRecognition(RecognitionOptions())])
    session.utterances.extend(
        [Utterance(np.zeros(320, np.int16)), Utterance(np.zeros(160, np.int16))]
    )
    events = []
    for _ in range(2):
        event, _ = await the_leg.next_event(asyncio.get_running_loop().time() + 2)
        events.append(event)
    assert events == [
        SpeechRecognised(_phrase("320 samples")),
        SpeechRejected(),  # nothing recognised in the second
    ]
    # A result that comes after the stream stopped is nobody's: dropped.
    recogniser.gate.clear()
    session.utterances.append(Utterance(np.zeros(480, np.int16)))
    assert the_leg.take_pending() == []  # picks the utterance up; decoding waits
    await until(lambda: recogniser.waiting)  # the decode is under way on the worker thread
    the_leg.send([StopRecognition()])
    recogniser.gate.set()
    listening = the_leg.listening
    await until(lambda: listening._decoder is not None and listening._decoder.done())
    assert recogniser.heard == [320, 160, 480]
    assert the_leg.take_pending() == []


async def test_a_language_the_recogniser_does_not_know_is_said_once_and_digits_only_count(
    tmp_path, caplog
):
    the_leg, session, _, recogniser = leg(tmp_path)  # it knows en and es
    the_leg.send([StartRecognition(RecognitionOptions(language="es-MX"))])
    assert session.recognising and the_leg.take_pending() == []
    for _ in range(2):  # a get_input listening again after its timeout message
        the_leg.send([StartRecognition(RecognitionOptions(language="fr-FR"))])
        assert not session.recognising  # the Spanish stream stopped; none in French
    (event,) = the_leg.take_pending()
    assert event == SpeechUnavailable(
        "speech language fr-FR is not one test recognises: only digits count"
    )
    assert caplog.text.count("speech language fr-FR is not one test recognises") == 1
    session.utterances.append(Utterance(np.zeros(320, np.int16)))
    assert the_leg.take_pending() == [] and recogniser.heard == []


def _phrase(text: str):
    from callhook.events import Phrase

    return Phrase((Alternative(text, 0.9),))


async def test_an_ssml_prompt_plays_its_pauses_store_files_and_fallbacks(tmp_path):
    the_leg, session, _, _ = leg(tmp_path)
    bell = the_leg.prompts.store.path("app", "bell.wav")
    bell.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(bell), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(np.full(160, 3000, dtype="<i2").tobytes())
    text = (
        '<speak>Hi. <break time="100ms"/><audio src="bell.wav">Not said</audio>'
        '<audio src="nowhere.wav">Fallback</audio></speak>'
    )
    the_leg.send([StartPrompt(6, (SayText(text),))])
    await until(lambda: not the_leg._streaming)
    audio = g711.decode("ulaw", session.player._prompt.audio)  # type: ignore[union-attr]
    spoken = 1000 * (len("Hi.") % 7 + 1)
    fallback = 1000 * (len("Fallback") % 7 + 1)
    expected = np.concatenate(
        [np.full(320, spoken), np.zeros(800), np.full(160, 3000), np.full(320, fallback)]
    )
    roundtrip = g711.decode("ulaw", g711.encode("ulaw", expected.astype(np.int16)))
    assert np.array_equal(audio, roundtrip)
    (note,) = [e for e in the_leg.take_pending() if isinstance(e, PromptNote)]
    assert note.note.startswith("SSML <audio>: nowhere.wav")
    assert note.note.endswith("its content is said instead")


async def test_a_voice_that_is_not_installed_is_said_once_in_the_calls_log(tmp_path):
    the_leg, _, _, _ = leg(tmp_path)
    for prompt_id in (7, 8):
        the_leg.send([StartPrompt(prompt_id, (SayText("Hi.", voice="nobody:here"),))])
        await until(lambda: not the_leg._streaming)
    notes = [e for e in the_leg.take_pending() if isinstance(e, PromptNote)]
    assert len(notes) == 1, notes  # once per call and voice, not once per prompt
    assert notes[0].note.startswith("tts_voice 'nobody:here' is not installed: using test:v")


class Streamer:
    """A remote voice that hands each word over as it makes it (``stream``): a word is
    1000 * its length for 160 samples; the word after ``hold`` waits for ``gate``; a word
    "crash" fails (the server went away)."""

    name = "stream"
    remote = True
    streaming = True

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.made: list[str] = []

    def voices(self) -> Sequence[str]:
        return ["s"]

    def voice_for(self, language: str) -> str | None:
        return "s"

    def warm_up(self) -> None:
        pass

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> np.ndarray:
        return np.concatenate(list(self.stream(text, voice, rate)))

    def stream(self, text: str, voice: str, rate: float = 1.0) -> Iterator[np.ndarray]:
        for word in text.rstrip(".").split():
            if word == "crash":
                raise SynthesisError("stream: the server went away")
            self.made.append(word)
            yield np.full(160, 1000 * len(word), dtype=np.int16)
            if word == "hold":
                self.gate.wait(5)


def streaming_leg(tmp_path: Path) -> tuple[SipLeg, MediaSession, Streamer]:
    streamer = Streamer()
    synthesiser = Synthesiser([Engine(), streamer], "stream:s", fallback_voice="test:v")
    session = MediaSession("PCMU", 0, 101, PEER)
    store = MediaStore(tmp_path)
    the_leg = SipLeg(
        CallInfo("c1"),
        "app",
        session,
        PromptAudio(store, synthesiser),
        store,
        answer=_nothing,
        hang_up=lambda: "200",
        speech=SpeechService(synthesiser, None, workers=1),
    )
    return the_leg, session, streamer


def heard(session: MediaSession) -> np.ndarray:
    return g711.decode("ulaw", session.player._prompt.audio)  # type: ignore[union-attr]


async def test_a_streaming_voice_is_played_piece_by_piece_and_then_cached(tmp_path):
    the_leg, session, streamer = streaming_leg(tmp_path)
    the_leg.send([StartPrompt(7, (SayText("One hold three."),))])
    # "One" and "hold" reach the prompt while "three" is not made yet.
    await until(lambda: len(heard(session)) == 320)
    assert streamer.made == ["One", "hold"]
    streamer.gate.set()
    await until(lambda: not the_leg._streaming)
    assert len(heard(session)) == 480
    # Streamed to its end: the sentence is cached, the voice not asked again.
    streamer.made.clear()
    the_leg.send([StartPrompt(8, (SayText("One hold three."),))])
    await until(lambda: not the_leg._streaming)
    assert streamer.made == []


async def test_a_streaming_voice_that_fails_midway_leaves_the_rest_to_the_embedded_one(
    tmp_path,
):
    the_leg, session, streamer = streaming_leg(tmp_path)
    streamer.gate.set()
    the_leg.send([StartPrompt(9, (SayText("Hello crash now. Goodbye."),))])
    await until(lambda: not the_leg._streaming)
    audio = heard(session)
    # "Hello" from the remote voice, its sentence not said again, then "Goodbye." from the
    # embedded one (Engine: 320 samples at 1000 * (len % 7 + 1)).
    expected = np.concatenate([np.full(160, 5000), np.full(320, 1000 * (len("Goodbye.") % 7 + 1))])
    assert np.array_equal(
        audio, g711.decode("ulaw", g711.encode("ulaw", expected.astype(np.int16)))
    )
    (note,) = [e for e in the_leg.take_pending() if isinstance(e, PromptNote)]
    assert note.note == "stream: the server went away: the rest said by test:v instead"
