"""The data sources (`data.source`): each a function params -> RawData. A source knows where its text lives and
how to read it; `prepare` cleans and splits. `data.corpus`, when given, takes the place of the source's corpus."""

from __future__ import annotations

import itertools
import math
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lmtransfer.classification.config import NAMED_CORPORA, DataParams
from lmtransfer.classification.data.imdb_release import ACL_IMDB_V1, ReviewLines, imdb_reviews
from lmtransfer.classification.data.movies_en import load_movies_en
from lmtransfer.classification.data.raw import RawData
from lmtransfer.classification.data.reviews_zh import load_reviews_zh
from lmtransfer.core.errors import DataSourceError
from lmtransfer.data.files import (
    Column,
    CorpusFiles,
    as_number,
    expand_corpus,
    read_pieces,
    read_table,
    refuse_blank,
    refuse_missing_labels,
    split_files,
    table_format,
)

IMDB_LABELS = ["negative", "positive"]
IMDB_CORPUS_FOLDERS = ("train/unsup", "train/pos", "train/neg")  # never test/: IMDb's test reviews stay unseen


# --- imdb: the Large Movie Review Dataset, its published 25,000 train / 25,000 test reviews ---------------------

def _imdb_split(kept: Path, split: str) -> pd.DataFrame:
    """A published split: its negative reviews, then its positive ones, each in the release's file order."""
    tables = []
    for label in IMDB_LABELS:
        texts = list(ReviewLines([kept / ACL_IMDB_V1.folder(f"{split}/{label[:3]}").kept_as]))
        tables.append(pd.DataFrame({"text": texts, "label": [label] * len(texts)}))
    return pd.concat(tables, ignore_index=True)


def load_imdb(params: DataParams) -> RawData:
    kept = imdb_reviews(params.imdb_from)
    return RawData(
        splits={"train": _imdb_split(kept, "train"), "test": _imdb_split(kept, "test")},
        corpus=ReviewLines([kept / ACL_IMDB_V1.folder("train/unsup").kept_as]),
        label_names=IMDB_LABELS,
        origins={"train": "IMDb's train/pos and train/neg", "test": "IMDb's test/pos and test/neg"},
        archive_sha256=ACL_IMDB_V1.digest,
    )


def imdb_corpus(params: DataParams) -> ReviewLines:
    """The 75,000 reviews of IMDb's train and unlabeled folders, as the release orders them."""
    kept = imdb_reviews(params.imdb_from)
    return ReviewLines([kept / ACL_IMDB_V1.folder(name).kept_as for name in IMDB_CORPUS_FOLDERS])


# --- files: the user's own labeled files -------------------------------------------------------------------------

def load_files(params: DataParams) -> RawData:
    """The user's labeled files (train, optional valid/test); `data.corpus` is read by `load_source`."""
    splits, origins = {}, {}
    for name, path in split_files({name: getattr(params, name) for name in ("train", "valid", "test")}):
        splits[name], origins[name] = read_labeled(path, params, f"data.{name}"), str(path)
    splits, folded = canonical_labels(splits, origins, params.label_case)
    for line in folded:
        print(f"data: {line}")
    return RawData(splits=splits, corpus=[], labeled_pieces=params.labeled_pieces,
                   corpus_pieces=params.corpus_pieces, origins=origins)


def read_labeled(path: Path, params: DataParams, key: str) -> pd.DataFrame:
    """A labeled file as a table with `text`, `label` (both str) and `where` (line or row, for messages)."""
    fmt = table_format(path, params.format, key, also=("pieces",))
    if fmt == "pieces":
        table = read_pieces(path, params.encoding, key)
    else:
        columns = {"text": Column(params.text_column, "data.text_column"),
                   "label": Column(params.label_column, "data.label_column", is_label=True)}
        table = read_table(path, fmt, columns, params.encoding, key)
        refuse_missing_labels(table, path, params.label_column)
    refuse_blank(table, path, key, "labeled rows")
    return table.reset_index(drop=True)


# Labels spelled more than one way for one class are made one class, or refused in one line, never two classes.
# All-numeric labels compare as numbers (`1`, `1.0`, `01` are `1`), booleans as booleans (beside numbers, `true` is
# 1 and `false` 0); names differing only in case or Unicode form stop, unless `data.label_case: fold`.
BOOLEANS = {"true": "1", "false": "0"}


def canonical_labels(splits: dict[str, pd.DataFrame], origins: dict[str, str],
                     label_case: str = "strict") -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The splits with one spelling per class, and a line per folded spelling (for the log). Spaces around a label
    are dropped first (`' pos'` is the class `'pos'`), and said like every other fold."""
    padded = [label for label in dict.fromkeys(pd.concat([t["label"] for t in splits.values()])) if label != label.strip()]
    if padded:
        splits = {name: table.assign(label=table["label"].str.strip()) for name, table in splits.items()}
    labels = pd.concat([table["label"] for table in splits.values()], ignore_index=True)
    spellings = list(dict.fromkeys(labels))
    if all(label.casefold() in BOOLEANS for label in spellings):
        mapping = {label: label.casefold() for label in spellings}
    elif all(label.casefold() in BOOLEANS or _number(label) is not None for label in spellings):
        mapping = {label: _number(BOOLEANS.get(label.casefold(), label)) for label in spellings}
    else:
        mapping = _fold_names(splits, origins, labels, label_case)
    folded = [f"label {label!r} is the class {mapping[label.strip()]!r}" for label in padded]
    folded += [f"label {label!r} is the class {name!r}" for label, name in mapping.items() if label != name]
    if not folded:
        return splits, []
    return {name: table.assign(label=table["label"].map(mapping)) for name, table in splits.items()}, folded


def _number(label: str) -> str | None:
    """The class name of a numeric label (`1.0` -> `1`, `0.50` -> `0.5`), or None when it is not a number."""
    value = as_number(label)
    if value is None or not math.isfinite(value):
        return None
    return str(int(value)) if value.is_integer() else repr(value)


def _fold_names(splits: dict[str, pd.DataFrame], origins: dict[str, str], labels: pd.Series,
                label_case: str) -> dict[str, str]:
    """Names that differ only in case or Unicode form: the most frequent spelling (`fold`), or an error."""
    counts = Counter(labels)
    groups: dict[str, list[str]] = {}
    for label in counts:
        groups.setdefault(unicodedata.normalize("NFKC", label).casefold(), []).append(label)
    mapping = {label: label for label in counts}
    for group in groups.values():
        if len(group) == 1:
            continue
        if label_case != "fold":
            first, second = group[:2]
            raise DataSourceError(
                f"labels {first!r} ({_first_place(first, splits, origins)}) and {second!r} "
                f"({_first_place(second, splits, origins)}) differ only in case or Unicode form, so they would be "
                "two classes; fix the file, or set data.label_case: fold to make them one class"
            )
        name = max(group, key=lambda label: counts[label])  # ties: the first seen
        mapping.update({label: name for label in group})
    return mapping


def _first_place(label: str, splits: dict[str, pd.DataFrame], origins: dict[str, str]) -> str:
    for name, table in splits.items():
        rows = table.index[table["label"] == label]
        if len(rows):
            return f"{origins.get(name, name)}, {table.loc[rows[0], 'where']}"
    raise ValueError(label)


# --- the registry, and data.corpus -------------------------------------------------------------------------------

SOURCES: dict[str, Callable[[DataParams], RawData]] = {
    "movies-en": load_movies_en,
    "reviews-zh": load_reviews_zh,
    "imdb": load_imdb,
    "files": load_files,
}


@dataclass
class Corpus:
    """A re-iterable chain of the corpora `data.corpus` names, in its order; `paths`: its files (for the manifest)."""

    parts: list[Iterable[str]]
    paths: list[Path] = field(default_factory=list)
    named: list[str] = field(default_factory=list)  # the pinned corpora (NAMED_CORPORA) among them

    def __iter__(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self.parts)


def load_source(params: DataParams) -> RawData:
    """The source's data; every entry of `data.corpus` (a named corpus fetched and checked, files and globs
    expanded, each checked) in place of its corpus."""
    raw = SOURCES[params.source](params)
    if params.corpus:
        raw.corpus = corpus = Corpus([])
        for entry in params.corpus:
            if entry in NAMED_CORPORA:  # imdb-reviews, the one named corpus
                corpus.parts.append(imdb_corpus(params))
                corpus.named.append(entry)
            else:
                files = expand_corpus([entry])
                corpus.paths += files
                corpus.parts.append(CorpusFiles(files, params.encoding))
    return raw
