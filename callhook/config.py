"""Settings: the applications callhook runs and how it serves them.

A config file is TOML::

    data_dir = "data"
    page_timeout = 10.0

    [http]                              # the REST API, demo app and web phone
    host = "127.0.0.1"
    port = 8080

    [sip]
    host = "0.0.0.0"                    # all interfaces, so phones on the LAN can call
    port = 5060
    rtp_ports = [20000, 29999]          # even ports for RTP, one per call
    shutdown_grace = 30                 # seconds running calls may go on after SIGTERM
    max_calls = 500                     # calls at once; more get 503 (0: no limit)

    [speech]
    voice = "piper:joe"                 # default TTS voice (engine:voice); "espeak:en-us" is light
    recogniser = "whisper"              # whisper | sphinx | none (digits only)
    workers = 2                         # threads for synthesis, and as many for recognition
    preload = true                      # load the models at start-up, not on the first call

    [trunk]                             # for outbound calls that get challenged (optional)
    username = "me"
    password = "secret"

    [apps.support]                      # calls to sip:support@... run this app
    first_page = "https://example.com/ivr/start"
    error_page = "https://example.com/ivr/error"     # optional
    final_page = "https://example.com/ivr/final"     # optional
    secret = "a long random string"                  # signs page requests
    application_parameters = "anything"              # passed in this_call

    default_app = "support"             # calls to any other user run this app

With no config the built-in demo application is the default app.
"""

from __future__ import annotations

import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The speech recognisers callhook has (``none``: get_input takes digits only).
RECOGNISERS = ("whisper", "sphinx", "none")


class ConfigError(ValueError):
    """A config file that cannot be used, with the reason."""


@dataclass(frozen=True)
class AppConfig:
    """One voice application: its pages and the secret its requests are signed with."""

    name: str
    first_page: str
    secret: str
    error_page: str | None = None
    final_page: str | None = None
    application_parameters: str = ""


@dataclass
class Settings:
    """Everything the composition root needs."""

    data_dir: Path = Path("data")
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    page_timeout: float = 10.0
    sip_host: str = "0.0.0.0"
    sip_port: int = 5060
    rtp_ports: tuple[int, int] = (20000, 29999)
    shutdown_grace: float = 30.0
    max_calls: int = 500
    tts_voice: str = "piper:joe"
    recogniser: str = "whisper"
    speech_workers: int = 2
    speech_preload: bool = True
    trunk_username: str | None = None
    trunk_password: str | None = None
    apps: dict[str, AppConfig] = field(default_factory=dict)
    default_app: str | None = None

    def app_for(self, user: str) -> AppConfig | None:
        """The application for calls to ``user`` (or the default application)."""
        app = self.apps.get(user)
        if app is None and self.default_app is not None:
            app = self.apps.get(self.default_app)
        return app


def data_secret(data_dir: Path) -> str:
    """The installation's own secret (created on first use), for apps configured without one."""
    path = data_dir / "secret"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def load(path: Path) -> Settings:
    """Read a TOML config file; raises :class:`ConfigError` naming the problem."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    settings = Settings()
    settings.data_dir = Path(raw.get("data_dir", "data"))
    settings.page_timeout = float(raw.get("page_timeout", 10.0))
    http = raw.get("http", {})
    settings.http_host = str(http.get("host", settings.http_host))
    settings.http_port = int(http.get("port", settings.http_port))
    sip = raw.get("sip", {})
    settings.sip_host = str(sip.get("host", settings.sip_host))
    settings.sip_port = int(sip.get("port", settings.sip_port))
    if "rtp_ports" in sip:
        first, last = (int(p) for p in sip["rtp_ports"])
        if not 1024 <= first < last <= 65535:
            raise ConfigError(f"{path}: [sip] rtp_ports must be two ports, low to high, above 1023")
        settings.rtp_ports = (first, last)
    settings.shutdown_grace = float(sip.get("shutdown_grace", settings.shutdown_grace))
    settings.max_calls = int(sip.get("max_calls", settings.max_calls))
    speech = raw.get("speech", {})
    unknown_speech = set(speech) - {"voice", "recogniser", "workers", "preload"}
    if unknown_speech:
        raise ConfigError(f"{path}: [speech] unknown keys: {', '.join(sorted(unknown_speech))}")
    settings.tts_voice = str(speech.get("voice", settings.tts_voice))
    settings.recogniser = str(speech.get("recogniser", settings.recogniser))
    if settings.recogniser not in RECOGNISERS:
        raise ConfigError(
            f"{path}: [speech] recogniser must be one of {', '.join(RECOGNISERS)}, "
            f"not {settings.recogniser!r}"
        )
    settings.speech_workers = max(1, int(speech.get("workers", settings.speech_workers)))
    settings.speech_preload = bool(speech.get("preload", settings.speech_preload))
    trunk = raw.get("trunk", {})
    settings.trunk_username = trunk.get("username")
    settings.trunk_password = trunk.get("password")
    apps: dict[str, Any] = raw.get("apps", {})
    for name, table in apps.items():
        if "first_page" not in table:
            raise ConfigError(f"{path}: [apps.{name}] needs a first_page")
        unknown = set(table) - {
            "first_page",
            "error_page",
            "final_page",
            "secret",
            "application_parameters",
        }
        if unknown:
            raise ConfigError(f"{path}: [apps.{name}] unknown keys: {', '.join(sorted(unknown))}")
        settings.apps[name] = AppConfig(
            name=name,
            first_page=str(table["first_page"]),
            secret=str(table.get("secret") or data_secret(settings.data_dir)),
            error_page=table.get("error_page"),
            final_page=table.get("final_page"),
            application_parameters=str(table.get("application_parameters", "")),
        )
    settings.default_app = raw.get("default_app")
    if settings.default_app is not None and settings.default_app not in settings.apps:
        raise ConfigError(f"{path}: default_app {settings.default_app!r} is not in [apps]")
    return settings
