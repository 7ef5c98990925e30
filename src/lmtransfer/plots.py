"""The experiment's figures, from the metrics files alone (so they redraw without retraining)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .io import atomic_path  # noqa: E402

COLORS = {"pretrained": "tab:blue", "scratch": "tab:orange"}
Rows = list[dict[str, str]]


def _save(figure, path: Path, dpi: int) -> Path:
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=dpi, format="png")
    plt.close(figure)
    return path


def _column(rows: Rows, key: str) -> list[float]:
    return [float(row[key]) for row in rows]


def majority_share(confusion: list[list[int]]) -> float:
    """Accuracy of always answering the most frequent class (rows of the confusion matrix are true classes)."""
    totals = [sum(row) for row in confusion]
    return max(totals) / max(sum(totals), 1)


def plot_finetune_accuracy(epochs: dict[str, Rows], path: Path, dpi: int, baseline: float | None = None) -> Path:
    """The central figure: validation accuracy per epoch, pretrained vs scratch, over the majority-class baseline."""
    figure, axis = plt.subplots(figsize=(6.5, 4.2))
    for variant, rows in epochs.items():
        x = _column(rows, "epoch")
        axis.plot(x, _column(rows, "val_accuracy"), "o-", color=COLORS[variant], label=f"{variant} (validation)")
        axis.plot(x, _column(rows, "train_accuracy"), "--", color=COLORS[variant], alpha=0.6,
                  label=f"{variant} (train)")
    if baseline is not None:
        axis.axhline(baseline, color="grey", linewidth=0.8, linestyle=":", label=f"majority class ({baseline:.0%})")
    axis.set(xlabel="epoch", ylabel="accuracy", title="Fine-tuning: pretrained vs from scratch")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return _save(figure, path, dpi)


def plot_finetune_loss(epochs: dict[str, Rows], path: Path, dpi: int) -> Path:
    figure, axis = plt.subplots(figsize=(6.5, 4.2))
    for variant, rows in epochs.items():
        x = _column(rows, "epoch")
        axis.plot(x, _column(rows, "val_loss"), "o-", color=COLORS[variant], label=f"{variant} (validation)")
        axis.plot(x, _column(rows, "train_loss"), "--", color=COLORS[variant], alpha=0.6, label=f"{variant} (train)")
    axis.set(xlabel="epoch", ylabel="cross-entropy loss", title="Fine-tuning loss")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return _save(figure, path, dpi)


def plot_pretraining(train_rows: Rows, valid_rows: Rows, path: Path, dpi: int) -> Path:
    figure, (loss_axis, ppl_axis) = plt.subplots(1, 2, figsize=(10, 4))
    loss_axis.plot(_column(train_rows, "step"), _column(train_rows, "train_loss"), label="train", color="tab:green")
    loss_axis.plot(_column(valid_rows, "step"), _column(valid_rows, "val_loss"), "o-", label="validation",
                   color="tab:red")
    loss_axis.set(xlabel="step", ylabel="next-token loss (nats)", title="Pretraining loss")
    ppl_axis.plot(_column(valid_rows, "step"), _column(valid_rows, "val_perplexity"), "o-", color="tab:red")
    ppl_axis.set(xlabel="step", ylabel="perplexity", yscale="log", title="Validation perplexity")
    for axis in (loss_axis, ppl_axis):
        axis.grid(alpha=0.3)
    loss_axis.legend()
    return _save(figure, path, dpi)


def plot_confusion(evaluation: dict, path: Path, dpi: int) -> Path:
    variants = [v for v in ("pretrained", "scratch") if v in evaluation]
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
        axis.set(xlabel="predicted", ylabel="actual", title=f"{variant}: test accuracy {accuracy:.3f}")
    return _save(figure, path, dpi)
