"""Stage plot: the experiment's figures from the metrics files."""

import _checkout  # noqa: F401 - this checkout's src/ first (an experiment runs in a copy)
import lmtransfer  # noqa: F401 - first: pins the CPU kernels, turns MLflow telemetry off
import mlflow

from lmtransfer.classification.config import load_params
from lmtransfer.core.io import read_json, read_tsv, require_file
from lmtransfer.classification.metrics import majority_share
from lmtransfer.core.paths import (
    BASELINE_METRICS, EVALUATE_DETAILS, EVALUATE_REPORT, HEADLINE, PARAMS, PLOTS, PRETRAIN_TRAIN_LOG, PRETRAIN_VALID_LOG,
    TOKENIZED, VARIANTS, finetune_epochs, finetune_summary,
)
from lmtransfer.core.plots import plot_confusion, plot_finetune_accuracy, plot_finetune_loss, plot_pretraining
from lmtransfer.harness.stage import stage_main
from lmtransfer.core.tokenized import load_labeled_split
from lmtransfer.harness.tracking import log_to_pipeline, stage_run


@stage_main("plot")
def main() -> None:
    params = load_params(PARAMS)
    dpi, seeds = params.plot.dpi, params.finetune.seeds
    runs = {v: [read_tsv(require_file(finetune_epochs(v, s), "fine-tuning metrics")) for s in seeds] for v in VARIANTS}
    best_epochs = {v: [read_json(require_file(finetune_summary(v, s), "fine-tuning metrics"))
                       ["best_epoch"] for s in seeds] for v in VARIANTS}
    pretrain_train = read_tsv(require_file(PRETRAIN_TRAIN_LOG, "pretraining metrics"))
    pretrain_valid = read_tsv(require_file(PRETRAIN_VALID_LOG, "pretraining metrics"))
    evaluation = read_json(require_file(EVALUATE_DETAILS / "confusion.json", "evaluation results"))
    report = read_json(require_file(EVALUATE_REPORT, "evaluation results"))
    baseline = read_json(require_file(BASELINE_METRICS, "baseline results"))
    for variant in VARIANTS:
        evaluation[variant] = {"confusion_matrix": evaluation[variant], "accuracy": report[variant]["accuracy_mean"]}
    majority = majority_share(load_labeled_split(TOKENIZED, "valid").labels)  # the split the curves are measured on
    with stage_run("plot", params.sections("plot")):
        figures = [
            plot_finetune_accuracy(runs, PLOTS / "finetune_accuracy.png", dpi, majority,
                                   baseline["valid_accuracy"], best_epochs),
            plot_finetune_loss(runs, PLOTS / "finetune_loss.png", dpi),
            plot_pretraining(pretrain_train, pretrain_valid, PLOTS / "pretrain.png", dpi),
            plot_confusion(evaluation, PLOTS / "confusion.png", dpi),
        ]
        for figure in figures:
            mlflow.log_artifact(str(figure), "figures")
        # The last stage puts the answer on the pipeline run too: evaluate is skipped when the fine-tuned
        # models come out identical (a fresh clone's `make run`), and the run must still carry it.
        log_to_pipeline(read_json(require_file(HEADLINE, "headline metrics")))
    print("plot: " + ", ".join(str(f) for f in figures))


if __name__ == "__main__":
    main()
