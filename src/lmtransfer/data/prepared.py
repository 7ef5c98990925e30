"""The `data/prepared/` folder, written and read here only.

    train.tsv valid.tsv test.tsv       text<TAB>label (class id), one example per row
    corpus_train.txt corpus_valid.txt  the pretraining corpus, one document per line
    meta.json                          source, label names, formats, counts, what was removed
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pandas as pd

from ..io import atomic_directory, read_json, require_file, write_json
from ..progress import progress_bar

SPLITS = ("train", "valid", "test")
CORPUS_PARTS = ("train", "valid")
META = "meta.json"


def _split_file(directory: Path, name: str) -> Path:
    return Path(directory) / f"{name}.tsv"


def _corpus_file(directory: Path, part: str) -> Path:
    return Path(directory) / f"corpus_{part}.txt"


def write_prepared_dir(
    out_dir: Path,
    splits: dict[str, pd.DataFrame],
    label_names: list[str],
    corpus: Iterable[tuple[str, str]],
    description: dict[str, Any],
    removed: dict[str, int],
    check_corpus: Callable[[dict[str, int]], None] = lambda lines: None,
) -> dict[str, Any]:
    """Splits as TSV, the (part, document) stream as text, then meta.json with the counts; all or nothing.

    `description` holds source and formats; `check_corpus(lines)` runs on the per-part line counts
    before anything is swapped in.
    """
    counts = {}
    with atomic_directory(out_dir) as tmp:
        for name, split in splits.items():
            split.to_csv(_split_file(tmp, name), sep="\t", index=False)
            per_class = split["label"].value_counts().sort_index()
            counts[name] = {label_names[k]: int(v) for k, v in per_class.items()}
        lines = {part: 0 for part in CORPUS_PARTS}
        handles = {part: open(_corpus_file(tmp, part), "w", encoding="utf-8") for part in CORPUS_PARTS}
        try:
            for part, document in progress_bar(iterable=corpus, desc="corpus", unit=" lines"):
                handles[part].write(document + "\n")
                lines[part] += 1
        finally:
            for handle in handles.values():
                handle.close()
        check_corpus(lines)
        meta = {
            "source": description["source"],
            "label_names": label_names,
            "labeled_format": description["labeled_format"],
            "corpus_format": description["corpus_format"],
            "examples": {name: len(split) for name, split in splits.items()},
            "examples_per_class": counts,
            "corpus_lines": lines,
            "removed": removed,
        }
        write_json(tmp / META, meta)
    return meta


def read_prepared_meta(directory: Path) -> dict[str, Any]:
    return read_json(require_file(Path(directory) / META, "prepared data"))


def read_split(directory: Path, name: str) -> pd.DataFrame:
    """One labeled split: `text` (str) and `label` (int class id)."""
    path = require_file(_split_file(directory, name), f"prepared '{name}' split")
    return pd.read_csv(path, sep="\t", dtype={"text": str, "label": int}, keep_default_na=False)


def read_corpus(directory: Path, part: str) -> Iterator[str]:
    """The documents of one corpus part (`train` or `valid`), streamed."""
    with open(require_file(_corpus_file(directory, part), "pretraining corpus"), encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield line.rstrip("\n")


def corpus_path(directory: Path, part: str) -> Path:
    """The corpus file itself, for tools that read a file (sentencepiece training)."""
    return require_file(_corpus_file(directory, part), "pretraining corpus")
