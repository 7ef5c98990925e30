"""Sentence pairs as ids: written by the translation tokenize stage, batched for training and decoding.

    translation/data/tokenized/
        train_pairs.npz valid_pairs.npz test_pairs.npz   source and target: flat ids + offsets (n+1) each
        meta.json, the tokenizer                         as for classification (what pretraining reads)

Each side is framed BOS + pieces + EOS. The encoder reads the source whole; the
decoder reads BOS + target and is scored on target + EOS (one position ahead).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmtransfer.core.io import atomic_directory
from lmtransfer.tokens.datasets import pad_batch
from lmtransfer.tokens.tokenized import PairSplit, write_pair_split
from lmtransfer.tokens.tokenizer import Tokenizer, encode_documents


def encode_pairs(tokenizer: Tokenizer, sources: Sequence[str], targets: Sequence[str]) -> PairSplit:
    """Both sides as BOS + pieces + EOS with the one tokenizer both languages share."""
    source_ids, source_offsets = encode_documents(tokenizer, sources)
    target_ids, target_offsets = encode_documents(tokenizer, targets)
    return PairSplit(source_ids, source_offsets, target_ids, target_offsets)


def trainable_pairs(split: PairSplit, max_len: int) -> np.ndarray:
    """Indices of the pairs whose two sides fit `max_len` tokens: longer ones are left out, never cut."""
    return np.flatnonzero((split.source_lengths() <= max_len) & (split.target_lengths() <= max_len))


def pad_rows(rows: Sequence[np.ndarray], pad_id: int) -> torch.Tensor:
    """Right-padded (B, longest) int64 tensor: classification's padding, with nothing cut."""
    return pad_batch(list(rows), max(len(r) for r in rows), pad_id)


def pair_batches(split: PairSplit, indices: np.ndarray, batch_size: int, pad_id: int,
                 generator: np.random.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(source, target_in, target_out) batches of pairs of similar length, in random order.

    The pairs are shuffled, sorted by length within windows of 50 batches (little padding, some randomness
    in who shares a batch), then the batches themselves are shuffled."""
    order = generator.permutation(indices)
    window = batch_size * 50
    lengths = split.source_lengths() + split.target_lengths()
    batches = []
    for begin in range(0, len(order), window):
        chunk = order[begin: begin + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size)]
    for position in generator.permutation(len(batches)):
        chosen = batches[position]
        source = pad_rows([split.source(i) for i in chosen], pad_id)
        target = pad_rows([split.target(i) for i in chosen], pad_id)
        yield source, target[:, :-1], target[:, 1:]


def steps_per_epoch(n_pairs: int, batch_size: int) -> int:
    """What `pair_batches` yields: each window of 50 batches rounds its last batch up."""
    window = batch_size * 50
    full, rest = divmod(n_pairs, window)
    return full * 50 + -(-rest // batch_size)


def tokenize_parallel(prepared_dir: Path, out_dir: Path, params, seed: int = 0, warn=print) -> dict:
    """The translation tokenize stage: one sentencepiece model over both languages (trained on the corpus, which
    holds both sides of the train pairs), the corpus encoded as for classification, each split's pairs as ids."""
    from lmtransfer.data.prepared import SPLITS
    from lmtransfer.tokens.tokenize_data import build_tokenizer, encode_corpus, tokenizer_meta, warn_unknown
    from lmtransfer.tokens.tokenized import write_tokenized_meta
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


def run_translation_tokenize_stage(params: Any, logged: dict) -> None:
    """The translation pipeline's tokenize stage (`params`: its tokenizer section): one sentencepiece model over both
    languages, the corpus and the pairs as ids."""
    from lmtransfer.core.paths import PREPARED, TOKENIZED, TOKENIZED_CORPUS
    from lmtransfer.harness.tracking import log_file, log_tokenization, stage_run

    with stage_run("tokenize", logged):
        meta = tokenize_parallel(PREPARED, TOKENIZED, params)
        log_tokenization(meta)
        log_file(TOKENIZED / "vocab.txt", "")
    print(f"tokenize: {meta['vocab_size']:,} pieces shared by both languages; pairs {meta['pairs']}, longest "
          f"{meta['longest']} tokens -> {TOKENIZED}; corpus -> {TOKENIZED_CORPUS} "
          f"(tokenizer trained in {meta['timings']['train_seconds']:.1f} s)")
