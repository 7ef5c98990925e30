"""Stage evaluate: both fine-tuned models on the test split, and the transfer gap."""

import mlflow

from lmtransfer.checkpoint import load_checkpoint
from lmtransfer.config import load_params
from lmtransfer.evaluate import evaluate_classifier, transfer_gap
from lmtransfer.io import write_json, write_text
from lmtransfer.paths import METRICS, PARAMS, TOKENIZED, VARIANTS, finetuned_checkpoint
from lmtransfer.runtime import select_device
from lmtransfer.stage import stage_main
from lmtransfer.tokenizer import LabeledSplit
from lmtransfer.tracking import stage_run


@stage_main("evaluate")
def main() -> None:
    params = load_params(PARAMS)
    test = LabeledSplit.load(TOKENIZED, "test")
    payloads = {v: load_checkpoint(finetuned_checkpoint(v), expected_kind="classifier") for v in VARIANTS}
    upstream = ",".join(payloads[v]["mlflow_run_id"] for v in VARIANTS)
    device = select_device("auto")
    with stage_run("evaluate", params.sections("evaluate"), upstream_run_id=upstream):
        results, confusion = {}, {}
        for variant, payload in payloads.items():
            metrics, predicted = evaluate_classifier(payload, test, params.evaluate.batch_size, device)
            confusion[variant] = metrics.pop("confusion_matrix")
            results[variant] = metrics
            names = payload["label_names"]
            rows = ["actual,predicted"] + [f"{names[a]},{names[p]}" for a, p in zip(test.labels, predicted)]
            write_text(METRICS / "evaluate" / f"predictions_{variant}.csv", "\n".join(rows) + "\n")
            mlflow.log_metrics({f"{variant}_test_{k}": v for k, v in metrics.items() if isinstance(v, float)})
        results.update(transfer_gap(results))
        write_json(METRICS / "evaluate.json", results)
        write_json(METRICS / "evaluate" / "confusion.json", confusion)
        mlflow.log_metrics({k: results[k] for k in ("accuracy_gap", "macro_f1_gap")})
        mlflow.log_dict(confusion, "confusion.json")
    for variant in VARIANTS:
        print(f"evaluate: {variant:>10}: test accuracy {results[variant]['accuracy']:.4f}, "
              f"macro-F1 {results[variant]['macro_f1']:.4f}")
    print(f"evaluate: pretrained - scratch accuracy gap {results['accuracy_gap']:+.4f}")


if __name__ == "__main__":
    main()
