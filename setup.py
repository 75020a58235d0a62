"""The modules mypyc compiles to C, besides pyproject.toml's C extensions.

pyproject.toml's ``[tool.callhook] compiled`` names them. Each is optional, as the C
extensions are: where one does not build (no compiler), its Python runs, and
``CALLHOOK_NO_MYPYC=1`` leaves them all out.
"""

import os
import tomllib

from setuptools import setup

with open("pyproject.toml", "rb") as f:
    COMPILED: list[str] = tomllib.load(f)["tool"]["callhook"]["compiled"]


def compiled() -> list:  # type: ignore[type-arg]
    if os.environ.get("CALLHOOK_NO_MYPYC"):
        return []
    from mypyc.build import mypycify

    extensions = mypycify(COMPILED, opt_level="3", group_name="callhook")
    for extension in extensions:
        extension.optional = True
    return extensions


setup(ext_modules=compiled())
