"""``[speech.engines.NAME]``: remote speech engines, each a server callhook reaches over an
open protocol, named for ``[speech] recogniser`` and for voices (``NAME:voice``)
(docs/configuration.md, docs/speech.md "Remote engines")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from callhook.config.values import ConfigError

#: Protocols callhook speaks to remote engines.
PROTOCOLS = ("wyoming",)
#: Names the embedded engines and settings have: an engine may not take them.
RESERVED = ("whisper", "sphinx", "none", "piper", "espeak")


@dataclass(frozen=True)
class RemoteEngine:
    """One ``[speech.engines.NAME]`` table."""

    name: str
    protocol: str
    uri: str
    #: Seconds each connect, send and read may take.
    timeout: float = 5.0
    #: What it recognises (BCP 47 tags or Whisper codes).
    languages: tuple[str, ...] = ("en",)
    #: Its voices (the server's spelling); empty: asked of the server at start-up.
    voices: tuple[str, ...] = ()


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
        unknown = set(values) - {"protocol", "uri", "timeout", "languages", "voices"}
        if unknown:
            raise ConfigError(f"{where}: unknown keys: {', '.join(sorted(unknown))}")
        protocol = values.get("protocol")
        if protocol not in PROTOCOLS:
            raise ConfigError(f"{where}: protocol must be one of {', '.join(PROTOCOLS)}")
        uri = values.get("uri")
        parts = urlsplit(uri) if isinstance(uri, str) else None
        if parts is None or not (
            (parts.scheme == "tcp" and parts.hostname and _port(parts))
            or (parts.scheme == "unix" and parts.path)
        ):
            raise ConfigError(f"{where}: uri must be tcp://host:port or unix:///path")
        timeout = values.get("timeout", 5.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"{where}: timeout must be a number of seconds above 0")
        assert isinstance(uri, str)
        engines[name] = RemoteEngine(
            name,
            protocol,
            uri,
            float(timeout),
            _strings(where, "languages", values.get("languages", ["en"])),
            _strings(where, "voices", values.get("voices", [])),
        )
    return engines


def _port(parts: Any) -> bool:
    try:
        return parts.port is not None
    except ValueError:
        return False


def _strings(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: {key} must be a list of names")
    return tuple(value)
