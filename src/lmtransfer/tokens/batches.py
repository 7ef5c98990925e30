"""Training batches: packed language-model windows and padded classification batches; only the batch being
trained on becomes a tensor (the ids stay as stored, possibly memory-mapped)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from lmtransfer.core.errors import ConfigError
from lmtransfer.tokens.id_files import LabeledSplit


class PackedBatches:
    """(inputs, targets) of shape (batch_size, seq_len) cut from one flat array of BOS ... EOS documents (no
    padding). Each epoch starts the windows at a new random offset and visits them in a new random order."""

    def __init__(self, ids: np.ndarray, seq_len: int, batch_size: int, seed: int = 0, what: str = "corpus"):
        if ids.size < seq_len + 1:
            raise ConfigError(
                f"{what} has {ids.size:,} tokens, fewer than pretrain.seq_len + 1 = {seq_len + 1}; "
                "lower pretrain.seq_len or add text"
            )
        self.ids, self.seq_len, self.batch_size = ids, seq_len, batch_size  # ids as stored: never copied whole
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
        for begin in range(0, min(len(starts), max_batches * self.batch_size), self.batch_size):
            yield self._gather(starts[begin : begin + self.batch_size])

    def _gather(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = starts.unsqueeze(1) + torch.arange(self.seq_len + 1)
        window = torch.from_numpy(np.asarray(self.ids[index.numpy()], dtype=np.int64))
        return window[:, :-1], window[:, 1:]


def pad_batch(sequences: list[np.ndarray], max_len: int, pad_id: int) -> torch.Tensor:
    """Right-pad to the longest sequence; longer ones keep their first max_len tokens (last-token pooling then
    reads the last kept piece, which has seen all of the kept text)."""
    width = min(max_len, max(len(s) for s in sequences))
    batch = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        sequence = sequence[:width]
        batch[row, : len(sequence)] = torch.from_numpy(sequence.astype(np.int64))
    return batch


def classification_batches(
    split: LabeledSplit, batch_size: int, max_len: int, pad_id: int, generator: np.random.Generator | None = None,
    bucketed: bool = True,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """In order without a generator (evaluation); with one, shuffled: `bucketed` into batches of similar lengths
    (little padding), else a random permutation cut into batches, as the original course drew them."""
    def cut(order: np.ndarray) -> list[np.ndarray]:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    if generator is None:
        batches = cut(np.arange(len(split)))
    elif not bucketed:
        batches = cut(generator.permutation(len(split)))
    else:
        order, lengths, bucket, batches = generator.permutation(len(split)), split.lengths(), batch_size * 50, []
        for begin in range(0, len(order), bucket):
            chunk = order[begin : begin + bucket]
            batches += cut(chunk[np.argsort(lengths[chunk], kind="stable")])
        batches = [batches[i] for i in generator.permutation(len(batches))]
    for indices in batches:
        ids = pad_batch([split.sequence(i) for i in indices], max_len, pad_id)
        yield ids, torch.from_numpy(split.labels[indices])
