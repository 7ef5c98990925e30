"""Stage tokenize: train (or load) the tokenizer, encode the labeled splits (data/tokenized/) and the corpus
(data/tokenized_corpus/). Not named tokenize.py, which would shadow the standard library's module."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_classification_params
from lmtransfer.classification.tokenize_stage import run_tokenize_stage
from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main


@stage_main("tokenize")
def main() -> None:
    params = load_classification_params(PARAMS)
    run_tokenize_stage(params.tokenizer, params.sections("tokenizer"))


if __name__ == "__main__":
    main()
