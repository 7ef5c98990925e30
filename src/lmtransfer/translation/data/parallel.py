"""The translation task's `data/prepared/` (train/valid/test.tsv: source<TAB>target, meta.json) and its
`data/prepared_corpus/` sibling (both languages' pretraining text, in the classification layout, so the same
tokenize and pretrain code reads it), written and read here."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pandas as pd

from lmtransfer.core.io import atomic_directory, require_file, write_json
from lmtransfer.data.prepared import CORPUS_PARTS, META, SPLITS, corpus_dir, corpus_name
from lmtransfer.translation.data.bible_en_fr import (
    EXTRA_MONOLINGUAL,
    ParallelData,
    fetch_bible_database,
    load_bible_pairs,
)
from lmtransfer.translation.data.clauses import add_clause_pairs

PAIR_COLUMNS = ["source", "target"]


def load_parallel(params) -> ParallelData:
    """`data.source` of translation/params.yaml: the built-in Bible pairs or the user's pair files."""
    if params.source == "bible-en-fr":
        data = load_bible_pairs(fetch_bible_database(), params.valid_fraction, params.test_fraction, params.seed,
                                EXTRA_MONOLINGUAL if params.extra_monolingual else ())
    else:
        from lmtransfer.translation.data.pairs import load_pair_files

        data = load_pair_files(params)
    if params.max_train_pairs and len(data.splits["train"]) > params.max_train_pairs:
        data.splits["train"] = data.splits["train"].iloc[: params.max_train_pairs].reset_index(drop=True)
    if params.clause_pairs:  # after the corpus is read: the pieces' text is already in it, whole
        # (both sources give one-line texts with single spaces: clean_verse, normalize_text)
        held_out = [text for name in ("valid", "test") for side in PAIR_COLUMNS for text in data.splits[name][side]]
        data.splits["train"], counts = add_clause_pairs(data.splits["train"], held_out)
        data.clause_pairs = counts.pop("clause_pairs_added")
        data.removed.update(counts)
    return data


def write_parallel(data: ParallelData, out_dir: Path, description: dict[str, Any]) -> dict[str, Any]:
    """The corpus, then the pairs, each folder swapped in whole or not at all; returns the pairs' meta."""
    valid = data.splits["valid"]
    parts = {"train": data.corpus, "valid": list(valid["source"]) + list(valid["target"])}
    with atomic_directory(corpus_dir(out_dir)) as tmp:
        for part in CORPUS_PARTS:
            (tmp / corpus_name(part)).write_text("".join(line + "\n" for line in parts[part]), encoding="utf-8")
        write_json(tmp / META, {"source": description["source"], "corpus_format": "text",
                                "corpus_lines": {part: len(parts[part]) for part in CORPUS_PARTS}})
    with atomic_directory(out_dir) as tmp:
        for name in SPLITS:
            data.splits[name][PAIR_COLUMNS].to_csv(tmp / f"{name}.tsv", sep="\t", index=False,
                                                   quoting=csv.QUOTE_NONE, escapechar=None)
        meta = {**description, "pairs": {name: len(data.splits[name]) for name in SPLITS},
                "corpus_lines": {part: len(parts[part]) for part in CORPUS_PARTS},
                "clause_pairs": data.clause_pairs, "removed": dict(data.removed)}
        write_json(tmp / META, meta)
    return meta


def read_pairs(directory: Path, name: str) -> pd.DataFrame:
    """One split's pairs: `source` and `target` (str)."""
    path = require_file(Path(directory) / f"{name}.tsv", f"prepared '{name}' pairs")
    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE)
