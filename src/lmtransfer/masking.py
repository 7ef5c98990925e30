"""BERT's corruption for masked language modelling: which tokens to hide, and what to show instead.

Per sequence, `mask_prob` of its ordinary tokens (never padding, begin/end of text or
another special id) are chosen, at least one; of the chosen, 80% become `<mask>`,
10% a random ordinary token and 10% stay as they are, so the model cannot learn that
only `<mask>` positions matter. Only the chosen positions are scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from .model import IGNORE_INDEX

REPLACE_WITH_MASK, REPLACE_WITH_RANDOM = 0.8, 0.1  # the rest of the chosen tokens stay as they are


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
        """ids (B, T) -> (corrupted inputs, targets): targets hold the original id at the chosen positions and
        IGNORE_INDEX elsewhere. Draws from `generator` (validation: the same masks every time), else from
        torch's global generator (training: saved and restored with the resume snapshots)."""
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
