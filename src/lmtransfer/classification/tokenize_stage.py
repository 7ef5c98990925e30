"""The classification tokenize stage: the tokenizer (trained or given), then every prepared part encoded as ids."""

from __future__ import annotations

from lmtransfer.core.config import TokenizerParams
from lmtransfer.core.io import write_timings
from lmtransfer.harness.tracking import log_file, log_run, stage_run
from lmtransfer.tokens.encode_splits import tokenize_prepared


def run_tokenize_stage(params: TokenizerParams, logged: dict) -> None:
    from lmtransfer.core.paths import PREPARED, TOKENIZED, TOKENIZED_CORPUS, timings_file

    with stage_run("tokenize", logged):
        meta = tokenize_prepared(PREPARED, TOKENIZED, params)
        log_run(metrics={**{f"tokens_{k}": v for k, v in meta["tokens"].items()}, "vocab_size": meta["vocab_size"],
                         **{f"unknown_rate_{k}": v for k, v in meta["unknown_rate"].items()}})
        log_run(tags={"tokenizer_scheme": meta["scheme"]})
        for artifact in sorted(TOKENIZED.glob("*.txt")) + sorted(TOKENIZED.glob("*.model")):
            log_file(artifact, "")
        timings, seconds = meta["timings"], max(meta["timings"]["encode_seconds"], 1e-9)
        timings["encode_tokens_per_second"] = round(timings["corpus_tokens"] / seconds)
        timings["encode_megabytes_per_second"] = round(timings["corpus_bytes"] / 2**20 / seconds, 2)
        write_timings(timings_file("tokenize"), timings)
        log_run(metrics={f"final_{k}": v for k, v in timings.items()})
    print(f"tokenize: {meta['scheme']} vocabulary of {meta['vocab_size']:,}, tokens {meta['tokens']} -> {TOKENIZED} "
          f"(tokenizer, labeled splits), {TOKENIZED_CORPUS} (corpus)")
    print(f"tokenize: tokenizer in {timings['train_seconds']:.1f} s; corpus of {timings['corpus_bytes'] / 2**20:,.1f} MB "
          f"encoded in {timings['encode_seconds']:.1f} s ({timings['encode_megabytes_per_second']:.1f} MB/s, "
          f"{timings['encode_tokens_per_second']:,} tokens/s)")
