"""``[retention]`` and ``[apps.NAME.retention]``: how many days each kind is kept."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from callhook.config.tables import RetentionSettings
from callhook.config.values import ConfigError, no_unknown, number

#: The most days anything is kept before it is deleted (a hundred years: "for ever" is 0).
MAX_DAYS = 36500
KEYS = tuple(f.name for f in dataclasses.fields(RetentionSettings))


def retention(path: Path, table: str, values: object, base: RetentionSettings) -> RetentionSettings:
    """The days of ``[table]`` (each key left out: ``base``'s); a ConfigError naming a key
    that is unknown or out of range."""
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: {table} must be a table ([{table}])")
    table_values: dict[str, Any] = values
    no_unknown(path, table, table_values, set(KEYS))
    days: dict[str, float] = {}
    for key in KEYS:
        value = number(path, table, key, table_values, getattr(base, key))
        if not 0 <= value <= MAX_DAYS:
            raise ConfigError(
                f"{path}: [{table}] {key} must be 0 (kept for ever) to {MAX_DAYS} days, "
                f"got {value:g}"
            )
        days[key] = value
    return RetentionSettings(**days)
