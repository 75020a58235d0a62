"""``callhook serve`` for the tests, forked from a process that has already imported it.

Most of what a serve costs the suite in CPU is its start: Python importing callhook's
stack (the action schemas, numpy, aiohttp, the SIP service), about 0.8 s of CPU, several
hundred times a run on two cores. So each test process keeps one *zygote*: a process that
imported the stack once (as ``python -m callhook`` does, collector off then frozen) and
forks a serve for each request. The serve then runs callhook's own command line
(``callhook.cli.main``) with the test's arguments, environment, working directory and
pipes: the same code from the command line on; only the imports were done before.

The serve is the zygote's child, not the test's, so the test gets :class:`ForkedServe`,
which stands for :class:`asyncio.subprocess.Process`: the real pid (signals go straight
to the serve, ``kill -9`` included; ``/proc/<pid>`` is the serve's), its output, and its
exit status, which the zygote reaps and sends back. If the test process goes, its
connection closes and the zygote kills the serve; if the zygote goes, it kills them all.

What a forked serve does not share with a fresh one: ``/proc/<pid>/environ`` and
``/proc/<pid>/maps`` are the zygote's (the environment a test gives is the one Python and
every process serve starts see), and Python's hash seed is the zygote's. A test that
looks at those, and ``CALLHOOK_TEST_FRESH=1`` for the whole suite, start serve afresh
(``tests/e2e/harness.py``).

The protocol, over a Unix stream socket: the test sends one JSON line (``argv``,
``env``, ``cwd``) with three file descriptors (stdin, stdout, stderr) beside it; the
zygote answers the serve's pid, then, when it has ended, its exit code (negative: the
signal that ended it), a line each.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: The largest request (the environment is most of it).
_MAX_REQUEST = 1 << 20


class ForkedServe:
    """A serve forked by the zygote, as the test sees it: what
    :class:`asyncio.subprocess.Process` offers that the harness and the tests use."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader, connection: socket.socket) -> None:
        self.pid = pid
        self.stdout = stdout
        #: The exit code once the zygote has reaped the serve (negative: a signal).
        self.returncode: int | None = None
        self._connection = connection
        self._ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._told = b""
        asyncio.get_running_loop().add_reader(connection.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        try:
            data = self._connection.recv(64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        self._told += data
        if data and not self._told.endswith(b"\n"):
            return
        asyncio.get_running_loop().remove_reader(self._connection.fileno())
        self._connection.close()
        # (no line at all: the zygote itself went, and the serve with it)
        code = int(self._told) if self._told else -int(signal.SIGKILL)
        self.returncode = code
        if not self._ended.done():
            self._ended.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """This test process's zygote: started at the first serve, ended with the process."""

    def __init__(self, env: dict[str, str]) -> None:
        self._env = {**env, "PYTHONUNBUFFERED": "1"}
        self._process: subprocess.Popen[bytes] | None = None
        self._socket = ""
        self._starting = threading.Lock()  # (two serves of one test may start at once)

    def _started(self) -> str:
        with self._starting:
            return self._start_once()

    def _start_once(self) -> str:
        if self._process is None or self._process.poll() is not None:
            folder = tempfile.mkdtemp(prefix="callhook-zygote-")  # (only this user's)
            if len(folder) > 90:  # (a socket's path has room for 107 bytes)
                os.rmdir(folder)
                folder = tempfile.mkdtemp(prefix="callhook-zygote-", dir="/tmp")
            path = os.path.join(folder, "socket")
            # Its stdin is how it knows this process is still here: at EOF it ends.
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.forkserver", path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=self._env,
                cwd=Path(__file__).resolve().parents[2],
            )
            assert self._process.stdout is not None
            line = self._process.stdout.readline()  # (it imports first: a second or so)
            if line.strip() != b"ready":
                raise RuntimeError(f"the test zygote did not start: {line!r}")
            self._socket = path
        return self._socket

    async def spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> ForkedServe:
        """A serve running ``callhook <argv>``, its output (stdout and stderr) on a pipe."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        read_end, write_end = os.pipe()
        try:
            # (the first start imports callhook: a second or more, off the event loop)
            connection.connect(await asyncio.to_thread(self._started))
            request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode() + b"\n"
            with open(os.devnull, "rb") as stdin:
                fds = array.array("i", [stdin.fileno(), write_end, write_end])
                connection.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = connection.recv(64)
                if not chunk:
                    raise RuntimeError("the test zygote did not fork a serve")
                answer += chunk
        except BaseException:
            connection.close()
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb", 0)
        )
        connection.setblocking(False)
        return ForkedServe(int(answer), reader, connection)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()  # (it kills what it forked, then ends)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._socket:
            Path(self._socket).unlink(missing_ok=True)
            Path(self._socket).parent.rmdir()
            self._socket = ""


# The zygote itself -------------------------------------------------------------------


def _imported() -> None:
    """Import what ``callhook serve`` imports, the way it does (``callhook/__main__.py``
    and ``cli.cmd_serve``): with the collector off, then frozen."""
    import gc

    gc.disable()
    try:
        import callhook.app
        import callhook.cli
        import callhook.serving.launch
        import callhook.serving.serve  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


class _Request:
    """What a test asks the zygote for: ``callhook <argv>`` in ``env`` and ``cwd``."""

    def __init__(self, text: bytes) -> None:
        fields = json.loads(text)
        self.argv = [str(a) for a in fields["argv"]]
        self.env = {str(k): str(v) for k, v in fields["env"].items()}
        self.cwd = str(fields["cwd"])


def _received(connection: socket.socket) -> tuple[_Request, list[int]]:
    """One request and the descriptors beside it."""
    data, fds = b"", array.array("i")
    while not data.endswith(b"\n"):
        chunk, ancillary, _, _ = connection.recvmsg(_MAX_REQUEST, socket.CMSG_SPACE(3 * 4))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not chunk:
            raise ConnectionError("the request ended early")
        data += chunk
    return _Request(data), list(fds)


def _run_serve(request: _Request, fds: list[int], inherited: list[int]) -> None:
    """In the forked child: become the serve the request asks for, and never return."""
    code = 1
    try:
        for fd in inherited:  # (the zygote's socket, its other serves' connections)
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request.cwd)
        os.environ.clear()  # (in place: what took os.environ keeps seeing it)
        os.environ.update(request.env)
        import callhook.cli

        sys.argv = [str(Path(callhook.cli.__file__).with_name("__main__.py")), *request.argv]
        code = callhook.cli.main(request.argv)
    except SystemExit as exc:  # as the interpreter turns it into a status
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        # What the interpreter does at its end: wait for the threads, then the atexit
        # functions, then flush.
        try:
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def serve_forever(path: str) -> None:
    """Accept requests on ``path`` until stdin ends; fork a serve for each."""
    _imported()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(listener, select.POLLIN)
    connections: dict[int, tuple[socket.socket, int]] = {}  # its fd -> (it, its serve)
    serves: dict[int, tuple[int, socket.socket]] = {}  # a pidfd -> (the pid, the caller)
    while True:
        # (an fd closed while a batch is handled may be reused by the next accept: its
        # later events in the batch are the old file's)
        done: set[int] = set()
        for fd, _ in poller.poll():
            if fd in done:
                continue
            if fd == 0:  # the test process has gone, or is done: so are its serves
                for pid, _ in serves.values():
                    os.kill(pid, signal.SIGKILL)
                return
            if fd == listener.fileno():
                connection, _ = listener.accept()
                try:
                    request, fds = _received(connection)
                except (OSError, ValueError, KeyError, AttributeError) as exc:
                    print(f"zygote: a request failed: {exc}", file=sys.stderr)
                    connection.close()
                    continue
                inherited = [listener.fileno(), *connections, *serves]
                pid = os.fork()
                if pid == 0:
                    inherited.append(connection.fileno())
                    _run_serve(request, fds, inherited)
                for received in fds:
                    os.close(received)
                pidfd = os.pidfd_open(pid)
                serves[pidfd] = (pid, connection)
                connections[connection.fileno()] = (connection, pid)
                poller.register(pidfd, select.POLLIN)
                poller.register(connection, select.POLLIN)
                connection.sendall(f"{pid}\n".encode())
            elif fd in serves:  # a serve ended: its status to its caller
                pid, connection = serves.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                done.update((fd, connection.fileno()))
                _, status = os.waitpid(pid, 0)
                if connection.fileno() in connections:
                    del connections[connection.fileno()]
                    poller.unregister(connection)
                    with contextlib.suppress(OSError):
                        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                connection.close()
            elif fd in connections:  # the caller closed (it has gone): the serve goes too
                connection, pid = connections.pop(fd)
                poller.unregister(fd)
                done.add(fd)
                os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    serve_forever(sys.argv[1])
