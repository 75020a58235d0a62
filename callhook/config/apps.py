"""The applications (``[apps.NAME]``) and the users whose phones register
(``[users.NAME]``) of the configuration file (callhook/config/settings.py reads the rest)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from callhook.config.classifycallee import classify_callee
from callhook.config.retention import retention
from callhook.config.secret import data_secret
from callhook.config.tables import RetentionSettings
from callhook.config.values import ConfigError, confidence
from callhook.config.values import no_unknown as _no_unknown
from callhook.config.values import text as _text
from callhook.dialplan.numbers import BadNumber, configured
from callhook.events import ClassifyOptions

#: The shortest API key accepted: a key is all that stands between the Internet and an
#: application's recordings.
API_KEY_MIN = 16

#: An application's page URLs besides first_page.
_PAGES = ("error_page", "final_page")

#: Application names: they name a directory of the media file store and a SIP user.
_APP_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")

#: User names (``[users.NAME]``): the user part of the phone's SIP address, as it writes
#: it (case-sensitive), so characters no phone escapes (RFC 3261 §25.1 unreserved).
_USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.!~*'()-]{0,63}")

#: The shortest user password accepted: the digest is all that keeps a caller from
#: ringing someone else's phone or calling in as them.
PASSWORD_MIN = 8


@dataclass(frozen=True)
class AppConfig:
    """One voice application: its pages, the secret its requests are signed with, its API key.

    ``api_key`` authorises the REST API for this application's files and calls
    (None: the application has no API access). Neither it nor the secret is
    shown in the repr, so they cannot end up in a log by accident.
    """

    name: str
    first_page: str
    secret: str = field(repr=False)
    error_page: str | None = None
    final_page: str | None = None
    application_parameters: str = ""
    api_key: str | None = field(default=None, repr=False)
    #: How each of its pages is requested: POST for an application's own; a connect's
    #: ``secondary_call`` pages as their web page request objects say.
    first_page_method: str = "POST"
    error_page_method: str = "POST"
    final_page_method: str = "POST"
    #: The ``cloudID/username`` of Aculab's web services' Basic authentication this
    #: application answers to (None: any; the key alone says which application asks).
    webservices_username: str | None = None
    #: Its outbound calls' far ends are classified before their first page (Aculab's
    #: outbound service setting "Enable far-end classification"; None: not).
    classify_callee: ClassifyOptions | None = None
    #: Its speech recogniser and default voice, when not ``[speech]``'s: an embedded
    #: engine or a ``[speech.engines.NAME]`` (docs/speech.md, "Remote engines").
    recogniser: str | None = None
    voice: str | None = None
    #: Its confidence floor, when not ``[speech]``'s.
    min_confidence: float | None = None
    #: How long its call logs, recordings, records and notifications are kept, when not
    #: ``[retention]``'s (``[apps.NAME.retention]``: what it leaves out is ``[retention]``'s).
    retention: RetentionSettings | None = None


@dataclass(frozen=True)
class UserConfig:
    """A user whose phones register with callhook (``[users.NAME]``): reached by ``connect``
    to ``user:NAME``; its calls in run ``app`` when set. The password is not in the repr."""

    name: str
    password: str = field(repr=False)
    app: str | None = None


def check_api_key(value: object, where: str) -> str | None:
    """An API key from a config file or flag (None if not given); ConfigError if unusable."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value.strip()) < API_KEY_MIN:
        raise ConfigError(f"{where} must be a string of at least {API_KEY_MIN} characters")
    if value != value.strip() or any(ord(c) < 33 or ord(c) > 126 for c in value):
        raise ConfigError(f"{where} must be printable ASCII with no spaces (it is a bearer token)")
    return value


def applications(
    path: Path,
    apps: dict[str, Any],
    data_dir: Path,
    base_retention: RetentionSettings | None = None,
) -> tuple[dict[str, AppConfig], dict[str, str]]:
    """``[apps.NAME]``, each checked; and the dialled numbers that run each (canonical).
    ``base_retention``: ``[retention]``, which an application's own table amends."""
    base_retention = base_retention or RetentionSettings()
    out: dict[str, AppConfig] = {}
    dialled: dict[str, str] = {}  # canonical number -> application
    keys: dict[str, str] = {}
    for name, table in apps.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: apps.{name} must be a table ([apps.{name}])")
        if not _APP_NAME.fullmatch(name):
            raise ConfigError(
                f"{path}: [apps.{name}]: an application name is 1 to 64 letters, digits, "
                "'_', '-' or '.' (not first)"
            )
        if "first_page" not in table:
            raise ConfigError(f"{path}: [apps.{name}] needs a first_page")
        unknown = set(table) - {
            "first_page",
            "error_page",
            "final_page",
            "secret",
            "api_key",
            "application_parameters",
            "numbers",
            "webservices_username",
            "classify_callee",
            "recogniser",
            "voice",
            "min_confidence",
            "retention",
        }
        if unknown:
            raise ConfigError(f"{path}: [apps.{name}] unknown keys: {', '.join(sorted(unknown))}")
        where = f"apps.{name}"
        pages = {k: _text(path, where, k, table, "") or None for k in _PAGES}
        out[name] = AppConfig(
            name=name,
            first_page=_text(path, where, "first_page", table, ""),
            secret=_text(path, where, "secret", table, "") or data_secret(data_dir),
            error_page=pages["error_page"],
            final_page=pages["final_page"],
            application_parameters=_text(path, where, "application_parameters", table, ""),
            api_key=check_api_key(table.get("api_key"), f"{path}: [apps.{name}] api_key"),
            webservices_username=_text(path, where, "webservices_username", table, "") or None,
            classify_callee=classify_callee(
                f"{path}: [apps.{name}] classify_callee", table.get("classify_callee", False)
            ),
            recogniser=_text(path, where, "recogniser", table, "") or None,
            voice=_text(path, where, "voice", table, "") or None,
            min_confidence=(
                confidence(path, where, table, 0.0) if "min_confidence" in table else None
            ),
            retention=(
                retention(path, f"{where}.retention", table["retention"], base_retention)
                if "retention" in table
                else None
            ),
        )
        numbers = table.get("numbers", [])
        if not isinstance(numbers, list):
            raise ConfigError(f"{path}: [apps.{name}] numbers must be a list of numbers")
        for number in numbers:
            try:
                canonical = configured(str(number))
            except BadNumber as exc:
                raise ConfigError(f"{path}: [apps.{name}] numbers: {exc}") from None
            if canonical in dialled:
                other = dialled[canonical]
                raise ConfigError(
                    f"{path}: [apps.{name}] numbers: {number!r} is already [apps.{other}]'s"
                )
            dialled[canonical] = name
        key = out[name].api_key
        if key is not None:
            if key in keys:
                raise ConfigError(
                    f"{path}: [apps.{name}] api_key is the same as [apps.{keys[key]}]'s: "
                    "a key must name one application"
                )
            keys[key] = name
    return out, dialled


def users(path: Path, tables: dict[str, Any], apps: dict[str, AppConfig]) -> dict[str, UserConfig]:
    """``[users.NAME]``: password (required), app (optional, one of ``[apps]``)."""
    out: dict[str, UserConfig] = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: users.{name} must be a table ([users.{name}])")
        if not _USER_NAME.fullmatch(name):
            raise ConfigError(
                f"{path}: [users.{name}]: a user name is 1 to 64 letters, digits or "
                "_ . ! ~ * ' ( ) - (a letter or digit first)"
            )
        where = f"users.{name}"
        _no_unknown(path, where, table, {"password", "app"})
        if "password" not in table:
            raise ConfigError(f"{path}: [{where}] needs a password (its phone's digest password)")
        password = _text(path, where, "password", table, "")
        if len(password) < PASSWORD_MIN:
            raise ConfigError(
                f"{path}: [{where}] password must be at least {PASSWORD_MIN} characters"
            )
        app = table.get("app")
        if app is not None:
            app = _text(path, where, "app", table, "")
            if app not in apps:
                raise ConfigError(f"{path}: [{where}] app {app!r} is not in [apps]")
        out[name] = UserConfig(name, password, app)
    return out
