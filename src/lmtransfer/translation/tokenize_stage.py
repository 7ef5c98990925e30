"""The translation tokenize stage: one sentencepiece model over both languages (trained on the corpus, which holds
both sides of the train pairs), the corpus encoded as for classification, each split's pairs as BOS + pieces + EOS."""

from __future__ import annotations

import time

import numpy as np

from lmtransfer.core.io import atomic_directory
from lmtransfer.core.paths import PREPARED, TOKENIZED, TOKENIZED_CORPUS
from lmtransfer.data.prepared import SPLITS
from lmtransfer.harness.tracking import log_file, log_run, stage_run
from lmtransfer.tokens.encode_splits import build_tokenizer, encode_corpus, tokenizer_meta, warn_unknown
from lmtransfer.tokens.id_files import PairSplit, write_pair_split, write_tokenized_meta
from lmtransfer.tokens.tokenizer import encode_documents, save_tokenizer
from lmtransfer.translation.data.parallel import read_pairs


def run_tokenize_stage(params, logged: dict) -> None:
    """`params`: the tokenizer section."""
    with stage_run("tokenize", logged):
        started = time.perf_counter()
        tokenizer = build_tokenizer(PREPARED, params, 0)
        train_seconds = round(time.perf_counter() - started, 2)
        corpus_meta, timings = encode_corpus(PREPARED, TOKENIZED, tokenizer)
        meta = {**tokenizer_meta(tokenizer), "task": "translation", "pairs": {}, "tokens": {}, "unknown_rate": {},
                "longest": {}}
        with atomic_directory(TOKENIZED) as tmp:
            save_tokenizer(tokenizer, tmp)
            for name in SPLITS:
                pairs = read_pairs(PREPARED, name)
                split = PairSplit(*encode_documents(tokenizer, list(pairs["source"])),
                                  *encode_documents(tokenizer, list(pairs["target"])))
                write_pair_split(tmp, name, split)
                meta["pairs"][name] = len(split)
                for side, ids in (("source", split.source_ids), ("target", split.target_ids)):
                    meta["tokens"][f"{name}_{side}"] = int(ids.size)
                    meta["unknown_rate"][f"{name}_{side}"] = round(
                        int(np.count_nonzero(ids == tokenizer.unk_id)) / max(ids.size - 2 * len(split), 1), 6)
                meta["longest"][name] = int(max(split.source_lengths().max(initial=0),
                                                split.target_lengths().max(initial=0)))
            write_tokenized_meta(tmp, meta)
        warn_unknown({**corpus_meta["unknown_rate"], **meta["unknown_rate"]}, print)
        tokens = {**corpus_meta["tokens"], **meta["tokens"]}
        log_run(metrics={**{f"tokens_{k}": v for k, v in tokens.items()}, "vocab_size": meta["vocab_size"],
                         **{f"unknown_rate_{k}": v for k, v in meta["unknown_rate"].items()}})
        log_file(TOKENIZED / "vocab.txt", "")
    print(f"tokenize: {meta['vocab_size']:,} pieces shared by both languages; pairs {meta['pairs']}, longest "
          f"{meta['longest']} tokens -> {TOKENIZED}; corpus -> {TOKENIZED_CORPUS} "
          f"(tokenizer trained in {train_seconds:.1f} s)")
