"""The `data/prepared/` folder and its sibling `data/prepared_corpus/`, written and read here only.

    data/prepared/         the labeled task: what fine-tuning and the baseline read
        train.tsv valid.tsv test.tsv   text<TAB>label (class id), one example per row
        meta.json                      source, label names, format, counts, what was removed or kept as given
    data/prepared_corpus/  the unlabeled pretraining corpus: only tokenize (and so pretraining) reads it
        corpus_train.txt corpus_valid.txt  one document per line
        meta.json                          format, line counts

Two folders, so a corpus change leaves the labeled folder byte-identical and DVC reruns
nothing that reads only the labeled data. The corpus folder is always the labeled
folder's sibling named `<name>_corpus` (`corpus_dir`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from lmtransfer.core.io import atomic_directory, read_json, require_file, write_json
from lmtransfer.harness.progress import progress_bar

SPLITS = ("train", "valid", "test")
CORPUS_PARTS = ("train", "valid")
META = "meta.json"


def _split_file(directory: Path, name: str) -> Path:
    return Path(directory) / f"{name}.tsv"


def corpus_dir(directory: Path) -> Path:
    """Where the corpus of the labeled folder `directory` lives: `data/prepared` -> `data/prepared_corpus`."""
    directory = Path(directory)
    return directory.with_name(f"{directory.name}_corpus")


def corpus_name(part: str) -> str:
    return f"corpus_{part}.txt"


def _corpus_file(directory: Path, part: str) -> Path:
    return corpus_dir(directory) / corpus_name(part)


def write_prepared_dir(
    out_dir: Path,
    splits: dict[str, pd.DataFrame],
    label_names: list[str],
    corpus: Iterable[tuple[str, str]],
    description: dict[str, Any],
    removed: dict[str, int],
    check_corpus: Callable[[dict[str, int]], None] = lambda lines: None,
    kept_as_given: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """The corpus stream into `corpus_dir(out_dir)`, then the splits as TSV into `out_dir`; each folder all or nothing.

    `description` holds source and formats; `check_corpus(lines)` runs on the per-part line counts
    before anything is swapped in. Returns the labeled folder's meta (its meta.json).
    """
    with atomic_directory(corpus_dir(out_dir)) as tmp:
        lines = {part: 0 for part in CORPUS_PARTS}
        handles = {part: open(tmp / corpus_name(part), "w", encoding="utf-8") for part in CORPUS_PARTS}
        try:
            for part, document in progress_bar(iterable=corpus, desc="corpus", unit=" lines"):
                handles[part].write(document + "\n")
                lines[part] += 1
        finally:
            for handle in handles.values():
                handle.close()
        check_corpus(lines)
        write_json(tmp / META, {"source": description["source"], "corpus_format": description["corpus_format"],
                                "corpus_lines": lines})
    counts = {}
    with atomic_directory(out_dir) as tmp:
        for name, split in splits.items():
            split.to_csv(_split_file(tmp, name), sep="\t", index=False)
            per_class = split["label"].value_counts().sort_index()
            counts[name] = {label_names[k]: int(v) for k, v in per_class.items()}
        meta = {
            "source": description["source"],
            "label_names": label_names,
            "labeled_format": description["labeled_format"],
            "examples": {name: len(split) for name, split in splits.items()},
            "examples_per_class": counts,
            "removed": removed,
        }
        if kept_as_given:
            meta["kept_as_given"] = kept_as_given
        write_json(tmp / META, meta)
    return meta


def read_prepared_meta(directory: Path) -> dict[str, Any]:
    return read_json(require_file(Path(directory) / META, "prepared data"))


def read_corpus_meta(directory: Path) -> dict[str, Any]:
    """The corpus folder's meta (format, line counts) for the labeled folder `directory`."""
    return read_json(require_file(corpus_dir(directory) / META, "prepared corpus"))


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
