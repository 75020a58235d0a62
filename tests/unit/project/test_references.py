"""Every pointer the docs, docstrings and comments give to a file resolves to a file of
this repository: a contributor outside reads only what is here. Markdown links of the
docs and the README; repository paths named in backquotes in docs, docstrings and
comments; and no pointer at all to the documents that stay outside (the product's
design notes and the actions' reference: the repository says it in its own words, in
docs/).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: Where the project's own words are.
TEXTS = [
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
    *sorted(ROOT.glob("tests/data/**/README.md")),
    *sorted(
        p
        for d in ("callhook", "tests", "bench", "examples", "scripts")
        for p in (ROOT / d).rglob("*.py")
    ),
    *sorted((ROOT / "callhook").rglob("*.c")),
]
#: Files outside the repository that nothing here may send a reader to.
OUTSIDE = ("DESIGN.md", "spec/actions.md", "research/sip.md")
#: A repository path as the texts name one (in backquotes, or as a Markdown link).
PATH = re.compile(
    r"(?<![\w./-])((?:callhook|tests|bench|docs|examples|scripts)/[\w./-]*\.[a-z]+)(?![\w/*-])"
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
#: A fenced code block of a Markdown text (its brackets are code, not links).
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _texts() -> list[Path]:
    return [p for p in TEXTS if p.name != Path(__file__).name and "__pycache__" not in p.parts]


@pytest.mark.parametrize("path", _texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_pointer_to_a_file_of_the_repository_resolves(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    missing = []
    for name in sorted(set(PATH.findall(text))):
        if not (ROOT / name).exists():
            missing.append(name)
    if path.suffix == ".md":
        for target in LINK.findall(FENCE.sub("", text)):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                missing.append(target)
    assert missing == [], f"{path.relative_to(ROOT)} points to what is not here: {missing}"


@pytest.mark.parametrize("path", _texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_sends_the_reader_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    found = [name for name in OUTSIDE if name in text]
    assert found == [], f"{path.relative_to(ROOT)} names {found}, which are not in the repository"
