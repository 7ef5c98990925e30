"""Stage prepare: raw source -> deduplicated, stratified splits + pretraining corpus."""

import lmtransfer  # noqa: F401 - first: pins the CPU kernels, turns MLflow telemetry off
import mlflow

from lmtransfer.config import load_params
from lmtransfer.data.prepare import write_prepared
from lmtransfer.data.sources import load_source
from lmtransfer.paths import PARAMS, PREPARED
from lmtransfer.stage import stage_main
from lmtransfer.tracking import stage_run


@stage_main("prepare")
def main() -> None:
    params = load_params(PARAMS)
    raw = load_source(params.data)
    with stage_run("prepare", params.sections("data")):
        meta = write_prepared(raw, params.data, PREPARED, params.data.source)
        mlflow.log_metrics({f"examples_{k}": v for k, v in meta["examples"].items()})
        mlflow.log_metrics({f"corpus_lines_{k}": v for k, v in meta["corpus_lines"].items()})
        mlflow.log_metric("n_classes", len(meta["label_names"]))
        mlflow.log_dict(meta, "prepared_meta.json")
    print(f"prepare: {meta['examples']} labeled examples in {len(meta['label_names'])} classes, "
          f"{meta['corpus_lines']} corpus lines -> {PREPARED}")


if __name__ == "__main__":
    main()
