"""The fork server's own end (serving/forkserver.py): a real fork server process on a
socket pair, its control socket closed by the test."""

from __future__ import annotations

import socket
import subprocess
import sys

SCRIPT = """
import os, signal, sys
from callhook.serving.forkserver import serve_forever
code = serve_forever(lambda argv: 0, signal.SIGTERM)
os.kill(os.getpid(), signal.SIGTERM)  # (the requester's death signal, late: as it exits)
sys.exit(code)
"""


def test_a_sigterm_after_the_farewell_is_ignored_not_a_traceback() -> None:
    ours, theirs = socket.socketpair()
    with ours:
        server = subprocess.Popen(
            [sys.executable, "-c", SCRIPT], stdin=theirs.fileno(), stderr=subprocess.PIPE, text=True
        )
        theirs.close()
        assert ours.recv(5) == b"ready"
    _, errors = server.communicate(timeout=30)
    assert (server.returncode, errors) == (0, "")
