"""Stage tokenize: train (or load) the tokenizer, encode the labeled splits (data/tokenized/) and the corpus
(data/tokenized_corpus/) to id arrays.

(Not named tokenize.py: that would shadow the standard library module of the same name.)
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

import mlflow

from lmtransfer.classification.config import load_params
from lmtransfer.core.io import write_timings
from lmtransfer.core.paths import PARAMS, PREPARED, TOKENIZED, TOKENIZED_CORPUS, timings_file
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import log_tokenization, stage_run
from lmtransfer.tokens.tokenize_data import tokenize_prepared


@stage_main("tokenize")
def main() -> None:
    params = load_params(PARAMS)
    with stage_run("tokenize", params.sections("tokenizer")):
        meta = tokenize_prepared(PREPARED, TOKENIZED, params.tokenizer)
        log_tokenization(meta)
        mlflow.set_tag("tokenizer_scheme", meta["scheme"])
        for artifact in sorted(TOKENIZED.glob("*.txt")) + sorted(TOKENIZED.glob("*.model")):
            mlflow.log_artifact(str(artifact))
        timings = meta["timings"]
        timings["encode_tokens_per_second"] = round(timings["corpus_tokens"] / max(timings["encode_seconds"], 1e-9))
        timings["encode_megabytes_per_second"] = round(timings["corpus_bytes"] / 2**20 / max(timings["encode_seconds"], 1e-9), 2)
        write_timings(timings_file("tokenize"), timings)
        mlflow.log_metrics({f"final_{k}": float(v) for k, v in timings.items()})
    print(f"tokenize: {meta['scheme']} vocabulary of {meta['vocab_size']:,}, tokens {meta['tokens']} -> {TOKENIZED} "
          f"(tokenizer, labeled splits), {TOKENIZED_CORPUS} (corpus)")
    print(f"tokenize: tokenizer in {timings['train_seconds']:.1f} s; corpus of {timings['corpus_bytes'] / 2**20:,.1f} MB "
          f"encoded in {timings['encode_seconds']:.1f} s ({timings['encode_megabytes_per_second']:.1f} MB/s, "
          f"{timings['encode_tokens_per_second']:,} tokens/s)")


if __name__ == "__main__":
    main()
