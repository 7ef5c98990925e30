"""Translation stage plot: fine-tuning curves, pretraining curves and the test scores, from the metrics files."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.core.io import read_json, require_file
from lmtransfer.core.paths import EVALUATE_REPORT, PARAMS, PLOTS
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import plot_stage_run
from lmtransfer.reporting.finetuned import epoch_logs
from lmtransfer.reporting.plots import plot_pretraining_logs
from lmtransfer.translation.config import load_translation_params
from lmtransfer.translation.plots import plot_translation_curves, plot_translation_scores


@stage_main("plot")
def main() -> None:
    params = load_translation_params(PARAMS)
    dpi, seeds = params.plot.dpi, params.finetune.seeds
    runs = epoch_logs(seeds)
    report = read_json(require_file(EVALUATE_REPORT, "evaluation results"))
    plot_stage_run(params, lambda: [
        plot_translation_curves(runs, PLOTS / "finetune_bleu.png", dpi),
        plot_pretraining_logs(PLOTS / "pretrain.png", dpi),
        plot_translation_scores(report, PLOTS / "test_scores.png", dpi),
    ])


if __name__ == "__main__":
    main()
