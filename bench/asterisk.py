"""Builds the peer benchmark's Asterisk (:mod:`bench.peer`): Asterisk 20 with chan_sip.

    .venv/bin/python -m bench.asterisk [--source SRC] [--prefix DIR] [--jobs N]

chan_sip left Asterisk in version 21, so the peer is Asterisk 20, built here from its public
source (20.15.0 is the version the figures compare with) and installed under ``--prefix``
(default ``~/.cache/callhook-bench/asterisk-20.15.0``); it prints the binary's path. When
``PREFIX/sbin/asterisk`` is already there, says it is Asterisk 20 and has chan_sip beside it,
it is reused and nothing is built.

``--source`` is an unpacked source directory, a ``.tar.gz`` (a path, or an https URL it
downloads), or a git repository (a path, bare or not, or a URL ending in ``.git``) whose
tag 20.15.0 it takes; the default is GitHub's archive of that tag,
``https://github.com/asterisk/asterisk/archive/refs/tags/20.15.0.tar.gz``.

The recipe, in a copy of the source in ``PREFIX.build/`` (removed once installed):
``./configure --without-pjproject --prefix=PREFIX`` (again with ``--with-jansson-bundled``
when it fails for want of jansson), ``make menuselect.makeopts``, ``menuselect/menuselect
--enable chan_sip`` (off by default in 20; the default sound packages are turned off too, as
the benchmark plays the kit's own sounds and ``make install`` would download them), ``make
-j N`` (N: ``--jobs``, default the CPUs) and ``make install``: a few minutes on 2 cores.
Every step's output goes to ``PREFIX.build.log``; a step that fails ends the run with its
name, the log's path and the log's last lines.

On Debian and Ubuntu the build needs build-essential and the development packages of
libedit, jansson, libxml2, uuid, sqlite3 and OpenSSL (:data:`PACKAGES`); missing ones are
installed with ``apt-get`` when this runs as root, otherwise it says the command to run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

#: The Asterisk the peer benchmark compares with: the last major version with chan_sip.
VERSION = "20.15.0"

#: Where the source comes from unless ``--source`` says: GitHub's archive of the tag (it
#: unpacks to ``asterisk-20.15.0/``).
DEFAULT_SOURCE = f"https://github.com/asterisk/asterisk/archive/refs/tags/{VERSION}.tar.gz"

#: Where it is installed unless ``--prefix`` says.
DEFAULT_PREFIX = Path.home() / ".cache" / "callhook-bench" / f"asterisk-{VERSION}"

#: The Debian/Ubuntu packages the build needs.
PACKAGES = (
    "build-essential",
    "libedit-dev",
    "libjansson-dev",
    "libxml2-dev",
    "uuid-dev",
    "libsqlite3-dev",
    "libssl-dev",
)

#: The menuselect members that are on by default and not wanted: the sound packages that
#: ``make install`` downloads (the benchmark's dialplan plays the kit's own sounds).
UNWANTED = ("CORE-SOUNDS-EN-GSM", "MOH-OPSOUND-WAV")

#: How many of the log's last lines a failed step shows.
TAIL = 20


def build(source: str | None = None, prefix: Path | None = None, jobs: int | None = None) -> Path:
    """The binary of an Asterisk 20 with chan_sip installed under ``prefix``: the one there
    already, or one built from ``source`` and installed there. Exits saying why on failure."""
    source = source or DEFAULT_SOURCE
    prefix = (prefix or DEFAULT_PREFIX).expanduser().absolute()
    binary = prefix / "sbin" / "asterisk"
    found = installed(binary)
    if found:
        progress(f"{found} is there already: {binary}")
        return binary
    work = prefix.with_name(prefix.name + ".build")
    log = prefix.with_name(prefix.name + ".build.log")
    shutil.rmtree(work, ignore_errors=True)
    (work / "src").mkdir(parents=True)
    log.write_text(f"bench.asterisk: Asterisk {VERSION} with chan_sip from {source}\n")
    started = time.monotonic()
    progress(f"building Asterisk {VERSION} with chan_sip into {prefix} (log: {log})")
    check_packages(log)
    tree = unpack(source, work, log)
    configure = ["./configure", "--without-pjproject", f"--prefix={prefix}"]
    if run_step("configure", configure, tree, log, check=False) != 0:
        if "--with-jansson-bundled" not in tail(log):
            fail("configure", log)
        bundled = [*configure, "--with-jansson-bundled"]
        run_step("configure (with the bundled jansson)", bundled, tree, log)
    run_step("make menuselect.makeopts", ["make", "menuselect.makeopts"], tree, log)
    disable = [arg for member in UNWANTED for arg in ("--disable", member)]
    menuselect = ["menuselect/menuselect", "--enable", "chan_sip", *disable, "menuselect.makeopts"]
    run_step("menuselect: chan_sip on", menuselect, tree, log)
    jobs = jobs or os.cpu_count() or 1
    run_step(f"make -j {jobs} (the long one)", ["make", "-j", str(jobs)], tree, log)
    run_step("make install", ["make", "install"], tree, log)
    found = installed(binary)
    if not found:
        sys.exit(
            f"bench.asterisk: make install did not leave an Asterisk 20 with chan_sip at "
            f"{binary} ({version(binary) or 'it does not run'}): see {log}"
        )
    shutil.rmtree(work, ignore_errors=True)
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    progress(f"built {found} in {minutes} min {seconds} s: {binary}")
    return binary


def installed(binary: Path) -> str:
    """What ``binary -V`` says when it is an Asterisk 20 with chan_sip among the modules
    beside it (where :func:`bench.peer.find_modules` looks), else ``""``."""
    said = version(binary)
    if not said.startswith("Asterisk 20."):
        return ""
    prefix = binary.parent.parent
    return said if any(prefix.glob("lib*/asterisk/modules/chan_sip.so")) else ""


def version(binary: Path) -> str:
    """The first line ``binary -V`` prints, or ``""`` when there is none or it fails."""
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return ""
    try:
        result = subprocess.run(
            [str(binary), "-V"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0] if result.returncode == 0 and lines else ""


def check_packages(log: Path) -> None:
    """Installs the missing :data:`PACKAGES` (as root), or exits naming the command."""
    if shutil.which("dpkg-query") is None:
        progress(
            "not Debian or Ubuntu: the build needs a C compiler, make, and the development "
            "files of libedit, jansson, libxml2, uuid, sqlite3 and OpenSSL"
        )
        return
    missing = [p for p in PACKAGES if not package_installed(p)]
    if not missing:
        return
    command = ["apt-get", "install", "-y", *missing]
    if os.geteuid() != 0:
        sys.exit(f"building Asterisk needs these packages: run sudo {shlex.join(command)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if run_step(shlex.join(command), command, Path.cwd(), log, env=env, check=False) != 0:
        run_step("apt-get update", ["apt-get", "update"], Path.cwd(), log, env=env)
        run_step(shlex.join(command), command, Path.cwd(), log, env=env)


def package_installed(package: str) -> bool:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0 and result.stdout.split()[-1:] == ["installed"]


def unpack(source: str, work: Path, log: Path) -> Path:
    """The source tree to build, in ``work/src/``: unpacked, taken from git, or copied."""
    into = work / "src"
    name = f"asterisk-{VERSION}"
    path = Path(source).expanduser().absolute()
    if "://" not in source and path.exists():
        if path.is_dir() and is_source(path):
            progress(f"copying {path}")
            shutil.copytree(path, into / path.name, symlinks=True)
        elif path.is_dir() and ((path / ".git").exists() or (path / "HEAD").is_file()):
            need("git")
            git_archive(path, into, name, log)
        elif path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
            run_step(f"unpack {path}", ["tar", "-xzf", str(path), "-C", str(into)], work, log)
        else:
            sys.exit(f"bench.asterisk: {path} is not a source directory, .tar.gz or git repository")
    elif source.rstrip("/").endswith(".git"):
        need("git")
        clone = ["git", "clone", "--depth", "1", "--branch", VERSION, source, str(into / name)]
        run_step(f"git clone {source} (tag {VERSION})", clone, work, log)
    elif urllib.parse.urlsplit(source).scheme in ("http", "https"):
        tarball = work / (Path(urllib.parse.urlsplit(source).path).name or f"{name}.tar.gz")
        download(source, tarball, log)
        run_step("unpack", ["tar", "-xzf", str(tarball), "-C", str(into)], work, log)
        tarball.unlink()
    else:
        sys.exit(
            f"bench.asterisk: {source} is neither a path that exists, a git URL (.git) nor "
            "an https URL of a .tar.gz"
        )
    trees = [d for d in into.iterdir() if d.is_dir() and is_source(d)]
    if len(trees) != 1:
        sys.exit(f"bench.asterisk: no Asterisk source tree (with configure) in {source}")
    tree = trees[0]
    stated = tree / ".version"
    said = stated.read_text().strip() if stated.is_file() else ""
    if said and not said.startswith("20."):
        sys.exit(f"bench.asterisk: {source} is Asterisk {said}; the peer is 20 (with chan_sip)")
    return tree


def is_source(path: Path) -> bool:
    return (path / "configure").is_file() and (path / "main" / "asterisk.c").is_file()


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        sys.exit(f"bench.asterisk: this source needs {tool} (apt-get install {tool})")


def download(url: str, to: Path, log: Path) -> None:
    progress(f"downloading {url}")
    with log.open("a") as out:
        out.write(f"\n$ download {url} to {to}\n")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, to.open("wb") as file:
            shutil.copyfileobj(response, file, 1 << 20)
    except OSError as e:
        with log.open("a") as out:
            out.write(f"{e}\n")
        sys.exit(f"bench.asterisk: downloading {url} failed: {e}")


def git_archive(repo: Path, into: Path, name: str, log: Path) -> None:
    """Tag :data:`VERSION` of the git repository ``repo`` (bare or not), unpacked as
    ``into/name``: ``git archive | tar -x``, without a clone. Files whose content the
    repository lacks (a partial clone or mirror) are left out, and said."""
    progress(f"git archive {VERSION} of {repo}")
    ref = f"refs/tags/{VERSION}"
    absent = absent_files(repo, ref)
    if absent:
        progress(f"left out, as {repo} lacks their content: {', '.join(absent)}")
    archive = ["git", "-C", str(repo), "archive", "--format=tar", f"--prefix={name}/", ref]
    if absent:
        archive += ["--", ".", *(f":(exclude,literal){path}" for path in absent)]
    with log.open("a") as out:
        out.write(f"\n$ {shlex.join(archive)} | tar -x -C {into}\n")
        out.flush()
        git = subprocess.Popen(archive, stdout=subprocess.PIPE, stderr=out)
        assert git.stdout is not None
        untar = subprocess.run(["tar", "-x", "-C", str(into)], stdin=git.stdout, stderr=out)
        git.stdout.close()
        git.wait()
    if git.returncode or untar.returncode:
        fail(f"git archive {VERSION}", log)


def absent_files(repo: Path, ref: str) -> list[str]:
    """The paths of ``ref``'s files whose blobs are not in ``repo``."""
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "-z", ref], capture_output=True, check=False
    )
    blobs: list[tuple[bytes, bytes]] = []
    for entry in listing.stdout.split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        fields = meta.split()
        if len(fields) == 3 and fields[1] == b"blob":
            blobs.append((fields[2], path))
    if listing.returncode or not blobs:
        return []  # git archive then says what is wrong
    check = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch-check"],
        input=b"".join(sha + b"\n" for sha, _ in blobs),
        capture_output=True,
        check=False,
    )
    missing = {line.split()[0] for line in check.stdout.splitlines() if line.endswith(b" missing")}
    return [path.decode(errors="surrogateescape") for sha, path in blobs if sha in missing]


def run_step(
    name: str,
    command: list[str],
    cwd: Path,
    log: Path,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> int:
    """Runs one step of the build with its output appended to ``log``; its exit status, or
    (``check``) the end of the run with :func:`fail` when that is not 0."""
    progress(name)
    with log.open("a") as out:
        out.write(f"\n$ {shlex.join(command)}  (in {cwd})\n")
        out.flush()
        try:
            result = subprocess.run(
                command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        except OSError as e:
            out.write(f"{e}\n")
            returncode = 127
        else:
            returncode = result.returncode
    if returncode and check:
        fail(name, log)
    return returncode


def tail(log: Path, lines: int = TAIL) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def fail(name: str, log: Path) -> NoReturn:
    sys.exit(f"bench.asterisk: {name} failed: see {log}; its last lines:\n{tail(log)}")


def progress(line: str) -> None:
    print(f"bench.asterisk: {line}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--source",
        default=DEFAULT_SOURCE,
        help="source directory, .tar.gz (path or https URL) or git repository (path or .git URL)",
    )
    parser.add_argument("--prefix", type=Path, default=DEFAULT_PREFIX, help="where to install")
    parser.add_argument("--jobs", type=int, help="make -j N (default: the CPUs)")
    args = parser.parse_args()
    print(build(args.source, args.prefix, args.jobs))


if __name__ == "__main__":
    main()
