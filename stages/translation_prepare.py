"""Translation stage prepare: sentence pairs (bible-en-fr or your files) split leak-free -> data/prepared/, and the
pretraining text of both languages -> data/prepared_corpus/ (paths inside translation/)."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

import mlflow

from lmtransfer.core.paths import PARAMS, PREPARED, PREPARED_CORPUS
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import stage_run
from lmtransfer.translation.config import load_translation_params
from lmtransfer.translation.data.parallel import load_parallel, write_parallel


@stage_main("prepare")
def main() -> None:
    params = load_translation_params(PARAMS)
    data = load_parallel(params.data)  # a bad file stops here, before any output is replaced
    with stage_run("prepare", params.sections("data")):
        meta = write_parallel(data, PREPARED, {"source": params.data.source})
        mlflow.log_metrics({f"pairs_{k}": v for k, v in meta["pairs"].items()})
        mlflow.log_metrics({f"corpus_lines_{k}": v for k, v in meta["corpus_lines"].items()})
        mlflow.log_dict(meta, "prepared_meta.json")
    for reason, count in meta["removed"].items():
        print(f"prepare: removed {count:,} train pairs ({reason.replace('_', ' ')})")
    if meta["clause_pairs"]:
        print(f"prepare: {meta['clause_pairs']:,} clause pairs cut from longer training pairs joined train "
              "(data.clause_pairs)")
    print(f"prepare: {meta['pairs']} sentence pairs -> {PREPARED}, {meta['corpus_lines']} corpus lines (both "
          f"languages) -> {PREPARED_CORPUS}")


if __name__ == "__main__":
    main()
