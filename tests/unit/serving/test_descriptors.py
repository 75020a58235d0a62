"""serve's open files: the soft limit raised as far as the port range needs, the table grown once.

Each case runs in a child process: limits and the descriptor table are the process's own."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from callhook.serving import descriptors

CHILD = textwrap.dedent(
    """
    import logging, resource, sys
    from callhook.serving import descriptors
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stdout)
    soft, hard = {soft}, {hard}
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    def table():
        for line in open("/proc/self/status"):
            if line.startswith("FDSize:"):
                return int(line.split()[1])
    before = table()
    got = descriptors.provide({wanted})
    print("limit", got, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    print("table", before, table())
    """
)


def run(soft: int, hard: int, wanted: int) -> list[str]:
    code = CHILD.format(soft=soft, hard=hard, wanted=wanted)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.splitlines()


def test_what_the_port_range_needs() -> None:
    # Two sockets a call, one port each, and the servers' and files' descriptors beside.
    assert descriptors.needed((20000, 29999)) == 10000 + descriptors.BESIDE_MEDIA


def test_the_soft_limit_goes_up_and_the_table_grows_once() -> None:
    out = run(256, 8192, 3000)
    assert out[0] == "limit 3000 3000"
    before, after = (int(x) for x in out[1].split()[1:])
    assert before < 3000 <= after
    assert len(out) == 2  # nothing to say


def test_a_limit_already_higher_stays() -> None:
    out = run(6000, 8192, 3000)
    assert out[0] == "limit 6000 6000"


def test_a_hard_limit_below_the_range_is_said_once() -> None:
    out = run(256, 1500, 3000)
    assert out[0].startswith("open files are limited to 1500 (the hard limit is 1500)")
    assert "calls beyond about 238 at once get 503" in out[0]
    assert out[1] == "limit 1500 1500"
    after = int(out[2].split()[2])
    assert after >= 1500  # grown as far as the limit lets it
