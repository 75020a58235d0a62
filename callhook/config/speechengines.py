"""``[speech.engines.NAME]``: remote speech engines, each a server callhook reaches over an
open protocol, named for ``[speech] recogniser`` and for voices (``NAME:voice``)
(docs/configuration.md, docs/speech.md "Remote engines")."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from callhook.config.values import ConfigError

#: Protocols callhook speaks to remote engines, and ``plugin``: an engine a Python package
#: installs (docs/speech.md, "Plug-in engines").
PROTOCOLS = ("wyoming", "openai", "plugin")
#: The entry point groups plug-ins are found in: a recogniser, a voice.
RECOGNISER_PLUGINS = "callhook.recognisers"
VOICE_PLUGINS = "callhook.voices"
#: The keys of each protocol's table, besides ``protocol``.
KEYS = {
    "wyoming": {"uri", "timeout", "languages", "voices"},
    "openai": {
        "url",
        "model",
        "voice_model",
        "api_key",
        "api_key_env",
        "timeout",
        "languages",
        "voices",
    },
    "plugin": {"plugin", "languages", "options"},
}
#: Names the embedded engines and settings have: an engine may not take them.
RESERVED = ("whisper", "sphinx", "none", "piper", "espeak")


@dataclass(frozen=True)
class RemoteEngine:
    """One ``[speech.engines.NAME]`` table."""

    name: str
    protocol: str
    #: Where it is: Wyoming's ``tcp://host:port`` or ``unix:///path``; the OpenAI API's
    #: base URL (``http://host:8000/v1``).
    uri: str
    #: Seconds each connect, send and read may take.
    timeout: float = 5.0
    #: What it recognises (BCP 47 tags or Whisper codes); empty for a plug-in: its own say.
    languages: tuple[str, ...] = ("en",)
    #: Its voices (the server's spelling); empty: asked of the server at start-up (Wyoming).
    voices: tuple[str, ...] = ()
    #: The OpenAI API's transcription and speech models, and its key.
    model: str = "whisper-1"
    voice_model: str = "tts-1"
    api_key: str | None = field(default=None, repr=False)
    #: A plug-in's entry point name, the groups it is in (:data:`RECOGNISER_PLUGINS`,
    #: :data:`VOICE_PLUGINS`), and the ``[speech.engines.NAME.options]`` its factory gets.
    plugin: str | None = None
    plugin_groups: frozenset[str] = frozenset()
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def recognises(self) -> bool:
        """Whether it can be a recogniser (a plug-in may have only a voice)."""
        return self.protocol != "plugin" or RECOGNISER_PLUGINS in self.plugin_groups


def speech_engines(path: Path, speech: dict[str, Any]) -> dict[str, RemoteEngine]:
    """The remote engines of a ``[speech]`` table, each checked."""
    tables = speech.get("engines", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: [speech.engines] must be a table of engines")
    engines: dict[str, RemoteEngine] = {}
    for name, values in tables.items():
        where = f"{path}: [speech.engines.{name}]"
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", name) or name in RESERVED:
            raise ConfigError(
                f"{where}: a name of lower-case letters, digits, - and _, not one of "
                + ", ".join(RESERVED)
            )
        if not isinstance(values, dict):
            raise ConfigError(f"{where} must be a table")
        protocol = values.get("protocol")
        if protocol not in PROTOCOLS:
            raise ConfigError(f"{where}: protocol must be one of {', '.join(PROTOCOLS)}")
        unknown = set(values) - KEYS[protocol] - {"protocol"}
        if unknown:
            raise ConfigError(f"{where}: unknown keys: {', '.join(sorted(unknown))}")
        if protocol == "plugin":
            engines[name] = _plugin(where, name, values)
            continue
        uri = _wyoming_uri(where, values) if protocol == "wyoming" else _api_url(where, values)
        timeout = values.get("timeout", 5.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"{where}: timeout must be a number of seconds above 0")
        engines[name] = RemoteEngine(
            name,
            protocol,
            uri,
            float(timeout),
            _strings(where, "languages", values.get("languages", ["en"])),
            _strings(where, "voices", values.get("voices", [])),
            _text(where, "model", values, "whisper-1"),
            _text(where, "voice_model", values, "tts-1"),
            _key(where, values),
        )
    return engines


def _plugin(where: str, name: str, values: dict[str, Any]) -> RemoteEngine:
    """A plug-in engine: its entry point must be installed (found by its package's metadata,
    nothing imported yet)."""
    plugin = _text(where, "plugin", values, name)
    groups = frozenset(
        group
        for group in (RECOGNISER_PLUGINS, VOICE_PLUGINS)
        if metadata.entry_points(group=group, name=plugin)
    )
    if not groups:
        raise ConfigError(
            f"{where}: no installed package has a plug-in named {plugin!r} (entry points "
            f"{RECOGNISER_PLUGINS} and {VOICE_PLUGINS}; pip install the plug-in's package)"
        )
    options = values.get("options", {})
    if not isinstance(options, dict):
        raise ConfigError(f"{where}: options must be a table (the plug-in's settings)")
    spoken = _strings(where, "languages", values["languages"]) if "languages" in values else ()
    return RemoteEngine(
        name,
        "plugin",
        f"plugin:{plugin}",
        languages=spoken,
        plugin=plugin,
        plugin_groups=groups,
        options=options,
    )


def _wyoming_uri(where: str, values: dict[str, Any]) -> str:
    uri = values.get("uri")
    parts = urlsplit(uri) if isinstance(uri, str) else None
    if parts is None or not (
        (parts.scheme == "tcp" and parts.hostname and _port(parts))
        or (parts.scheme == "unix" and parts.path)
    ):
        raise ConfigError(f"{where}: uri must be tcp://host:port or unix:///path")
    assert isinstance(uri, str)
    return uri


def _api_url(where: str, values: dict[str, Any]) -> str:
    url = values.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: url must be the API's base, http(s)://host[:port]/v1")
    assert isinstance(url, str)
    return url


def _text(where: str, key: str, values: dict[str, Any], default: str) -> str:
    value = values.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key} must be a name")
    return value


def _key(where: str, values: dict[str, Any]) -> str | None:
    """The API key: ``api_key``, or the environment variable ``api_key_env`` names."""
    if "api_key" in values and "api_key_env" in values:
        raise ConfigError(f"{where}: api_key or api_key_env, not both")
    if "api_key_env" in values:
        variable = _text(where, "api_key_env", values, "")
        key = os.environ.get(variable)
        if not key:
            raise ConfigError(f"{where}: api_key_env: the environment has no {variable}")
        return key
    return _text(where, "api_key", values, "") if "api_key" in values else None


def _port(parts: Any) -> bool:
    try:
        return parts.port is not None
    except ValueError:
        return False


def _strings(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: {key} must be a list of names")
    return tuple(value)
