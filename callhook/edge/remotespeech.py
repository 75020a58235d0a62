"""The remote speech engines of ``[speech.engines.NAME]``, made by their protocol: a
recogniser and a voice each (:mod:`callhook.speech.wyoming`, :mod:`callhook.speech.openai`).
Their clients are imported only when an engine uses them."""

from __future__ import annotations

from callhook.config.speechengines import RemoteEngine
from callhook.speech.asr import Recogniser
from callhook.speech.tts import SpeechEngine


def remote_voice(server: RemoteEngine) -> SpeechEngine | None:
    """A remote engine's voices (an OpenAI-compatible one has them only by the config)."""
    if server.protocol == "openai":
        from callhook.speech.openai import OpenAIVoice

        if not server.voices:
            return None
        return OpenAIVoice(
            server.name,
            server.uri,
            model=server.voice_model,
            voices=server.voices,
            api_key=server.api_key,
            timeout=server.timeout,
        )
    from callhook.speech.wyoming import WyomingVoice

    return WyomingVoice(server.name, server.uri, timeout=server.timeout, voices=server.voices)


def remote_recogniser(server: RemoteEngine) -> Recogniser:
    """A remote engine's recogniser, by its protocol."""
    if server.protocol == "openai":
        from callhook.speech.openai import OpenAIRecogniser

        return OpenAIRecogniser(
            server.name,
            server.uri,
            model=server.model,
            api_key=server.api_key,
            timeout=server.timeout,
            spoken=server.languages,
        )
    from callhook.speech.wyoming import WyomingRecogniser

    return WyomingRecogniser(
        server.name, server.uri, timeout=server.timeout, spoken=server.languages
    )
