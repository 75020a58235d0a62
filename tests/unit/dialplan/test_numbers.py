"""Routing by dialled number (``[apps.X] numbers``): canonical forms and matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from callhook.config.settings import ConfigError, load
from callhook.dialplan.numbers import BadNumber, app_for_number, canonical, configured, matches

UK = "+441234567890"


@pytest.mark.parametrize(
    ("written", "form"),
    [
        ("+441234567890", "+441234567890"),
        ("00441234567890", "+441234567890"),
        ("+44 1234 567-890", "+441234567890"),
        ("(01234) 567.890", "01234567890"),
        ("441234567890", "441234567890"),
        ("01234567890;phone-context=+44", "01234567890"),
        ("support", ""),
        ("", ""),
        ("+", ""),
    ],
)
def test_canonical(written: str, form: str) -> None:
    assert canonical(written) == form


@pytest.mark.parametrize(
    ("dialled", "hit"),
    [
        ("+441234567890", True),
        ("441234567890", True),  # providers often drop the +
        ("00441234567890", True),
        ("01234567890", True),  # national form: trunk prefix 0, country code 44 left out
        ("01234 567890", True),
        ("1234567890", False),  # no trunk prefix: not a national form
        ("001234567890", False),  # 00 is the international prefix: +1234567890
        ("+441234567891", False),
        ("0567890", False),  # the rest would leave more than 3 digits of country code
        ("support", False),
    ],
)
def test_matching(dialled: str, hit: bool) -> None:
    assert matches(dialled, UK) is hit


def test_the_request_uri_user_wins_over_the_to_user() -> None:
    plan = {UK: "uk", "+33123456789": "fr"}
    assert app_for_number(plan, "0123456789", "+441234567890") == "fr"
    assert app_for_number(plan, "anything", "+441234567890") == "uk"
    assert app_for_number(plan, "", "") is None


def test_a_configured_number_must_be_one() -> None:
    with pytest.raises(BadNumber):
        configured("sales")
    assert configured("0044 1234 567890") == UK


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'data_dir = "{tmp_path}"\n' + text)
    return path


def test_the_config_routes_numbers_to_their_applications(tmp_path: Path) -> None:
    settings = load(
        write(
            tmp_path,
            'default_app = "sales"\n'
            '[apps.support]\nfirst_page = "http://a/s"\nnumbers = ["+44 1234 567890"]\n'
            '[apps.sales]\nfirst_page = "http://a/x"\n',
        )
    )
    assert settings.app_for("+441234567890").name == "support"  # type: ignore[union-attr]
    assert settings.app_for("01234567890").name == "support"  # type: ignore[union-attr]
    assert settings.app_for("s", to_user="441234567890").name == "support"  # type: ignore[union-attr]
    assert settings.app_for("sales").name == "sales"  # type: ignore[union-attr]  # by name, as before
    assert settings.app_for("+449999").name == "sales"  # type: ignore[union-attr]  # the default


@pytest.mark.parametrize(
    ("numbers", "problem"),
    [
        ('["sales"]', "is not a telephone number"),
        ('"+441234567890"', "numbers must be a list"),
    ],
)
def test_bad_numbers_are_named(tmp_path: Path, numbers: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        load(write(tmp_path, f'[apps.a]\nfirst_page = "http://a/"\nnumbers = {numbers}\n'))


def test_a_number_of_two_applications_is_refused(tmp_path: Path) -> None:
    text = (
        '[apps.a]\nfirst_page = "http://a/"\nnumbers = ["+441234567890"]\n'
        '[apps.b]\nfirst_page = "http://b/"\nnumbers = ["00441234567890"]\n'
    )
    with pytest.raises(ConfigError, match=r"is already \[apps.a\]'s"):
        load(write(tmp_path, text))
