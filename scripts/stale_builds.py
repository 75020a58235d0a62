"""Which built extensions of this checkout are older than their sources, or left over.

    python scripts/stale_builds.py      # one line each; nothing where all is built

pyproject.toml says what is built of what: its C extensions
(``[[tool.setuptools.ext-modules]]``) and the modules mypyc compiles (``[tool.callhook]
compiled``, setup.py: one shared library, ``callhook/sip__mypyc``, and an extension for
each module). A compiled module whose source changed since its build, or one no longer listed
whose extension is still in the tree, would be imported instead of its ``.py``: stale.
With ``CALLHOOK_NO_MYPYC`` set, any compiled module left in the tree is. scripts/setup
builds again what this names; tests/conftest.py stops a test run that would import it.
"""

from __future__ import annotations

import glob
import os
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def _source_of(built: Path) -> Path:
    """The ``.py`` a build of a compiled module stands for (C extensions have none)."""
    return built.with_name(built.name.split(".", 1)[0] + ".py")


def _older(built: Path, sources: list[Path]) -> bool:
    return not built.exists() or any(s.stat().st_mtime > built.stat().st_mtime for s in sources)


def stale(root: Path = ROOT) -> list[str]:
    """What to build again (a name, and why)."""
    with open(root / "pyproject.toml", "rb") as f:
        tool = tomllib.load(f)["tool"]
    out: list[str] = []
    for m in tool["setuptools"]["ext-modules"]:
        built = root / (m["name"].replace(".", "/") + SUFFIX)
        if _older(built, [root / p for p in m["sources"] + m.get("depends", [])]):
            out.append(f"{m['name']} (C extension)")
    listed = {root / p for p in tool["callhook"]["compiled"]}
    in_tree = [Path(p) for p in glob.glob(str(root / "callhook" / "**" / "*.so"), recursive=True)]
    shims = {p for p in in_tree if _source_of(p).exists()}
    library = root / "callhook" / ("sip__mypyc" + SUFFIX)
    # (An earlier layout's library, at the top: importable only from the checkout.)
    shims |= {Path(p) for p in glob.glob(str(root / "callhook__mypyc.*.so"))}
    if os.environ.get("CALLHOOK_NO_MYPYC"):
        return out + [f"{p.relative_to(root)} (compiled, left over)" for p in sorted(shims)]
    for source in sorted(listed):
        shim = source.with_name(source.stem + SUFFIX)
        if _older(shim, [source]) or _older(library, [source]):
            out.append(f"{source.relative_to(root)} (compiled with mypyc)")
    for shim in sorted(shims):
        if _source_of(shim) not in listed:
            out.append(f"{shim.relative_to(root)} (compiled, no longer listed)")
    return out


if __name__ == "__main__":
    print("\n".join(stale()))
