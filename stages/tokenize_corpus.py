"""Stage tokenize: train (or load) the tokenizer, encode the labeled splits (data/tokenized/) and the corpus
(data/tokenized_corpus/) to id arrays.

(Not named tokenize.py: that would shadow the standard library module of the same name.)
"""

import _checkout  # noqa: F401 - this checkout's src/ first (an experiment runs in a copy)
import lmtransfer  # noqa: F401 - first: pins the CPU kernels, turns MLflow telemetry off
import mlflow

from lmtransfer.config import load_params
from lmtransfer.paths import PARAMS, PREPARED, TOKENIZED, TOKENIZED_CORPUS
from lmtransfer.stage import stage_main
from lmtransfer.tokenize_data import tokenize_prepared
from lmtransfer.tracking import stage_run


@stage_main("tokenize")
def main() -> None:
    params = load_params(PARAMS)
    with stage_run("tokenize", params.sections("tokenizer")):
        meta = tokenize_prepared(PREPARED, TOKENIZED, params.tokenizer)
        mlflow.log_metrics({f"tokens_{k}": v for k, v in meta["tokens"].items()})
        mlflow.log_metrics({f"unknown_rate_{k}": v for k, v in meta["unknown_rate"].items()})
        mlflow.log_metric("vocab_size", meta["vocab_size"])
        mlflow.set_tag("tokenizer_scheme", meta["scheme"])
        for artifact in sorted(TOKENIZED.glob("*.txt")) + sorted(TOKENIZED.glob("*.model")):
            mlflow.log_artifact(str(artifact))
    print(f"tokenize: {meta['scheme']} vocabulary of {meta['vocab_size']:,}, tokens {meta['tokens']} -> {TOKENIZED} "
          f"(tokenizer, labeled splits), {TOKENIZED_CORPUS} (corpus)")


if __name__ == "__main__":
    main()
