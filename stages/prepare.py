"""Stage prepare: raw source -> labeled splits (given ones kept as given, train deduplicated and leak-free, missing
ones carved) in data/prepared/ + the pretraining corpus in data/prepared_corpus/."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

import mlflow

from lmtransfer.classification.config import load_params
from lmtransfer.classification.data.prepare import describe_removals, write_prepared
from lmtransfer.classification.data.sources import load_source
from lmtransfer.core.paths import PARAMS, PREPARED, PREPARED_CORPUS
from lmtransfer.data.prepared import read_corpus_meta
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import stage_run


@stage_main("prepare")
def main() -> None:
    params = load_params(PARAMS)
    raw = load_source(params.data)
    with stage_run("prepare", params.sections("data")):
        meta = write_prepared(raw, params.data, PREPARED, params.data.source)
        corpus_lines = read_corpus_meta(PREPARED)["corpus_lines"]
        mlflow.log_metrics({f"examples_{k}": v for k, v in meta["examples"].items()})
        mlflow.log_metrics({f"corpus_lines_{k}": v for k, v in corpus_lines.items()})
        mlflow.log_metrics({f"removed_{k}": v for k, v in meta["removed"].items()})
        mlflow.log_metric("n_classes", len(meta["label_names"]))
        mlflow.log_dict(meta, "prepared_meta.json")
    for line in describe_removals(meta):
        print(f"prepare: {line}")
    print(f"prepare: {meta['examples']} labeled examples in {len(meta['label_names'])} classes -> {PREPARED}, "
          f"{corpus_lines} corpus lines -> {PREPARED_CORPUS}")


if __name__ == "__main__":
    main()
