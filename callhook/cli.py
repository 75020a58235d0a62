"""The ``callhook`` command and its subcommands (``callhook --help`` lists them all)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import logging
import sys
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from callhook import __version__
from callhook.config.settings import (
    RECOGNISERS,
    AppConfig,
    ConfigError,
    Settings,
    data_secret,
    load,
)
from callhook.redact import Redacting, redact
from callhook.serving.launch import host_port

if TYPE_CHECKING:
    from callhook.events import StartRecording


def run_loop(coro: Coroutine[Any, Any, int]) -> int:
    """Run ``coro`` on uvloop when it is installed (the cheaper loop for the media tick), else
    on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _settings(args: argparse.Namespace) -> Settings:
    settings = load(Path(args.config)) if getattr(args, "config", None) else Settings()
    if getattr(args, "data_dir", None):
        settings.data_dir = Path(args.data_dir)
    if getattr(args, "page_timeout", None):
        settings.page_timeout = args.page_timeout
    if getattr(args, "voice", None):
        settings.speech.voice = args.voice
    if getattr(args, "recogniser", None):
        settings.speech.recogniser = args.recogniser
    return settings


# --- validate / schema -----------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    """Check an action list (a page response) and print every problem: a file's, standard
    input's, or what a page's URL answers (requested as a call's first page is)."""
    from callhook.devtools.validating import validate

    return validate(args.file, args.secret, lambda: _settings(args))


def cmd_schema(args: argparse.Namespace) -> int:
    from callhook.devtools.validating import schema

    return schema()


# --- call -------------------------------------------------------------------------------


async def _terminal_call(args: argparse.Namespace, settings: Settings) -> int:
    from callhook.app import build_services
    from callhook.devtools.terminal import Keyboard, TerminalLeg, log_printer
    from callhook.ports import CallInfo

    services = build_services(settings)
    services.start_notifier()
    try:
        if args.url:
            app = AppConfig(
                name="cli",
                first_page=args.url,
                secret=args.secret or services.secret,
                error_page=args.error_page,
                final_page=args.final_page,
                application_parameters=args.parameters,
            )
            services.trust_app_hosts(app)  # named on the command line: the operator's own
        else:
            await services.start_web("127.0.0.1", 0)
            app = services.demo_app()
        out = sys.stdout
        out.write(
            f"callhook {__version__} terminal phone — calling {redact(app.first_page)}\n"
            "Press keys 0-9 * # to send them. Type  say <words>  to speak (your words are\n"
            "spoken by the TTS voice to the speech recogniser, as on a real call),\n"
            "keys <ABCD> for the A-D keys, hangup to hang up.\n\n"
        )
        info = CallInfo(
            call_id=f"terminal-{id(out):x}",
            direction="in",
            call_from="sip:terminal@127.0.0.1",
            call_to=f"sip:{app.name}@127.0.0.1",
            call_target=app.name,
        )

        def save(command: StartRecording, seconds: float) -> float:
            # The terminal has no microphone: the file holds silence for the recording's length.
            return services.record_silence(app, command, seconds)

        leg = TerminalLeg(
            out,
            info=info,
            timer=services.prompt_timer(app),
            save_recording=save,
            speech=services.speech,
        )
        keyboard = Keyboard(leg)
        with keyboard.attached():
            summary = await services.run_call(app, leg, [log_printer(leg)])
        out.write(
            f"\ncall ended: {summary.cause}; {len(summary.pages)} page request(s); "
            f"log: {services.store.path(app.name, 'logs')}/\n"
        )
        return 0 if summary.cause in ("completed", "hung_up") else 1
    finally:
        await services.close()


def cmd_test(args: argparse.Namespace) -> int:
    """Run call flows against applications (callhook/devtools/tester.py)."""
    from callhook.app import ASSEMBLY
    from callhook.config.settings import Serve
    from callhook.devtools.tester import serve_secret, test_command

    junit = Path(args.junit) if args.junit else None
    settings = _settings(args)
    serve = None
    if args.sip:
        http_host, http_port = host_port(
            args.http or f"{settings.http.host}:{settings.http.port}", 8080
        )
        where = f"[{http_host}]" if ":" in http_host else http_host
        secret = serve_secret(settings.data_dir)
        if secret is None:
            return 2
        serve = Serve(host_port(args.sip, 5060), f"http://{where}:{http_port}", secret)
    flows = [Path(f) for f in args.flows]
    if (
        serve is None
        and settings.data_dir == Settings().data_dir
        and not settings.data_dir.exists()
    ):
        # In-process, with no data directory of serve's here: the calls' recordings and
        # logs are the run's own, and nothing is left in the user's folder.
        with tempfile.TemporaryDirectory(prefix="callhook-test-") as scratch:
            settings.data_dir = Path(scratch)
            return run_loop(
                test_command(flows, settings, junit, serve=None, jobs=args.jobs, assembly=ASSEMBLY)
            )
    return run_loop(
        test_command(flows, settings, junit, serve=serve, jobs=args.jobs, assembly=ASSEMBLY)
    )


def cmd_call(args: argparse.Namespace) -> int:
    """Call an application from the terminal (the built-in demo when no URL is given)."""
    return run_loop(_terminal_call(args, _settings(args)))


# --- serve / dial -----------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve applications (on embedded defaults: the built-in demo)."""
    from callhook.serving.launch import launch, supervised

    if args.fork_server:
        return _fork_server(args.fork_server)
    settings = _settings(args)
    start = launch(args, settings)
    if start.supervises(args):  # (Kamailio and the workers: none of the calls' modules)
        return run_loop(supervised(args, settings, start))
    from callhook.serving.collector import frozen_imports

    with frozen_imports():  # (the calls' modules: many objects, kept for good)
        from callhook.app import ASSEMBLY
        from callhook.serving.serve import serve

    return run_loop(serve(args, settings, ASSEMBLY, start))


def _fork_server(farewell: str) -> int:
    """``serve --fork-server``: import what a worker does, then fork a ``callhook`` run for
    each request of the supervisor (or of a test), and end with it."""
    import signal

    from callhook.serving.collector import frozen_imports
    from callhook.serving.forkserver import serve_forever

    with frozen_imports():
        import callhook.app
        import callhook.serving.serve  # noqa: F401
    return serve_forever(main, signal.Signals[f"SIG{farewell}"])


async def _dial(args: argparse.Namespace, settings: Settings) -> int:
    from callhook.app import build_services, build_sip_service
    from callhook.dialplan.trunks import RouteError
    from callhook.serving.serve import apply_app_flags
    from callhook.sip.agent import Credentials

    services = build_services(settings)
    services.start_notifier()
    try:
        if args.app_url:
            apply_app_flags(args, services)
            app = settings.apps["default"]
        else:
            await services.start_web("127.0.0.1", 0)
            app = services.demo_app()
        host, port = host_port(args.sip, 0)
        sip = build_sip_service(services, host, port)
        await sip.start(register=False, listen=False)
        try:
            route = sip.trunks.route(args.target, args.trunk)
            sip.admission.admit(args.target, app, args.trunk)
        except RouteError as exc:
            raise ConfigError(str(exc)) from None
        if args.username:
            route = dataclasses.replace(
                route, credentials=Credentials(args.username, args.password or "")
            )
        via = f" through trunk {route.trunk}" if route.trunk else ""
        print(f"calling {route.uri}{via} from udp {sip.address}:{sip.port} ...", flush=True)
        summary = await sip.dialler.dial(
            route.uri, app, route=route, ring_timeout=args.ring_timeout
        )
        await sip.shutdown(0)
        pages = len(summary.pages)
        print(f"call ended: {summary.cause} ({summary.raw_cause}); {pages} page request(s)")
        return 0 if summary.cause in ("completed", "hung_up") else 1
    finally:
        await services.close()


def cmd_dial(args: argparse.Namespace) -> int:
    """Place a call and run an application on it when it is answered."""
    return run_loop(_dial(args, _settings(args)))


# --- main -------------------------------------------------------------------------------


def _app_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--app-url", "--app", help="the application's first page (default: the built-in demo)"
    )
    p.add_argument("--error-page", help="the application's error page URL")
    p.add_argument("--final-page", help="the application's final page URL")
    p.add_argument("--secret", help="the secret page requests are signed with")
    p.add_argument("--parameters", default="", help="application_parameters to send")
    p.add_argument("--page-timeout", type=float, help="seconds to wait for a page (default 10)")
    _speech_flags(p)


def _speech_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", help="default TTS voice, engine:voice (default piper:joe)")
    p.add_argument(
        "--recogniser",
        choices=RECOGNISERS,
        help="speech recogniser (default whisper; none: get_input takes digits only)",
    )


def cmd_remote(args: argparse.Namespace) -> int:
    """Print a running ``serve``'s ``GET /api/<command>`` as a table: its trunks and their
    state, the SIP sources it banned, or the phones registered with it."""
    from callhook.serving.remote import show

    settings = _settings(args)
    host, port = host_port(args.http or f"{settings.http.host}:{settings.http.port}", 8080)
    return show(args.command, host, port, data_secret(settings.data_dir))


def cmd_sweep(args: argparse.Namespace) -> int:
    """Delete now what is past its retention (``[retention]``), as ``serve`` does every
    hour; ``--dry-run`` only says what it would delete."""
    import time

    from callhook.store.database import Database
    from callhook.store.files import MediaStore
    from callhook.store.retention import Sweeper

    settings = _settings(args)
    if settings.database.url is not None:
        from callhook.store.postgres import connect

        db: Database = connect(settings.database.url)
    else:
        db = Database(settings.data_dir / "state.sqlite3")

    try:
        store = MediaStore(settings.data_dir / "media")
        swept = Sweeper(store, db, settings.retention_of).sweep(time.time(), dry_run=args.dry_run)
    finally:
        db.close()
    verb = "would delete" if args.dry_run else "deleted"
    for app, kinds in sorted(swept.deleted.items()):
        for kind, count in sorted(kinds.items()):
            print(f"{app}: {verb} {count} {kind.replace('_', ' ')}")
    if not swept.deleted:
        print("nothing is past its retention")
    return 0


def cmd_decrypt(args: argparse.Namespace) -> int:
    """Decrypt an ``aescbc`` recording (as ``openssl enc -d`` does, with its sizes fixed)."""
    import os

    from callhook.media import wav
    from callhook.store import crypto

    key_hex = args.key or os.environ.get("CALLHOOK_KEY", "")
    iv_hex = args.iv or os.environ.get("CALLHOOK_IV", "")
    if not key_hex or not iv_hex:
        print("callhook decrypt: give the key and IV (--key/--iv or CALLHOOK_KEY/CALLHOOK_IV)",
              file=sys.stderr)  # fmt: skip
        return 2
    source = Path(args.file)
    # In the current directory by default: never beside the recording, where the
    # plaintext would join the application's namespace (and its REST API listing).
    output = Path(args.output) if args.output else Path(f"{source.stem}.decrypted.wav")
    try:
        key = crypto.Key.from_hex(key_hex, iv_hex)
        plain = crypto.decrypt_wav(source.read_bytes(), key)
    except (OSError, ValueError) as exc:  # DecryptionError is a ValueError
        print(f"callhook decrypt: {source}: {exc}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.buffer.write(plain)
        return 0
    temp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        # Readable by its owner only: it is what the encryption protected.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(plain)
        temp.replace(output)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        print(f"callhook decrypt: {output}: {exc}", file=sys.stderr)
        return 1
    print(f"{output}: {wav.read_info(plain).seconds:.1f} s", file=sys.stderr)
    return 0


def cmd_voices(args: argparse.Namespace) -> int:
    """List the installed text-to-speech voices (values for tts_voice): the embedded
    engines', and with ``--config`` its remote and plug-in engines' too."""
    from callhook.edge.speechworkers import build_synthesiser

    settings = _settings(args)
    remote = tuple(settings.speech.engines.values())
    synthesiser = build_synthesiser(settings.speech.voice, remote)
    if synthesiser is None:
        print("no text-to-speech engine is installed", file=sys.stderr)
        return 1
    print(f"default: {synthesiser.default.label}")
    for name in synthesiser.voice_names():
        print(name)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="callhook", description=__doc__)
    p.add_argument("--version", action="version", version=f"callhook {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log more (to stderr)")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="serve applications (the demo app on embedded defaults)")
    s.add_argument("--config", help="TOML config file (see docs/configuration.md)")
    s.add_argument("--data-dir", help="where recordings, logs and state live (default ./data)")
    s.add_argument("--http", help="HOST:PORT of the web server (default 127.0.0.1:8080)")
    s.add_argument("--sip", help="HOST:PORT to take SIP calls on (default 0.0.0.0:5060)")
    s.add_argument("--rtp-ports", help="FIRST-LAST port range for RTP (default 20000-29999)")
    s.add_argument("--max-calls", type=int, help="calls at once; more get 503 (default 500)")
    s.add_argument(
        "--workers",
        type=int,
        help="processes behind Kamailio (default: one per core, when Kamailio is installed)",
    )
    s.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # the supervisor's children
    # (where the supervisor forks its workers from: serving/forkserver.py)
    s.add_argument("--fork-server", choices=("TERM", "KILL"), help=argparse.SUPPRESS)
    s.add_argument(
        "--shutdown-grace", type=float, help="seconds calls may go on after SIGTERM (default 30)"
    )
    s.add_argument(
        "--api-key",
        help="REST API key of the --app-url application, or of the demo "
        "(default: the installation secret, <data_dir>/secret)",
    )
    _app_flags(s)
    s.set_defaults(func=cmd_serve)

    d = sub.add_parser("dial", help="call a SIP URI and run an application on the call")
    d.add_argument(
        "target", help="who to call: a SIP URI (sip:alice@192.0.2.10), or a number with --trunk"
    )
    d.add_argument("--trunk", help="the [trunks.NAME] to call through (a number or a URI)")
    d.add_argument("--sip", default="0.0.0.0:0", help="local HOST:PORT for SIP (default: any)")
    d.add_argument("--username", help="user name for digest authentication (401/407)")
    d.add_argument("--password", help="password for digest authentication")
    d.add_argument("--ring-timeout", type=float, default=60.0, help="seconds to let it ring")
    d.add_argument("--config", help="TOML config file")
    d.add_argument("--data-dir", help="where recordings and logs go (default ./data)")
    _app_flags(d)
    d.set_defaults(func=cmd_dial)

    c = sub.add_parser("call", help="call an application from this terminal (no phone needed)")
    c.add_argument("url", nargs="?", help="the application's first page (default: the demo)")
    c.add_argument("--error-page", help="the application's error page URL")
    c.add_argument("--final-page", help="the application's final page URL")
    c.add_argument("--secret", help="the secret page requests are signed with")
    c.add_argument("--parameters", default="", help="application_parameters to send")
    c.add_argument("--page-timeout", type=float, help="seconds to wait for a page (default 10)")
    c.add_argument("--data-dir", help="where recordings and logs go (default ./data)")
    c.add_argument("--config", help="TOML config file")
    _speech_flags(c)
    c.set_defaults(func=cmd_call)

    t = sub.add_parser("test", help="run call flows (FLOW.yaml) against applications, for CI")
    t.add_argument("flows", nargs="+", help="flow files (YAML): docs/testing.md")
    t.add_argument("--junit", help="also write the outcomes as JUnit XML to this file")
    t.add_argument(
        "--data-dir",
        help="where recordings and logs go (default ./data when it exists, serve's files"
        " to play, else a temporary directory, removed after); with --sip, serve's: its"
        " installation secret reads the calls' logs",
    )
    t.add_argument("--config", help="TOML config file (speech engines, page timeout)")
    t.add_argument(
        "--sip",
        metavar="HOST:PORT",
        help="call a running serve there over real SIP and RTP instead of running in-process",
    )
    t.add_argument("--http", help="with --sip: serve's web server, HOST:PORT (default 8080)")
    t.add_argument(
        "--jobs", type=int, default=1, help="with --sip: calls at once (default 1, one by one)"
    )
    _speech_flags(t)
    t.set_defaults(func=cmd_test)

    tr = sub.add_parser("trunks", help="show the trunks of a running serve and their state")
    tr.add_argument("--http", help="HOST:PORT of serve's web server (default from the config)")
    tr.add_argument("--config", help="TOML config file")
    tr.add_argument("--data-dir", help="serve's data directory (for the installation secret)")
    tr.set_defaults(func=cmd_remote)

    ba = sub.add_parser("bans", help="show the SIP sources a running serve has banned")
    ba.add_argument("--http", help="HOST:PORT of serve's web server (default from the config)")
    ba.add_argument("--config", help="TOML config file")
    ba.add_argument("--data-dir", help="serve's data directory (for the installation secret)")
    ba.set_defaults(func=cmd_remote)

    us = sub.add_parser("users", help="show the phones registered with a running serve")
    us.add_argument("--http", help="HOST:PORT of serve's web server (default from the config)")
    us.add_argument("--config", help="TOML config file")
    us.add_argument("--data-dir", help="serve's data directory (for the installation secret)")
    us.set_defaults(func=cmd_remote)

    sw = sub.add_parser("sweep", help="delete what is past its retention ([retention]) now")
    sw.add_argument("--config", help="TOML config file")
    sw.add_argument("--data-dir", help="the data directory")
    sw.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    sw.set_defaults(func=cmd_sweep)

    de = sub.add_parser("decrypt", help="decrypt an encrypted (aescbc) recording to a WAV file")
    de.add_argument("file", help="the encrypted recording")
    de.add_argument("-o", "--output", help="where to write the WAV (- for stdout)")
    de.add_argument("--key", help="the key, hex (better: CALLHOOK_KEY, kept out of ps)")
    de.add_argument("--iv", help="the initialisation vector, hex (or CALLHOOK_IV)")
    de.set_defaults(func=cmd_decrypt)

    vo = sub.add_parser("voices", help="list the installed TTS voices (values for tts_voice)")
    vo.add_argument("--config", help="TOML config file: its remote and plug-in engines' voices")
    vo.set_defaults(func=cmd_voices)

    v = sub.add_parser("validate", help="check an action list (a page response) for errors")
    v.add_argument(
        "file",
        help="a JSON file, - for standard input, or a page's http(s) URL (requested as a"
        " call's first page, signed with --secret)",
    )
    v.add_argument("--secret", help="with a URL: the secret the application checks")
    v.add_argument("--config", help="TOML config file (which recogniser: its languages)")
    v.set_defaults(func=cmd_validate)

    sc = sub.add_parser("schema", help="print the JSON Schema of a page response")
    sc.set_defaults(func=cmd_schema)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # serve --workers: the workers'
    level = logging.DEBUG if args.verbose else logging.WARNING
    if args.command in ("serve", "dial") and not args.verbose:
        level = logging.INFO
    # (force: a process forked by serve --fork-server runs main again, for its own command)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(Redacting())  # no password of a URL in the server log
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"callhook: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # (a full disk, a folder it may not write: the cause, one line)
        if args.verbose:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        data_dir = getattr(args, "data_dir", None)
        if not where and exc.errno in (errno.ENOSPC, errno.EDQUOT) and data_dir:
            where = f" (data directory {data_dir})"  # (a write names no file)
        print(f"callhook: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
