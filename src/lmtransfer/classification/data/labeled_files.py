"""The user's own labeled files (`data.source: files`): `data.*` keys applied to the shared readers of `data.files`."""

from __future__ import annotations

from pathlib import Path
import pandas as pd

from lmtransfer.classification.config import DataParams
from lmtransfer.classification.data.labels import canonical_labels
from lmtransfer.classification.data.raw import RawData
from lmtransfer.data.files import (
    Column,
    Columns,
    read_pieces,
    read_table,
    refuse_blank,
    refuse_missing_labels,
    split_files,
    table_format,
)


def load_files(params: DataParams) -> RawData:
    """The user's labeled files (train, optional valid/test); `data.corpus` is read by `sources.load_source`."""
    splits, origins = {}, {}
    for name, path in split_files({name: getattr(params, name) for name in ("train", "valid", "test")}):
        splits[name], origins[name] = read_labeled(path, params, f"data.{name}"), str(path)
    splits, folded = canonical_labels(splits, origins, params.label_case)
    for line in folded:
        print(f"data: {line}")
    return RawData(splits=splits, corpus=[], labeled_pieces=params.labeled_pieces,
                   corpus_pieces=params.corpus_pieces, origins=origins)


def label_columns(params: DataParams) -> Columns:
    return {"text": Column(params.text_column, "data.text_column"),
            "label": Column(params.label_column, "data.label_column", is_label=True)}


def read_labeled(path: Path, params: DataParams, key: str) -> pd.DataFrame:
    """A labeled file as a table with `text`, `label` (both str) and `where` (line or row, for messages)."""
    fmt = table_format(path, params.format, key, also=("pieces",))
    if fmt == "pieces":
        table = read_pieces(path, params.encoding, key)
    else:
        table = read_table(path, fmt, label_columns(params), params.encoding, key)
        refuse_missing_labels(table, path, params.label_column)
    refuse_blank(table, path, key, "labeled rows")
    return table.reset_index(drop=True)
