"""Processes forked from one that has already imported callhook's calls' modules.

A worker of ``serve --workers N`` is ``callhook serve``. Started as a new process, it
first imports the calls' stack (the action schemas, numpy, aiohttp, the SIP service):
most of the CPU its start costs, paid by every worker at the start, all at once, and
again by each one started after a crash. So the supervisor keeps a *fork server*: one process that
imports those modules once, the way ``python -m callhook`` does (collector off, then
frozen), and forks a process for each request, which runs callhook's command line with
the request's arguments, environment, folder and standard streams. Everything from the
command line on is the same code as in a new process; only the imports were done before.
The forked processes share the imported modules' memory with it, copy-on-write.

A forked process is the fork server's child, not its requester's, so the requester gets
:class:`ForkedProcess`, which stands for :class:`asyncio.subprocess.Process`: the real pid
(signals go straight to it), its output, and its exit status, which the fork server reaps
and sends back. Each forked process is a process group of its own.

Who ends what:

* the requester closes its connection to a forked process (it has gone): the fork server
  sends that process ``farewell`` (``serve``'s workers: SIGTERM, which ends their calls
  within their grace; the tests' serves: SIGKILL);
* the fork server's control socket closes, or the fork server gets SIGTERM: it sends
  ``farewell`` to every process it forked, and ends;
* the fork server itself ends otherwise (killed): what it forked goes on. The requester
  learns of each one's end from the process itself (a pidfd), without its exit status
  (:data:`UNKNOWN`), and :meth:`ForkServer.spawn` starts a new fork server.

What a forked process does not share with a new one: its command line (``ps``,
``/proc/<pid>/cmdline``) is the one a new process would have, but as one string
(setproctitle: ``python -m callhook serve ... --worker 0``); ``/proc/<pid>/environ`` and
``maps`` show the fork server's (the environment a request gives is the one Python, and
every process it starts, see); and Python's hash seed is the fork server's.

The protocol: the fork server's standard input is one end of a Unix socket pair
(``SOCK_SEQPACKET``: one message, one request). Once it has imported, it sends ``ready``
there. Each request is one JSON message (``argv``, ``env``, ``cwd``) with four
descriptors beside it: the new process's stdin, stdout and stderr, and the fork server's
end of a new connection for that process, on which it answers the pid, then, when the
process has ended, its exit code (negative: the signal that ended it), a line each. Only
the processes that hold the socket pair can ask: it has no name.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping

logger = logging.getLogger("callhook.workers")

#: The largest request (the environment is most of it).
_MAX_REQUEST = 1 << 20
#: The exit code of a process whose fork server went before it: it ended, how is unknown.
UNKNOWN = -256
#: The descriptors beside a request: stdin, stdout, stderr, the process's connection.
_FDS = 4


class ForkServerError(Exception):
    """The fork server could not be started (it said why on its standard error), or did
    not fork the process asked for."""


class _Gone(Exception):
    """The fork server has ended (or is ending)."""


class ForkedProcess:
    """A process forked by a :class:`ForkServer`, as its requester sees it: what
    :class:`asyncio.subprocess.Process` offers of a process started with its stdout on
    a pipe."""

    def __init__(
        self,
        pid: int,
        stdout: asyncio.StreamReader,
        connection: socket.socket,
        told: bytes,
    ) -> None:
        self.pid = pid
        self.stdout = stdout
        #: The exit code once it has ended (negative: a signal; :data:`UNKNOWN`).
        self.returncode: int | None = None
        self._connection = connection
        self._told = told  # (what came after the pid's line)
        loop = asyncio.get_running_loop()
        self._ended: asyncio.Future[int] = loop.create_future()
        # Its own end, in case the fork server goes before it (a pidfd: Linux 5.3).
        self._pidfd: int | None = None
        with contextlib.suppress(OSError):
            self._pidfd = os.pidfd_open(pid)
        connection.setblocking(False)
        loop.add_reader(connection.fileno(), self._on_told)
        if told.endswith(b"\n"):
            loop.call_soon(self._on_told)

    def _on_told(self) -> None:
        data = b""
        if not self._told.endswith(b"\n"):
            try:
                data = self._connection.recv(64)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            self._told += data
            if data and not self._told.endswith(b"\n"):
                return
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._connection.fileno())
        self._connection.close()
        if self._told.endswith(b"\n"):
            self._end(int(self._told))
        elif self._pidfd is None:
            self._end(UNKNOWN)  # (it had already ended)
        else:  # the fork server went: the process says when it ends
            loop.add_reader(self._pidfd, self._end, UNKNOWN)

    def _end(self, code: int) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ValueError):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self.returncode = code
        if not self._ended.done():
            self._ended.set_result(code)

    async def wait(self) -> int:
        """Its exit code, once it has ended."""
        return await asyncio.shield(self._ended)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """A fork server run by ``command`` (which ends in ``serve --fork-server``), in
    ``env``; started at the first :meth:`spawn` (or :meth:`start`), started again there
    if it has ended, stopped by :meth:`close`. ``preexec`` runs in its process before
    the command (subprocess's ``preexec_fn``)."""

    def __init__(
        self,
        command: list[str],
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self._command = command
        self._env = None if env is None else dict(env)
        self._cwd = cwd
        self._preexec = preexec
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._starting = threading.Lock()  # (two processes may be asked for at once)

    @property
    def pid(self) -> int | None:
        """The running fork server's pid."""
        process = self._process
        return None if process is None or process.poll() is not None else process.pid

    def start(self) -> socket.socket:
        """The control socket of a running fork server: this one's, or a new one's (which
        takes a second or so to import: it blocks)."""
        with self._starting:
            process, control = self._process, self._control
            if process is not None and control is not None and process.poll() is None:
                return control
            if process is not None:
                code = process.wait()
                how = f"signal {-code}" if code < 0 else f"exit status {code}"
                logger.error(
                    "the workers' fork server (pid %d) ended with %s; starting another "
                    "(the workers it forked go on)",
                    process.pid,
                    how,
                )
                self._drop()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._process = subprocess.Popen(
                    self._command,
                    stdin=theirs.fileno(),
                    env=self._env,
                    cwd=self._cwd,
                    preexec_fn=self._preexec,
                )
            finally:
                theirs.close()
            self._control = ours
            ready = ours.recv(64)  # (it imports first: a second or so)
            if ready != b"ready":
                code = self._process.wait()
                self._drop()
                raise ForkServerError(f"the workers' fork server did not start (status {code})")
            return ours

    async def spawn(
        self,
        argv: list[str],
        env: Mapping[str, str],
        cwd: str,
        *,
        stderr: int | None = None,
    ) -> ForkedProcess:
        """A process running ``callhook <argv>`` in ``env`` and ``cwd``, its stdin
        /dev/null, its stdout on a pipe (:attr:`ForkedProcess.stdout`), its stderr the
        descriptor ``stderr`` (the same pipe when None). A fork server found ending is
        started again for it, once."""
        for attempt in (1, 2):
            control = await asyncio.to_thread(self.start)
            try:
                return await self._spawn(control, argv, env, cwd, stderr)
            except _Gone:
                if attempt == 2:
                    raise ForkServerError("the workers' fork server ended at the request") from None
                await asyncio.to_thread(self._ended, control)
        raise AssertionError("unreachable")

    async def _spawn(
        self,
        control: socket.socket,
        argv: list[str],
        env: Mapping[str, str],
        cwd: str,
        stderr: int | None,
    ) -> ForkedProcess:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        read_end, write_end = os.pipe()
        loop = asyncio.get_running_loop()
        try:
            request = json.dumps({"argv": argv, "env": dict(env), "cwd": cwd}).encode()
            with open(os.devnull, "rb") as stdin:
                err = write_end if stderr is None else stderr
                fds = array.array("i", [stdin.fileno(), write_end, err, theirs.fileno()])
                try:
                    control.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                except (BrokenPipeError, ConnectionError):
                    raise _Gone from None
            theirs.close()
            ours.setblocking(False)
            told = b""
            while b"\n" not in told:
                chunk = await loop.sock_recv(ours, 64)
                if not chunk:
                    if await asyncio.to_thread(self._gone, control):  # (it waits up to 0.1 s)
                        raise _Gone
                    raise ForkServerError("the workers' fork server refused the request")
                told += chunk
        except BaseException:
            ours.close()
            os.close(read_end)
            raise
        finally:
            theirs.close()
            os.close(write_end)
        pid, _, rest = told.partition(b"\n")
        reader = asyncio.StreamReader(limit=1 << 20)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb", 0)
        )
        return ForkedProcess(int(pid), reader, ours, rest)

    def _gone(self, control: socket.socket) -> bool:
        """Whether the fork server of ``control`` has ended (its end of it is closed)."""
        with contextlib.suppress(OSError):
            return select.select([control], [], [], 0.1)[0] != [] and not control.recv(
                1, socket.MSG_PEEK | socket.MSG_DONTWAIT
            )
        return True

    def _ended(self, control: socket.socket) -> None:
        """Wait for the fork server of ``control``, found ending, to have ended (killed
        if it does not within 5 s), so that :meth:`start` starts another."""
        with self._starting:
            process = self._process
            if self._control is not control or process is None:
                return  # (another request has started a new one already)
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the fork server: it sends its farewell to what it forked, and ends."""
        process = self._process
        if self._control is not None:
            self._control.close()  # (at its end of the pair: the farewell, then its end)
        if process is not None:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._drop()

    def _drop(self) -> None:
        if self._control is not None:
            self._control.close()
        self._process = self._control = None


# The fork server itself -----------------------------------------------------------


class _Request:
    """What a requester asks for: ``callhook <argv>`` in ``env`` and ``cwd``."""

    def __init__(self, text: bytes) -> None:
        fields = json.loads(text)
        self.argv = [str(a) for a in fields["argv"]]
        self.env = {str(k): str(v) for k, v in fields["env"].items()}
        self.cwd = str(fields["cwd"])


class _Farewell(Exception):
    """SIGTERM to the fork server."""


def _on_sigterm(signum: int, frame: object) -> None:
    # Once: a requester that dies sends both SIGTERM (the kernel's, its death signal) and
    # its end of the control socket, and the farewell must not be cut short by a second.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Farewell


def _received(control: socket.socket) -> tuple[bytes, list[int]]:
    """One message and the descriptors beside it (empty at the requester's end)."""
    data, ancillary, _, _ = control.recvmsg(_MAX_REQUEST, socket.CMSG_SPACE(_FDS * 4))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _become(
    request: _Request,
    fds: list[int],
    inherited: list[int],
    run: Callable[[list[str]], int],
    title: Callable[[str], None],
) -> None:
    """In the forked child: run ``callhook <argv>`` as asked, and never return."""
    code = 1
    try:
        title(" ".join([*_command(), *request.argv]))
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.setpgid(0, 0)  # (its supervisor stops what it started as a group)
        for fd in inherited:  # (the control socket, the other processes' connections)
            os.close(fd)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        try:
            os.chdir(request.cwd)
        except OSError as exc:  # (its requester's folder, gone since)
            print(f"callhook: cannot run in {request.cwd}: {exc.strerror}", file=sys.stderr)
            return
        os.environ.clear()  # (in place: what took os.environ keeps seeing it)
        os.environ.update(request.env)
        sys.argv = [sys.argv[0], *request.argv]
        code = run(request.argv)
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


def _command() -> list[str]:
    """How a new process would have been started: this one's command line up to
    ``serve --fork-server``."""
    argv = sys.orig_argv
    return argv[: argv.index("serve")] if "serve" in argv else [sys.executable, "-m", "callhook"]


def serve_forever(run: Callable[[list[str]], int], farewell: signal.Signals) -> int:
    """Be the fork server on standard input (the control socket), its modules imported:
    fork a process running ``run(argv)`` for each request, until the control socket
    closes or SIGTERM; then ``farewell`` to every process still running."""
    from setproctitle import setproctitle

    control = socket.socket(fileno=os.dup(0))
    with open(os.devnull, "rb") as null:
        os.dup2(null.fileno(), 0)
    signal.signal(signal.SIGTERM, _on_sigterm)
    poller = select.poll()
    poller.register(control, select.POLLIN)
    connections: dict[int, tuple[socket.socket, int]] = {}  # its fd -> (it, its process)
    forked: dict[int, tuple[int, socket.socket]] = {}  # a pidfd -> (the pid, connection)
    control.sendall(b"ready")
    try:
        while True:
            # (an fd closed while a batch is handled may be reused by a later request:
            # its later events in the batch are the old file's)
            done: set[int] = set()
            for fd, _ in poller.poll():
                if fd in done:
                    continue
                if fd == control.fileno():
                    message, fds = _received(control)
                    if not message:  # the requester has gone, or is done
                        for fd_ in fds:
                            os.close(fd_)
                        return 0  # (after the farewell)
                    _fork(message, fds, control, connections, forked, poller, run, setproctitle)
                elif fd in forked:  # a process ended: its status to its requester
                    pid, connection = forked.pop(fd)
                    poller.unregister(fd)
                    os.close(fd)
                    done.update((fd, connection.fileno()))
                    _, status = os.waitpid(pid, 0)
                    if connection.fileno() in connections:
                        del connections[connection.fileno()]
                        poller.unregister(connection)
                        with contextlib.suppress(OSError):
                            code = os.waitstatus_to_exitcode(status)
                            connection.sendall(f"{code}\n".encode())
                    connection.close()
                elif fd in connections:  # the requester closed it: the process goes too
                    connection, pid = connections.pop(fd)
                    poller.unregister(fd)
                    done.add(fd)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, farewell)
    except _Farewell:
        pass
    finally:
        # The farewell is now: a SIGTERM after it (the requester's death signal, which may
        # come as this interpreter exits) has nothing to add, and raised in an atexit hook
        # it would print a traceback. (One just before: its handler ignores the next.)
        with contextlib.suppress(_Farewell):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _farewell(forked, farewell)
    return 0


def _farewell(forked: dict[int, tuple[int, socket.socket]], farewell: signal.Signals) -> None:
    """``farewell`` to every process still running (again and again: harmless)."""
    for pid, _ in forked.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, farewell)


def _fork(
    message: bytes,
    fds: list[int],
    control: socket.socket,
    connections: dict[int, tuple[socket.socket, int]],
    forked: dict[int, tuple[int, socket.socket]],
    poller: select.poll,
    run: Callable[[list[str]], int],
    title: Callable[[str], None],
) -> None:
    """Fork the process a request asks for, and follow it."""
    if len(fds) != _FDS:
        for fd in fds:
            os.close(fd)
        print(f"fork server: a request came with {len(fds)} descriptors", file=sys.stderr)
        return
    connection = socket.socket(fileno=fds[3])
    try:
        request = _Request(message)
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        print(f"fork server: a request is not one: {exc}", file=sys.stderr)
        for fd in fds[:3]:
            os.close(fd)
        connection.close()
        return
    inherited = [control.fileno(), *connections, *forked]
    # (SIGTERM waits until the child has its own handler, and the parent follows it)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        pid = os.fork()
        if pid == 0:
            _become(request, fds, inherited, run, title)
        for fd in fds[:3]:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        forked[pidfd] = (pid, connection)
        connections[connection.fileno()] = (connection, pid)
        poller.register(pidfd, select.POLLIN)
        poller.register(connection, select.POLLIN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    with contextlib.suppress(OSError):
        connection.sendall(f"{pid}\n".encode())
