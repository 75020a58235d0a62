"""An application's ``classify_callee`` (``[apps.NAME]``): who answers its outbound calls
is found before their first page (docs/configuration.md)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from callhook.config.values import ConfigError
from callhook.events import CLASSIFY_RANGES, ClassifyOptions


def classify_callee(where: str, value: Any) -> ClassifyOptions | None:
    """``true`` (the defaults), ``false``, or a table of :class:`ClassifyOptions`' names
    (and ``enable``), each checked; ``where`` names the key in errors."""
    if isinstance(value, bool):
        return ClassifyOptions() if value else None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: true, false or a table of its options")
    names = {f.name for f in fields(ClassifyOptions)}
    unknown = set(value) - names - {"enable"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys: {', '.join(sorted(unknown))}")
    enable = value.get("enable", True)
    if not isinstance(enable, bool):
        raise ConfigError(f"{where}.enable: true or false")
    options: dict[str, Any] = {}
    for name, given in value.items():
        if name == "enable":
            continue
        if name == "wait_for_beep":
            if not isinstance(given, bool):
                raise ConfigError(f"{where}.wait_for_beep: true or false")
        else:
            low, high = CLASSIFY_RANGES[name]
            if isinstance(given, bool) or not isinstance(given, int) or not low <= given <= high:
                raise ConfigError(f"{where}.{name}: a whole number from {low} to {high}")
        options[name] = given
    return ClassifyOptions(**options) if enable else None
