"""The registry of data sources (`data.source` in params.yaml): each a function params -> RawData.

`data.corpus`, when given, takes the place of the source's own corpus (`corpora.corpus_of`).
"""

from __future__ import annotations

from typing import Callable

from lmtransfer.classification.config import DataParams
from lmtransfer.classification.data.corpora import corpus_of
from lmtransfer.classification.data.imdb_source import load_imdb
from lmtransfer.classification.data.labeled_files import load_files
from lmtransfer.classification.data.movies_en import load_movies_en
from lmtransfer.classification.data.raw import RawData
from lmtransfer.classification.data.reviews_zh import load_reviews_zh

SOURCES: dict[str, Callable[[DataParams], RawData]] = {
    "movies-en": load_movies_en,
    "reviews-zh": load_reviews_zh,
    "imdb": load_imdb,
    "files": load_files,
}


def load_source(params: DataParams) -> RawData:
    raw = SOURCES[params.source](params)
    if params.corpus:
        raw.corpus = corpus_of(params)
    return raw
