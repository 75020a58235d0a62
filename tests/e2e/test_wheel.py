"""The wheel and the sdist as ``python -m build`` makes them from this checkout.

``python -m build`` makes the sdist, then the wheel from the sdist (so a file the sdist
lacks fails the wheel's build or its test). The sdist holds every source file of the
package, the C ones included; the wheel holds every module, the package's other files
(the web phone's), and the built code: each C extension pyproject.toml names and the
modules mypyc compiles (``[tool.callhook] compiled``, setup.py). Installed in a venv of
its own (its dependencies taken from this checkout's venv, not callhook itself), the
wheel's callhook imports its compiled modules, and its ``serve`` answers a SIPp call
through a real application, in one process and with workers behind Kamailio.

The build is kept by its source's hash (tests/e2e/wheelbuild.py): scripts/test makes it
at the lowest priority while the tests run, and this file's tests wait for it.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp, wheelbuild
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.e2e.test_workers import worker_pids
from tests.e2e.wheelbuild import tracked

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


def _run(*args: str, cwd: Path | None = None, timeout: float = 900) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stdout[-4000:]}{done.stderr[-4000:]}"
    return done.stdout


class Built:
    def __init__(self, dist: Path) -> None:
        self.sdist = next(dist.glob("callhook-*.tar.gz"))
        self.wheel = next(dist.glob("callhook-*.whl"))


@pytest.fixture(scope="module")
def built() -> Built:
    """``python -m build`` on a copy of the checkout's source files (not its build
    leftovers): kept by their hash, so scripts/test builds it while the other tests run."""
    return Built(wheelbuild.dist())


def _config() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def test_the_sdist_holds_every_source_file(built: Built) -> None:
    with tarfile.open(built.sdist) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        names = {name.removeprefix(top + "/") for name in sdist.getnames()}
    wanted = set(tracked("callhook"))
    wanted |= {"pyproject.toml", "setup.py", "README.md", "LICENSE"}
    assert not wanted - names, sorted(wanted - names)
    assert any(name.endswith(".c") for name in names)


def test_the_wheel_holds_every_module_and_the_built_code(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
    package = set(tracked("callhook"))
    wanted = {n for n in package if not n.endswith((".c", ".h"))}
    assert not wanted - names, sorted(wanted - names)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    config = _config()
    tool: Any = config["tool"]
    extensions = [e["name"] for e in tool["setuptools"]["ext-modules"]]
    compiled = [m.removesuffix(".py").replace("/", ".") for m in tool["callhook"]["compiled"]]
    assert extensions and compiled
    built_code = {name.replace(".", "/") + suffix for name in extensions + compiled}
    assert not built_code - names, sorted(built_code - names)
    assert f"callhook/sip__mypyc{suffix}" in names  # the compiled modules' shared library
    assert any(name.endswith("dist-info/licenses/LICENSE") for name in names)


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel in a venv of its own; its dependencies from this checkout's venv (a path
    to its site-packages, whose .pth files, this checkout's own callhook among them, are
    not read)."""
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    python = venv / "bin" / "python"
    site = Path(_run(str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
                .strip())  # fmt: skip
    _run(sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", str(site), str(built.wheel))  # fmt: skip
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def test_the_installed_wheel_runs_its_compiled_modules(installed: Path) -> None:
    where = _run(str(installed), "-P", "-c",
                 "import callhook, callhook.sip.message as m, callhook.media._frames as f;"
                 "print(callhook.__file__); print(m.__file__); print(f.__file__)",
                 cwd=ROOT)  # fmt: skip
    package, message, frames = where.split()
    venv = installed.parent.parent
    assert Path(package).is_relative_to(venv), where
    assert message.endswith(sysconfig.get_config_var("EXT_SUFFIX")), where  # mypyc's
    assert Path(frames).is_relative_to(venv), where


@pytest.mark.parametrize("workers", WORKERS)
async def test_the_installed_wheel_serves_a_call(
    installed: Path, app: AppServer, tmp_path: Path, workers: int
) -> None:
    app.page("/start", [
        {"play": {"play_list": [{"text_to_say": "Installed from the wheel."}]}},
        {"hang_up": {}},
    ])  # fmt: skip
    app.page("/final", None)
    server = served(tmp_path, app, workers)
    # -P: not this checkout's callhook from the working directory.
    server.command = [str(installed), "-P", "-m", "callhook"]
    async with server:
        assert server.proc is not None
        # Each process that takes calls runs the wheel's compiled code, not the checkout's.
        pids = list(worker_pids(server.data_dir).values()) or [server.proc.pid]
        assert len(pids) == workers, pids
        for pid in pids:
            maps = Path(f"/proc/{pid}/maps").read_text()
            loaded = {line.split()[-1] for line in maps.splitlines() if "sip__mypyc" in line}
            assert loaded and all(Path(p).is_relative_to(installed.parent.parent)
                                  for p in loaded), loaded  # fmt: skip
        run = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite(),
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
        )
        assert run.returncode == 0, run.output + server.output
        assert await wait_for_request(app, "/final", timeout=10.0), server.output
    assert [r.path for r in app.requests] == ["/start", "/final"]
