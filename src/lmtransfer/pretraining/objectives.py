"""Pretraining objectives: `clm`, the next token at every position of packed windows (causal attention); `mlm`,
BERT's masked tokens predicted from both sides, on packed windows that start with [CLS] (`MaskedWindows`), or with
next-sentence prediction on sentence pairs (`SentencePairs`). Per sequence `mask_prob` of the ordinary tokens are
chosen (at least one): 80% become `<mask>`, 10% a random ordinary token, 10% stay; only they are scored."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

from lmtransfer.core.config import PretrainParams
from lmtransfer.core.errors import ConfigError
from lmtransfer.modeling.model import IGNORE_INDEX, LanguageModel, MaskedLanguageModel, ModelConfig
from lmtransfer.tokens.batches import PackedBatches
from lmtransfer.tokens.tokenizer import real_mask_id

REPLACE_WITH_MASK, REPLACE_WITH_RANDOM = 0.8, 0.1  # the rest of the chosen tokens stay as they are
VALIDATION_MASK_SEED = 1234  # validation corrupts the same tokens the same way at every measurement


@dataclass(frozen=True)
class TokenMasker:
    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...]  # never chosen, never drawn as a random replacement
    mask_prob: float = 0.15

    @cached_property
    def ordinary_ids(self) -> torch.Tensor:
        keep = torch.ones(self.vocab_size, dtype=torch.bool)
        keep[list({*self.special_ids, self.mask_id})] = False
        return keep.nonzero().squeeze(1)

    def __call__(self, ids: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, T) -> (corrupted inputs, targets: the original id where chosen, else IGNORE_INDEX); draws from
        `generator` (validation), else torch's global one (saved by the snapshots)."""
        eligible = torch.ones_like(ids, dtype=torch.bool)
        for special in {*self.special_ids, self.mask_id}:
            eligible &= ids.ne(special)
        # exactly round(mask_prob x ordinary tokens) per sequence (at least one): the lowest random scores win
        n_chosen = (eligible.sum(dim=1, keepdim=True) * self.mask_prob).round().clamp(min=1)
        scores = torch.rand(ids.shape, generator=generator).masked_fill(~eligible, 2.0)
        rank = scores.argsort(dim=1).argsort(dim=1)
        chosen = (rank < n_chosen) & eligible
        targets = ids.masked_fill(~chosen, IGNORE_INDEX)
        action = torch.rand(ids.shape, generator=generator)
        to_mask = chosen & (action < REPLACE_WITH_MASK)
        to_random = chosen & (action >= REPLACE_WITH_MASK) & (action < REPLACE_WITH_MASK + REPLACE_WITH_RANDOM)
        ordinary = self.ordinary_ids
        random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]
        inputs = ids.masked_fill(to_mask, self.mask_id)
        inputs = torch.where(to_random, random_ids, inputs)
        return inputs, targets


class MaskedWindows(PackedBatches):
    """Packed windows, the first token replaced by the begin-of-text id (BERT's [CLS]), corrupted by `masker`."""

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


def _positions(ids: np.ndarray, value: int, chunk: int = 1 << 24) -> np.ndarray:
    """Where `value` occurs in `ids`, a chunk at a time: a memory-mapped corpus is never compared whole."""
    found = [np.flatnonzero(np.asarray(ids[begin : begin + chunk]) == value) + begin
             for begin in range(0, len(ids), chunk)]
    return np.concatenate(found) if found else np.zeros(0, np.int64)


class SentencePairs:
    """BERT's next-sentence prediction: `[CLS] A [SEP] B [SEP]` (begin/end-of-text ids), A consecutive documents and
    B, half the time, those that follow A, else a run from a random document; segments 0 then 1; masked. An epoch
    has as many batches as the packed windows (the same budget). Yields (inputs, targets, segments, is_next)."""

    def __init__(self, ids: np.ndarray, seq_len: int, batch_size: int, masker: TokenMasker, bos_id: int,
                 eos_id: int, pad_id: int, seed: int = 0, what: str = "corpus"):
        packed = PackedBatches(ids, seq_len, batch_size, what=what)  # the same length checks and budget
        self.n_batches = packed.steps_per_epoch()
        self.ids, self.seq_len, self.batch_size, self.masker = ids, seq_len, batch_size, masker
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        starts = _positions(ids, bos_id) + 1  # the first token after BOS
        ends = _positions(ids, eos_id)
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
        yield from self._batches(self._draw(self.n_batches * self.batch_size, self.generator), skip)

    def sequential(self, max_batches: int) -> Iterator[tuple[torch.Tensor, ...]]:  # the same pairs and masks each time
        generator = torch.Generator().manual_seed(VALIDATION_MASK_SEED)
        plan = self._draw(min(max_batches, self.n_batches) * self.batch_size, generator)
        self.mask_generator = generator
        try:
            yield from self._batches(plan)
        finally:
            self.mask_generator = None

    def _batches(self, plan: tuple[np.ndarray, ...], skip: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        for begin in range(skip * self.batch_size, len(plan[0]), self.batch_size):
            yield self._batch(*(column[begin : begin + self.batch_size] for column in plan))

    def _draw(self, n: int, generator: torch.Generator) -> tuple[np.ndarray, ...]:
        n_docs = len(self.doc_starts)
        first = torch.randint(0, n_docs - 1, (n,), generator=generator).numpy()
        is_next = (torch.rand(n, generator=generator) < 0.5).numpy()
        elsewhere = torch.randint(0, n_docs, (n,), generator=generator).numpy()
        split = (0.25 + 0.5 * torch.rand(n, generator=generator)).numpy()  # A's share of the length
        return first, is_next, elsewhere, split

    def _run(self, doc: int, budget: int) -> tuple[list[int], int]:
        """Consecutive documents from `doc` on, at least one, up to `budget` tokens, and the document after them."""
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


@dataclass(frozen=True)
class Objective:
    name: str = "clm"
    masker: TokenMasker | None = None  # mlm only
    bos_id: int = 2
    eos_id: int = 3
    pad_id: int = 0
    next_sentence: bool = False

    @classmethod
    def from_params(cls, params: PretrainParams, meta: dict[str, Any]) -> Objective:
        """The objective `pretrain.*` asks for over the tokenized data's ids (`data/tokenized/meta.json`)."""
        ids = {key: meta[key] for key in ("bos_id", "eos_id", "pad_id")}
        if params.objective == "clm":
            return cls("clm", **ids)
        mask_id = real_mask_id(meta.get("mask_id"), meta["unk_id"])
        if mask_id is None:
            raise ConfigError(
                "pretrain.objective: mlm needs a <mask> token, and this tokenizer has none (a tokenizer.vocab_file "
                "dictionary or a tokenizer.model_file without <mask>); use the tokenizer the pipeline trains "
                "(tokenizer.model_file: '', tokenizer.vocab_file: '') or pretrain.objective: clm"
            )
        specials = (meta["pad_id"], meta["unk_id"], meta["bos_id"], meta["eos_id"], mask_id)
        masker = TokenMasker(mask_id, meta["vocab_size"], specials, params.mask_prob)
        return cls("mlm", masker, next_sentence=params.nsp, **ids)

    def build_model(self, config: ModelConfig) -> LanguageModel:
        if self.name == "mlm":
            return MaskedLanguageModel(config, next_sentence=self.next_sentence)
        return LanguageModel(config)

    def checkpoint_fields(self) -> dict[str, Any]:
        """What a pretrained checkpoint records, so fine-tuning, `fill` and `generate` rebuild the right model."""
        return {"objective": self.name, "next_sentence": self.next_sentence}

    def train_batches(self, ids: np.ndarray, params: PretrainParams, seed: int, what: str):
        return self._pairs(ids, params, seed, what) if self.next_sentence else self._windows(ids, params, seed, what)

    def valid_batches(self, ids: np.ndarray, params: PretrainParams, seed: int, what: str) -> tuple:
        """(windows, pairs or None): masked-token scores from the same windows with or without next-sentence
        prediction, so the two compare; pairs add its accuracy."""
        windows = self._windows(ids, params, seed, what)
        return windows, (self._pairs(ids, params, seed, what) if self.next_sentence else None)

    def _windows(self, ids: np.ndarray, params: PretrainParams, seed: int, what: str) -> PackedBatches:
        if self.name == "clm":
            return PackedBatches(ids, params.seq_len, params.batch_size, seed, what)
        return MaskedWindows(ids, params.seq_len, params.batch_size, self.masker, self.bos_id, seed, what)

    def _pairs(self, ids: np.ndarray, params: PretrainParams, seed: int, what: str) -> SentencePairs:
        return SentencePairs(ids, params.seq_len, params.batch_size, self.masker, self.bos_id, self.eos_id,
                             self.pad_id, seed, what)
