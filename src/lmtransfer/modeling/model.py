"""The Transformer of the experiment, readable in one file.

An encoder ("base") shared by two heads: a language-model head for pretraining
and a classification head for fine-tuning. Transfer learning is "keep the base,
swap the head". The base is causal for next-token prediction (`clm`) and
bidirectional for BERT's masked language modelling (`mlm`), which may add
next-sentence prediction (segment embeddings and a binary head on position 0).
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lmtransfer.modeling.lm_loss import IGNORE_INDEX, linear_cross_entropy


@dataclass(frozen=True)
class ModelConfig:
    """The network's shape. No defaults: the pipeline's live in `core.config.ModelParams`, one place."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    dropout: float
    pad_id: int = 0
    causal: bool = True  # position i attends to positions <= i only; False: to every non-padding position
    embedding_init: str = "normal"  # the token embedding's first draw: nn.Embedding's N(0, 1), or uniform in ±0.1

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def attention(self) -> str:
        return "causal" if self.causal else "bidirectional"

    @classmethod
    def from_params(cls, model_params: Any, vocab_size: int, pad_id: int, causal: bool = True) -> ModelConfig:
        """The network `params.yaml`'s `model.*` describes over a tokenizer's id space (V and padding id);
        `causal` is the resolved `model.attention` (`ClassificationParams.causal_attention`)."""
        shape = {k: v for k, v in model_params.model_dump().items() if k != "attention"}
        return cls(vocab_size=vocab_size, pad_id=pad_id, causal=causal, **shape)


EMBEDDING_UNIFORM = 0.1  # model.embedding_init: uniform: PyTorch's Transformer tutorial's range


def sinusoidal_positions(n_positions: int, d_model: int) -> torch.Tensor:
    """Fixed encoding: sin on even dims, cos on odd dims, wavelengths 10000^(2i/D)."""
    position = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    inverse_wavelength = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(position * inverse_wavelength)
    table[:, 1::2] = torch.cos(position * inverse_wavelength[: d_model // 2])
    return table


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table; grows it on demand so no max length is baked in."""

    def __init__(self, d_model: int, initial_positions: int = 512):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("pe", sinusoidal_positions(initial_positions, d_model), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq_len = x.size(1)
        if seq_len > self.pe.size(0):
            self.pe = sinusoidal_positions(2 * seq_len, self.d_model).to(self.pe.device)
        return x + self.pe[:seq_len].to(x.dtype)


def causal_mask(seq_len: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean mask, True above the diagonal: position i may not attend to j > i."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(diagonal=1)


def dropout_on_cpu(x: torch.Tensor, p: float) -> torch.Tensor:
    """nn.Dropout's distribution (keep with probability 1 - p, scale the kept by 1 / (1 - p)) at a third of its
    cost on a CPU. PyTorch's CPU generator, one Mersenne Twister behind a lock, spends ~3 ns on each random
    number; here torch's generator gives one seed per call and NumPy's PCG64 (whose streams NumPy keeps stable
    across versions) the 32 random bits of each element, compared with p to 2^-32 (torch.rand's floats
    resolve 2^-24). Seeding, resume snapshots and per-rank streams therefore still go through torch."""
    seed = int(torch.randint(0, 2**62, ()))
    bits = np.random.PCG64(seed).random_raw((x.numel() + 1) // 2).view(np.int32)  # two uniform 32-bit lanes each
    uniform = torch.from_numpy(bits)[: x.numel()].view(x.shape)
    keep = uniform >= round(p * 2**32) - 2**31
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))


def use_dropout_on_cpu(x: torch.Tensor) -> bool:
    """On a CPU, in eager mode: under train.compile, F.dropout is compiled with inductor's own generator."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


class Dropout(nn.Dropout):
    """nn.Dropout, drawn by `dropout_on_cpu` on a CPU; on a GPU, and in compiled code, F.dropout stays."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if use_dropout_on_cpu(x):
            return dropout_on_cpu(x, self.p)
        return F.dropout(x, self.p, training=True)


def attention_with_dropout_on_cpu(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None, causal: bool, p: float
) -> torch.Tensor:
    """F.scaled_dot_product_attention's arithmetic (softmax(q k^T / sqrt(d)) v; a query with no allowed key gets
    zeros) with the attention weights dropped by `dropout_on_cpu`: on a CPU, SDPA with dropout runs these same
    steps but draws its mask from the slow Bernoulli sampler."""
    scores = torch.matmul(query, key.transpose(-2, -1)).mul_(1.0 / math.sqrt(query.size(-1)))
    if allowed is not None:
        blocked = ~allowed
        weights = torch.softmax(scores.masked_fill_(blocked, float("-inf")), -1).masked_fill(blocked, 0.0)
    else:
        if causal:
            scores.masked_fill_(causal_mask(scores.size(-1), scores.device), float("-inf"))
        weights = torch.softmax(scores, -1)
    return torch.matmul(dropout_on_cpu(weights, p) if p > 0 else weights, value)


class SelfAttention(nn.Module):
    """Multi-head self-attention with nn.MultiheadAttention's parameters (packed `in_proj_weight` (3D, D),
    `in_proj_bias`, `out_proj`) and initialisation, so checkpoints, the course's import and the parameter count
    are unchanged. It stays batch-first throughout: PyTorch's module turns (B, T, 3D) into (3, T, B, D) and
    back, which on a CPU took a tenth of a training step in copies and zero-fills."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"model.d_model ({d_model}) must be a multiple of model.n_heads ({n_heads})")
        self.n_heads, self.dropout = n_heads, dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * d_model))
        self.out_proj = nn.Linear(d_model, d_model)  # initialised first, as in nn.MultiheadAttention
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.in_proj_bias)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """x (B, T, D); `allowed` (B, 1, T, T) True where a query may attend to a key, or None for every key
        (or, with `causal`, every earlier one)."""
        batch, length, d_model = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        query, key, value = qkv.view(batch, length, 3, self.n_heads, d_model // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.training and self.dropout > 0 and use_dropout_on_cpu(x):
            heads = attention_with_dropout_on_cpu(query, key, value, allowed, causal, self.dropout)
        else:
            heads = F.scaled_dot_product_attention(
                query, key, value, attn_mask=allowed, dropout_p=self.dropout if self.training else 0.0,
                is_causal=causal and allowed is None,
            )
        return self.out_proj(heads.transpose(1, 2).reshape(batch, length, d_model))


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer's post-norm layer (ReLU, the same parameter names and initialisation):
    x = norm1(x + dropout(attention(x))); x = norm2(x + dropout(linear2(dropout(relu(linear1(x))))))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.self_attn = SelfAttention(d_model, n_heads, dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, causal: bool) -> torch.Tensor:
        x = self.norm1(x + self.dropout1(self.self_attn(x, allowed, causal)))
        return self.norm2(x + self.dropout2(self.linear2(self.dropout(F.relu(self.linear1(x))))))


class Encoder(nn.Module):
    """N copies of one initialised layer, as nn.TransformerEncoder makes them (so a seed gives the same
    weights as before this module existed), under one attention mask built once for all of them."""

    def __init__(self, layer: EncoderLayer, n_layers: int, causal: bool):
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(n_layers))
        self.causal = causal

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, D); padding_mask (B, T) True at padding, which no position attends to."""
        allowed = None
        if padding_mask is not None:
            allowed = ~padding_mask[:, None, None, :]
            if self.causal:
                allowed = allowed & ~causal_mask(x.size(1), x.device)
        for layer in self.layers:
            x = layer(x, allowed, self.causal)
        return x


class TransformerBase(nn.Module):
    """Embedding x sqrt(D) + positions, dropout, N post-norm encoder layers (causal unless config says not)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        if config.embedding_init == "uniform":  # drawn after N(0, 1), so `normal` keeps every later draw as it was
            nn.init.uniform_(self.token_embedding.weight, -EMBEDDING_UNIFORM, EMBEDDING_UNIFORM)
        self.positions = PositionalEncoding(config.d_model)
        self.dropout = Dropout(config.dropout)
        layer = EncoderLayer(config.d_model, config.n_heads, config.d_ff, config.dropout)
        self.layers = Encoder(layer, config.n_layers, config.causal)

    def forward(self, ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) -> hidden states (B, T, D). padding_mask is True at padding."""
        return self.encode(self.embed(ids), padding_mask)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings x sqrt(D): where next-sentence prediction adds its segment embeddings."""
        return self.token_embedding(ids) * math.sqrt(self.config.d_model)

    def encode(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Embedded tokens (B, T, D) -> hidden states: positions, dropout, the layers."""
        return self.layers(self.dropout(self.positions(x)), padding_mask)


class LanguageModel(nn.Module):
    """Base + Linear(D, V) at every position: next-token prediction."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.base = TransformerBase(config)
        self.head = nn.Linear(config.d_model, config.vocab_size)
        self.chunked_loss = False  # how the loss is computed, not what: `lm_loss.py` (pretrain.chunked_loss)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.base(ids))

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.chunked_loss:
            return linear_cross_entropy(self.base(ids), self.head.weight, self.head.bias, targets)
        logits = self(ids)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))

    def losses(self, ids: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the training loop reads: `loss` (the one it minimises) and any other measurements."""
        return {"loss": self.loss(ids, targets)}

    @torch.no_grad()
    def generate(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        eos_id: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Continue a (1, T) prompt; temperature 0 is greedy, else sample (optionally top-k)."""
        for _ in range(max_new_tokens):
            logits = self(ids)[:, -1, :].float()
            if temperature <= 0:
                next_id = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k > 0:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = F.softmax(logits, dim=-1)
                next_id = torch.multinomial(probs, 1, generator=generator)
            ids = torch.cat([ids, next_id], dim=1)
            if eos_id is not None and int(next_id) == eos_id:
                break
        return ids


class MaskedLanguageModel(LanguageModel):
    """BERT's objective: a bidirectional base predicts the masked tokens from both sides (`masking.py` chooses
    them); with `next_sentence`, segment embeddings and a binary head on position 0 also tell whether the
    second segment followed the first in the corpus.

    The segment embeddings live here, not in the base, so the base (and so the classifier and its parameter
    count) is the same network for every objective; `fold_segment_a` carries segment A into a classifier.
    """

    def __init__(self, config: ModelConfig, next_sentence: bool = False):
        if config.causal:
            raise ValueError("a masked language model needs bidirectional attention (ModelConfig.causal=False)")
        super().__init__(config)
        self.next_sentence = next_sentence
        if next_sentence:
            self.segment_embedding = nn.Embedding(2, config.d_model)
            self.next_sentence_head = nn.Linear(config.d_model, 2)

    def hidden(self, ids: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        x = self.base.embed(ids)
        if self.next_sentence:
            x = x + self.segment_embedding(segments if segments is not None else torch.zeros_like(ids))
        return self.base.encode(x, ids.eq(self.base.config.pad_id))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(ids))

    def losses(
        self, ids: torch.Tensor, targets: torch.Tensor, segments: torch.Tensor | None = None,
        is_next: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Cross-entropy at the masked positions only (targets IGNORE_INDEX elsewhere): the head runs on those
        alone. With `is_next`, plus next-sentence prediction's cross-entropy; `loss` is their sum."""
        hidden = self.hidden(ids, segments)
        chosen = targets.ne(IGNORE_INDEX)
        logits = self.head(hidden[chosen]).float()
        masked = F.cross_entropy(logits, targets[chosen])
        out = {"loss": masked, "masked_accuracy": (logits.argmax(-1) == targets[chosen]).float().mean()}
        if is_next is not None:
            nsp_logits = self.next_sentence_head(hidden[:, 0]).float()
            nsp_loss = F.cross_entropy(nsp_logits, is_next)
            out.update(loss=masked + nsp_loss, masked_loss=masked, nsp_loss=nsp_loss,
                       nsp_accuracy=(nsp_logits.argmax(-1) == is_next).float().mean())
        return out

    def generate(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise ValueError("a masked language model (pretrain.objective: mlm) fills in blanks from both sides; it "
                         "cannot continue a text left to right: use `lmtransfer fill \"the movie was <mask> good\"`")


def fold_segment_a(base_state: dict[str, torch.Tensor], segment_embedding: torch.Tensor) -> dict[str, torch.Tensor]:
    """A base state for one-segment inputs (a classifier's): segment A's vector folded into the token embedding,
    exact because E x sqrt(D) + s = (E + s / sqrt(D)) x sqrt(D). The base keeps its plain shape and size."""
    embedding = base_state["token_embedding.weight"]
    return {**base_state, "token_embedding.weight": embedding + segment_embedding[0] / math.sqrt(embedding.size(1))}


def pool_last_token(hidden: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """The last non-padding position: the only one that has seen the whole (right-padded) text."""
    last = (~padding_mask).sum(dim=1) - 1
    return hidden[torch.arange(hidden.size(0), device=hidden.device), last.clamp(min=0)]


def pool_mean(hidden: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """Mean over non-padding positions."""
    keep = (~padding_mask).unsqueeze(-1).to(hidden.dtype)
    return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)


def pool_first_token(hidden: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """Position 0, the begin-of-text token every text starts with: BERT's [CLS]. Only a bidirectional base
    lets it see the text after it."""
    return hidden[:, 0]


POOLING = {"last": pool_last_token, "mean": pool_mean, "first": pool_first_token}


class Classifier(nn.Module):
    """Base + Linear(D, C) over one pooled vector per sequence."""

    def __init__(self, config: ModelConfig, n_classes: int, pooling: str = "last"):
        super().__init__()
        if pooling not in POOLING:
            raise ValueError(f"unknown pooling {pooling!r}; choose one of {sorted(POOLING)}")
        self.base = TransformerBase(config)
        self.head = nn.Linear(config.d_model, n_classes)
        self.pooling = pooling

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        padding_mask = ids.eq(self.base.config.pad_id)
        hidden = self.base(ids, padding_mask=padding_mask)
        return self.head(POOLING[self.pooling](hidden, padding_mask))


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def expected_base_parameters(vocab_size: int, d_model: int, n_layers: int, d_ff: int) -> int:
    """Closed form: V*D + N * (attention 4(D^2+D) + feed-forward 2DF+F+D + norms 4D)."""
    per_layer = 4 * (d_model**2 + d_model) + (2 * d_model * d_ff + d_ff + d_model) + 4 * d_model
    return vocab_size * d_model + n_layers * per_layer
