"""Remote speech engines over the OpenAI-compatible audio API: ``POST /v1/audio/transcriptions``
(an utterance as a WAV file, multipart) and ``POST /v1/audio/speech`` (JSON in, WAV out), as
served by OpenAI, vLLM, ``faster-whisper-server`` and hosted services.

Blocking, as the engines' interfaces are (they run on worker threads): one HTTP request per
utterance or sentence with the standard library's client, ``timeout`` for each. An API key
from the config or the environment is sent as ``Authorization: Bearer``.

What the API carries (docs/speech.md, "Remote engines"): the language (ISO 639-1), word
hints as the ``prompt`` (a bias, not a closed set: the transcript is matched against them
here), a confidence derived from ``verbose_json``'s per-segment ``avg_logprob`` where the
server gives it, one alternative, a speaking rate (``speed``) for voices.
"""

from __future__ import annotations

import io
import json
import math
import urllib.error
import urllib.request
import uuid
import wave
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, RecognitionOptions
from callhook.media import wav
from callhook.speech import languages
from callhook.speech.breaker import Breaker
from callhook.speech.remote import CONFIDENCE, Guard, Refused, RemoteSpeechError, matched
from callhook.speech.tts import telephone_audio

#: ``verbose_json`` segments whose ``no_speech_prob`` is above this are not speech.
NO_SPEECH = 0.6


class _Api:
    """The HTTP side: requests to ``url`` (``http://host:8000/v1``) with the key."""

    def __init__(self, url: str, api_key: str | None, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def post(self, path: str, body: bytes, content_type: str) -> bytes:
        headers = {"Content-Type": content_type}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            f"{self.url}{path}", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                data: bytes = response.read()
                return data
        except urllib.error.HTTPError as exc:
            message = _error_message(exc.read())
            error = Refused if 400 <= exc.code < 500 and exc.code != 429 else RemoteSpeechError
            raise error(f"{self.url}{path}: HTTP {exc.code}: {message}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RemoteSpeechError(f"{self.url}{path}: cannot reach it: {reason}") from None


def _error_message(body: bytes) -> str:
    """What an error body says: OpenAI's ``{"error": {"message"}}``, FastAPI's ``detail``."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    if isinstance(data, dict):
        error = data.get("error") or data.get("detail")
        if isinstance(error, dict):
            error = error.get("message") or error.get("error") or error
        return str(error)[:200]
    return str(data)[:200]


def _wav(audio: npt.NDArray[np.int16]) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.asarray(audio, dtype="<i2").tobytes())
    return out.getvalue()


def _multipart(fields: dict[str, str], audio: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
            f"{value}\r\n".encode()
        )
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="utterance.wav"\r\nContent-Type: audio/wav\r\n\r\n'.encode()
        + audio
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class OpenAIRecogniser:
    """An OpenAI-compatible transcription endpoint as a
    :class:`~callhook.speech.asr.Recogniser`."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        model: str = "whisper-1",
        api_key: str | None = None,
        timeout: float = 10.0,
        spoken: Iterable[str] = ("en",),
    ) -> None:
        self.name = name
        self.model = model
        self._api = _Api(url, api_key, timeout)
        self._languages = frozenset(languages.code(tag) for tag in spoken)

    @property
    def languages(self) -> frozenset[str]:
        return self._languages

    @property
    def timeout(self) -> float:
        """Seconds it waits for the server's answer."""
        return self._api.timeout

    def restarted(self) -> OpenAIRecogniser:
        api = self._api
        return OpenAIRecogniser(
            self.name,
            api.url,
            model=self.model,
            api_key=api.api_key,
            timeout=api.timeout,
            spoken=self._languages,
        )

    def warm_up(self) -> None:
        return  # (the API has no cheap "are you there": the first utterance tells)

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        fields = {
            "model": self.model,
            "language": languages.code(options.language),
            "response_format": "verbose_json",
            "temperature": "0",
        }
        if options.word_hints:
            fields["prompt"] = ", ".join(options.word_hints)
        body, content_type = _multipart(fields, _wav(audio))
        answer = self._api.post("/audio/transcriptions", body, content_type)
        try:
            data = json.loads(answer)
            text = str(data["text"]).strip()
        except (ValueError, KeyError, TypeError):
            raise RemoteSpeechError(
                f"{self._api.url}/audio/transcriptions: not a transcription: {answer[:100]!r}"
            ) from None
        segments = data.get("segments") if isinstance(data, dict) else None
        if not text or _no_speech(segments):
            return ()
        found = matched(text, options.word_hints)
        confidence = _confidence(segments)
        if confidence is not None and found.confidence == CONFIDENCE:
            found = Alternative(found.text, confidence)
        return (found,)


def _no_speech(segments: Any) -> bool:
    if not isinstance(segments, list) or not segments:
        return False
    return all(
        isinstance(s, dict) and float(s.get("no_speech_prob", 0.0)) > NO_SPEECH for s in segments
    )


def _confidence(segments: Any) -> float | None:
    """The segments' mean token probability (``exp(avg_logprob)``, by their lengths)."""
    if not isinstance(segments, list) or not segments:
        return None
    total = weight = 0.0
    for segment in segments:
        if not isinstance(segment, dict) or "avg_logprob" not in segment:
            return None
        length = max(0.01, float(segment.get("end", 1.0)) - float(segment.get("start", 0.0)))
        total += float(segment["avg_logprob"]) * length
        weight += length
    return round(min(1.0, max(0.0, math.exp(total / weight))), 3)


class OpenAIVoice:
    """An OpenAI-compatible speech endpoint as a :class:`~callhook.speech.tts.SpeechEngine`.

    The API lists no voices: they are the config's. While the endpoint fails, a circuit
    breaker refuses at once for a growing back-off, and the synthesiser speaks with the
    embedded default voice."""

    remote = True

    def __init__(
        self,
        name: str,
        url: str,
        *,
        model: str = "tts-1",
        voices: Sequence[str] = (),
        api_key: str | None = None,
        timeout: float = 10.0,
        breaker: Breaker | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self._api = _Api(url, api_key, timeout)
        self._voices = {v.lower(): v for v in voices}
        self.guard = Guard(name, breaker)
        self.breaker = self.guard.breaker

    def voices(self) -> Sequence[str]:
        return sorted(self._voices)

    def voice_for(self, language: str) -> str | None:
        return next(iter(sorted(self._voices)), None)  # (the API's voices speak any language)

    def warm_up(self) -> None:
        return

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> npt.NDArray[np.int16]:
        return self.guard.call(lambda: self._synthesize(text, voice, rate))

    def _synthesize(self, text: str, voice: str, rate: float) -> npt.NDArray[np.int16]:
        request: dict[str, Any] = {
            "model": self.model,
            "input": text,
            "voice": self._voices.get(voice, voice),
            "response_format": "wav",
        }
        if rate != 1.0:
            request["speed"] = round(min(4.0, max(0.25, rate)), 3)
        data = self._api.post("/audio/speech", json.dumps(request).encode(), "application/json")
        try:
            audio = wav.decode_to_8k(data)
        except wav.WavError as exc:
            raise RemoteSpeechError(f"{self._api.url}/audio/speech: not audio: {exc}") from None
        return telephone_audio(audio.astype(np.float32) / 32768, 8000)

    def snapshot(self) -> dict[str, Any]:
        """Its breaker, for ``/api/stats``."""
        return self.guard.snapshot()
