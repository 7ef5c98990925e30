"""Stage plot: the experiment's figures from the metrics files."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_params
from lmtransfer.classification.metrics import majority_share
from lmtransfer.classification.plots import plot_confusion, plot_finetune_accuracy, plot_finetune_loss
from lmtransfer.core.io import read_json, require_file
from lmtransfer.core.paths import (
    BASELINE_METRICS,
    EVALUATE_DETAILS,
    EVALUATE_REPORT,
    PARAMS,
    PLOTS,
    TOKENIZED,
    VARIANTS,
    finetune_summary,
)
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import plot_stage_run
from lmtransfer.reporting.finetuned import epoch_logs
from lmtransfer.reporting.plots import plot_pretraining_logs
from lmtransfer.tokens.tokenized import load_labeled_split


@stage_main("plot")
def main() -> None:
    params = load_params(PARAMS)
    dpi, seeds = params.plot.dpi, params.finetune.seeds
    runs = epoch_logs(seeds)
    best_epochs = {v: [read_json(require_file(finetune_summary(v, s), "fine-tuning metrics"))
                       ["best_epoch"] for s in seeds] for v in VARIANTS}
    evaluation = read_json(require_file(EVALUATE_DETAILS / "confusion.json", "evaluation results"))
    report = read_json(require_file(EVALUATE_REPORT, "evaluation results"))
    baseline = read_json(require_file(BASELINE_METRICS, "baseline results"))
    for variant in VARIANTS:
        evaluation[variant] = {"confusion_matrix": evaluation[variant], "accuracy": report[variant]["accuracy_mean"]}
    majority = majority_share(load_labeled_split(TOKENIZED, "valid").labels)  # the split the curves are measured on
    plot_stage_run(params, lambda: [
        plot_finetune_accuracy(runs, PLOTS / "finetune_accuracy.png", dpi, majority, baseline["valid_accuracy"],
                               best_epochs),
        plot_finetune_loss(runs, PLOTS / "finetune_loss.png", dpi),
        plot_pretraining_logs(PLOTS / "pretrain.png", dpi),
        plot_confusion(evaluation, PLOTS / "confusion.png", dpi),
    ])


if __name__ == "__main__":
    main()
