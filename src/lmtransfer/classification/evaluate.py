"""Test-set evaluation: every fine-tuned run of both variants, their spread, and the transfer gap with a 95%
interval and p-value resampling pretraining runs, fine-tuning seeds and test examples together (one run's gap can
be noise), each source's share of the spread, beside the TF-IDF baseline."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lmtransfer.classification.config import EvaluateParams
from lmtransfer.classification.inference import predict
from lmtransfer.classification.metrics import accuracy, confusion_matrix, macro_f1, per_class_f1
from lmtransfer.core.paths import VARIANTS, finetune_run
from lmtransfer.modeling.checkpoint import build_classifier
from lmtransfer.reporting.statistics import gap_uncertainty, summarize
from lmtransfer.tokens.id_files import LabeledSplit


@dataclass
class SeedResult:
    """One fine-tuned model (pretraining run, fine-tuning seed) on the test split, and its fine-tuning history."""

    pretrain_seed: int
    seed: int
    metrics: dict
    correct: np.ndarray  # bool per test example
    epochs: list[dict[str, float]]  # epoch, train/val loss and accuracy

    @property
    def run(self) -> str:
        return finetune_run(self.seed, self.pretrain_seed)

    @property
    def val_accuracy_per_epoch(self) -> list[float]:
        return [row["val_accuracy"] for row in self.epochs]


def evaluate_classifier(
    payload: dict, test: LabeledSplit, batch_size: int, device: torch.device
) -> tuple[dict, np.ndarray]:
    model = build_classifier(payload)  # `predict` moves it to `device`
    probabilities, loss = predict(model, test, batch_size, payload["max_len"], device)
    predicted = probabilities.argmax(-1)
    label_names = payload["label_names"]
    matrix = confusion_matrix(test.labels, predicted, len(label_names))
    metrics = {
        "accuracy": accuracy(matrix),
        "macro_f1": macro_f1(matrix),
        "loss": loss,
        "f1_per_class": dict(zip(label_names, map(float, per_class_f1(matrix)))),
        "confusion_matrix": {"labels": label_names, "rows_actual_columns_predicted": matrix.tolist()},
        "n_examples": len(test),
    }
    return metrics, predicted


def variant_report(results: list[SeedResult]) -> dict:
    """Mean, std and per-seed values of the test scores and of validation accuracy per epoch."""
    report: dict = {}
    values = {"accuracy": [r.metrics["accuracy"] for r in results], "macro_f1": [r.metrics["macro_f1"] for r in results],
              "first_epoch_val_accuracy": [r.val_accuracy_per_epoch[0] for r in results]}
    for key, numbers in values.items():
        stats = summarize(numbers)
        report.update({f"{key}_mean": stats["mean"], f"{key}_std": stats["std"], f"{key}_per_seed": stats["per_seed"]})
    curves = np.array([r.val_accuracy_per_epoch for r in results])
    report["val_accuracy_mean_per_epoch"] = [float(v) for v in curves.mean(axis=0)]
    report["val_accuracy_std_per_epoch"] = [float(v) for v in (curves.std(axis=0, ddof=1) if len(results) > 1
                                                               else np.zeros(curves.shape[1]))]
    names = list(results[0].metrics["f1_per_class"])
    report["f1_per_class_mean"] = {n: float(np.mean([r.metrics["f1_per_class"][n] for r in results])) for n in names}
    report["loss_mean"] = float(np.mean([r.metrics["loss"] for r in results]))
    report["runs"] = [r.run for r in results]
    return report


def pooled_confusion(results: list[SeedResult]) -> dict:
    """One variant's test confusion matrix summed over its seeds."""
    matrices = [r.metrics["confusion_matrix"] for r in results]
    total = np.sum([m["rows_actual_columns_predicted"] for m in matrices], axis=0)
    return {"labels": matrices[0]["labels"], "runs": [r.run for r in results],
            "rows_actual_columns_predicted": total.tolist()}


CURVE_KEYS = ("val_accuracy", "train_loss", "val_loss", "train_accuracy")


def mean_curves(results: dict[str, list[SeedResult]], baseline_valid_accuracy: float) -> list[dict[str, float]]:
    """Per epoch, each variant's mean over seeds: the table `dvc plots` draws."""
    n_epochs = min(len(r.epochs) for runs in results.values() for r in runs)
    rows = []
    for epoch in range(n_epochs):
        row: dict[str, float] = {"epoch": epoch + 1}
        for key in CURVE_KEYS:
            for variant, runs in results.items():
                row[f"{key}_{variant}"] = float(np.mean([r.epochs[epoch][key] for r in runs]))
        row["val_accuracy_baseline"] = baseline_valid_accuracy
        rows.append(row)
    return rows


def correctness_grid(results: list[SeedResult]) -> np.ndarray:
    """(pretraining runs, fine-tuning seeds, examples) 0/1 array, sorted; the runs must form the full grid."""
    pretrain_seeds = sorted({r.pretrain_seed for r in results})
    seeds = sorted({r.seed for r in results})
    by_cell = {(r.pretrain_seed, r.seed): r.correct for r in results}
    missing = [finetune_run(s, p) for p in pretrain_seeds for s in seeds if (p, s) not in by_cell]
    if missing:
        raise ValueError(f"the fine-tuned runs do not form a grid of pretraining x fine-tuning seeds: "
                         f"missing {', '.join(missing)}")
    return np.stack([np.stack([by_cell[p, s] for s in seeds]) for p in pretrain_seeds])


def pretraining_report(summaries: dict[int, dict]) -> dict:
    """The pretraining runs' summaries: each number's mean at the top (`val_perplexity`, ...), each run's under
    `per_seed`."""
    first = next(iter(summaries.values()))
    means = {key: (float(np.mean([s[key] for s in summaries.values()])) if isinstance(value, (int, float))
                   and not isinstance(value, bool) else value) for key, value in first.items()}
    return {**means, "seeds": list(summaries), "per_seed": {str(seed): s for seed, s in summaries.items()}}


def transfer_report(
    pretrained: list[SeedResult], scratch: list[SeedResult], baseline: dict, params: EvaluateParams,
    pretraining: dict,
) -> dict:
    """The gap and its uncertainty, each variant, the baseline, and the pretraining summaries (their files are
    DVC-cached: this git-tracked report keeps them for `lmtransfer compare`)."""
    if [r.run for r in pretrained] != [r.run for r in scratch]:
        raise ValueError("pretrained and scratch must be evaluated on the same runs (they are paired run by run)")
    correct_pretrained, correct_scratch = correctness_grid(pretrained), correctness_grid(scratch)
    uncertainty = gap_uncertainty(correct_pretrained, correct_scratch, params.bootstrap_samples, seed=params.seed)
    pretrained_report, scratch_report = variant_report(pretrained), variant_report(scratch)
    gap = {
        "accuracy_mean": pretrained_report["accuracy_mean"] - scratch_report["accuracy_mean"],
        **{key: uncertainty[key] for key in ("ci95_low", "ci95_high", "p_value", "std", "spread", "share")},
        "macro_f1_mean": pretrained_report["macro_f1_mean"] - scratch_report["macro_f1_mean"],
        "first_epoch_val_accuracy_mean": (
            pretrained_report["first_epoch_val_accuracy_mean"] - scratch_report["first_epoch_val_accuracy_mean"]
        ),
    }
    return {
        "gap": gap,
        "pretrained": pretrained_report,
        "scratch": scratch_report,
        "baseline": {"accuracy": baseline["accuracy"], "macro_f1": baseline["macro_f1"],
                     "valid_accuracy": baseline["valid_accuracy"]},
        "n_seeds": len(pretrained),
        "n_pretraining_runs": int(correct_pretrained.shape[0]),
        "n_finetuning_seeds": int(correct_pretrained.shape[1]),
        "n_test_examples": int(correct_pretrained.shape[2]),
        "pretraining": pretraining,
    }


def headline_metrics(report: dict) -> dict:
    """The answer in eight flat numbers (`metrics/headline.json`): short names, so `dvc metrics show` fits one
    120-column row. Test accuracies (variants' means), the gap with its 95% interval and p-value, and `head_start`,
    the gap in validation accuracy after one epoch."""
    gap = report["gap"]
    return {
        "pretrained": report["pretrained"]["accuracy_mean"],
        "scratch": report["scratch"]["accuracy_mean"],
        "gap": gap["accuracy_mean"],
        "gap_low": gap["ci95_low"],
        "gap_high": gap["ci95_high"],
        "p_value": gap["p_value"],
        "head_start": gap["first_epoch_val_accuracy_mean"],
        "baseline": report["baseline"]["accuracy"],
    }


def runs_described(report: dict) -> str:
    """`3 runs (3 pretraining runs x 1 fine-tuning seed)`: what each variant's mean is over."""
    runs, seeds = report["n_pretraining_runs"], report["n_finetuning_seeds"]
    return (f"{report['n_seeds']} runs ({runs} pretraining run{'s' * (runs != 1)} x {seeds} fine-tuning "
            f"seed{'s' * (seeds != 1)})")


def spread_line(gap: dict, n_finetuning_seeds: int) -> str:
    """Where the gap's uncertainty comes from: each source's share of the variance, resampled alone."""
    share = gap["share"]
    runs = "pretraining runs" if n_finetuning_seeds > 1 else "pretraining runs (with their one fine-tune each)"
    parts = [f"{runs} {share['pretraining_runs']:.0%}"]
    if n_finetuning_seeds > 1:
        parts.append(f"fine-tuning seeds {share['finetuning_seeds']:.0%}")
    parts.append(f"test examples {share['test_examples']:.0%}")
    return "the gap's spread comes from: " + ", ".join(parts)


def report_lines(report: dict) -> list[str]:
    """The answer in a few lines, as the evaluate stage prints it."""
    lines = [f"{variant:>10}: test accuracy {report[variant]['accuracy_mean']:.4f} "
             f"± {report[variant]['accuracy_std']:.4f} over {runs_described(report)} "
             f"(epoch-1 validation {report[variant]['first_epoch_val_accuracy_mean']:.4f})"
             for variant in VARIANTS]
    gap = report["gap"]
    lines.append(f"  baseline: test accuracy {report['baseline']['accuracy']:.4f} (TF-IDF + logistic regression)")
    lines.append(f"gap {gap['accuracy_mean']:+.4f}, 95% CI [{gap['ci95_low']:+.4f}, {gap['ci95_high']:+.4f}], "
                 f"p = {gap['p_value']:.4f}")
    lines.append(spread_line(gap, report["n_finetuning_seeds"]))
    return lines
