"""Bad input, fuzzed: the config file (issue 14, item 5).

Property (``bench/fuzz.py --target config``): any file loads or raises
ConfigError naming the problem, which ``callhook serve`` prints as one line.

The cases below are the ones the campaign found (``config.load`` converted
values with bare ``int()`` / ``float()`` and iterated tables it had not
type-checked, so a wrong type or a file that is not UTF-8 gave a traceback).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from bench.fuzz import TARGETS, check_of, strategy


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(b"\xd1", id="not-utf8"),
        pytest.param(b'page_timeout = "soon"', id="float-of-text"),
        pytest.param(b"page_timeout = {}", id="float-of-table"),
        pytest.param(b"[sip]\nport = [5060]", id="int-of-list"),
        pytest.param(b"[sip]\nrtp_ports = 20000", id="ports-not-a-list"),
        pytest.param(b"[sip]\nrtp_ports = [20000]", id="one-port"),
        pytest.param(b"[security]\nrate = []", id="rate-list"),
        pytest.param(b"[recordings]\nmax_mb = ''", id="megabytes-of-empty-text"),
        pytest.param(b"[apps]\ndemo = 1", id="app-not-a-table"),
        pytest.param(b"default_app = []", id="default-app-list"),
    ],
)
def test_a_wrong_type_is_a_config_error(text: bytes) -> None:
    check_of("config")(text)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(strategy(TARGETS["config"], max_size=2000))
def test_fuzz_config_file(data: bytes) -> None:
    check_of("config")(data)


def test_a_valid_config_loads(tmp_path: Path) -> None:
    """The seed is a valid config (else the mutations above would test little)."""
    from callhook.config import settings as config

    path = tmp_path / "callhook.toml"
    path.write_bytes(TARGETS["config"].seeds()[0])
    settings_ = config.load(path)
    assert "demo" in settings_.apps and settings_.sip.port == 5060
