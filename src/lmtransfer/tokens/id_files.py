"""The id arrays, written and read here only: `data/tokenized/` (<split>.npz of flat ids, offsets n+1 and labels,
translation's <split>_pairs.npz, the tokenizer, meta.json) and `data/tokenized_corpus/` (corpus_<part>.npy, read
by pretraining alone, so a corpus change reruns no fine-tune). No torch, pandas or tokenizer import here.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lmtransfer.core.errors import EmptySplitError
from lmtransfer.core.io import read_json, require_file, write_json
from lmtransfer.core.paths import corpus_dir

META = "meta.json"


def _corpus_file(directory: Path, part: str) -> Path:
    return Path(directory) / f"corpus_{part}.npy"


def _split_file(directory: Path, name: str) -> Path:
    return Path(directory) / f"{name}.npz"


def _pair_file(directory: Path, name: str) -> Path:
    return Path(directory) / f"{name}_pairs.npz"


@dataclass
class PairSplit:
    """A split's sentence pairs, as views into flat arrays."""

    source_ids: np.ndarray
    source_offsets: np.ndarray
    target_ids: np.ndarray
    target_offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.source_offsets) - 1

    def source(self, index: int) -> np.ndarray:
        return self.source_ids[self.source_offsets[index]: self.source_offsets[index + 1]]

    def target(self, index: int) -> np.ndarray:
        return self.target_ids[self.target_offsets[index]: self.target_offsets[index + 1]]

    def source_lengths(self) -> np.ndarray:
        return np.diff(self.source_offsets)

    def target_lengths(self) -> np.ndarray:
        return np.diff(self.target_offsets)


@dataclass(eq=False)
class LabeledSplit:
    """Token sequences of one labeled split, as views into one flat array."""

    ids: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def sequence(self, index: int) -> np.ndarray:
        return self.ids[self.offsets[index] : self.offsets[index + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def text_stream(self, eos_id: int) -> np.ndarray:
        """The texts alone, each closed by EOS and concatenated, as the pretraining corpus is: labels unused."""
        return np.insert(self.ids, self.offsets[1:], eos_id).astype(self.ids.dtype, copy=False)


def write_corpus_part(directory: Path, part: str, chunks: Iterable[np.ndarray], dtype: np.dtype) -> int:
    """Stream id chunks into the .npy `np.save` would write; returns the token count. The count is known only at
    the end: a headerless file first, then copied behind the header (not memory-mapped: resident memory)."""
    path = _corpus_file(directory, part)
    raw, total = path.with_suffix(".raw"), 0
    with open(raw, "wb") as handle:
        for chunk in chunks:
            chunk.astype(dtype, copy=False).tofile(handle)
            total += chunk.size
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (total,)}
    with open(path, "wb") as target, open(raw, "rb") as source:
        np.lib.format.write_array_header_1_0(target, header)
        shutil.copyfileobj(source, target, 1 << 22)
    raw.unlink()
    return total


def write_labeled_split(directory: Path, name: str, split: LabeledSplit) -> None:
    np.savez(_split_file(directory, name), ids=split.ids, offsets=split.offsets, labels=split.labels)


def write_pair_split(directory: Path, name: str, split: PairSplit) -> None:
    np.savez(_pair_file(directory, name), source_ids=split.source_ids, source_offsets=split.source_offsets,
             target_ids=split.target_ids, target_offsets=split.target_offsets)


def write_tokenized_meta(directory: Path, meta: dict[str, Any]) -> None:
    write_json(Path(directory) / META, meta)


def read_tokenized_meta(directory: Path) -> dict[str, Any]:
    return read_json(require_file(Path(directory) / META, "tokenized data"))


def load_corpus(directory: Path, part: str) -> np.ndarray:
    """One corpus part of the tokenized folder `directory`'s `_corpus` sibling, memory-mapped."""
    return np.load(require_file(_corpus_file(corpus_dir(directory), part), "tokenized corpus"), mmap_mode="r")


def load_labeled_split(directory: Path, name: str) -> LabeledSplit:
    path = require_file(_split_file(directory, name), f"tokenized '{name}' split")
    with np.load(path) as data:
        split = LabeledSplit(data["ids"], data["offsets"], data["labels"])
    if len(split) == 0:
        raise EmptySplitError(f"{path}: the '{name}' split is empty (rerun prepare and tokenize)")
    return split


def load_pair_split(directory: Path, name: str) -> PairSplit:
    path = require_file(_pair_file(directory, name), f"tokenized '{name}' pairs")
    with np.load(path) as data:
        split = PairSplit(data["source_ids"], data["source_offsets"], data["target_ids"], data["target_offsets"])
    if len(split) == 0:
        raise EmptySplitError(f"{path}: the '{name}' split has no pairs (rerun prepare and tokenize)")
    return split
