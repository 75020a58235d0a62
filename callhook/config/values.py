"""Reading one value of the config file: its TOML type checked, its range, a clear error.

Each function takes the file's path (for the message), the table and key it reads, and
gives the value or raises :class:`ConfigError` naming the file, the table, the key and
what was wrong; ``config.py`` builds the settings from them.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A config file that cannot be used, with the reason."""


def table(path: Path, raw: dict[str, Any], name: str) -> dict[str, Any]:
    """The table ``[name]`` of the file (empty if absent); ConfigError if it is not one."""
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {name} must be a table ([{name}])")
    return value


def number(path: Path, table: str, key: str, values: dict[str, Any], default: float) -> float:
    """A number (integer or float; not a boolean, not text), or ``default`` when absent."""
    value = values.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        where = f"[{table}] {key}" if table else key
        raise ConfigError(f"{path}: {where} must be a number, got {value!r}")
    return float(value)


def confidence(path: Path, table: str, values: dict[str, Any], default: float) -> float:
    """``min_confidence``: the confidence floor of answers to word hints, 0 to 1."""
    value = number(path, table, "min_confidence", values, default)
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{path}: [{table}] min_confidence must be 0 (off) to 1, got {value}")
    return value


def integer(path: Path, table: str, key: str, values: dict[str, Any], default: int) -> int:
    """A whole number, or ``default`` when absent."""
    value = values.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path}: [{table}] {key} must be a whole number, got {value!r}")
    return value


def text(path: Path, table: str, key: str, values: dict[str, Any], default: str) -> str:
    """A string, or ``default`` when absent."""
    value = values.get(key, default)
    if not isinstance(value, str):
        where = f"[{table}] {key}" if table else key
        raise ConfigError(f"{path}: {where} must be a string, got {value!r}")
    return value


def flag(path: Path, table: str, key: str, values: dict[str, Any], default: bool) -> bool:
    """``true`` or ``false``, or ``default`` when absent."""
    value = values.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: [{table}] {key} must be true or false, got {value!r}")
    return value


def no_unknown(path: Path, table: str, values: dict[str, Any], known: set[str]) -> None:
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"{path}: [{table}] unknown keys: {', '.join(sorted(unknown))}")


def ip_address(
    path: Path,
    value: object,
    where: str = "[sip] external_address",
    what: str = "the public address callhook is reached at",
) -> str:
    """An IP address (``[sip] external_address``: it goes into SDP's c= line as it is)."""
    try:
        return str(ipaddress.ip_address(str(value).strip()))
    except ValueError:
        message = f"{path}: {where} must be an IP address ({what}), got {value!r}"
        raise ConfigError(message) from None


#: A host name (RFC 3261 §25.1 hostname: labels of letters, digits and hyphens).
HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def domains(path: Path, value: object) -> tuple[str, ...]:
    """``[sip] domains``: host names or IP addresses, no ports."""
    where = f"{path}: [sip] domains"
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of host names or addresses")
    out = []
    for text in value:
        host = text.strip().strip("[]")
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            if len(host) > 253 or not HOSTNAME.fullmatch(host):
                raise ConfigError(f"{where}: {text!r} is not a host name or address") from None
        out.append(host.lower())
    return tuple(out)


def port(path: Path, key: str, value: object) -> int:
    port = value if isinstance(value, int) and not isinstance(value, bool) else -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"{path}: [sip] {key} must be a port number (0: none), got {value!r}")
    return port


def endpoints(path: Path, table: str, key: str, values: dict[str, Any]) -> tuple[str, ...]:
    """A list of ``host:port`` (an IPv6 address in brackets), or () when absent."""
    value = values.get(key, [])
    if not isinstance(value, list) or not all(_endpoint(v) for v in value):
        raise ConfigError(
            f'{path}: [{table}] {key} must be a list of "host:port" '
            f'(e.g. "127.0.0.1:8765", "[::1]:8765", "agent.internal:443")'
        )
    return tuple(value)


def _endpoint(value: object) -> bool:
    if not isinstance(value, str):
        return False
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})", value)
    return m is not None and 1 <= int(m.group(2)) <= 65535


def network_list(path: Path, table: str, key: str, values: dict[str, Any]) -> tuple[str, ...]:
    """A list of addresses or CIDR blocks, or () when absent."""
    value = values.get(key, [])
    where = f"{path}: [{table}] {key}"
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of addresses or CIDR blocks")
    for text in value:
        try:
            ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            raise ConfigError(f"{where}: {text!r} is not an address or CIDR block") from None
    return tuple(v.strip() for v in value)


def workers(path: Path, values: dict[str, Any]) -> tuple[int | None, int | None]:
    """``[workers]``: how many worker processes ``serve`` runs (None: ``"auto"``), and
    their first SIP port (None: not given, chosen free)."""
    no_unknown(path, "workers", values, {"count", "first_port"})
    count: int | None = None
    if values.get("count", "auto") != "auto":
        count = integer(path, "workers", "count", values, 1)
        if not 1 <= count <= 256:
            raise ConfigError(f'{path}: [workers] count must be 1 to 256 or "auto", got {count}')
    if "first_port" not in values:
        return count, None
    first = integer(path, "workers", "first_port", values, 0)
    if not 1024 <= first <= 65535:
        raise ConfigError(f"{path}: [workers] first_port must be a port above 1023, got {first}")
    return count, first


def speech(
    path: Path, values: dict[str, Any], recognisers: tuple[str, ...], models: tuple[str, ...]
) -> tuple[str, str, str, int, bool]:
    """``[speech]``: voice, recogniser, model, workers and preload (defaults: config.Settings)."""
    no_unknown(
        path,
        "speech",
        values,
        {"voice", "recogniser", "model", "workers", "preload", "engines", "min_confidence"},
    )
    voice = text(path, "speech", "voice", values, "piper:joe")
    recogniser = text(path, "speech", "recogniser", values, "whisper")
    if recogniser not in recognisers:
        raise ConfigError(
            f"{path}: [speech] recogniser must be one of {', '.join(recognisers)}, "
            f"not {recogniser!r}"
        )
    model = text(path, "speech", "model", values, "tiny.en")
    if model not in models:
        raise ConfigError(
            f"{path}: [speech] model must be one of {', '.join(models)}, not {model!r}"
        )
    threads = integer(path, "speech", "workers", values, 2)
    if not 1 <= threads <= 64:
        raise ConfigError(f"{path}: [speech] workers must be 1 to 64")
    return voice, recogniser, model, threads, flag(path, "speech", "preload", values, True)


def media_thread(
    path: Path, values: dict[str, Any], default_lag: float
) -> tuple[bool, float, int, int]:
    """``[media]``'s media thread: whether it runs, the lag (seconds; ``default_lag``
    when not set) past which new calls get 503 (0: never), its SCHED_FIFO priority and its
    nice level (0: off)."""
    thread = flag(path, "media", "thread", values, True)
    lag = number(path, "media", "max_lag_ms", values, default_lag * 1000)
    if not 0 <= lag <= 10_000:
        raise ConfigError(f"{path}: [media] max_lag_ms must be 0 (never refuse) to 10000")
    fifo = integer(path, "media", "thread_fifo", values, 0)
    if not 0 <= fifo <= 99:
        raise ConfigError(f"{path}: [media] thread_fifo must be 0 (off) to 99")
    nice = integer(path, "media", "thread_nice", values, 0)
    if not -20 <= nice <= 19:
        raise ConfigError(f"{path}: [media] thread_nice must be -20 to 19")
    return thread, lag / 1000, fifo, nice


def database(path: Path, values: dict[str, Any]) -> tuple[str | None, float, str, int]:
    """``[database]``: the PostgreSQL URL of shared state (None: SQLite in the data
    directory); how many seconds a silent node is given before it is taken for gone; and
    the address and port other nodes reach this one's private API at (port 0: any)."""
    no_unknown(path, "database", values, {"url", "node_timeout", "node_address", "node_port"})
    url = text(path, "database", "url", values, "") or None
    if url is not None and not re.match(r"postgres(ql)?://", url):
        raise ConfigError(
            f"{path}: [database] url must be a PostgreSQL URL (postgresql://user:password@host"
            f"/database), got {url.split('://')[0]!r}://...; leave it out for SQLite"
        )
    timeout = number(path, "database", "node_timeout", values, 30)
    if not 3 <= timeout <= 3600:
        raise ConfigError(f"{path}: [database] node_timeout must be 3 to 3600 seconds")
    address = ip_address(
        path,
        values.get("node_address", "127.0.0.1"),
        "[database] node_address",
        "where the other nodes reach this one",
    )
    if ipaddress.ip_address(address).is_unspecified:
        raise ConfigError(
            f"{path}: [database] node_address must be the address the other nodes reach this"
            f" one at, not {address} (every address)"
        )
    node_port = integer(path, "database", "node_port", values, 0)
    if not (node_port == 0 or 1024 <= node_port <= 65535):
        raise ConfigError(f"{path}: [database] node_port must be 0 (any) or a port above 1023")
    return url, timeout, address, node_port


def conference(path: Path, values: dict[str, Any]) -> tuple[int, float, float]:
    """``[conference]``: (max_participants, talker_dbov, talker_hangover in seconds)."""
    known = {"max_participants", "talker_dbov", "talker_hangover_ms"}
    no_unknown(path, "conference", values, known)
    limit = integer(path, "conference", "max_participants", values, 40)
    if not 2 <= limit <= 350:
        raise ConfigError(f"{path}: [conference] max_participants must be 2 to 350")
    dbov = number(path, "conference", "talker_dbov", values, -45.0)
    if not -90 <= dbov <= 0:
        raise ConfigError(f"{path}: [conference] talker_dbov must be -90 to 0")
    hangover = integer(path, "conference", "talker_hangover_ms", values, 300)
    if not 0 <= hangover <= 5000:
        raise ConfigError(f"{path}: [conference] talker_hangover_ms must be 0 to 5000")
    return limit, dbov, hangover / 1000
