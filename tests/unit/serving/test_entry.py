"""The ``callhook`` command's entry: the command line imported with the collector off."""

from __future__ import annotations

import subprocess
import sys

# In a process of its own: freezing the test process's objects would change its collections.
PROBE = """
import gc, sys
import callhook.cli
seen = {}
def fake_main():
    seen["enabled"], seen["frozen"] = gc.isenabled(), gc.get_freeze_count()
    return 7
callhook.cli.main = fake_main
from callhook.__main__ import main
code = main()
print(code, seen["enabled"], seen["frozen"] > 20_000)
"""


def test_the_command_runs_with_the_collector_on_and_its_modules_frozen() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["7", "True", "True"], out.stdout + out.stderr


def test_the_command_line_imports_with_the_collector_off() -> None:
    probe = (
        "import gc, sys, callhook.__main__ as m\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and print('collection'))\n"
        "sys.argv = ['callhook', '--version']\n"
        "try:\n    m.main()\nexcept SystemExit:\n    pass\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    before, version, _ = out.stdout.partition("callhook ")
    assert version, out.stdout
    # (With the collector on, the import alone runs some hundreds; after it, the command
    # line's parser may take one.)
    assert before.count("collection") <= 2, out.stdout


def test_the_supervisor_loads_none_of_the_calls_modules() -> None:
    """``serve --workers``' supervisor runs Kamailio and the workers, no calls: the command
    line and the supervisor's modules load none of the call-handling stack."""
    probe = (
        "import sys, callhook.cli, callhook.serving.launch, callhook.serving.supervisor\n"
        "heavy = ('numpy', 'pydantic', 'aiohttp', 'callhook.actions', 'callhook.app',\n"
        "         'callhook.telephony.service', 'callhook.httpserver.restapi')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
