"""No secret in any log: the check run at the end of every test session (docs/security.md,
"Secrets").

A test run uses real secrets: installation secrets (``<data_dir>/secret``), the
applications' signing secrets and API keys and the trunks' passwords of the config
files it writes, cipher keys in its pages, and whatever tests declare with
:func:`used`. callhook's logs are the server's output (the harness saves each
``serve``'s to ``serve-*.out``), the call logs (``media/*/logs/*.log``) and, for
in-process tests, the ``callhook`` logger's records (``callhook-inprocess.log``).
:func:`leaks` reads every one of them under the session's base temporary directory
and reports each secret found, so a key that reaches a log fails the run.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

#: Secrets tests declared (cipher keys, passwords passed on command lines, ...).
SECRETS: set[str] = set()
#: Shorter values are not looked for (too likely to occur by chance).
MIN_LENGTH = 8
#: Config keys whose values are secrets.
SECRET_KEYS = frozenset({"secret", "api_key", "password", "key"})
#: The in-process log every session writes (conftest.py).
INPROCESS_LOG = "callhook-inprocess.log"


def used(*values: str) -> None:
    """Declare secrets a test uses, so the end-of-session check looks for them."""
    SECRETS.update(v for v in values if len(v) >= MIN_LENGTH)


def _config_secrets(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in SECRET_KEYS and isinstance(item, str):
                yield item
            else:
                yield from _config_secrets(item)
    elif isinstance(value, list):
        for item in value:
            yield from _config_secrets(item)


def secrets_in(base: Path) -> set[str]:
    """Every secret the run under ``base`` used (see the module docstring)."""
    found = set(SECRETS)
    for path in base.rglob("secret"):
        if path.is_file() and path.parent.name != "logs":
            found.add(path.read_text().strip())
    for path in base.rglob("*.toml"):
        try:
            found.update(_config_secrets(tomllib.loads(path.read_text())))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
    return {s for s in found if len(s) >= MIN_LENGTH}


def logs_in(base: Path) -> list[Path]:
    """callhook's logs under ``base``."""
    logs = [*base.rglob("serve-*.out"), *base.rglob(INPROCESS_LOG)]
    logs += [p for p in base.rglob("*.log") if p.parent.name == "logs"]
    return sorted(p for p in logs if p.is_file())


def leaks(base: Path) -> list[str]:
    """``path: secret`` (the secret shortened) for each secret found in a log."""
    secrets = secrets_in(base)
    out = []
    for path in logs_in(base):
        text = path.read_text(errors="replace")
        for secret in sorted(secrets):
            if secret in text:
                out.append(f"{path.relative_to(base)}: {secret[:4]}...")
    return out
