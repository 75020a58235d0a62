"""Every snippet of the docs and the README, put to what it claims to be: a config file
is loaded by callhook's config loader, an action list validated, SSML rendered, a flow
loaded, Python compiled, a callhook command line parsed by callhook's own parser, a
benchmark or a script found. (docs/tutorial.md's are run for real: tests/e2e/test_tutorial.py; the
library snippet of docs/applications.md too: tests/unit/sdk/test_sdk.py.) Output samples
(blocks with no language) and other programs' files (Asterisk's ``ini``) are not ours
to run.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from callhook.actions.response import parse_response
from callhook.cli import parser
from callhook.config.settings import load
from callhook.devtools.flow import load_flow
from callhook.speech import ssml

ROOT = Path(__file__).resolve().parents[3]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def snippets() -> list[tuple[str, str, str]]:
    out = []
    for doc in DOCS:
        for n, (lang, body) in enumerate(
            re.findall(r"```(\w*)\n(.*?)```", doc.read_text(), flags=re.S)
        ):
            out.append((f"{doc.name}#{n}", lang, body))
    return out


SNIPPETS = snippets()


@pytest.mark.parametrize(("where", "lang", "body"), SNIPPETS, ids=[s[0] for s in SNIPPETS])
def test_snippet(
    where: str, lang: str, body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if lang == "toml" and "pyproject.toml" in body.splitlines()[0]:
        # A package's own pyproject.toml (a plug-in's entry points): TOML, not a config.
        assert "project" in tomllib.loads(body)
    elif lang == "toml":
        # The files a config names are read from the working directory: real ones here.
        monkeypatch.chdir(tmp_path)
        _certificates(tmp_path)
        # The key the docs' remote speech engine reads from the environment (api_key_env).
        monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")
        path = tmp_path / "callhook.toml"
        path.write_text(body)
        load(path)  # raises ConfigError naming the problem
    elif lang == "json":
        value = json.loads(body)
        if isinstance(value, dict) and "actions" in value:
            parse_response(body.encode())
        elif isinstance(value, dict) and len(value) == 1 and "error" not in value:
            parse_response(json.dumps({"actions": [value]}).encode())  # one action
    elif lang == "xml":  # SSML for a text_to_say
        assert ssml.is_ssml(body), f"{where}: an xml block that is not SSML"
        assert ssml.parts(body)
    elif lang == "yaml" and body.startswith("scrape_configs:"):
        # A Prometheus scrape job (docs/monitoring.md): with the bearer token /metrics needs.
        (job,) = yaml.safe_load(body)["scrape_configs"]
        assert job["authorization"]["credentials_file"] and job["static_configs"][0]["targets"]
    elif lang == "yaml":
        path = tmp_path / "flow.yaml"
        path.write_text(body)
        load_flow(path)
    elif lang == "python":
        compile(body, where, "exec")
    elif lang == "sh":
        for line in _commands(body):
            _check_command(line, where)
    else:
        assert lang in ("", "ini"), f"{where}: a {lang!r} block: say how it is checked"


def _certificates(folder: Path) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("callhook.example")
    cert.cert_chain_pems[0].write_to_path(str(folder / "cert.pem"))
    cert.private_key_pem.write_to_path(str(folder / "key.pem"))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))


def _commands(body: str) -> list[str]:
    """The command lines of an ``sh`` block: in a block that shows a prompt (``$``), only
    its lines; each pipeline's commands, without redirections, comments or ``&``."""
    body = body.replace("\\\n", " ")  # continued lines
    prompted = any(line.startswith("$ ") for line in body.splitlines())
    lines = []
    for raw in body.splitlines():
        if prompted and not raw.startswith("$ "):
            continue  # what the command printed
        line = raw.split("  #")[0].strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        for part in line.split("|"):
            part = part.split(">")[0].strip().rstrip("&").strip()
            if part and not re.fullmatch(r"[A-Z_]+=\S*", part):
                lines.append(part)
    return lines


def _check_package_command(words: list[str], where: str) -> None:
    """apt, systemctl and journalctl on the Debian package (docs/install.md): the package
    and unit names and the file name scripts/build-deb makes, from the package's files."""
    debian = ROOT / "deploy" / "debian"
    package = re.search(r"^Package: (\S+)", (debian / "control").read_text(), re.M)
    assert package and (debian / f"{package[1]}.service").exists(), where
    name = package[1]
    line = " ".join(words)
    if words[0] == "apt":
        version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
        deb = f"./{name}_{version}-1_amd64.deb"
        assert words[1:] in (["install", deb], ["remove", name], ["purge", name]), line
    elif words[0] == "systemctl":
        assert words[1] in ("status", "start", "stop", "restart", "reload"), line
        assert words[2:] == [name], line
    else:
        assert words[1:3] == ["-u", name], line


def _check_command(line: str, where: str) -> None:
    words = shlex.split(line)
    if words[0].startswith("("):  # a subshell: (cd examples && python x.py --port 5000 &)
        words = shlex.split(line.strip("()").split("&&")[-1])
    while words and (("=" in words[0] and not words[0].startswith("-")) or words[0] == "sudo"):
        words = words[1:]  # sudo, VAR=value before the command
    program = words[0]
    if program.endswith("callhook"):
        parser().parse_args(words[1:])  # exits (SystemExit) on a wrong command line
    elif program in ("python", ".venv/bin/python"):
        if words[1] == "-m":
            assert importlib.util.find_spec(words[2]) is not None, f"{where}: {line}"
        else:
            script = words[1]
            found = (ROOT / script).exists() or (ROOT / "examples" / script).exists()
            assert found or script in ("my_app.py", "voicemail.py"), f"{where}: {line}"
    elif program.startswith("scripts/"):
        assert (ROOT / program).exists(), f"{where}: {line}"
    elif program in ("pip", ".venv/bin/pip"):
        # A package the suite's own dependencies pin (pyproject.toml).
        pinned = (ROOT / "pyproject.toml").read_text()
        assert words[1] == "install" and all(f'"{w}>=' in pinned for w in words[2:]), where
    elif program in ("apt", "systemctl", "journalctl"):
        _check_package_command(words, where)
    elif program in ("curl", "KEY", "ssh"):
        pass  # an HTTP request to a running serve (docs/api.md; the API's own tests)
    else:
        raise AssertionError(f"{where}: a command this test does not know: {line}")
