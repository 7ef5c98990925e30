"""Turn a source's raw text into clean, deduplicated, leak-free splits.

Order matters: deduplicate first (so one text cannot land in two splits), split
with a seeded stratified shuffle, and only then build the pretraining corpus,
from which every valid/test text is removed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..config import DataParams
from ..io import atomic_directory, write_json
from .sources import RawData

SPLITS = ("train", "valid", "test")
_WHITESPACE = re.compile(r"\s+")


class EmptySplitError(ValueError):
    """A split or the corpus came out empty: the data or the fractions need changing."""


def normalize_text(text: str) -> str:
    """One line, single spaces: tabs and newlines would break the TSV files downstream."""
    return _WHITESPACE.sub(" ", text).strip()


def dedup_key(text: str) -> str:
    return normalize_text(text).casefold()


def deduplicate_labeled(table: pd.DataFrame) -> pd.DataFrame:
    """Drop empty texts and repeats; a text seen with two different labels is dropped entirely."""
    table = table.assign(text=table["text"].map(normalize_text))
    table = table[table["text"] != ""]
    key = table["text"].map(dedup_key)
    labels_per_text = table.groupby(key)["label"].transform("nunique")
    table = table[labels_per_text == 1]
    return table[~key[table.index].duplicated()].reset_index(drop=True)


def stratified_split(labels: np.ndarray, valid_fraction: float, test_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """Indices per split; each class is shuffled and cut in the same proportions."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in SPLITS}
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_test = int(round(len(members) * test_fraction))
        n_valid = int(round(len(members) * valid_fraction))
        parts["test"].append(members[:n_test])
        parts["valid"].append(members[n_test : n_test + n_valid])
        parts["train"].append(members[n_test + n_valid :])
    return {name: np.sort(np.concatenate(chunks)) for name, chunks in parts.items()}


@dataclass
class PreparedData:
    splits: dict[str, pd.DataFrame]
    corpus_train: list[str]
    corpus_valid: list[str]
    label_names: list[str]


def prepare(raw: RawData, params: DataParams) -> PreparedData:
    labeled = deduplicate_labeled(raw.labeled)
    if params.max_examples and len(labeled) > params.max_examples:
        keep = np.random.default_rng(params.seed).choice(len(labeled), params.max_examples, replace=False)
        labeled = labeled.iloc[np.sort(keep)].reset_index(drop=True)
    indices = stratified_split(labeled["label"].to_numpy(), params.valid_fraction, params.test_fraction, params.seed)
    splits = {name: labeled.iloc[idx].reset_index(drop=True) for name, idx in indices.items()}
    for name, split in splits.items():
        if split.empty:
            raise EmptySplitError(
                f"split '{name}' is empty ({len(labeled)} labeled examples after deduplication); "
                "raise data.max_examples or adjust data.valid_fraction / data.test_fraction"
            )

    held_out = {dedup_key(text) for name in ("valid", "test") for text in splits[name]["text"]}
    corpus, corpus_keys, seen = [], [], set(held_out)
    for document in raw.corpus:
        document = normalize_text(document)
        key = dedup_key(document)
        if document and key not in seen:
            seen.add(key)
            corpus.append(document)
            corpus_keys.append(key)
    rng = np.random.default_rng(params.seed + 1)
    order = rng.permutation(len(corpus))
    if params.max_corpus_lines:
        order = order[: params.max_corpus_lines]
    n_valid = max(1, int(round(len(order) * params.corpus_valid_fraction)))
    if len(order) <= n_valid:
        raise EmptySplitError(
            f"the unlabeled corpus has {len(order)} usable lines: too few for a pretraining split; "
            "raise data.max_corpus_lines or provide more text"
        )
    corpus_valid = [corpus[i] for i in np.sort(order[:n_valid])]
    corpus_train = [corpus[i] for i in np.sort(order[n_valid:])]
    if params.add_train_to_corpus:
        # Compare against the lines actually kept: a train text equal to a line the cap dropped still joins.
        kept = held_out | {corpus_keys[i] for i in order}
        corpus_train += [t for t in splits["train"]["text"] if dedup_key(t) not in kept]
    return PreparedData(splits, corpus_train, corpus_valid, raw.label_names)


def write_prepared(data: PreparedData, out_dir: Path, source: str) -> dict:
    """Write splits as TSV, corpus as text, plus meta.json with counts; all or nothing."""
    counts = {}
    with atomic_directory(out_dir) as tmp:
        for name, split in data.splits.items():
            split.to_csv(tmp / f"{name}.tsv", sep="\t", index=False)
            counts[name] = {data.label_names[k]: int(v) for k, v in split["label"].value_counts().sort_index().items()}
        for name, lines in (("corpus_train", data.corpus_train), ("corpus_valid", data.corpus_valid)):
            (tmp / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        meta = {
            "source": source,
            "label_names": data.label_names,
            "examples": {name: len(split) for name, split in data.splits.items()},
            "examples_per_class": counts,
            "corpus_lines": {"train": len(data.corpus_train), "valid": len(data.corpus_valid)},
        }
        write_json(tmp / "meta.json", meta)
    return meta


def read_split(prepared_dir: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(prepared_dir / f"{name}.tsv", sep="\t", dtype={"text": str, "label": int}, keep_default_na=False)
