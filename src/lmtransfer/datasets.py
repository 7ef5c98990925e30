"""Batches for training: packed language-model windows (plain or masked), sentence pairs for
next-sentence prediction, and padded classification batches.

The data stays as stored (flat id arrays, possibly memory-mapped); only the
batch being trained on becomes a tensor.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch

from .errors import ConfigError
from .masking import TokenMasker
from .tokenized import LabeledSplit

VALIDATION_MASK_SEED = 1234  # validation corrupts the same tokens the same way at every measurement


class PackedBatches:
    """(inputs, targets) batches of shape (batch_size, seq_len) cut from one flat token array.

    Documents are concatenated (each framed by BOS ... EOS), so no compute is spent on
    padding. Each epoch starts the windows at a new random offset and visits them in a
    new random order.
    """

    def __init__(self, ids: np.ndarray, seq_len: int, batch_size: int, seed: int = 0, what: str = "corpus"):
        """`what` names the token stream in messages (`the corpus's validation part`)."""
        if ids.size < seq_len + 1:
            raise ConfigError(
                f"{what} has {ids.size:,} tokens, fewer than pretrain.seq_len + 1 = {seq_len + 1}; "
                "lower pretrain.seq_len or add text"
            )
        self.ids = ids  # kept as stored (uint16, possibly memory-mapped): a huge corpus is never copied whole
        self.seq_len, self.batch_size = seq_len, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def windows(self, offset: int) -> int:
        return (self.ids.size - 1 - offset) // self.seq_len

    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(self.windows(self.seq_len - 1) / self.batch_size))

    def epoch(self, skip: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass in a new random order; `skip` leaves out its first batches (a resumed epoch)."""
        offset = int(torch.randint(0, self.seq_len, (1,), generator=self.generator))
        n_windows = self.windows(offset)
        if n_windows == 0:
            offset, n_windows = 0, self.windows(0)
        starts = offset + torch.randperm(n_windows, generator=self.generator) * self.seq_len
        for begin in range(skip * self.batch_size, n_windows, self.batch_size):
            yield self._gather(starts[begin : begin + self.batch_size])

    def sequential(self, max_batches: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Fixed, ordered windows: the same validation batches every time."""
        starts = torch.arange(self.windows(0)) * self.seq_len
        for batch_index, begin in enumerate(range(0, len(starts), self.batch_size)):
            if batch_index >= max_batches:
                break
            yield self._gather(starts[begin : begin + self.batch_size])

    def _gather(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = starts.unsqueeze(1) + torch.arange(self.seq_len + 1)
        window = torch.from_numpy(np.asarray(self.ids[index.numpy()], dtype=np.int64))
        return window[:, :-1], window[:, 1:]


class MaskedWindows(PackedBatches):
    """Packed windows for masked language modelling: `seq_len` tokens, the first replaced by the begin-of-text
    id (BERT's [CLS], where classification's `first` pooling and next-sentence prediction read), then
    corrupted by `masker`. Yields (inputs, targets) with targets IGNORE_INDEX where nothing is scored."""

    def __init__(self, ids: np.ndarray, seq_len: int, batch_size: int, masker: TokenMasker, cls_id: int,
                 seed: int = 0, what: str = "corpus"):
        super().__init__(ids, seq_len, batch_size, seed, what)
        self.masker, self.cls_id = masker, cls_id
        self.mask_generator: torch.Generator | None = None  # None: torch's global generator (training)

    def sequential(self, max_batches: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.mask_generator = torch.Generator().manual_seed(VALIDATION_MASK_SEED)
        try:
            yield from super().sequential(max_batches)
        finally:
            self.mask_generator = None

    def _gather(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        window, _ = super()._gather(starts)
        window[:, 0] = self.cls_id
        return self.masker(window, self.mask_generator)


class SentencePairs:
    """BERT's next-sentence prediction data: `[CLS] A [SEP] B [SEP]` with A a run of consecutive documents
    (corpus lines) and B, half the time, the documents that follow A in the corpus, else a run starting at a
    random document. Segment ids are 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`; begin/end-of-text ids serve as
    [CLS]/[SEP]. Both segments are masked like `MaskedWindows`; an epoch has as many batches as the packed
    windows would, so `pretrain.max_steps` and `pretrain.epochs` mean the same budget.

    Yields (inputs, targets, segments, is_next), right-padded to the longest pair of the batch."""

    def __init__(self, ids: np.ndarray, seq_len: int, batch_size: int, masker: TokenMasker, bos_id: int,
                 eos_id: int, pad_id: int, seed: int = 0, what: str = "corpus"):
        packed = PackedBatches(ids, seq_len, batch_size, what=what)  # the same length checks and budget
        self.n_batches = packed.steps_per_epoch()
        self.ids, self.seq_len, self.batch_size, self.masker = ids, seq_len, batch_size, masker
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        stream = np.asarray(ids)
        starts = np.flatnonzero(stream == bos_id) + 1  # the first token after BOS
        ends = np.flatnonzero(stream == eos_id)
        end_index = np.searchsorted(ends, starts)
        complete = end_index < len(ends)  # a stream cut mid-document leaves its last one open
        self.doc_starts, self.doc_ends = starts[complete], ends[end_index[complete]]
        if len(self.doc_starts) < 3:
            raise ConfigError(f"{what} needs at least 3 documents framed begin ... end of text for "
                              "pretrain.nsp (sentence pairs)")
        self.generator = torch.Generator().manual_seed(seed)
        self.mask_generator: torch.Generator | None = None

    def steps_per_epoch(self) -> int:
        return self.n_batches

    def epoch(self, skip: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        """One epoch's pairs, all drawn up front from the generator, so a resumed epoch (`skip`) is the same."""
        plan = self._draw(self.n_batches * self.batch_size, self.generator)
        for begin in range(skip * self.batch_size, len(plan[0]), self.batch_size):
            yield self._batch(*(column[begin : begin + self.batch_size] for column in plan))

    def sequential(self, max_batches: int) -> Iterator[tuple[torch.Tensor, ...]]:
        """The same validation pairs and masks every time."""
        generator = torch.Generator().manual_seed(VALIDATION_MASK_SEED)
        plan = self._draw(min(max_batches, self.n_batches) * self.batch_size, generator)
        self.mask_generator = generator
        try:
            for begin in range(0, len(plan[0]), self.batch_size):
                yield self._batch(*(column[begin : begin + self.batch_size] for column in plan))
        finally:
            self.mask_generator = None

    def _draw(self, n: int, generator: torch.Generator) -> tuple[np.ndarray, ...]:
        n_docs = len(self.doc_starts)
        first = torch.randint(0, n_docs - 1, (n,), generator=generator).numpy()
        is_next = (torch.rand(n, generator=generator) < 0.5).numpy()
        elsewhere = torch.randint(0, n_docs, (n,), generator=generator).numpy()
        split = (0.25 + 0.5 * torch.rand(n, generator=generator)).numpy()  # A's share of the length
        return first, is_next, elsewhere, split

    def _run(self, doc: int, budget: int) -> tuple[list[int], int]:
        """Consecutive documents from `doc` on, at least one, until `budget` tokens (the last one cut), and the
        document after them."""
        tokens: list[int] = []
        while doc < len(self.doc_starts) and (not tokens or len(tokens) < budget):
            tokens += np.asarray(self.ids[self.doc_starts[doc] : self.doc_ends[doc]]).tolist()
            doc += 1
        return tokens[:budget], doc

    def _pair(self, first: int, is_next: bool, elsewhere: int, split: float) -> tuple[list[int], list[int], int]:
        budget = self.seq_len - 3  # [CLS] A [SEP] B [SEP]
        a, after_a = self._run(first, max(1, int(budget * split)))
        if is_next and after_a < len(self.doc_starts):
            b_start, label = after_a, 1
        else:
            b_start, label = (elsewhere if elsewhere != after_a else (elsewhere + 1) % len(self.doc_starts)), 0
        b, _ = self._run(b_start, max(1, budget - len(a)))
        ids = [self.bos_id, *a, self.eos_id, *b, self.eos_id]
        segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        return ids, segments, label

    def _batch(self, first, is_next, elsewhere, split) -> tuple[torch.Tensor, ...]:
        pairs = [self._pair(int(f), bool(n), int(e), float(s)) for f, n, e, s in zip(first, is_next, elsewhere, split)]
        width = max(len(ids) for ids, _, _ in pairs)
        ids = torch.full((len(pairs), width), self.pad_id, dtype=torch.long)
        segments = torch.zeros((len(pairs), width), dtype=torch.long)
        for row, (pair_ids, pair_segments, _) in enumerate(pairs):
            ids[row, : len(pair_ids)] = torch.tensor(pair_ids)
            segments[row, : len(pair_segments)] = torch.tensor(pair_segments)
        inputs, targets = self.masker(ids, self.mask_generator)
        labels = torch.tensor([label for _, _, label in pairs], dtype=torch.long)
        return inputs, targets, segments, labels


def pad_batch(sequences: list[np.ndarray], max_len: int, pad_id: int) -> torch.Tensor:
    """Right-pad to the longest sequence; longer ones keep their first max_len tokens.

    Last-token pooling then reads the last kept piece, which has seen all of the kept text.
    """
    width = min(max_len, max(len(s) for s in sequences))
    batch = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        sequence = sequence[:width]
        batch[row, : len(sequence)] = torch.from_numpy(sequence.astype(np.int64))
    return batch


def classification_batches(
    split: LabeledSplit, batch_size: int, max_len: int, pad_id: int, generator: np.random.Generator | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled, length-bucketed batches (little compute wasted on padding) when a generator is given;
    in order otherwise."""
    if generator is None:
        batches = [np.arange(i, min(i + batch_size, len(split))) for i in range(0, len(split), batch_size)]
    else:
        order = generator.permutation(len(split))
        lengths = split.lengths()
        bucket = batch_size * 50
        batches = []
        for begin in range(0, len(order), bucket):
            chunk = order[begin : begin + bucket]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
        batches = [batches[i] for i in generator.permutation(len(batches))]
    for indices in batches:
        ids = pad_batch([split.sequence(i) for i in indices], max_len, pad_id)
        yield ids, torch.from_numpy(split.labels[indices])
