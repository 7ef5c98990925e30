"""Written and read here only: `data/prepared/` (<split>.tsv of text<TAB>class id, meta.json) and, apart so a corpus
change reruns nothing that reads only the labels, `data/prepared_corpus/` (corpus_<part>.txt, a document a line).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pandas as pd

from lmtransfer.core.io import atomic_directory, read_json, require_file, write_json
from lmtransfer.core.paths import corpus_dir
from lmtransfer.harness.progress import progress_bar

SPLITS = ("train", "valid", "test")
CORPUS_PARTS = ("train", "valid")
META = "meta.json"


def _split_file(directory: Path, name: str) -> Path:
    return Path(directory) / f"{name}.tsv"


def corpus_name(part: str) -> str:
    return f"corpus_{part}.txt"


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
    """The (part, document) stream into `corpus_dir(out_dir)`, then the splits into `out_dir`, each folder all or
    nothing; `check_corpus(lines per part)` runs before anything is swapped in. Returns the labeled meta."""
    with atomic_directory(corpus_dir(out_dir)) as tmp, ExitStack() as files:
        lines = dict.fromkeys(CORPUS_PARTS, 0)
        handles = {part: files.enter_context(open(tmp / corpus_name(part), "w", encoding="utf-8"))
                   for part in CORPUS_PARTS}
        for part, document in progress_bar(iterable=corpus, desc="corpus", unit=" lines"):
            handles[part].write(document + "\n")
            lines[part] += 1
        check_corpus(lines)
        write_json(tmp / META, {"source": description["source"], "corpus_format": description["corpus_format"],
                                "corpus_lines": lines})
    meta = {"source": description["source"], "label_names": label_names,
            "labeled_format": description["labeled_format"],
            "examples": {name: len(split) for name, split in splits.items()}, "examples_per_class": {},
            "removed": removed}
    with atomic_directory(out_dir) as tmp:
        for name, split in splits.items():
            split.to_csv(_split_file(tmp, name), sep="\t", index=False)
            per_class = split["label"].value_counts().sort_index()
            meta["examples_per_class"][name] = {label_names[k]: int(v) for k, v in per_class.items()}
        if kept_as_given:
            meta["kept_as_given"] = kept_as_given
        write_json(tmp / META, meta)
    return meta


def read_prepared_meta(directory: Path) -> dict[str, Any]:
    return read_json(require_file(Path(directory) / META, "prepared data"))


def read_corpus_meta(directory: Path) -> dict[str, Any]:
    return read_json(require_file(corpus_dir(directory) / META, "prepared corpus"))


def read_split(directory: Path, name: str) -> pd.DataFrame:
    """One labeled split: `text` (str) and `label` (int class id)."""
    path = require_file(_split_file(directory, name), f"prepared '{name}' split")
    return pd.read_csv(path, sep="\t", dtype={"text": str, "label": int}, keep_default_na=False)


def corpus_path(directory: Path, part: str) -> Path:
    """One corpus part's file (`train` or `valid`)."""
    return require_file(corpus_dir(directory) / corpus_name(part), "pretraining corpus")


def read_corpus(directory: Path, part: str) -> Iterator[str]:
    with open(corpus_path(directory, part), encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield line.rstrip("\n")
