"""The modules mypyc compiles to C, besides pyproject.toml's C extensions.

pyproject.toml's ``[tool.callhook] compiled`` names them. mypyc makes one shared library
of them (``callhook__mypyc``) and, for each, a small extension that imports it; a module
whose extension is there is imported from it, not from its ``.py``. So they are built
all or none: where mypyc cannot compile them, or the C compiler fails on any of them,
none is kept (in the source tree too, for an editable install) and their Python runs.
``CALLHOOK_NO_MYPYC=1`` builds none (and removes those an earlier build left in the
tree). They are compiled when the extensions are built (``build_ext``), not when this
file is read, which pip does several times.
"""

import contextlib
import glob
import os
import sys
import tomllib

from setuptools import setup
from setuptools.command.build_ext import build_ext

GROUP = "callhook"  # the shared library: callhook__mypyc

with open("pyproject.toml", "rb") as f:
    COMPILED: list[str] = tomllib.load(f)["tool"]["callhook"]["compiled"]


def in_tree() -> list[str]:
    """What an earlier build of the compiled modules left in the source tree: the shared
    library, and every extension under callhook/ beside a ``.py`` of its name (the C
    extensions have no such twin)."""
    found = glob.glob(f"{GROUP}__mypyc.*.so")
    for built in glob.glob("callhook/**/*.so", recursive=True):
        if os.path.exists(built.split(".", 1)[0] + ".py"):
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
            remove(in_tree())
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
            self._none(f"mypyc could not compile them ({exc!r})", [], inplace)
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
            self._none(f"they did not build ({exc!r})", extensions, inplace)
            self.extensions = c_extensions
            return
        self.extensions = c_extensions + extensions
        if inplace:  # (modules no longer compiled: their Python runs again)
            expected = {os.path.abspath(self.get_ext_fullpath(e.name)) for e in extensions}
            remove([p for p in in_tree() if os.path.abspath(p) not in expected])

    def _none(self, why: str, extensions: list, inplace: bool) -> None:  # type: ignore[type-arg]
        print(f"callhook: no module compiled with mypyc: {why}; their Python runs", file=sys.stderr)
        remove(in_tree() if inplace else [])
        built = [os.path.join(self.build_lib, self.get_ext_filename(e.name)) for e in extensions]
        remove(built)


setup(cmdclass={"build_ext": BuildExt})
