"""Turning a trained `TranslationModel` into translations: batched greedy decoding and beam search.

Both encode the source batch once and then decode one position per step
(`TranslationModel.decode_step` keeps each decoder layer's keys and values, since
causal attention never revisits them; beam search reorders that cache with its beams).
Both return token ids without BOS and EOS, one list per source sentence.

Beam search ranks finished hypotheses by GNMT's length penalty (Wu et al., 2016):
score = log P(Y | X) / lp(Y), lp(Y) = ((5 + |Y|) / 6) ** alpha, where |Y| counts
the generated tokens including EOS. alpha = 0 is the raw log-probability (which
favours short outputs); alpha = 1 is close to per-token normalisation. Alive
hypotheses compete on raw log-probability, as in fairseq and GNMT; a sentence is
done once it has `beam_size` finished hypotheses or reaches `max_len` tokens.
With beam_size 1 this is greedy decoding, token for token.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from lmtransfer.translation.model import DecoderCache, TranslationModel


def _next_log_probs(model: TranslationModel, next_ids: torch.Tensor, cache: DecoderCache | None,
                    memory: torch.Tensor, source_padding: torch.Tensor) -> tuple[torch.Tensor, DecoderCache]:
    """Log-probabilities (float32) of the token after each prefix, and the grown cache: the one computation
    both decoders share."""
    logits, cache = model.decode_step(next_ids, cache, memory, source_padding)
    return F.log_softmax(logits.float(), dim=-1), cache


@contextmanager
def evaluation_mode(model: torch.nn.Module) -> Iterator[None]:
    """Dropout off while decoding, and the model's mode restored after: the per-epoch example translations
    run in the middle of training."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _strip(tokens: list[int], eos_id: int) -> list[int]:
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


@torch.no_grad()
def greedy_decode(model: TranslationModel, source: torch.Tensor, bos_id: int, eos_id: int,
                  max_len: int) -> list[list[int]]:
    """The most likely next token at every step, for a right-padded batch of sources (B, S)."""
    with evaluation_mode(model):
        return _greedy(model, source, bos_id, eos_id, max_len)


def _greedy(model: TranslationModel, source: torch.Tensor, bos_id: int, eos_id: int, max_len: int) -> list[list[int]]:
    source_padding = model.padding_mask(source)
    memory = model.encode(source, source_padding)
    prefix = torch.full((source.size(0), 1), bos_id, dtype=torch.long, device=source.device)
    finished = torch.zeros(source.size(0), dtype=torch.bool, device=source.device)
    cache = None
    for _ in range(max_len):
        log_probs, cache = _next_log_probs(model, prefix[:, -1:], cache, memory, source_padding)
        next_id = log_probs.topk(1, dim=-1).indices.squeeze(-1)
        next_id = next_id.masked_fill(finished, model.config.pad_id)  # a finished sentence only pads
        prefix = torch.cat([prefix, next_id.unsqueeze(1)], dim=1)
        finished |= next_id.eq(eos_id)
        if bool(finished.all()):
            break
    return [_strip(row, eos_id) for row in prefix[:, 1:].tolist()]


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, EOS included when it ended there
    log_prob: float
    score: float  # log_prob / length_penalty


@torch.no_grad()
def beam_search(model: TranslationModel, source: torch.Tensor, bos_id: int, eos_id: int, max_len: int,
                beam_size: int = 4, alpha: float = 0.6) -> list[list[int]]:
    """The best of `beam_size` hypotheses per source sentence (module docstring: how they are scored)."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    with evaluation_mode(model):
        return _beam(model, source, bos_id, eos_id, max_len, beam_size, alpha)


def _beam(model: TranslationModel, source: torch.Tensor, bos_id: int, eos_id: int, max_len: int, k: int,
          alpha: float) -> list[list[int]]:
    batch, device = source.size(0), source.device
    source_padding = model.padding_mask(source)
    memory = model.encode(source, source_padding)  # once; each beam reads its sentence's copy
    memory, source_padding = memory.repeat_interleave(k, dim=0), source_padding.repeat_interleave(k, dim=0)
    prefix = torch.full((batch * k, 1), bos_id, dtype=torch.long, device=device)
    # float64 running scores: adding a beam's score keeps the order (and ties) of its next-token log-probs
    scores = torch.full((batch, k), float("-inf"), dtype=torch.float64, device=device)
    scores[:, 0] = 0.0  # one live hypothesis (BOS) per sentence to start from
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    done = [False] * batch
    cache = None
    for step in range(1, max_len + 1):
        log_probs, cache = _next_log_probs(model, prefix[:, -1:], cache, memory, source_padding)
        log_probs = log_probs.double()
        vocab = log_probs.size(-1)
        candidates = (scores.unsqueeze(-1) + log_probs.view(batch, k, vocab)).view(batch, k * vocab)
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=-1)
        top_scores, top_index = top_scores.tolist(), top_index.tolist()
        new_scores = torch.full((batch, k), float("-inf"), dtype=torch.float64, device=device)
        parents = torch.zeros(batch, k, dtype=torch.long, device=device)
        tokens = torch.full((batch, k), model.config.pad_id, dtype=torch.long, device=device)
        for b in range(batch):
            if done[b]:
                continue
            alive = 0
            for rank, (score, index) in enumerate(zip(top_scores[b], top_index[b])):
                if score == float("-inf") or alive == k:
                    break
                parent, token = divmod(index, vocab)
                if token == eos_id:
                    if rank < k:  # an EOS among the best k ends a hypothesis; lower ones are dropped
                        generated = prefix[b * k + parent, 1:].tolist() + [eos_id]
                        finished[b].append(Hypothesis(generated, score, score / length_penalty(step, alpha)))
                    continue
                new_scores[b, alive], parents[b, alive], tokens[b, alive] = score, parent, token
                alive += 1
            done[b] = len(finished[b]) >= k or alive == 0
        if all(done):
            break
        rows = (parents + torch.arange(batch, device=device).unsqueeze(1) * k).view(-1)
        prefix = torch.cat([prefix[rows], tokens.view(-1, 1)], dim=1)
        cache = cache.select(rows)
        scores = new_scores
    for b in range(batch):  # max_len reached: the live hypotheses end here, without EOS
        if not done[b]:
            for j in range(k):
                score = float(scores[b, j])
                if score != float("-inf"):
                    generated = prefix[b * k + j, 1:].tolist()
                    finished[b].append(Hypothesis(generated, score, score / length_penalty(len(generated), alpha)))
    return [_strip(max(hyps, key=lambda h: h.score).tokens, eos_id) for hyps in finished]


def translate_ids(model: TranslationModel, source: torch.Tensor, bos_id: int, eos_id: int, max_len: int,
                  beam_size: int = 1, alpha: float = 0.6) -> list[list[int]]:
    """Greedy for beam_size 1, else beam search: what `evaluate.beam_size` selects."""
    if beam_size == 1:
        return greedy_decode(model, source, bos_id, eos_id, max_len)
    return beam_search(model, source, bos_id, eos_id, max_len, beam_size, alpha)
