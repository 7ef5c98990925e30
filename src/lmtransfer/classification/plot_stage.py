"""The classification plot stage: the figures of plots/ from the metrics the pipeline wrote."""

from __future__ import annotations

from lmtransfer.classification.config import ClassificationParams
from lmtransfer.classification.label_curve import LABEL_CURVE
from lmtransfer.classification.metrics import majority_share
from lmtransfer.classification.plots import plot_confusion, plot_finetune_accuracy, plot_finetune_loss, plot_label_curve
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
from lmtransfer.reporting.plots import plot_pretraining_logs
from lmtransfer.tokens.id_files import load_labeled_split


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
    majority = majority_share(load_labeled_split(TOKENIZED, "valid").labels)  # the split the curves are measured on
    plot_stage_run(params, lambda: [
        plot_finetune_accuracy(runs, PLOTS / "finetune_accuracy.png", dpi, majority, baseline["valid_accuracy"],
                               best_epochs),
        plot_finetune_loss(runs, PLOTS / "finetune_loss.png", dpi),
        plot_pretraining_logs(PLOTS / "pretrain.png", dpi, params.pretrain.seeds),
        plot_confusion(evaluation, PLOTS / "confusion.png", dpi),
        plot_label_curve(read_tsv(require_file(LABEL_CURVE, "evaluation results")), PLOTS / "label_curve.png", dpi),
    ])
