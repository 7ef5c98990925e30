"""Sentence pairs as ids: written by the translation tokenize stage, batched for training and decoding.

    translation/data/tokenized/
        train_pairs.npz valid_pairs.npz test_pairs.npz   source and target: flat ids + offsets (n+1) each
        meta.json, the tokenizer                         as for classification (what pretraining reads)

Each side is framed BOS + pieces + EOS. The encoder reads the source whole; the
decoder reads BOS + target and is scored on target + EOS (one position ahead).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from lmtransfer.tokens.batches import pad_batch
from lmtransfer.tokens.id_files import PairSplit
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
