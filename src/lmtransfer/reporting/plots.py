"""What every figure shares (colours, bands over seeds, atomic saving) and the pretraining curve both tasks plot."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lmtransfer.core.io import atomic_path  # noqa: E402
from lmtransfer.core.paths import VARIANTS  # noqa: E402

COLORS = dict(zip(VARIANTS, ("tab:blue", "tab:orange")))
Rows = list[dict[str, str]]


def save_figure(figure, path: Path, dpi: int) -> Path:
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=dpi, format="png")
    plt.close(figure)
    return path


def column(rows: Rows, key: str) -> list[float]:
    return [float(row[key]) for row in rows]


def mean_band(axis, runs: list[Rows], key: str, color: str, label: str, style: str = "o-") -> None:
    """Mean over runs as a line, the runs' min-max range as a band (one run: just the line)."""
    epochs = column(runs[0], "epoch")
    values = np.array([column(rows, key) for rows in runs])
    axis.plot(epochs, values.mean(axis=0), style, color=color, label=f"{label} (mean of {len(runs)} runs)"
              if len(runs) > 1 else label)
    if len(runs) > 1:
        axis.fill_between(epochs, values.min(axis=0), values.max(axis=0), color=color, alpha=0.18, linewidth=0)


def plot_pretraining_logs(path: Path, dpi: int, seeds: list[int] | None = None) -> Path:
    """Loss and perplexity per step of each pretraining run (one per seed, or translation's one); the adaptation
    phase (validated on the task's texts) drawn apart."""
    from lmtransfer.core.io import read_tsv, require_file
    from lmtransfer.core.paths import PretrainOutputs

    runs = [PretrainOutputs(seed) for seed in seeds] if seeds is not None else [PretrainOutputs()]
    runs = [(read_tsv(require_file(run.train_log, "pretraining metrics")),
             read_tsv(require_file(run.valid_log, "pretraining metrics"))) for run in runs]
    figure, (loss_axis, ppl_axis) = plt.subplots(1, 2, figsize=(10, 4))
    several = f" ({len(runs)} runs)" if len(runs) > 1 else ""
    alpha = 1.0 if len(runs) == 1 else 0.6
    for index, (train_rows, valid_rows) in enumerate(runs):
        first = index == 0
        loss_axis.plot(column(train_rows, "step"), column(train_rows, "train_loss"), color="tab:green",
                       alpha=alpha, label=f"train{several}" if first else None)
        for phase, color, name in (("corpus", "tab:red", "corpus"), ("task", "tab:purple", "task texts")):
            rows = [row for row in valid_rows if row.get("phase", "corpus") == phase]
            if not rows:
                continue
            loss_axis.plot(column(rows, "step"), column(rows, "val_loss"), "o-", color=color, alpha=alpha,
                           label=f"validation ({name})" if first else None)
            ppl_axis.plot(column(rows, "step"), column(rows, "val_perplexity"), "o-", color=color, alpha=alpha,
                          label=name if first else None)
    adapt_start = [float(row["step"]) for row in runs[0][1] if row.get("phase") == "task"][:1]
    for axis in (loss_axis, ppl_axis):
        for step in adapt_start:
            axis.axvline(step, color="grey", linestyle=":", linewidth=0.8)
        axis.grid(alpha=0.3)
    loss_axis.set(xlabel="step", ylabel="next-token loss (nats)", title=f"Pretraining loss{several}")
    ppl_axis.set(xlabel="step", ylabel="perplexity", yscale="log", title="Validation perplexity")
    loss_axis.legend(fontsize=8)
    ppl_axis.legend(fontsize=8)
    return save_figure(figure, path, dpi)
