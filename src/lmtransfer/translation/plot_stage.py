"""The translation plot stage: the figures of plots/ from the metrics the pipeline wrote."""

from __future__ import annotations

from typing import Any

from lmtransfer.translation.plots import plot_translation_curves, plot_translation_scores


def run_plot_stage(params: Any) -> None:
    """The translation pipeline's plot stage: fine-tuning curves, pretraining curves and the test scores."""
    from lmtransfer.core.io import read_json, require_file
    from lmtransfer.core.paths import EVALUATE_REPORT, PLOTS
    from lmtransfer.harness.tracking import plot_stage_run
    from lmtransfer.reporting.finetuned import epoch_logs, run_names
    from lmtransfer.reporting.plots import plot_pretraining_logs

    dpi = params.plot.dpi
    runs = epoch_logs(run_names(params.pretrain.seeds, params.finetune.seeds))
    report = read_json(require_file(EVALUATE_REPORT, "evaluation results"))
    plot_stage_run(params, lambda: [
        plot_translation_curves(runs, PLOTS / "finetune_bleu.png", dpi),
        plot_pretraining_logs(PLOTS / "pretrain.png", dpi, params.pretrain.seeds),
        plot_translation_scores(report, PLOTS / "test_scores.png", dpi),
    ])
