"""Translation stage plot: fine-tuning curves, pretraining curves and the test scores, from the metrics files."""

import _checkout  # noqa: F401 - this checkout's src/ first (an experiment runs in a copy)
import lmtransfer  # noqa: F401 - first: pins the CPU kernels, turns MLflow telemetry off
import mlflow

from lmtransfer.translation.config import load_translation_params
from lmtransfer.core.io import read_json, read_tsv, require_file
from lmtransfer.core.paths import (
    EVALUATE_REPORT, HEADLINE, PARAMS, PLOTS, PRETRAIN_TRAIN_LOG, PRETRAIN_VALID_LOG, VARIANTS, finetune_epochs,
)
from lmtransfer.core.plots import plot_pretraining, plot_translation_curves, plot_translation_scores
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import log_to_pipeline, stage_run


@stage_main("plot")
def main() -> None:
    params = load_translation_params(PARAMS)
    dpi, seeds = params.plot.dpi, params.finetune.seeds
    runs = {v: [read_tsv(require_file(finetune_epochs(v, s), "fine-tuning metrics")) for s in seeds] for v in VARIANTS}
    pretrain_train = read_tsv(require_file(PRETRAIN_TRAIN_LOG, "pretraining metrics"))
    pretrain_valid = read_tsv(require_file(PRETRAIN_VALID_LOG, "pretraining metrics"))
    report = read_json(require_file(EVALUATE_REPORT, "evaluation results"))
    with stage_run("plot", params.sections("plot")):
        figures = [
            plot_translation_curves(runs, PLOTS / "finetune_bleu.png", dpi),
            plot_pretraining(pretrain_train, pretrain_valid, PLOTS / "pretrain.png", dpi),
            plot_translation_scores(report, PLOTS / "test_scores.png", dpi),
        ]
        for figure in figures:
            mlflow.log_artifact(str(figure), "figures")
        log_to_pipeline(read_json(require_file(HEADLINE, "headline metrics")))
    print("plot: " + ", ".join(str(f) for f in figures))


if __name__ == "__main__":
    main()
