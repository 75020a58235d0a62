"""Remote speech engines, one layer at a time: the circuit breaker on a virtual clock, a
transcript made an answer, ``[speech.engines]`` read from a config, the synthesiser's
fallback from a failing remote voice, and the Wyoming client against a stand-in server
that misbehaves (the real servers are in tests/e2e/test_remote_speech.py)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import socket
import threading
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from wyoming.asr import Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import read_event, write_event

from callhook.config.settings import load
from callhook.config.values import ConfigError
from callhook.events import Alternative, RecognitionOptions
from callhook.speech.breaker import Breaker
from callhook.speech.remote import CONFIDENCE, UNHINTED_CONFIDENCE, RemoteSpeechError, matched
from callhook.speech.synthesis import Synthesiser
from callhook.speech.tts import SynthesisError
from callhook.speech.wyoming import WyomingRecogniser, WyomingVoice


def test_the_breaker_backs_off_doubling_and_closes_on_success() -> None:
    breaker = Breaker(base=1.0, ceiling=4.0)
    assert breaker.allow(0.0)
    assert breaker.failure(0.0, "down") == 1.0
    assert not breaker.allow(0.5) and breaker.allow(1.0)  # a trial after the back-off
    assert breaker.failure(1.0, "down") == 2.0
    assert not breaker.allow(2.9) and breaker.allow(3.0)
    assert breaker.failure(3.0, "down") == 4.0
    assert breaker.failure(7.0, "down") == 4.0  # no longer than the ceiling
    assert breaker.is_open and breaker.cause == "down" and breaker.refused == 2
    breaker.success()
    assert not breaker.is_open and breaker.allow(7.5)
    assert breaker.failure(8.0, "again") == 1.0  # from the start again


@pytest.mark.parametrize(
    ("text", "hints", "answer"),
    [
        ("Seven.", (), Alternative("Seven.", CONFIDENCE)),
        ("Seven.", ("six", "seven"), Alternative("seven", CONFIDENCE)),
        (
            "I'd like Customer Service, please",
            ("sales", "customer service"),
            Alternative("customer service", CONFIDENCE),
        ),
        ("Several", ("seven",), Alternative("Several", UNHINTED_CONFIDENCE)),
    ],
)
def test_a_transcript_against_its_hints(
    text: str, hints: tuple[str, ...], answer: Alternative
) -> None:
    assert matched(text, hints) == answer


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "callhook.toml"
    path.write_text(text)
    return path


def test_remote_engines_are_read_from_the_config(tmp_path: Path) -> None:
    settings = load(
        config(
            tmp_path,
            '[speech]\nrecogniser = "farm"\n'
            '[speech.engines.farm]\nprotocol = "wyoming"\nuri = "tcp://10.0.0.5:10300"\n'
            'timeout = 2.5\nlanguages = ["en", "fr"]\n'
            '[speech.engines.sock]\nprotocol = "wyoming"\nuri = "unix:///run/tts.sock"\n'
            'voices = ["en_US-amy-medium"]\n',
        )
    )
    farm = settings.speech.engines["farm"]
    assert (farm.uri, farm.timeout, farm.languages) == ("tcp://10.0.0.5:10300", 2.5, ("en", "fr"))
    assert settings.speech.engines["sock"].voices == ("en_US-amy-medium",)
    assert settings.speech.recogniser == "farm"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[speech.engines.farm]\nprotocol = "mrcp"\nuri = "tcp://h:1"', "protocol must be one of"),
        ('[speech.engines.farm]\nprotocol = "wyoming"\nuri = "http://h:1"', "uri must be tcp"),
        ('[speech.engines.farm]\nprotocol = "wyoming"\nuri = "tcp://h"', "uri must be tcp"),
        ('[speech.engines.whisper]\nprotocol = "wyoming"\nuri = "tcp://h:1"', "not one of"),
        ('[speech.engines.farm]\nprotocol = "wyoming"\nuri = "tcp://h:1"\ntimeout = 0', "timeout"),
        (
            '[speech.engines.farm]\nprotocol = "wyoming"\nuri = "tcp://h:1"\nvoice = "x"',
            "unknown keys: voice",
        ),
        ('[speech]\nrecogniser = "farm"', "recogniser must be one of"),
    ],
)
def test_a_bad_remote_engine_is_a_config_error(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(config(tmp_path, table))


class _Local:
    name = "piper"

    def voices(self) -> list[str]:
        return ["joe"]

    def voice_for(self, language: str) -> str | None:
        return "joe"

    def warm_up(self) -> None:
        pass

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> np.ndarray:
        return np.full(80, 7, dtype=np.int16)


class _Remote(_Local):
    name = "farm"
    remote = True

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> np.ndarray:
        raise SynthesisError("farm: cannot connect")


def test_a_failing_remote_voice_falls_back_to_the_embedded_one() -> None:
    synthesiser = Synthesiser([_Local(), _Remote()], "farm:joe", fallback_voice="piper:joe")
    choice = synthesiser.choose(None, None)
    assert choice.label == "farm:joe"
    fallback = synthesiser.fallback_for(choice)
    assert fallback is not None and fallback.label == "piper:joe"
    assert synthesiser.fallback_for(fallback) is None  # an embedded voice's error stands
    assert len(synthesiser.speak("One. Two.")) == 160
    with pytest.raises(SynthesisError):
        synthesiser.sentence(choice, "One.")  # (the caller decides: prompts.py notes it)


# --- the Wyoming client against a stand-in server -------------------------------------


@pytest.fixture
def server() -> Iterator[Callable[[Callable[[object], None]], str]]:
    """A one-connection-at-a-time TCP server; each connection is handled by the test's
    function, given the connection's file."""
    listener = socket.create_server(("127.0.0.1", 0))
    handler: list[Callable[[object], None]] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as f, contextlib.suppress(OSError):
                handler[0](f)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def start(handle: Callable[[object], None]) -> str:
        handler.append(handle)
        return f"tcp://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    listener.close()


def _until_audio_stop(f: object) -> int:
    chunks = 0
    while True:
        event = read_event(f)  # type: ignore[arg-type]
        assert event is not None
        if AudioChunk.is_type(event.type):
            chunks += 1
        if AudioStop.is_type(event.type):
            return chunks


def test_an_utterance_is_sent_in_chunks_and_its_transcript_read(server) -> None:
    sent: list[int] = []

    def handle(f: object) -> None:
        sent.append(_until_audio_stop(f))
        write_event(Transcript(text=" Seven. ").event(), f)  # type: ignore[arg-type]
        f.flush()  # type: ignore[attr-defined]

    recogniser = WyomingRecogniser("farm", server(handle), timeout=2.0)
    audio = np.zeros(8000, dtype=np.int16)
    options = RecognitionOptions(word_hints=("seven", "eight"))
    assert recogniser.recognise(audio, options) == (Alternative("seven", CONFIDENCE),)
    assert sent == [8]  # 8000 samples in chunks of 1024


def test_an_utterance_streams_to_the_server_as_it_is_spoken(server) -> None:
    heard = threading.Event()  # the server has the first piece's chunks
    events: list[str] = []

    def handle(f: object) -> None:
        while True:
            event = read_event(f)  # type: ignore[arg-type]
            assert event is not None
            events.append(event.type)
            if len(events) == 4:  # transcribe, audio-start, and the first piece's two chunks
                heard.set()
            if AudioStop.is_type(event.type):
                break
        write_event(Transcript(text="Eight.").event(), f)  # type: ignore[arg-type]
        f.flush()  # type: ignore[attr-defined]

    recogniser = WyomingRecogniser("farm", server(handle), timeout=2.0)
    assert recogniser.streaming
    stream = recogniser.stream(RecognitionOptions(word_hints=("seven", "eight")))
    stream.feed(np.zeros(1600, dtype=np.int16))
    # The server has the audio while the caller is still speaking, before the end.
    assert heard.wait(2.0), events
    stream.feed(np.zeros(1600, dtype=np.int16))
    assert stream.finish() == (Alternative("eight", CONFIDENCE),)
    assert events[:2] == ["transcribe", "audio-start"] and events[-1] == "audio-stop"
    assert events.count("audio-chunk") == 4  # (1600 samples: chunks of 1024 and 576)


def test_a_stream_nobody_wants_any_more_is_closed(server) -> None:
    ended = threading.Event()

    def dropped(f: object) -> None:
        while read_event(f) is not None:  # type: ignore[arg-type]
            pass
        ended.set()

    cancelled = WyomingRecogniser("farm", server(dropped), timeout=2.0)
    cancelled.stream(RecognitionOptions()).cancel()
    assert ended.wait(2.0)


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        (b"", "the server closed the connection"),
        (b"not json\n", "or sent what is not an event"),
        (None, "timed out"),
    ],
)
def test_a_server_that_misbehaves_is_a_remote_speech_error(server, reply, cause) -> None:
    def handle(f: object) -> None:
        _until_audio_stop(f)
        if reply is None:
            threading.Event().wait(1.0)  # no answer within the client's timeout
            return
        f.write(reply)  # type: ignore[attr-defined]
        f.flush()  # type: ignore[attr-defined]

    recogniser = WyomingRecogniser("farm", server(handle), timeout=0.3)
    with pytest.raises(RemoteSpeechError, match=cause):
        recogniser.recognise(np.zeros(800, dtype=np.int16), RecognitionOptions())


def test_nobody_listening_is_a_remote_speech_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # (closed: nobody listens there)
    recogniser = WyomingRecogniser("farm", f"tcp://127.0.0.1:{port}", timeout=1.0)
    with pytest.raises(RemoteSpeechError, match="cannot connect"):
        recogniser.recognise(np.zeros(800, dtype=np.int16), RecognitionOptions())


def test_a_voice_reads_the_servers_audio_and_its_breaker_opens_when_it_is_down(server) -> None:
    def handle(f: object) -> None:
        event = read_event(f)  # type: ignore[arg-type]
        assert event is not None and event.data["text"] == "Hello."
        assert event.data["voice"]["name"] == "en_US-amy-medium"
        pcm = (np.sin(np.arange(16000) / 5) * 8000).astype("<i2").tobytes()
        for e in (
            AudioStart(16000, 2, 1).event(),
            AudioChunk(16000, 2, 1, pcm[:16000]).event(),
            AudioChunk(16000, 2, 1, pcm[16000:]).event(),
            AudioStop().event(),
        ):
            write_event(e, f)  # type: ignore[arg-type]
        f.flush()  # type: ignore[attr-defined]

    voice = WyomingVoice("farm", server(handle), voices=["en_US-amy-medium"], timeout=2.0)
    assert voice.voices() == ["en_us-amy-medium"]
    assert voice.voice_for("en-GB") == "en_us-amy-medium"
    audio = voice.synthesize("Hello.", "en_us-amy-medium")
    assert len(audio) == 8000  # 1 s at 16 kHz, resampled to 8 kHz
    assert not voice.snapshot()["open"]

    down = WyomingVoice("down", "tcp://127.0.0.1:1", voices=["x"], timeout=0.5)
    with pytest.raises(SynthesisError, match="cannot connect"):
        down.synthesize("Hello.", "x")
    with pytest.raises(SynthesisError, match="not asked for a while"):
        down.synthesize("Hello.", "x")  # refused at once while the breaker is open
    assert down.snapshot() == {
        "open": True,
        "failed": 1,
        "refused": 1,
        "cause": down.breaker.cause,
    }


def test_an_error_from_the_server_fails_the_sentence_not_the_server(server) -> None:
    def handle(f: object) -> None:
        read_event(f)  # type: ignore[arg-type]
        write_event(Error(text="no such voice").event(), f)  # type: ignore[arg-type]
        f.flush()  # type: ignore[attr-defined]

    voice = WyomingVoice("farm", server(handle), voices=["x"], timeout=2.0)
    with pytest.raises(SynthesisError, match="the server says: no such voice"):
        voice.synthesize("Hello.", "x")
    assert not voice.breaker.is_open


# --- the OpenAI-compatible audio API against a stand-in server -------------------------


class _Api:
    """An HTTP server in a thread: records each request, answers ``reply(path, body)``."""

    def __init__(self, reply: Callable[[str, bytes], tuple[int, bytes]]) -> None:
        import http.server

        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                api.requests.append((self.path, dict(self.headers), body))
                status, answer = reply(self.path, body)
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _form(body: bytes, headers: dict[str, str]) -> dict[str, bytes]:
    import email.parser

    message = email.parser.BytesParser().parsebytes(
        f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + body
    )
    form: dict[str, bytes] = {}
    for part in message.get_payload():
        assert not isinstance(part, str)
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        assert isinstance(name, str) and isinstance(payload, bytes)
        form[name] = payload
    return form


def test_an_utterance_is_transcribed_over_the_openai_api(tmp_path: Path) -> None:
    from callhook.speech.openai import OpenAIRecogniser

    verbose = {
        "text": " Sales, please.",
        "segments": [
            {"start": 0.0, "end": 1.0, "avg_logprob": -0.1, "no_speech_prob": 0.01},
            {"start": 1.0, "end": 3.0, "avg_logprob": -0.4, "no_speech_prob": 0.02},
        ],
    }
    api = _Api(lambda path, body: (200, json.dumps(verbose).encode()))
    try:
        recogniser = OpenAIRecogniser("cloud", api.url, model="whisper-1", api_key="sk-test")
        options = RecognitionOptions(language="en-GB", word_hints=("sales", "support"))
        (answer,) = recogniser.recognise(np.zeros(8000, dtype=np.int16), options)
    finally:
        api.close()
    assert answer.text == "sales"
    assert answer.confidence == pytest.approx(round(math.exp((-0.1 * 1 - 0.4 * 2) / 3), 3))
    ((path, headers, body),) = api.requests
    assert path == "/v1/audio/transcriptions"
    assert headers["Authorization"] == "Bearer sk-test"
    form = _form(body, headers)
    assert form["model"] == b"whisper-1" and form["language"] == b"en"
    assert form["prompt"] == b"sales, support" and form["response_format"] == b"verbose_json"
    assert form["file"][:4] == b"RIFF" and len(form["file"]) == 44 + 16000


@pytest.mark.parametrize(
    ("status", "answer", "error", "cause"),
    [
        (
            401,
            b'{"error": {"message": "bad key", "type": "invalid_request_error"}}',
            "Refused",
            "HTTP 401: bad key",
        ),
        (422, b'{"detail": [{"loc": ["body", "file"]}]}', "Refused", "HTTP 422"),
        (500, b"oops", "RemoteSpeechError", "HTTP 500: oops"),
        (200, b"<html>", "RemoteSpeechError", "not a transcription"),
    ],
)
def test_what_the_openai_api_answers_wrongly_is_a_remote_speech_error(
    status: int, answer: bytes, error: str, cause: str
) -> None:
    from callhook.speech import remote
    from callhook.speech.openai import OpenAIRecogniser

    api = _Api(lambda path, body: (status, answer))
    try:
        recogniser = OpenAIRecogniser("cloud", api.url)
        with pytest.raises(RemoteSpeechError, match=cause) as caught:
            recogniser.recognise(np.zeros(800, dtype=np.int16), RecognitionOptions())
    finally:
        api.close()
    assert type(caught.value) is getattr(remote, error)


def test_silence_the_api_calls_no_speech_is_nothing_recognised() -> None:
    from callhook.speech.openai import OpenAIRecogniser

    quiet = {"text": " you", "segments": [{"avg_logprob": -1.0, "no_speech_prob": 0.9}]}
    api = _Api(lambda path, body: (200, json.dumps(quiet).encode()))
    try:
        said = OpenAIRecogniser("cloud", api.url).recognise(
            np.zeros(800, dtype=np.int16), RecognitionOptions()
        )
    finally:
        api.close()
    assert said == ()


def test_a_voice_over_the_openai_api_and_its_breaker() -> None:
    from callhook.speech.openai import OpenAIVoice

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes((np.sin(np.arange(24000) / 5) * 8000).astype("<i2").tobytes())
    api = _Api(lambda path, body: (200, out.getvalue()))
    try:
        voice = OpenAIVoice("cloud", api.url, voices=["Alloy"], api_key="k")
        assert voice.voices() == ["alloy"]
        audio = voice.synthesize("Hello there.", "alloy", 1.25)
    finally:
        api.close()
    assert len(audio) == 8000
    ((path, headers, body),) = api.requests
    assert path == "/v1/audio/speech" and headers["Authorization"] == "Bearer k"
    assert json.loads(body) == {
        "model": "tts-1",
        "input": "Hello there.",
        "voice": "Alloy",
        "response_format": "wav",
        "speed": 1.25,
    }
    down = OpenAIVoice("cloud", "http://127.0.0.1:1/v1", voices=["alloy"], timeout=0.5)
    with pytest.raises(SynthesisError, match="cannot reach it"):
        down.synthesize("Hello.", "alloy")
    with pytest.raises(SynthesisError, match="not asked for a while"):
        down.synthesize("Hello.", "alloy")


def test_an_openai_engine_is_read_from_the_config(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CLOUD_KEY", "sk-secret")
    settings = load(
        config(
            tmp_path,
            '[speech.engines.cloud]\nprotocol = "openai"\nurl = "https://api.example.com/v1"\n'
            'api_key_env = "CLOUD_KEY"\nmodel = "whisper-large"\nvoices = ["alloy"]\n',
        )
    )
    cloud = settings.speech.engines["cloud"]
    assert (cloud.uri, cloud.model, cloud.voice_model) == (
        "https://api.example.com/v1",
        "whisper-large",
        "tts-1",
    )
    assert cloud.api_key == "sk-secret" and "sk-secret" not in repr(cloud)
    monkeypatch.delenv("CLOUD_KEY")
    with pytest.raises(ConfigError, match="the environment has no CLOUD_KEY"):
        load(config(tmp_path, (tmp_path / "callhook.toml").read_text()))
    with pytest.raises(ConfigError, match="url must be"):
        load(config(tmp_path, '[speech.engines.cloud]\nprotocol = "openai"\nurl = "ftp://x/v1"\n'))
    with pytest.raises(ConfigError, match="unknown keys: uri"):
        load(
            config(
                tmp_path,
                '[speech.engines.cloud]\nprotocol = "openai"\nurl = "http://x/v1"\nuri = "tcp://x:1"\n',
            )
        )


def test_an_application_names_its_own_recogniser_and_voice(tmp_path: Path) -> None:
    engine = '[speech.engines.farm]\nprotocol = "wyoming"\nuri = "tcp://10.0.0.5:10300"\n'
    app = '[apps.support]\nfirst_page = "http://127.0.0.1/start"\n'
    settings = load(config(tmp_path, f'{engine}{app}recogniser = "farm"\nvoice = "espeak:en-gb"\n'))
    support = settings.apps["support"]
    assert (support.recogniser, support.voice) == ("farm", "espeak:en-gb")
    with pytest.raises(ConfigError, match=r"\[apps.support\] recogniser must be one of"):
        load(config(tmp_path, f'{app}recogniser = "elsewhere"\n'))


def test_applications_naming_one_recogniser_share_its_service(tmp_path: Path) -> None:
    from callhook.app import _app_speech
    from callhook.edge.speechworkers import SpeechService
    from callhook.speech.wyoming import WyomingRecogniser

    apps = "".join(
        f'[apps.{name}]\nfirst_page = "http://127.0.0.1/"\nrecogniser = "{recogniser}"\n'
        for name, recogniser in (("a", "farm"), ("b", "farm"), ("c", "none"), ("d", "whisper"))
    )
    text = (
        '[speech]\npreload = false\n[speech.engines.farm]\nprotocol = "wyoming"\n'
        f'uri = "tcp://127.0.0.1:1"\n{apps}[apps.e]\nfirst_page = "http://127.0.0.1/"\n'
    )
    settings = load(config(tmp_path, text))
    default = SpeechService(None, None)
    services = _app_speech(settings, default, tuple(settings.speech.engines.values()))
    try:
        assert services["a"] is services["b"] and services["a"] is not default
        assert isinstance(services["a"].recogniser, WyomingRecogniser)
        assert services["c"].recogniser is None and services["c"] is not services["a"]
        assert services["d"] is default  # [speech]'s own: the process's service
        assert "e" not in services
    finally:
        for service in {id(s): s for s in services.values()}.values():
            if service is not default:
                service.close()
        default.close()
