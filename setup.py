"""The modules mypyc compiles to C, besides pyproject.toml's C extensions.

pyproject.toml's ``[tool.callhook] compiled`` names them. mypyc makes one shared library
of them (``callhook/sip__mypyc``, inside the package so that an editable install finds
it) and, for each, a small extension that imports it; a module whose extension is there
is imported from it, not from its ``.py``. So they are built all or none: where mypyc
cannot compile them, or the C compiler fails on any of them, none is kept (neither in
the build directory, whose whole tree a wheel takes, nor in the source tree of an
editable install) and their Python runs. ``CALLHOOK_NO_MYPYC=1`` builds none (and removes
what an earlier build left). They are compiled when the extensions are built
(``build_ext``), not when this file is read, which pip does several times.
"""

import contextlib
import glob
import os
import sys
import tomllib

from setuptools import setup
from setuptools.command.build_ext import build_ext

GROUP = "callhook.sip"  # the shared library: callhook/sip__mypyc

with open("pyproject.toml", "rb") as f:
    COMPILED: list[str] = tomllib.load(f)["tool"]["callhook"]["compiled"]


def compiled_in(base: str) -> list[str]:
    """What a build of the compiled modules put under ``base`` (the source tree, or the
    build directory): the shared library (and the one an earlier layout left at the top),
    and every extension under callhook/ whose module is a ``.py`` of the source tree
    (the C extensions have no such twin)."""
    found = glob.glob(os.path.join(base, "callhook__mypyc.*.so"))
    found += glob.glob(os.path.join(base, "callhook", "**", "*__mypyc.*.so"), recursive=True)
    for built in glob.glob(os.path.join(base, "callhook", "**", "*.so"), recursive=True):
        module = os.path.relpath(built, base).split(".", 1)[0]
        if os.path.exists(module + ".py"):
            found.append(built)
    return found


def remove(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


class BuildExt(build_ext):
    """pyproject.toml's C extensions as setuptools builds them, then the compiled modules,
    all or none (see the module docstring)."""

    def run(self) -> None:
        compiler = self.compiler  # (a name: run() replaces it with the compiler it made)
        inplace = self.inplace  # (run() clears it while it builds: a failure leaves it so)
        super().run()
        if os.environ.get("CALLHOOK_NO_MYPYC"):
            self._none("CALLHOOK_NO_MYPYC is set", inplace)
            return
        try:
            from mypyc.build import mypycify

            # The modules they import are type-checked, their errors not reported, and the
            # project's mypy settings not read: a build has only its own requirements, not
            # every package callhook imports.
            extensions = mypycify(
                ["--config-file=", "--follow-imports=silent", *COMPILED],
                opt_level="3",
                group_name=GROUP,
            )
        except (Exception, SystemExit) as exc:  # (mypyc exits on a type error)
            self._none(f"mypyc could not compile them ({exc!r})", inplace)
            return
        for extension in extensions:  # (what finalize_options did for the others)
            extension._full_name = self.get_ext_fullname(extension.name)
            extension._links_to_dynamic = extension._needs_stub = False
            extension._file_name = self.get_ext_filename(extension._full_name)
            self.ext_map[extension._full_name] = extension
        c_extensions = self.extensions
        self.extensions = extensions
        self.compiler = compiler
        try:
            super().run()
        except Exception as exc:
            self.inplace = inplace
            self.extensions = c_extensions
            self._none(f"they did not build ({exc!r})", inplace)
            return
        self.extensions = c_extensions + extensions
        # Modules no longer compiled (their Python runs again), an older layout's library.
        names = {self.get_ext_filename(e.name) for e in extensions}
        for base in [self.build_lib, "."] if inplace else [self.build_lib]:
            remove([p for p in compiled_in(base) if os.path.relpath(p, base) not in names])

    def _none(self, why: str, inplace: bool) -> None:
        print(f"callhook: no module compiled with mypyc: {why}; their Python runs", file=sys.stderr)
        remove(compiled_in(self.build_lib) + (compiled_in(".") if inplace else []))


setup(cmdclass={"build_ext": BuildExt})
