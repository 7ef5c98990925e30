"""The registry of data sources (`data.source` in params.yaml): each a function params -> RawData."""

from __future__ import annotations

from typing import Callable

from ..config import DataParams
from .files import load_files
from .movies_en import load_movies_en
from .raw import RawData
from .reviews_zh import load_reviews_zh

SOURCES: dict[str, Callable[[DataParams], RawData]] = {
    "movies-en": load_movies_en,
    "reviews-zh": load_reviews_zh,
    "files": load_files,
}


def load_source(params: DataParams) -> RawData:
    return SOURCES[params.source](params)
