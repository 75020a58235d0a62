"""The remote speech engines of ``[speech.engines.NAME]``, made by their protocol: a
recogniser and a voice each (:mod:`callhook.speech.wyoming`, :mod:`callhook.speech.openai`,
and plug-ins: :mod:`callhook.speech.plugins`).
Their clients are imported only when an engine uses them."""

from __future__ import annotations

import logging

from callhook.config.speechengines import RemoteEngine
from callhook.speech.asr import Recogniser
from callhook.speech.tts import SpeechEngine

logger = logging.getLogger("callhook.speech")


def remote_voice(server: RemoteEngine) -> SpeechEngine | None:
    """A remote engine's voices (an OpenAI-compatible one has them only by the config; a
    plug-in only if it has a voice; None, and the cause in the log, for one that fails)."""
    if server.protocol == "plugin":
        from callhook.config.speechengines import VOICE_PLUGINS
        from callhook.speech.plugins import PluginError, PluginVoice

        if server.plugin is None or VOICE_PLUGINS not in server.plugin_groups:
            return None
        try:
            return PluginVoice(server.name, server.plugin, server.options)
        except PluginError as exc:
            logger.error("the %s voices are not available: %s", server.name, exc)
            return None
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


def remote_recogniser(server: RemoteEngine) -> Recogniser | None:
    """A remote engine's recogniser, by its protocol (None, and the cause in the log, for a
    plug-in that cannot be made: only digits count)."""
    if server.protocol == "plugin":
        from callhook.speech.plugins import PluginError, PluginRecogniser

        assert server.plugin is not None
        try:
            return PluginRecogniser(server.name, server.plugin, server.options, server.languages)
        except PluginError as exc:
            logger.error(
                "speech recogniser %r is not available: %s: only digits count", server.name, exc
            )
            return None
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
