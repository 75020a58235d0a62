"""The ``callhook`` command as a user runs it: validate, schema, serve."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp

from callhook.signature import HEADER, sign
from tests.e2e.harness import free_tcp_port

CALLHOOK = [sys.executable, "-m", "callhook"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CALLHOOK, *args], input=stdin, capture_output=True, text=True, timeout=30
    )


def test_validate_accepts_a_valid_list(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"actions": [{"play": {"play_list": [{"text_to_say": "Hi"}]}}]}))
    result = run("validate", str(path))
    assert result.returncode == 0
    assert result.stdout == "valid\n"


def test_validate_warns_of_a_language_the_configured_recogniser_does_not_know(
    tmp_path: Path,
) -> None:
    listen = {"next_page": {"url": "/x"}, "speech_recognition_options": {"language": "es-ES"}}
    option = {"digit": "1", "words": ["uno"], "next_page": {"url": "/uno"}}
    menu = {"language": "tlh-QO", "menu_options": [option]}
    page = {"actions": [{"get_input": listen}, {"run_speech_menu": menu}]}
    result = run("validate", "-", stdin=json.dumps(page))
    assert result.returncode == 0, result.stdout + result.stderr  # valid: a warning only
    assert result.stdout.splitlines() == [
        "warning: $.actions[0].get_input.speech_recognition_options.language: speech language"
        " es-ES is not recognised by whisper tiny.en (English only; Whisper's multilingual"
        ' models do: [speech] recogniser = "whisper", model = "base"); speech input will not'
        " be recognised",
        "warning: $.actions[1].run_speech_menu.language: speech language tlh-QO is not"
        " recognised by whisper tiny.en (English only); speech input will not be recognised",
        "valid",
    ]
    config = tmp_path / "callhook.toml"
    config.write_text('[speech]\nmodel = "base"\n')
    result = run("validate", "--config", str(config), "-", stdin=json.dumps(page))
    assert result.stdout.splitlines() == [
        "warning: $.actions[1].run_speech_menu.language: speech language tlh-QO is not one"
        " whisper base recognises; speech input will not be recognised",
        "valid",
    ]


def test_validate_takes_a_remote_recognisers_languages_from_its_table(tmp_path: Path) -> None:
    listen = {"next_page": {"url": "/x"}, "speech_recognition_options": {"language": "es-ES"}}
    page = json.dumps({"actions": [{"get_input": listen}, {"run_speech_menu": {
        "language": "fr-FR",
        "menu_options": [{"digit": "1", "words": ["un"], "next_page": {"url": "/un"}}],
    }}]})  # fmt: skip
    config = tmp_path / "callhook.toml"
    config.write_text(
        '[speech]\nrecogniser = "farm"\n'
        '[speech.engines.farm]\nprotocol = "wyoming"\nuri = "tcp://127.0.0.1:9"\n'
        'languages = ["en-GB", "es"]\n'
    )
    result = run("validate", "--config", str(config), "-", stdin=page)
    assert result.returncode == 0, result.stdout + result.stderr
    # Spanish is one of the farm's (tiny.en's English-only warning would name es-ES too).
    assert result.stdout.splitlines() == [
        "warning: $.actions[1].run_speech_menu.language: speech language fr-FR is not one"
        " farm recognises; speech input will not be recognised",
        "valid",
    ]
    # A plug-in with no languages of its own in the table says them when it is made.
    config.write_text(
        '[speech]\nrecogniser = "whisper-plugin"\n'
        '[speech.engines.whisper-plugin]\nprotocol = "plugin"\nplugin = "faster-whisper"\n'
    )
    result = run("validate", "--config", str(config), "-", stdin=page)
    assert result.stdout.splitlines() == ["valid"], result.stdout + result.stderr


def test_validate_takes_both_play_action_forms_and_names_menu_problems() -> None:
    say = {"play_list": [{"text_to_say": "Press 1."}]}
    keyed = {
        "actions": [
            {
                "get_number": {
                    "next_page": {"url": "/n"},
                    "prompt": {"play": say},
                    "on_digit_timeout_messages": [{"play": say}, say],
                }
            },
            {
                "run_menu": {
                    "prompt": say,
                    "menu_options": [{"digit": "1", "next_page": {"url": "a"}}],
                }
            },
        ]
    }
    result = run("validate", "-", stdin=json.dumps(keyed))
    assert (result.returncode, result.stdout) == (0, "valid\n")
    bad = {
        "actions": [{"run_menu": {"menu_options": [{"digit": "1", "next_page": {"url": "a"}}] * 2}}]
    }
    result = run("validate", "-", stdin=json.dumps(bad))
    assert result.returncode == 1
    assert result.stdout.startswith("$.actions[0].run_menu.menu_options: digit '1' is used by")
    schema = json.loads(run("schema").stdout)
    prompt = schema["$defs"]["GetNumber"]["properties"]["prompt"]
    given, null = prompt["anyOf"]  # optional: null is "not given", as for Aculab
    assert null == {"type": "null"}
    assert [r["$ref"] for r in given["oneOf"]] == ["#/$defs/PlayStep", "#/$defs/Play"]


def test_validate_prints_every_error() -> None:
    doc = {
        "actions": [
            {"get_number": {"next_page": {"url": "/n"}, "valid_digits": "12x", "digit_count": "4"}},
            {"recrod": {}},
        ]
    }
    result = run("validate", "-", stdin=json.dumps(doc))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("$.actions[0].get_number.valid_digits: ") for line in lines)
    assert any(line.startswith("$.actions[0].get_number.digit_count: ") for line in lines)
    assert any(line.startswith("$.actions[1]: unknown action 'recrod'") for line in lines)
    assert len(lines) == 3


def test_validate_rejects_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("<html>oops</html>")
    result = run("validate", str(path))
    assert result.returncode == 1
    assert result.stdout.startswith("$: not valid JSON")


def test_schema_is_json_schema_of_the_envelope() -> None:
    result = run("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["required"] == ["actions"]
    assert set(schema["properties"]) == {"actions", "token", "api_version", "call_recording_cipher"}


def _free_port() -> int:
    return free_tcp_port()


async def test_serve_runs_the_demo_application(tmp_path: Path) -> None:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        *CALLHOOK,
        "serve",
        "--workers",
        "1",
        "--http",
        f"127.0.0.1:{port}",
        "--sip",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        banner = ""
        while "application: " not in banner:
            line = await asyncio.wait_for(proc.stdout.readline(), 15)
            assert line, banner
            banner += line.decode()
        assert f"web: http://127.0.0.1:{port}" in banner
        assert "application: http://127.0.0.1" in banner and "/demo/start" in banner
        secret = (tmp_path / "secret").read_text().strip()
        body = json.dumps({"application_instance_id": "x", "token": None}).encode()
        url = f"http://127.0.0.1:{port}/demo/start"
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=body, headers={HEADER: sign(secret, body)}) as r:
                assert r.status == 200
                actions = (await r.json())["actions"]
            assert [next(iter(a)) for a in actions] == ["play", "get_number", "play", "redirect"]
            # The demo checks signatures: a forged request is refused.
            async with http.post(url, data=body, headers={HEADER: sign("wrong", body)}) as r:
                assert r.status == 403
            # So is one whose signature is not even hex (once a 500, with a traceback).
            forged = sign(secret, body).split(",v1=")[0] + ",v1=é"
            async with http.post(url, data=body, headers={HEADER: forged}) as r:
                assert r.status == 403
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 15) == 0


def test_validate_takes_aculabs_forms_and_refuses_a_destination_before_any_call() -> None:
    """Aculab's nulls and destination prefixes, through the real command."""
    aculab = {
        "actions": [
            {
                "connect": {
                    "destinations": ["tel:441908273800", "loc:support", "bob@pbx.example"],
                    "hold_media": None,
                    "classify_callee": None,
                    "next_page": None,
                }
            }
        ],
        "token": None,
        "api_version": "2.0",
    }
    result = run("validate", "-", stdin=json.dumps(aculab))
    assert (result.returncode, result.stdout) == (0, "valid\n"), result.stdout
    bad = {"actions": [{"connect": {"destinations": ["sip:a@b.example", "fax:123"]}}]}
    result = run("validate", "-", stdin=json.dumps(bad))
    assert result.returncode == 1
    assert result.stdout.startswith("$.actions[0].connect.destinations[1]: 'fax:123': unknown")


def test_callhook_test_leaves_nothing_in_the_users_folder(tmp_path: Path) -> None:
    """In-process, where serve has no data directory: the run's recordings and logs go to
    a temporary directory, removed after (``./data`` is used when it exists: serve's)."""
    flow = Path(__file__).resolve().parents[2] / "examples" / "flows" / "demo.yaml"
    ran = subprocess.run(
        [*CALLHOOK, "test", str(flow)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0 and ran.stdout.startswith("PASS"), ran.stdout + ran.stderr
    assert list(tmp_path.iterdir()) == []
