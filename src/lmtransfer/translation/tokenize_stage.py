"""The translation tokenize stage: one sentencepiece model over both languages, the corpus and each split's sentence
pairs as ids."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from lmtransfer.core.io import atomic_directory
from lmtransfer.tokens.id_files import PairSplit, write_pair_split
from lmtransfer.tokens.tokenizer import Tokenizer, encode_documents


def encode_pairs(tokenizer: Tokenizer, sources: list[str], targets: list[str]) -> PairSplit:
    """Both sides as BOS + pieces + EOS with the one tokenizer both languages share."""
    return PairSplit(*encode_documents(tokenizer, sources), *encode_documents(tokenizer, targets))


def tokenize_parallel(prepared_dir: Path, out_dir: Path, params, seed: int = 0, warn=print) -> dict:
    """The tokenizer trained on the corpus (both sides of the train pairs), the corpus as for classification."""
    from lmtransfer.data.prepared import SPLITS
    from lmtransfer.tokens.encode_splits import build_tokenizer, encode_corpus, tokenizer_meta, warn_unknown
    from lmtransfer.tokens.id_files import write_tokenized_meta
    from lmtransfer.tokens.tokenizer import save_tokenizer
    from lmtransfer.translation.data.parallel import read_pairs

    started = time.perf_counter()
    tokenizer = build_tokenizer(prepared_dir, params, seed)
    train_seconds = round(time.perf_counter() - started, 2)
    corpus_meta, timings = encode_corpus(prepared_dir, out_dir, tokenizer)
    meta = {**tokenizer_meta(tokenizer), "task": "translation", "pairs": {}, "tokens": {}, "unknown_rate": {},
            "longest": {}}
    with atomic_directory(out_dir) as tmp:
        save_tokenizer(tokenizer, tmp)
        for name in SPLITS:
            pairs = read_pairs(prepared_dir, name)
            split = encode_pairs(tokenizer, list(pairs["source"]), list(pairs["target"]))
            write_pair_split(tmp, name, split)
            meta["pairs"][name] = len(split)
            for side, ids in (("source", split.source_ids), ("target", split.target_ids)):
                meta["tokens"][f"{name}_{side}"] = int(ids.size)
                meta["unknown_rate"][f"{name}_{side}"] = round(
                    int(np.count_nonzero(ids == tokenizer.unk_id)) / max(ids.size - 2 * len(split), 1), 6)
            meta["longest"][name] = int(max(split.source_lengths().max(initial=0),
                                            split.target_lengths().max(initial=0)))
        write_tokenized_meta(tmp, meta)
    warn_unknown({**corpus_meta["unknown_rate"], **meta["unknown_rate"]}, warn)
    return {**meta, "tokens": {**corpus_meta["tokens"], **meta["tokens"]},
            "timings": {"train_seconds": train_seconds, **timings}}


def run_tokenize_stage(params: Any, logged: dict) -> None:
    from lmtransfer.core.paths import PREPARED, TOKENIZED, TOKENIZED_CORPUS
    from lmtransfer.harness.tracking import log_file, log_run, stage_run

    with stage_run("tokenize", logged):
        meta = tokenize_parallel(PREPARED, TOKENIZED, params)
        log_run(metrics={**{f"tokens_{k}": v for k, v in meta["tokens"].items()}, "vocab_size": meta["vocab_size"],
                         **{f"unknown_rate_{k}": v for k, v in meta["unknown_rate"].items()}})
        log_file(TOKENIZED / "vocab.txt", "")
    print(f"tokenize: {meta['vocab_size']:,} pieces shared by both languages; pairs {meta['pairs']}, longest "
          f"{meta['longest']} tokens -> {TOKENIZED}; corpus -> {TOKENIZED_CORPUS} "
          f"(tokenizer trained in {meta['timings']['train_seconds']:.1f} s)")
