"""Greedy decoding and beam search, shared by the validation BLEU, evaluate, the MLflow model and `lmtransfer
translate`. Beam search ranks finished hypotheses by GNMT's length penalty (Wu et al., 2016), log P(Y | X) /
((5 + |Y|) / 6) ** alpha, |Y| counting EOS; live ones compete on raw log-probability, as in fairseq."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from lmtransfer.harness.progress import progress_bar
from lmtransfer.modeling.checkpoint import load_checkpoint
from lmtransfer.modeling.runtime import autocast
from lmtransfer.tokens.batches import pad_batch
from lmtransfer.tokens.tokenizer import Tokenizer
from lmtransfer.translation.model import TranslationConfig, TranslationModel


def pad_rows(rows: Sequence[np.ndarray], pad_id: int) -> torch.Tensor:
    return pad_batch(list(rows), max(len(r) for r in rows), pad_id)


@contextmanager
def evaluation_mode(model: torch.nn.Module) -> Iterator[None]:
    """Dropout off while decoding, the mode restored after (examples are translated mid-training)."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _strip(tokens: list[int], eos_id: int) -> list[int]:
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


def _start(model: TranslationModel, source: torch.Tensor, copies: int = 1):
    source_padding = model.padding_mask(source)
    memory = model.encode(source, source_padding)  # once; each beam reads its sentence's copy
    return memory.repeat_interleave(copies, dim=0), source_padding.repeat_interleave(copies, dim=0)


def _next_log_probs(model, next_ids, cache, memory, source_padding):
    logits, cache = model.decode_step(next_ids, cache, memory, source_padding)
    return F.log_softmax(logits.float(), dim=-1), cache


@torch.no_grad()
def greedy_decode(model: TranslationModel, source: torch.Tensor, bos_id: int, eos_id: int,
                  max_len: int) -> list[list[int]]:
    """The likeliest next token at every step, for right-padded sources (B, S); ids without BOS/EOS."""
    with evaluation_mode(model):
        memory, source_padding = _start(model, source)
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
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model: TranslationModel, source: torch.Tensor, bos_id: int, eos_id: int, max_len: int,
                beam_size: int = 4, alpha: float = 0.6) -> list[list[int]]:
    """The best of `beam_size` hypotheses per source sentence; done with `beam_size` finished or at `max_len`."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    k, batch, device = beam_size, source.size(0), source.device
    with evaluation_mode(model):
        memory, source_padding = _start(model, source, k)
        prefix = torch.full((batch * k, 1), bos_id, dtype=torch.long, device=device)
        # float64 running scores: adding a beam's score keeps the order (and ties) of its next-token log-probs
        scores = torch.full((batch, k), float("-inf"), dtype=torch.float64, device=device)
        scores[:, 0] = 0.0  # one live hypothesis (BOS) per sentence to start from
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]  # (score, tokens with EOS)
        done = [False] * batch
        cache = None
        for step in range(1, max_len + 1):
            log_probs, cache = _next_log_probs(model, prefix[:, -1:], cache, memory, source_padding)
            vocab = log_probs.size(-1)
            candidates = (scores.unsqueeze(-1) + log_probs.double().view(batch, k, vocab)).view(batch, k * vocab)
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
                            finished[b].append((score / length_penalty(step, alpha), generated))
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
                    finished[b].append((score / length_penalty(len(generated), alpha), generated))
    return [_strip(max(hyps, key=lambda h: h[0])[1], eos_id) for hyps in finished]


def translate_ids(model: TranslationModel, source: torch.Tensor, bos_id: int, eos_id: int, max_len: int,
                  beam_size: int = 1, alpha: float = 0.6) -> list[list[int]]:
    if beam_size == 1:
        return greedy_decode(model, source, bos_id, eos_id, max_len)
    return beam_search(model, source, bos_id, eos_id, max_len, beam_size, alpha)


@dataclass(frozen=True)
class DecodingOptions:
    beam_size: int = 1
    length_penalty: float = 0.6
    max_length_ratio: float = 1.5
    max_length_extra: int = 10
    batch_size: int = 64


def translate_sources(model: TranslationModel, sources: Sequence[np.ndarray], tokenizer: Tokenizer,
                      options: DecodingOptions, device: torch.device, desc: str = "") -> list[str]:
    """Framed source ids (BOS + pieces + EOS) -> detokenized translations, in the order given."""
    order = np.argsort([len(s) for s in sources], kind="stable")
    out: list[str] = [""] * len(sources)
    progress = progress_bar(total=len(sources), desc=desc, unit=" sentences", disable=not desc)
    for begin in range(0, len(order), options.batch_size):
        chosen = order[begin: begin + options.batch_size]
        batch = pad_rows([sources[i] for i in chosen], model.config.pad_id).to(device)
        max_len = int(options.max_length_ratio * batch.size(1)) + options.max_length_extra  # EOS included
        with autocast(device):
            ids = translate_ids(model, batch, tokenizer.bos_id, tokenizer.eos_id, max_len, options.beam_size,
                                options.length_penalty)
        for index, tokens in zip(chosen, ids):
            out[index] = tokenizer.decode(tokens)
        progress.update(len(chosen))
    progress.close()
    return out


def translate_texts(model: TranslationModel, texts: Sequence[str], tokenizer: Tokenizer, options: DecodingOptions,
                    device: torch.device, desc: str = "") -> list[str]:
    """Plain sentences, each framed BOS + pieces + EOS as the encoder was trained -> translations."""
    sources = [np.array([tokenizer.bos_id, *tokenizer.encode(t), tokenizer.eos_id], dtype=np.int64) for t in texts]
    return translate_sources(model, sources, tokenizer, options, device, desc)


def translation_model(payload: dict, device: torch.device) -> TranslationModel:
    model = TranslationModel(TranslationConfig(**payload["model_config"]))
    model.load_state_dict(payload["state_dict"])
    return model.to(device).eval()


def load_translation_model(path, device: torch.device) -> TranslationModel:
    return translation_model(load_checkpoint(path, expected_kind="translation"), device)
