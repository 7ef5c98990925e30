"""Translation stage tokenize: one sentencepiece model over both languages; the corpus (data/tokenized_corpus/)
and the sentence pairs (data/tokenized/) as ids."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main
from lmtransfer.translation.config import load_translation_params
from lmtransfer.translation.prepare_stage import run_tokenize_stage


@stage_main("tokenize")
def main() -> None:
    params = load_translation_params(PARAMS)
    run_tokenize_stage(params.tokenizer, params.sections("tokenizer"))


if __name__ == "__main__":
    main()
