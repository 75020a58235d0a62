"""The end-to-end harness's serve: the speech models load on first use unless asked."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.e2e.harness import Server


def config_of(server: Server) -> dict[str, object]:
    return tomllib.loads(Path(server.args[server.args.index("--config") + 1]).read_text())


def test_a_serve_with_no_config_gets_one_that_turns_preload_off(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server._without_preload()
    assert config_of(server) == {"speech": {"preload": False}}
    server._without_preload()  # (a second start, on other ports, adds nothing)
    assert server.args.count("--config") == 1


def test_preload_goes_into_the_configs_own_speech_table(tmp_path: Path) -> None:
    path = tmp_path / "callhook.toml"
    path.write_text('[sip]\nshutdown_grace = 2\n[speech]\nvoice = "espeak"\n[speech.engines.x]\n')
    server = Server(tmp_path / "data", extra=("--config", str(path)))
    server._without_preload()
    config = config_of(server)
    assert config["speech"] == {"voice": "espeak", "preload": False, "engines": {"x": {}}}
    assert config["sip"] == {"shutdown_grace": 2}


def test_a_config_with_no_speech_table_gets_one(tmp_path: Path) -> None:
    path = tmp_path / "callhook.toml"
    path.write_text("[speech.engines.x]\nurl = 'tcp://127.0.0.1:1'\n")
    server = Server(tmp_path / "data", extra=("--config", str(path)))
    server._without_preload()
    assert config_of(server)["speech"] == {
        "preload": False,
        "engines": {"x": {"url": "tcp://127.0.0.1:1"}},
    }


def test_a_preload_the_test_chose_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "callhook.toml"
    path.write_text("[speech]\npreload = true\n")
    server = Server(tmp_path / "data", extra=("--config", str(path)))
    server._without_preload()
    assert config_of(server) == {"speech": {"preload": True}}
