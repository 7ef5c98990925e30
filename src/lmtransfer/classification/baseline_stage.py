"""The classification baseline stage: TF-IDF + logistic regression on the prepared texts, scored on the test split
(metrics/baseline.json)."""

from __future__ import annotations

from lmtransfer.classification.baseline import run_baseline
from lmtransfer.classification.config import ClassificationParams
from lmtransfer.core.io import write_json
from lmtransfer.core.paths import BASELINE_METRICS, PREPARED
from lmtransfer.data.prepared import SPLITS, read_prepared_meta, read_split
from lmtransfer.harness.tracking import log_run, stage_run


def run_baseline_stage(params: ClassificationParams) -> None:
    label_names = read_prepared_meta(PREPARED)["label_names"]
    splits = {name: read_split(PREPARED, name) for name in SPLITS}
    with stage_run("baseline", params.sections("baseline")):
        result = run_baseline(
            *[item for name in SPLITS
              for item in (splits[name]["text"].tolist(), splits[name]["label"].to_numpy())],
            params=params.baseline,
        )
        summary = {
            "accuracy": result.accuracy,
            "macro_f1": result.macro_f1,
            "valid_accuracy": result.valid_accuracy_by_c[result.best_c],
            "best_c": result.best_c,
            "valid_accuracy_by_c": {str(c): a for c, a in result.valid_accuracy_by_c.items()},
            "n_test_examples": len(splits["test"]),
            "label_names": label_names,
        }
        write_json(BASELINE_METRICS, summary)
        log_run(metrics={"test_accuracy": result.accuracy, "test_macro_f1": result.macro_f1,
                         "valid_accuracy": summary["valid_accuracy"], "best_c": result.best_c})
        for step, (c, accuracy) in enumerate(sorted(result.valid_accuracy_by_c.items())):
            log_run(metrics={"valid_accuracy_by_c": accuracy}, step=step)
    print(f"baseline: TF-IDF + logistic regression, C={result.best_c:g} (validation accuracy "
          f"{summary['valid_accuracy']:.4f}): test accuracy {result.accuracy:.4f}, macro-F1 {result.macro_f1:.4f}")
