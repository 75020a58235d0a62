"""``python -m callhook``, and the ``callhook`` command."""

from __future__ import annotations

import gc
import sys


def main() -> int:
    """Import the command line with the cyclic garbage collector off, then run it.

    Importing builds a great many long-lived objects (the dataclasses, the settings'
    tables), which the collector, left on, scans again and again as they accumulate: a
    large share of the CPU a start costs, paid again by every worker. They are frozen
    once imported (``gc.freeze``): no later pass scans them. The command line imports
    little (``serve``'s supervisor needs no more); a command imports the rest the same
    way when it runs (``serve``: the action schemas, numpy, aiohttp:
    :func:`callhook.serving.collector.frozen_imports`), and serve freezes what it builds
    before its first call (``serving/serve.py``).
    """
    gc.disable()
    try:
        from callhook.cli import main as run
    finally:
        gc.freeze()
        gc.enable()
    return run()


if __name__ == "__main__":
    sys.exit(main())
