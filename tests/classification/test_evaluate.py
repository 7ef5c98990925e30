"""The evaluation report and its flat headline (what `dvc metrics show` and `dvc exp show` display)."""

import json
from pathlib import Path

import numpy as np
import pytest

from lmtransfer.classification.evaluate import SeedResult, correctness_grid, headline_metrics, report_lines
from lmtransfer.classification.metrics import confusion_matrix, macro_f1, per_class_f1

from shipped import shipped

REPO = Path(__file__).resolve().parents[2]


def _seed(pretrain_seed: int, correct: list[bool], val_accuracy: list[float]) -> SeedResult:
    accuracy = float(np.mean(correct))
    metrics = {"accuracy": accuracy, "macro_f1": accuracy - 0.01, "loss": 0.5,
               "f1_per_class": {"neg": accuracy, "pos": accuracy}}
    epochs = [{"epoch": i + 1, "val_accuracy": v, "train_loss": 0.6, "val_loss": 0.6, "train_accuracy": 0.7}
              for i, v in enumerate(val_accuracy)]
    return SeedResult(pretrain_seed, 0, metrics, np.array(correct), epochs)


@pytest.fixture
def report() -> dict:
    from lmtransfer.classification.evaluate import pretraining_report, transfer_report

    pretrained = [_seed(0, [True] * 8 + [False] * 2, [0.70, 0.80]), _seed(1, [True] * 7 + [False] * 3, [0.72, 0.78])]
    scratch = [_seed(0, [True] * 6 + [False] * 4, [0.55, 0.70]), _seed(1, [True] * 5 + [False] * 5, [0.57, 0.66])]
    baseline = {"accuracy": 0.9, "macro_f1": 0.89, "valid_accuracy": 0.88, "best_c": 4.0}
    params = shipped("evaluate", bootstrap_samples=200, seed=0)
    pretraining = pretraining_report({0: {"val_perplexity": 77.5, "steps": 500, "objective": "clm"},
                                      1: {"val_perplexity": 80.5, "steps": 500, "objective": "clm"}})
    return transfer_report(pretrained, scratch, baseline, params, pretraining)


def test_the_headline_is_flat_and_takes_its_numbers_from_the_report(report):
    headline = headline_metrics(report)
    assert list(headline) == ["pretrained", "scratch", "gap", "gap_low", "gap_high", "p_value", "head_start",
                              "baseline"]
    assert all(isinstance(value, (int, float)) for value in headline.values())  # one column each, no nesting
    assert headline["pretrained"] == pytest.approx(0.75) and headline["scratch"] == pytest.approx(0.55)
    assert headline["gap"] == pytest.approx(0.20) == report["gap"]["accuracy_mean"]
    assert headline["gap_low"] <= headline["gap"] <= headline["gap_high"]
    assert headline["p_value"] == report["gap"]["p_value"]
    assert headline["head_start"] == pytest.approx(0.71 - 0.56)
    assert headline["baseline"] == 0.9
    # the cached pretraining summaries travel in the git-tracked report: their mean on top, each run's below
    assert report["pretraining"]["val_perplexity"] == 79.0 and report["pretraining"]["objective"] == "clm"
    assert report["pretraining"]["per_seed"]["1"]["val_perplexity"] == 80.5 and report["pretraining"]["seeds"] == [0, 1]
    assert (report["n_pretraining_runs"], report["n_finetuning_seeds"], report["n_test_examples"]) == (2, 1, 10)


def test_the_printed_answer_puts_the_baseline_and_the_gaps_interval_beside_both_variants(report):
    pretrained, scratch, baseline, gap, spread = report_lines(report)
    assert pretrained.startswith("pretrained: test accuracy 0.7500 ± ")
    assert "over 2 runs (2 pretraining runs x 1 fine-tuning seed)" in pretrained
    assert scratch.startswith("   scratch: test accuracy 0.5500 ± ") and "(epoch-1 validation 0.5600)" in scratch
    assert baseline == "  baseline: test accuracy 0.9000 (TF-IDF + logistic regression)"
    low, high, p = report["gap"]["ci95_low"], report["gap"]["ci95_high"], report["gap"]["p_value"]
    assert gap == f"gap +0.2000, 95% CI [{low:+.4f}, {high:+.4f}], p = {p:.4f}"
    share = report["gap"]["share"]
    assert spread == (f"the gap's spread comes from: pretraining runs (with their one fine-tune each) "
                      f"{share['pretraining_runs']:.0%}, test examples {share['test_examples']:.0%}")


def test_runs_missing_from_the_grid_stop_the_report(report):
    runs = [_seed(0, [True, False], [0.5]), _seed(1, [True, True], [0.5]), SeedResult(0, 1, {}, np.ones(2), [])]
    with pytest.raises(ValueError, match="missing 1-1"):
        correctness_grid(runs)


def test_the_committed_headline_is_what_evaluate_writes_from_the_committed_report():
    """metrics/headline.json is derived: it agrees with metrics/evaluate.json (which holds pretrain's summary)."""
    metrics = REPO / "metrics"
    report = json.loads((metrics / "evaluate.json").read_text())
    expected = json.dumps(headline_metrics(report), indent=2) + "\n"  # as lmtransfer.core.io.write_json
    assert (metrics / "headline.json").read_text() == expected


def test_a_class_neither_in_the_labels_nor_predicted_does_not_pull_the_macro_f1_down():
    actual, predicted = np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 1, 0])
    two, three = confusion_matrix(actual, predicted, 2), confusion_matrix(actual, predicted, 3)
    assert macro_f1(three) == macro_f1(two) == pytest.approx(per_class_f1(two).mean())
    predicted_three = confusion_matrix(actual, np.array([0, 2, 1, 1, 0]), 3)  # class 2 predicted: it counts
    assert macro_f1(predicted_three) == pytest.approx(per_class_f1(predicted_three).mean())


def test_the_answer_line_the_mlflow_ui_shows_first_carries_both_variants_the_gap_and_the_baseline(report):
    from lmtransfer.classification.evaluate import answer_line

    line, gap = answer_line(report), report["gap"]
    assert "\n" not in line  # the UI shows the description's first line above the runs table
    for number in (report["pretrained"]["accuracy_mean"], report["scratch"]["accuracy_mean"],
                   report["baseline"]["accuracy"]):
        assert f"{number:.4f}" in line
    assert f"gap {gap['accuracy_mean']:+.4f} [{gap['ci95_low']:+.4f}, {gap['ci95_high']:+.4f}]" in line
