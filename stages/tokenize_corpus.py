"""Stage tokenize: train sentencepiece on the pretraining corpus, encode everything to id arrays.

(Not named tokenize.py: that would shadow the standard library module of the same name.)
"""

import mlflow

from lmtransfer.config import load_params
from lmtransfer.paths import PARAMS, PREPARED, TOKENIZED
from lmtransfer.stage import stage_main
from lmtransfer.tokenizer import tokenize_prepared
from lmtransfer.tracking import stage_run


@stage_main("tokenize")
def main() -> None:
    params = load_params(PARAMS)
    with stage_run("tokenize", params.sections("tokenizer")):
        meta = tokenize_prepared(PREPARED, TOKENIZED, params.tokenizer)
        mlflow.log_metrics({f"tokens_{k}": v for k, v in meta["tokens"].items()})
        mlflow.log_metric("vocab_size", meta["vocab_size"])
        mlflow.log_artifact(str(TOKENIZED / "spm.model"))
    print(f"tokenize: vocabulary {meta['vocab_size']}, tokens {meta['tokens']} -> {TOKENIZED}")


if __name__ == "__main__":
    main()
