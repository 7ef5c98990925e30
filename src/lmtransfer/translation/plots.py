"""The translation plot stage: validation BLEU and loss per epoch, pretraining curves, both variants' test scores."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import MaxNLocator

from lmtransfer.core.io import read_json, require_file
from lmtransfer.core.paths import EVALUATE_REPORT, PLOTS, VARIANTS
from lmtransfer.harness.tracking import plot_stage_run
from lmtransfer.reporting.finetuned import epoch_logs, run_names
from lmtransfer.reporting.plots import COLORS, Rows, mean_band, plot_pretraining_logs, plt, save_figure


def plot_translation_curves(runs: dict[str, list[Rows]], path: Path, dpi: int) -> Path:
    """Validation BLEU (greedy) and loss per epoch, mean over runs with their range."""
    figure, (bleu, loss) = plt.subplots(1, 2, figsize=(10, 4))
    for variant, variant_runs in runs.items():
        mean_band(bleu, variant_runs, "val_bleu", COLORS[variant], variant)
        mean_band(loss, variant_runs, "val_loss", COLORS[variant], f"{variant}, validation")
        mean_band(loss, variant_runs, "train_loss", COLORS[variant], f"{variant}, train", style="--")
    bleu.set(xlabel="epoch", ylabel="validation BLEU (greedy)", title="Translation quality while fine-tuning")
    loss.set(xlabel="epoch", ylabel="cross-entropy per target token", title="Loss (train: label-smoothed)")
    for axis in (bleu, loss):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    return save_figure(figure, path, dpi)


def plot_translation_scores(report: dict, path: Path, dpi: int) -> Path:
    """Test BLEU and chrF per variant (mean, 95% interval, each seed a dot, the copy baseline a line), a second row
    for the short test sentences."""
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
                     f"{scores['n_seeds']} runs, 95% interval")
            axis.title.set_fontsize(9)
            axis.grid(axis="y", alpha=0.3)
            axis.legend(fontsize=8)
    return save_figure(figure, path, dpi)


def run_plot_stage(params) -> None:
    dpi = params.plot.dpi
    runs = epoch_logs(run_names(params.pretrain.seeds, params.finetune.seeds))
    report = read_json(require_file(EVALUATE_REPORT, "evaluation results"))
    plot_stage_run(params, lambda: [
        plot_translation_curves(runs, PLOTS / "finetune_bleu.png", dpi),
        plot_pretraining_logs(PLOTS / "pretrain.png", dpi, params.pretrain.seeds),
        plot_translation_scores(report, PLOTS / "test_scores.png", dpi),
    ])
