"""Translation stage tokenize: one sentencepiece model over both languages; the corpus (data/tokenized_corpus/)
and the sentence pairs (data/tokenized/) as ids."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

import mlflow

from lmtransfer.core.paths import PARAMS, PREPARED, TOKENIZED, TOKENIZED_CORPUS
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import log_tokenization, stage_run
from lmtransfer.translation.batches import tokenize_parallel
from lmtransfer.translation.config import load_translation_params


@stage_main("tokenize")
def main() -> None:
    params = load_translation_params(PARAMS)
    with stage_run("tokenize", params.sections("tokenizer")):
        meta = tokenize_parallel(PREPARED, TOKENIZED, params.tokenizer)
        log_tokenization(meta)
        mlflow.log_artifact(str(TOKENIZED / "vocab.txt"))
    print(f"tokenize: {meta['vocab_size']:,} pieces shared by both languages; pairs {meta['pairs']}, longest "
          f"{meta['longest']} tokens -> {TOKENIZED}; corpus -> {TOKENIZED_CORPUS} "
          f"(tokenizer trained in {meta['timings']['train_seconds']:.1f} s)")


if __name__ == "__main__":
    main()
