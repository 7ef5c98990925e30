"""The classification figures: accuracy and loss per epoch of both variants, and the confusion matrices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from lmtransfer.classification.config import ClassificationParams
from lmtransfer.classification.label_curve import LABEL_CURVE
from lmtransfer.core.io import read_json, read_tsv, require_file
from lmtransfer.core.paths import (
    BASELINE_METRICS,
    EVALUATE_DETAILS,
    EVALUATE_REPORT,
    PLOTS,
    TOKENIZED,
    VARIANTS,
    finetune_summary,
)
from lmtransfer.harness.tracking import plot_stage_run
from lmtransfer.reporting.finetuned import epoch_logs, run_names
from lmtransfer.reporting.plots import COLORS, Rows, mean_band, plot_pretraining_logs, plt, save_figure
from lmtransfer.tokens.id_files import load_labeled_split


def plot_finetune_accuracy(
    runs: dict[str, list[Rows]], path: Path, dpi: int, majority: float | None = None,
    baseline: float | None = None, best_epochs: dict[str, list[int]] | None = None,
) -> Path:
    """The central figure: validation accuracy per epoch, pretrained vs scratch (mean and range over seeds), with
    TF-IDF's and the majority class's accuracy on the same validation split."""
    figure, axis = plt.subplots(figsize=(9.5, 4.4))
    for variant, variant_runs in runs.items():
        mean_band(axis, variant_runs, "val_accuracy", COLORS[variant], f"{variant}, validation")
        mean_band(axis, variant_runs, "train_accuracy", COLORS[variant], f"{variant}, train", style="--")
        for rows, best in zip(variant_runs, (best_epochs or {}).get(variant, [])):
            accuracy = {int(float(r["epoch"])): float(r["val_accuracy"]) for r in rows}[best]
            axis.plot([best], [accuracy], "*", color=COLORS[variant], markersize=9, alpha=0.7)
    if baseline is not None:
        axis.axhline(baseline, color="tab:green", linewidth=1.2, linestyle="-.",
                     label=f"TF-IDF + logistic regression ({baseline:.1%})")
    if majority is not None:
        axis.axhline(majority, color="grey", linewidth=0.8, linestyle=":", label=f"majority class ({majority:.0%})")
    if best_epochs:
        axis.plot([], [], "*", color="black", label="kept checkpoint (best validation epoch)")
    axis.set(xlabel="epoch", ylabel="accuracy", title="Fine-tuning: pretrained vs from scratch")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot: no line hidden
    return save_figure(figure, path, dpi)


def plot_finetune_loss(runs: dict[str, list[Rows]], path: Path, dpi: int) -> Path:
    figure, axis = plt.subplots(figsize=(6.8, 4.4))
    for variant, variant_runs in runs.items():
        mean_band(axis, variant_runs, "val_loss", COLORS[variant], f"{variant}, validation")
        mean_band(axis, variant_runs, "train_loss", COLORS[variant], f"{variant}, train", style="--")
    axis.set(xlabel="epoch", ylabel="cross-entropy loss", title="Fine-tuning loss")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    return save_figure(figure, path, dpi)


def plot_confusion(evaluation: dict, path: Path, dpi: int) -> Path:
    variants = [v for v in VARIANTS if v in evaluation]
    figure, axes = plt.subplots(1, len(variants), figsize=(4.5 * len(variants), 4), squeeze=False)
    for axis, variant in zip(axes[0], variants):
        matrix = evaluation[variant]["confusion_matrix"]["rows_actual_columns_predicted"]
        labels = evaluation[variant]["confusion_matrix"]["labels"]
        axis.imshow(matrix, cmap="Blues")
        darkest = max(max(row) for row in matrix) or 1
        for i, row in enumerate(matrix):
            for j, count in enumerate(row):
                color = "white" if count > 0.6 * darkest else "black"  # readable on dark and light cells
                axis.text(j, i, str(count), ha="center", va="center", color=color)
        axis.set_xticks(range(len(labels)), labels)
        axis.set_yticks(range(len(labels)), labels)
        accuracy = evaluation[variant]["accuracy"]
        runs = evaluation[variant]["confusion_matrix"].get("runs", [])
        pooled = f", {len(runs)} runs pooled" if len(runs) > 1 else ""
        axis.set(xlabel="predicted", ylabel="actual", title=f"{variant}: test accuracy {accuracy:.3f}{pooled}")
    return save_figure(figure, path, dpi)


def plot_label_curve(rows: Rows, path: Path, dpi: int) -> Path:
    """Test accuracy against labeled examples (log scale): both variants (± one std) and TF-IDF."""
    figure, axis = plt.subplots(figsize=(7.2, 4.4))
    sizes = [float(row["n_train"]) for row in rows]
    for variant in VARIANTS:
        means = [float(row[variant]) for row in rows]
        spread = [float(row[f"{variant}_std"]) for row in rows]
        axis.errorbar(sizes, means, yerr=spread, color=COLORS[variant], marker="o", capsize=3, label=variant)
    axis.plot(sizes, [float(row["baseline"]) for row in rows], color="tab:green", marker="s", linestyle="-.",
              label="TF-IDF + logistic regression")
    axis.set_xscale("log")
    title = "Test accuracy against labeled examples"
    if len(rows) == 1:
        title += " (the full split alone: add sizes with finetune.label_sizes)"
    axis.set(xlabel="labeled training examples (log scale)", ylabel="test accuracy", title=title)
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    return save_figure(figure, path, dpi)


def run_plot_stage(params: ClassificationParams) -> None:
    dpi, names = params.plot.dpi, run_names(params.pretrain.seeds, params.finetune.seeds)
    runs = epoch_logs(names)
    best_epochs = {v: [read_json(require_file(finetune_summary(v, r), "fine-tuning metrics"))
                       ["best_epoch"] for r in names] for v in VARIANTS}
    evaluation = read_json(require_file(EVALUATE_DETAILS / "confusion.json", "evaluation results"))
    report = read_json(require_file(EVALUATE_REPORT, "evaluation results"))
    baseline = read_json(require_file(BASELINE_METRICS, "baseline results"))
    for variant in VARIANTS:
        evaluation[variant] = {"confusion_matrix": evaluation[variant], "accuracy": report[variant]["accuracy_mean"]}
    counts = np.bincount(load_labeled_split(TOKENIZED, "valid").labels)  # the split the curves are measured on
    majority = float(counts.max() / max(counts.sum(), 1))  # always answering the most frequent class
    plot_stage_run(params, lambda: [
        plot_finetune_accuracy(runs, PLOTS / "finetune_accuracy.png", dpi, majority, baseline["valid_accuracy"],
                               best_epochs),
        plot_finetune_loss(runs, PLOTS / "finetune_loss.png", dpi),
        plot_pretraining_logs(PLOTS / "pretrain.png", dpi, params.pretrain.seeds),
        plot_confusion(evaluation, PLOTS / "confusion.png", dpi),
        plot_label_curve(read_tsv(require_file(LABEL_CURVE, "evaluation results")), PLOTS / "label_curve.png", dpi),
    ])
