"""The experiment's figures, from the metrics files alone (so they redraw without retraining)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from lmtransfer.core.io import atomic_path  # noqa: E402
from lmtransfer.core.paths import VARIANTS  # noqa: E402

COLORS = dict(zip(VARIANTS, ("tab:blue", "tab:orange")))
Rows = list[dict[str, str]]


def _save(figure, path: Path, dpi: int) -> Path:
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=dpi, format="png")
    plt.close(figure)
    return path


def _column(rows: Rows, key: str) -> list[float]:
    return [float(row[key]) for row in rows]


def _mean_band(axis, runs: list[Rows], key: str, color: str, label: str, style: str = "o-") -> None:
    """Mean over seeds as a line, the seeds' min-max range as a band (one seed: just the line)."""
    epochs = _column(runs[0], "epoch")
    values = np.array([_column(rows, key) for rows in runs])
    axis.plot(epochs, values.mean(axis=0), style, color=color, label=f"{label} (mean of {len(runs)} seeds)"
              if len(runs) > 1 else label)
    if len(runs) > 1:
        axis.fill_between(epochs, values.min(axis=0), values.max(axis=0), color=color, alpha=0.18, linewidth=0)


def plot_finetune_accuracy(
    runs: dict[str, list[Rows]], path: Path, dpi: int, majority: float | None = None,
    baseline: float | None = None, best_epochs: dict[str, list[int]] | None = None,
) -> Path:
    """The central figure: validation accuracy per epoch, pretrained vs scratch, mean over seeds with their range.

    Reference lines: the TF-IDF baseline's and the majority class's accuracy on the same validation split.
    """
    figure, axis = plt.subplots(figsize=(9.5, 4.4))
    for variant, variant_runs in runs.items():
        _mean_band(axis, variant_runs, "val_accuracy", COLORS[variant], f"{variant}, validation")
        _mean_band(axis, variant_runs, "train_accuracy", COLORS[variant], f"{variant}, train", style="--")
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
    return _save(figure, path, dpi)


def plot_finetune_loss(runs: dict[str, list[Rows]], path: Path, dpi: int) -> Path:
    figure, axis = plt.subplots(figsize=(6.8, 4.4))
    for variant, variant_runs in runs.items():
        _mean_band(axis, variant_runs, "val_loss", COLORS[variant], f"{variant}, validation")
        _mean_band(axis, variant_runs, "train_loss", COLORS[variant], f"{variant}, train", style="--")
    axis.set(xlabel="epoch", ylabel="cross-entropy loss", title="Fine-tuning loss")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    return _save(figure, path, dpi)


def plot_pretraining(train_rows: Rows, valid_rows: Rows, path: Path, dpi: int) -> Path:
    """Loss and perplexity per step; a second phase (adaptation to the task's texts) is drawn apart,
    since its validation texts are the task's, not the corpus's."""
    figure, (loss_axis, ppl_axis) = plt.subplots(1, 2, figsize=(10, 4))
    phase_style = {"corpus": ("tab:red", "corpus"), "task": ("tab:purple", "task texts")}
    loss_axis.plot(_column(train_rows, "step"), _column(train_rows, "train_loss"), label="train", color="tab:green")
    for phase, (color, name) in phase_style.items():
        rows = [row for row in valid_rows if row.get("phase", "corpus") == phase]
        if not rows:
            continue
        loss_axis.plot(_column(rows, "step"), _column(rows, "val_loss"), "o-", color=color,
                       label=f"validation ({name})")
        ppl_axis.plot(_column(rows, "step"), _column(rows, "val_perplexity"), "o-", color=color, label=name)
    adapt_start = [float(row["step"]) for row in valid_rows if row.get("phase") == "task"][:1]
    for axis in (loss_axis, ppl_axis):
        for step in adapt_start:
            axis.axvline(step, color="grey", linestyle=":", linewidth=0.8)
        axis.grid(alpha=0.3)
    loss_axis.set(xlabel="step", ylabel="next-token loss (nats)", title="Pretraining loss")
    ppl_axis.set(xlabel="step", ylabel="perplexity", yscale="log", title="Validation perplexity")
    loss_axis.legend(fontsize=8)
    ppl_axis.legend(fontsize=8)
    return _save(figure, path, dpi)


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
        seeds = evaluation[variant]["confusion_matrix"].get("seeds", [])
        pooled = f", {len(seeds)} seeds pooled" if len(seeds) > 1 else ""
        axis.set(xlabel="predicted", ylabel="actual", title=f"{variant}: test accuracy {accuracy:.3f}{pooled}")
    return _save(figure, path, dpi)


def plot_translation_curves(runs: dict[str, list[Rows]], path: Path, dpi: int) -> Path:
    """Translation fine-tuning per epoch: validation BLEU (greedy) and validation loss, mean over seeds with their
    range, pretrained vs scratch."""
    figure, (bleu, loss) = plt.subplots(1, 2, figsize=(10, 4))
    for variant, variant_runs in runs.items():
        _mean_band(bleu, variant_runs, "val_bleu", COLORS[variant], variant)
        _mean_band(loss, variant_runs, "val_loss", COLORS[variant], f"{variant}, validation")
        _mean_band(loss, variant_runs, "train_loss", COLORS[variant], f"{variant}, train", style="--")
    bleu.set(xlabel="epoch", ylabel="validation BLEU (greedy)", title="Translation quality while fine-tuning")
    loss.set(xlabel="epoch", ylabel="cross-entropy per target token", title="Loss (train: label-smoothed)")
    for axis in (bleu, loss):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    return _save(figure, path, dpi)


def plot_translation_scores(report: dict, path: Path, dpi: int) -> Path:
    """Test BLEU and chrF per variant: the mean over seeds with its 95% bootstrap interval, each seed as a dot, and
    the copy-the-source baseline as a line; a second row for the short test sentences (clause pairs) if scored."""
    rows = [("test verses", report)] + ([("short test sentences", report["clauses"])] if "clauses" in report else [])
    figure, grid = plt.subplots(len(rows), 2, figsize=(9, 4 * len(rows)), squeeze=False)
    for axes, (test_set, scores) in zip(grid, rows):
        for axis, metric, name in zip(axes, ("bleu", "chrf"), ("BLEU", "chrF")):
            for x, variant in enumerate(VARIANTS):
                section = scores[variant]
                mean = section[f"{metric}_mean"]
                error = [[mean - section[f"{metric}_ci95_low"]], [section[f"{metric}_ci95_high"] - mean]]
                axis.bar(x, mean, color=COLORS[variant], alpha=0.75, yerr=error, capsize=6,
                         label=f"{variant} {mean:.2f}")
                axis.plot([x] * len(section[f"{metric}_per_seed"]), section[f"{metric}_per_seed"], "k.", alpha=0.6)
            baseline = scores["baseline"][f"copy_source_{metric}"]
            axis.axhline(baseline, color="tab:green", linestyle="-.", label=f"source copied ({baseline:.2f})")
            axis.set_xticks(range(len(VARIANTS)), VARIANTS)
            axis.set(ylabel=f"{name}", title=f"{name} on {scores['n_test_sentences']} {test_set}, "
                     f"{scores['n_seeds']} seeds, 95% interval")
            axis.title.set_fontsize(9)
            axis.grid(axis="y", alpha=0.3)
            axis.legend(fontsize=8)
    return _save(figure, path, dpi)
