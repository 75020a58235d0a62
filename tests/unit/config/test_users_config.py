"""The config file's ``[users.NAME]`` (callhook's registered phones) and ``[security]
digest_algorithms``."""

from __future__ import annotations

from pathlib import Path

import pytest

from callhook.config.settings import ConfigError, load

APP = '[apps.support]\nfirst_page = "https://example.com/start"\nsecret = "s3cret-s3cret"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "callhook.toml"
    path.write_text(f'data_dir = "{tmp_path}"\n' + text + APP)
    return path


def test_users_are_read_with_their_password_and_app(tmp_path: Path) -> None:
    settings = load(
        write(
            tmp_path,
            '[users.alice]\npassword = "alice-password"\napp = "support"\n'
            '[users."bob.smith"]\npassword = "bob-password"\n',
        )
    )
    alice, bob = settings.users["alice"], settings.users["bob.smith"]
    assert (alice.password, alice.app) == ("alice-password", "support")
    assert (bob.password, bob.app) == ("bob-password", None)
    assert "alice-password" not in repr(alice)  # never in a log by accident
    assert settings.security.digest_algorithms == ("MD5",)


def test_no_users_by_default(tmp_path: Path) -> None:
    assert load(write(tmp_path, "")).users == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[users.alice]\n", "[users.alice] needs a password"),
        ('[users.alice]\npassword = "short"\n', "password must be at least 8 characters"),
        ("[users.alice]\npassword = 12345678\n", "[users.alice] password must be a string"),
        (
            '[users.alice]\npassword = "long enough"\nvoicemail = true\n',
            "[users.alice] unknown keys: voicemail",
        ),
        (
            '[users.alice]\npassword = "long enough"\napp = "sales"\n',
            "[users.alice] app 'sales' is not in [apps]",
        ),
        ('[users."al ice"]\npassword = "long enough"\n', "a user name is 1 to 64"),
        ('[users."-alice"]\npassword = "long enough"\n', "a user name is 1 to 64"),
        ('[users."al@ice"]\npassword = "long enough"\n', "a user name is 1 to 64"),
        ('users = "alice"\n', "users must be a table"),
        ('[users]\nalice = "x"\n', "users.alice must be a table"),
        ('[security]\ndigest_algorithms = ["SHA-512"]\n', "digest_algorithms must list MD5"),
        ("[security]\ndigest_algorithms = []\n", "digest_algorithms must list MD5"),
        ('[security]\ndigest_algorithms = ["MD5", "md5"]\n', "each once"),
        ('[sip]\ndomains = "pbx.example.com"\n', "[sip] domains must be a list"),
        ('[sip]\ndomains = ["pbx.example.com:5060"]\n', "is not a host name or address"),
        ('[sip]\ndomains = ["sip:pbx.example.com"]\n', "is not a host name or address"),
        ('[sip]\ndomains = ["-pbx.example"]\n', "is not a host name or address"),
    ],
)
def test_bad_users_are_refused_clearly(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load(write(tmp_path, text))
    assert message in str(error.value)


def test_digest_algorithms_keep_their_order(tmp_path: Path) -> None:
    settings = load(write(tmp_path, '[security]\ndigest_algorithms = ["sha-256", "MD5"]\n'))
    assert settings.security.digest_algorithms == ("SHA-256", "MD5")


def test_sip_domains_are_read_as_hosts(tmp_path: Path) -> None:
    """The names phones know callhook by: an INVITE from one is challenged as a user's."""
    text = '[sip]\ndomains = ["PBX.Example.com", "[2001:DB8::1]", "192.0.2.7"]\n'
    settings = load(write(tmp_path, text))
    assert settings.sip.domains == ("pbx.example.com", "2001:db8::1", "192.0.2.7")
    assert load(write(tmp_path, "")).sip.domains == ()
