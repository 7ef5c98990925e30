"""Stage plot: the experiment's figures from the metrics files."""

import mlflow

from lmtransfer.config import load_params
from lmtransfer.io import read_json, read_tsv, require_file
from lmtransfer.paths import METRICS, PARAMS, PLOTS, VARIANTS, finetune_epochs
from lmtransfer.plots import (
    majority_share,
    plot_confusion,
    plot_finetune_accuracy,
    plot_finetune_loss,
    plot_pretraining,
)
from lmtransfer.stage import stage_main
from lmtransfer.tracking import stage_run


@stage_main("plot")
def main() -> None:
    params = load_params(PARAMS)
    dpi = params.plot.dpi
    epochs = {v: read_tsv(require_file(finetune_epochs(v), "fine-tuning metrics")) for v in VARIANTS}
    pretrain_train = read_tsv(require_file(METRICS / "pretrain" / "train.tsv", "pretraining metrics"))
    pretrain_valid = read_tsv(require_file(METRICS / "pretrain" / "valid.tsv", "pretraining metrics"))
    evaluation = read_json(require_file(METRICS / "evaluate" / "confusion.json", "evaluation results"))
    test_metrics = read_json(require_file(METRICS / "evaluate.json", "evaluation results"))
    for variant in VARIANTS:
        evaluation[variant] = {"confusion_matrix": evaluation[variant], **test_metrics[variant]}
    baseline = majority_share(evaluation["scratch"]["confusion_matrix"]["rows_actual_columns_predicted"])
    with stage_run("plot", params.sections("plot")):
        figures = [
            plot_finetune_accuracy(epochs, PLOTS / "finetune_accuracy.png", dpi, baseline),
            plot_finetune_loss(epochs, PLOTS / "finetune_loss.png", dpi),
            plot_pretraining(pretrain_train, pretrain_valid, PLOTS / "pretrain.png", dpi),
            plot_confusion(evaluation, PLOTS / "confusion.png", dpi),
        ]
        for figure in figures:
            mlflow.log_artifact(str(figure), "figures")
    print("plot: " + ", ".join(str(f) for f in figures))


if __name__ == "__main__":
    main()
