"""The Transformer of the experiment, readable in one file.

A causal encoder ("base") shared by two heads: a language-model head for
pretraining and a classification head for fine-tuning. Transfer learning is
"keep the base, swap the head".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int = 200
    n_layers: int = 4
    n_heads: int = 2
    d_ff: int = 200
    dropout: float = 0.1
    pad_id: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_params(cls, model_params: Any, vocab_size: int, pad_id: int) -> "ModelConfig":
        """The network `params.yaml`'s `model.*` describes over a tokenizer's id space (V and padding id)."""
        return cls(vocab_size=vocab_size, pad_id=pad_id, **model_params.model_dump())


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


class TransformerBase(nn.Module):
    """Embedding x sqrt(D) + positions, dropout, N post-norm causal encoder layers."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = PositionalEncoding(config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        layer = nn.TransformerEncoderLayer(
            d_model=config.d_model,
            nhead=config.n_heads,
            dim_feedforward=config.d_ff,
            dropout=config.dropout,
            activation="relu",
            batch_first=True,
            norm_first=False,
        )
        self.layers = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) -> hidden states (B, T, D). padding_mask is True at padding."""
        x = self.token_embedding(ids) * math.sqrt(self.config.d_model)
        x = self.dropout(self.positions(x))
        mask = causal_mask(ids.size(1), ids.device)
        return self.layers(x, mask=mask, src_key_padding_mask=padding_mask, is_causal=True)


class LanguageModel(nn.Module):
    """Base + Linear(D, V) at every position: next-token prediction."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.base = TransformerBase(config)
        self.head = nn.Linear(config.d_model, config.vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.base(ids))

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(ids)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))

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


def pool_last_token(hidden: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """The last non-padding position: the only one that has seen the whole (right-padded) text."""
    last = (~padding_mask).sum(dim=1) - 1
    return hidden[torch.arange(hidden.size(0), device=hidden.device), last.clamp(min=0)]


def pool_mean(hidden: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """Mean over non-padding positions."""
    keep = (~padding_mask).unsqueeze(-1).to(hidden.dtype)
    return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)


POOLING = {"last": pool_last_token, "mean": pool_mean}


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
