"""The label curve's subsets of the train split (`label_curve` has the curve itself).

`finetune.label_sizes` adds fine-tunes of both variants, from every pretraining run, on stratified subsets of the
train split (stages `finetune_<variant>_labels@<size>-<p>-<f>`), and TF-IDF on the same subsets. The subsets are
nested: one seeded order of the train split (`label_order`), each class spread evenly along it, and a size takes
its head; so 300 examples hold the 100, every class is in each from its first few, and both variants and TF-IDF
see the very same examples. The full split is the pipeline's own fine-tunes.

A subset is repeated to about the full split's size (`repeats_for`), so a run on 100 labels takes as many steps, and
as many validation rounds, as the full run: the same recipe, not 1/70th of its training (ULMFiT's few-label runs,
too, train to convergence rather than for a fixed number of passes).
"""

from __future__ import annotations

import numpy as np

from lmtransfer.tokens.id_files import LabeledSplit


def label_order(labels: np.ndarray, seed: int) -> np.ndarray:
    """Every index of the train split, in the order the subsets take them: each class shuffled, its i-th member
    placed at i / (its size), so any head of the order keeps the classes' shares (one of each class first)."""
    rng = np.random.default_rng(seed)
    keys = np.empty(len(labels))
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        keys[members] = np.arange(len(members)) / len(members)
    ties = rng.random(len(labels))  # classes meeting at one key come in a seeded order
    return np.lexsort((ties, keys))


def label_subset(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """The indices (sorted) of the `size` examples a label-curve run trains on."""
    if not 0 < size <= len(labels):
        raise ValueError(f"a subset of {size} examples of a split of {len(labels)}")
    return np.sort(label_order(labels, seed)[:size])


def repeats_for(full: int, size: int) -> int:
    """How many times a subset of `size` is repeated so that an epoch over it is about one over `full` examples."""
    return max(1, round(full / size))


def train_subset(train: LabeledSplit, size: int, seed: int, repeats: int = 1) -> LabeledSplit:
    """The train split's sequences a label-curve run of `size` trains on, as a split of their own: each
    `repeats` times (`repeats_for`), so its epochs are the full split's length."""
    keep = np.tile(label_subset(train.labels, size, seed), repeats)
    ids = np.concatenate([train.sequence(i) for i in keep])
    offsets = np.concatenate([[0], np.cumsum(train.lengths()[keep])]).astype(train.offsets.dtype)
    return LabeledSplit(ids, offsets, train.labels[keep])


def label_run(run: str, size: int | None) -> str:
    """`2-0-n300`: run `2-0` trained on 300 labeled examples; the full split's run keeps its plain name."""
    return run if size is None else f"{run}-n{size}"
