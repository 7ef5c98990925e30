"""Where pretraining pays (ULMFiT's figure 3): test accuracy per number of labeled examples. The subsets are nested
heads of one seeded, class-balanced order of the train split, the same for both variants and TF-IDF; each is
repeated to about the full split's size, so it trains as many steps as the full run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmtransfer.tokens.id_files import LabeledSplit

LABEL_CURVE = Path("metrics/evaluate/label_curve.tsv")  # evaluate's: test accuracy per number of labeled examples


def label_order(labels: np.ndarray, seed: int) -> np.ndarray:
    """Every index in the order the subsets take them: each class shuffled, its i-th member at i / (its size)."""
    rng = np.random.default_rng(seed)
    keys = np.empty(len(labels))
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        keys[members] = np.arange(len(members)) / len(members)
    ties = rng.random(len(labels))  # classes meeting at one key come in a seeded order
    return np.lexsort((ties, keys))


def label_subset(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    if not 0 < size <= len(labels):
        raise ValueError(f"a subset of {size} examples of a split of {len(labels)}")
    return np.sort(label_order(labels, seed)[:size])


def repeats_for(full: int, size: int) -> int:
    return max(1, round(full / size))


def train_subset(train: LabeledSplit, size: int, seed: int, repeats: int = 1) -> LabeledSplit:
    """The sequences a label-curve run of `size` trains on, each `repeats` times, as a split of their own."""
    keep = np.tile(label_subset(train.labels, size, seed), repeats)
    ids = np.concatenate([train.sequence(i) for i in keep])
    offsets = np.concatenate([[0], np.cumsum(train.lengths()[keep])]).astype(train.offsets.dtype)
    return LabeledSplit(ids, offsets, train.labels[keep])


def label_run(run: str, size: int | None) -> str:
    """`2-0-n300`: run `2-0` trained on 300 labeled examples; the full split's run keeps its plain name."""
    return run if size is None else f"{run}-n{size}"
