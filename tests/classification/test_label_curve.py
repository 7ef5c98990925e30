"""The label curve: subsets stratified, nested, every class first, a function of labels and seed; the curve's rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmtransfer.classification.data.prepare import LabeledData
from lmtransfer.classification.evaluate import baseline_at_size, curve_rows
from lmtransfer.classification.inputs import check_label_sizes
from lmtransfer.classification.label_curve import label_order, label_run, label_subset, repeats_for, train_subset
from lmtransfer.core.errors import ConfigError
from lmtransfer.tokens.id_files import LabeledSplit

from shipped import shipped, shipped_params

LABELS = np.array([0] * 600 + [1] * 300 + [2] * 100)[np.random.default_rng(5).permutation(1000)]


def test_a_subset_keeps_each_class_share_holds_every_class_first_is_nested_and_drawn_again_with_another_seed():
    for size in (3, 10, 100, 500):
        counts = np.bincount(LABELS[label_subset(LABELS, size, seed=0)], minlength=3)
        assert counts.sum() == size and (counts >= 1).all()
        assert np.abs(counts - size * np.array([0.6, 0.3, 0.1])).max() <= 1.5
    assert sorted(LABELS[label_order(LABELS, 0)[:3]]) == [0, 1, 2]
    small, large = set(label_subset(LABELS, 100, 0)), set(label_subset(LABELS, 300, 0))
    assert small < large
    assert set(label_subset(LABELS, 100, 1)) != small
    assert (label_subset(LABELS, 100, 0) == label_subset(LABELS.copy(), 100, 0)).all()  # a function of labels, seed


def test_the_train_subset_holds_the_chosen_sequences_with_their_labels_repeated_to_the_full_splits_length():
    lengths = np.arange(1, 11)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = np.concatenate([np.full(n, i) for i, n in enumerate(lengths)])
    split = LabeledSplit(ids, offsets, np.array([0, 1] * 5))
    subset = train_subset(split, 4, seed=0)
    chosen = label_subset(split.labels, 4, 0)
    assert len(subset) == 4 and (subset.labels == split.labels[chosen]).all()
    for position, index in enumerate(chosen):
        assert (subset.sequence(position) == index).all() and len(subset.sequence(position)) == lengths[index]
    assert label_run("2-0", 300) == "2-0-n300" and label_run("2-0", None) == "2-0"
    # repeated so that its runs take as many steps as the full split's
    assert repeats_for(7397, 100) == 74 and repeats_for(7397, 3000) == 2 and repeats_for(10, 10) == 1
    assert repeats_for(100, 300) == 1  # never fewer than once
    split = LabeledSplit(np.arange(10), np.arange(11), np.array([0, 1] * 5))
    once, thrice = train_subset(split, 4, seed=0), train_subset(split, 4, seed=0, repeats=3)
    assert len(thrice) == 12 and (thrice.labels == np.tile(once.labels, 3)).all()
    assert all((thrice.sequence(i + 4 * r) == once.sequence(i)).all() for i in range(4) for r in range(3))


def test_tfidf_at_a_size_trains_on_that_subset_alone():
    texts = {name: [f"{'good fine' if i % 2 else 'bad poor'} text {i}" for i in range(n)]
             for name, n in (("train", 60), ("valid", 20), ("test", 20))}
    labels = {name: np.array([i % 2 for i in range(len(texts[name]))]) for name in texts}
    result = baseline_at_size(texts, labels, 6, 0, shipped("baseline", c_values=[1.0]))
    assert result["accuracy"] == 1.0 and result["best_c"] == 1.0
    flipped = {**labels, "train": 1 - labels["train"]}  # the subset's labels are the ones it learns
    assert baseline_at_size(texts, flipped, 6, 0, shipped("baseline", c_values=[1.0]))["accuracy"] == 0.0


def test_the_curve_has_a_row_per_size_then_the_full_split():
    def report(pretrained, scratch, n_train):
        return {"gap": {"accuracy_mean": pretrained - scratch, "ci95_low": -0.1, "ci95_high": 0.2, "p_value": 0.3},
                "pretrained": {"accuracy_mean": pretrained, "accuracy_std": 0.01},
                "scratch": {"accuracy_mean": scratch, "accuracy_std": 0.02}, "baseline": {"accuracy": 0.5},
                "n_train": n_train}
    rows = curve_rows({"100": report(0.7, 0.6, 100), "all": report(0.8, 0.79, 7397)})
    assert [(row["labels"], row["n_train"]) for row in rows] == [("100", 100), ("all", 7397)]
    assert rows[0]["gap"] == pytest.approx(0.1) and rows[0]["scratch_std"] == 0.02


def test_label_sizes_are_distinct_at_least_two_and_validate_refuses_one_not_a_true_subset_holding_every_class():
    assert shipped("finetune", label_sizes=[100, 300]).label_sizes == [100, 300]
    for bad in ([100, 100], [1]):
        with pytest.raises(ValueError, match="finetune.label_sizes must be distinct"):
            shipped("finetune", label_sizes=bad)
    labeled = LabeledData({"train": pd.DataFrame({"text": list("abcdef"), "label": [0, 1, 2] * 2})},
                          ["neg", "neutral", "pos"], {})

    def sizes(label_sizes):
        return shipped_params().model_copy(update={"finetune": shipped("finetune", label_sizes=label_sizes)})

    check_label_sizes(sizes([3, 5]), labeled)
    for size in (2, 6):
        with pytest.raises(ConfigError, match=f"finetune.label_sizes: {size} labeled examples, but a subset of the "
                                              r"train split \(6 examples, 3 classes\) has from 3"):
            check_label_sizes(sizes([size]), labeled)
