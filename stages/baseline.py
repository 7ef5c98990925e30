"""Stage baseline: TF-IDF + logistic regression on the same splits, the reference line for every result."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

import mlflow

from lmtransfer.classification.baseline import run_baseline
from lmtransfer.classification.config import load_params
from lmtransfer.core.io import write_json
from lmtransfer.core.paths import BASELINE_METRICS, PARAMS, PREPARED
from lmtransfer.data.prepared import SPLITS, read_prepared_meta, read_split
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import stage_run


@stage_main("baseline")
def main() -> None:
    params = load_params(PARAMS)
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
        mlflow.log_metrics({"test_accuracy": result.accuracy, "test_macro_f1": result.macro_f1,
                            "valid_accuracy": summary["valid_accuracy"], "best_c": result.best_c})
        for step, (c, accuracy) in enumerate(sorted(result.valid_accuracy_by_c.items())):
            mlflow.log_metric("valid_accuracy_by_c", accuracy, step=step)
    print(f"baseline: TF-IDF + logistic regression, C={result.best_c:g} (validation accuracy "
          f"{summary['valid_accuracy']:.4f}): test accuracy {result.accuracy:.4f}, macro-F1 {result.macro_f1:.4f}")


if __name__ == "__main__":
    main()
