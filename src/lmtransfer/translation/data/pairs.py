"""The user's own sentence pairs (CSV, TSV, JSONL, Parquet), read by the shared table reader (one message naming the
file, the line and the key), split by classification's rules: whitespace normalised, repeated train pairs dropped,
missing valid/test carved from train (test first), every train text shared with valid or test dropped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lmtransfer.core.errors import ConfigError, DataSourceError, EmptySplitError
from lmtransfer.data.files import (
    Column,
    CorpusFiles,
    expand_corpus,
    read_table,
    refuse_blank,
    split_files,
    table_format,
)
from lmtransfer.data.input_files import resolve_input
from lmtransfer.data.normalize import normalize_text
from lmtransfer.translation.config import TranslationDataParams
from lmtransfer.translation.data.bible_en_fr import ParallelData

HELD_OUT = ("test", "valid")  # the order splits are carved in


def read_pairs(path: Path, key: str, fmt: str, source_column: str, target_column: str,
               encoding: str) -> pd.DataFrame:
    """A pair file as `source`, `target` (str, as written) and `where` (line or row, for later messages)."""
    if source_column == target_column:
        raise ConfigError(f"data.source_column and data.target_column are both {source_column!r}: "
                          "a pair needs two columns")
    columns = {"source": Column(source_column, "data.source_column"),
               "target": Column(target_column, "data.target_column")}
    try:
        table = read_table(path, table_format(path, fmt, key), columns, encoding, key)
        refuse_blank(table, path, key, "sentence pairs")
    except DataSourceError as exc:  # some shared messages (bad quoting, not JSON, a missing column) name no key
        if f" {key})" in str(exc):  # "(set by data.train)", "(read because of data.train)"
            raise
        raise DataSourceError(f"{exc} (set by {key})") from None
    return table


def load_pair_files(params: TranslationDataParams) -> ParallelData:
    """Train/valid/test pairs and the corpus from the user's files, as `data.*` names them; `removed` counts what
    left train and the corpus."""
    train = params.train
    read = {name: read_pairs(path, f"data.{name}", params.format, params.source_column, params.target_column,
                             params.encoding)
            for name, path in split_files({"train": train, "valid": params.valid, "test": params.test})}
    read = {name: pd.DataFrame({side: table[side].map(normalize_text) for side in ("source", "target")})
            for name, table in read.items()}
    pool = read["train"].drop_duplicates(ignore_index=True)
    removed = {"duplicates_train": len(read["train"]) - len(pool)}
    fractions = {"valid": params.valid_fraction, "test": params.test_fraction}
    carve = {name: fractions[name] for name in HELD_OUT if name not in read}
    splits = {**{name: read[name] for name in HELD_OUT if name in read}, **carve_pairs(pool, carve, params.seed)}
    for name, fraction in carve.items():
        if splits[name].empty:
            raise EmptySplitError(
                f"split '{name}' is empty: data.{name}_fraction {fraction} of the {len(pool)} distinct pairs of "
                f"data.train ({train}) is less than one pair; raise it, give more pairs, or give data.{name} a file"
            )
    carved_out = len(pool) - len(splits["train"])
    held_out = {text for name in HELD_OUT for side in ("source", "target") for text in splits[name][side]}
    shared = splits["train"]["source"].isin(held_out) | splits["train"]["target"].isin(held_out)
    removed["train_pairs_also_in_valid_or_test"] = int(shared.sum())
    splits["train"] = splits["train"][~shared].reset_index(drop=True)
    if splits["train"].empty:
        raise EmptySplitError(
            f"split 'train' is empty: of the {len(pool)} distinct pairs of data.train ({train}), {carved_out} were "
            f"carved out as valid/test and {int(shared.sum())} share a text with valid/test; give more pairs or "
            "lower data.valid_fraction / data.test_fraction"
        )
    lines = [normalize_text(line) for line in CorpusFiles(expand_corpus(params.corpus), params.encoding)]
    kept = [line for line in lines if line not in held_out]
    removed["corpus_lines_also_in_valid_or_test"] = len(lines) - len(kept)
    return ParallelData(splits={name: splits[name] for name in ("train", "valid", "test")},
                        corpus=list(splits["train"]["source"]) + list(splits["train"]["target"]) + kept,
                        removed=removed)


def carve_pairs(pool: pd.DataFrame, fractions: dict[str, float], seed: int) -> dict[str, pd.DataFrame]:
    """`train` and each split of `fractions` (test first, then valid) cut from `pool` at random, seeded; each part
    keeps the file's order."""
    order = np.random.default_rng(seed).permutation(len(pool))
    parts, start = {}, 0
    for name in HELD_OUT:
        if name in fractions:
            count = round(len(pool) * fractions[name])
            parts[name], start = order[start:start + count], start + count
    parts["train"] = order[start:]
    return {name: pool.iloc[np.sort(rows)].reset_index(drop=True) for name, rows in parts.items()}


def read_lab_sentences(path: str) -> tuple[list[str], list[str]]:
    """`evaluate.lab_sentences` (a TSV with `source` and `target`, relative to translation/) as (sources,
    references); none for ''. Read by evaluate, checked by prepare first."""
    if not path:
        return [], []
    pairs = read_pairs(resolve_input(path, "evaluate.lab_sentences"), "evaluate.lab_sentences", "tsv", "source",
                       "target", "utf-8")
    return list(pairs["source"]), list(pairs["target"])
