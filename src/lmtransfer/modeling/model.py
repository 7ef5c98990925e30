"""The Transformer of the experiment: a base shared by a language-model head (pretraining) and a classification
head (fine-tuning); causal for next-token prediction, bidirectional for BERT's masked tokens. A new model knob: a
`Field`-annotated field of `ModelConfig` and its value in params.yaml's `model` section."""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, get_origin, get_type_hints

import numpy as np
import torch
from pydantic import Field, create_model, model_validator
from torch import nn
from torch.nn import functional as F

from lmtransfer.core.config import Section

IGNORE_INDEX = -100  # a target that is not scored (cross_entropy's default ignore_index)
EMBEDDING_UNIFORM = 0.1  # model.embedding_init: uniform: PyTorch's Transformer tutorial's range


@dataclass(frozen=True)
class ModelConfig:
    """The network's shape. The `Field`-annotated fields are params.yaml's `model` keys; vocab_size and pad_id come
    from the tokenizer, causal from `model.attention`."""

    vocab_size: int
    d_model: Annotated[int, Field(ge=2, description="D: width of the embeddings and hidden states (even, "
                                                     "divisible by `model.n_heads`)")]
    n_layers: Annotated[int, Field(ge=1, description="N: Transformer layers")]
    n_heads: Annotated[int, Field(ge=1, description="A: attention heads per layer")]
    d_ff: Annotated[int, Field(ge=1, description="F: hidden units of each layer's feed-forward block")]
    dropout: Annotated[float, Field(ge=0, lt=1, description="dropout rate after the embedding and inside every "
                                                             "layer")]
    pad_id: int = 0
    causal: bool = True  # position i attends to positions <= i only; False: to every non-padding position
    embedding_init: Annotated[Literal["normal", "uniform"], Field(
        description="the token embedding's first weights: `normal`, nn.Embedding's N(0, 1) (times sqrt(D): std 14 "
        "at D = 200, far above the positions' scale), or `uniform` in [-0.1, 0.1] as PyTorch's Transformer "
        "tutorial draws them (what reaches the course's published accuracy from scratch: docs/results/course.md)"
    )] = "normal"

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def attention(self) -> str:
        return "causal" if self.causal else "bidirectional"

    @classmethod
    def from_params(cls, model_params: Any, vocab_size: int, pad_id: int, causal: bool = True) -> ModelConfig:
        """`model.*` over a tokenizer's ids; `causal` is `PipelineParams.causal_attention`."""
        shape = {k: v for k, v in model_params.model_dump().items() if k != "attention"}
        return cls(vocab_size=vocab_size, pad_id=pad_id, causal=causal, **shape)


def check_shape(d_model: int, n_heads: int) -> None:
    """The heads split D; sin/cos fill D in pairs."""
    if d_model % n_heads:
        raise ValueError(f"model.d_model ({d_model}) must be divisible by model.n_heads ({n_heads})")
    if d_model % 2:
        raise ValueError(f"model.d_model ({d_model}) must be even for the sinusoidal encoding")


def _check_model_params(params: Any) -> Any:
    check_shape(params.d_model, params.n_heads)
    return params


# params.yaml's `model` section: ModelConfig's annotated fields, plus the attention (`auto` follows the objective).
ModelParams = create_model(
    "ModelParams", __base__=Section,
    __validators__={"_check": model_validator(mode="after")(_check_model_params)},
    **{name: (hint, ...) for name, hint in get_type_hints(ModelConfig, include_extras=True).items()
       if get_origin(hint) is Annotated},
    attention=(Literal["auto", "causal", "bidirectional"], Field(
        description="`causal` (position i sees positions <= i), `bidirectional` (every position sees the whole "
        "text), or `auto`: causal for `pretrain.objective: clm`, bidirectional for `mlm`")),
)


def sinusoidal_positions(n_positions: int, d_model: int) -> torch.Tensor:
    """Fixed encoding: sin on even dims, cos on odd dims, wavelengths 10000^(2i/D)."""
    position = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    inverse_wavelength = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(position * inverse_wavelength)
    table[:, 1::2] = torch.cos(position * inverse_wavelength[: d_model // 2])
    return table


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table, grown on demand: no maximum length."""

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


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout's distribution. On a CPU (eager) the mask's 32 random bits per element come from NumPy's PCG64,
    seeded from torch's generator (so seeds, resume snapshots and ranks still go through torch): torch's CPU
    Bernoulli sampler, one Mersenne Twister behind a lock, made a fine-tuning step 1.8x slower
    (benchmarks/model_speed.py)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling():
        return F.dropout(x, p, training=True)
    bits = np.random.PCG64(int(torch.randint(0, 2**62, ()))).random_raw((x.numel() + 1) // 2).view(np.int32)
    keep = torch.from_numpy(bits)[: x.numel()].view(x.shape) >= round(p * 2**32) - 2**31
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


class SelfAttention(nn.Module):
    """Multi-head self-attention, batch first, with nn.MultiheadAttention's parameters (`in_proj_weight` (3D, D),
    `in_proj_bias`, `out_proj`) and initialisation, so the course's checkpoints load as they are."""

    def __init__(self, d_model: int, n_heads: int, p: float):
        super().__init__()
        self.n_heads, self.p = n_heads, p
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d_model))
        self.out_proj = nn.Linear(d_model, d_model)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """x (B, T, D); `allowed` (B, 1, T, T) True where a query may see a key; None: every (earlier) key."""
        batch, length, d_model = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(batch, length, 3, self.n_heads, d_model // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.training and self.p > 0 and x.device.type == "cpu" and not torch.compiler.is_compiling():
            # SDPA's own arithmetic, with the attention weights dropped by `dropout` instead of its Bernoulli
            scores = (q @ k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.size(-1)))
            blocked = ~allowed if allowed is not None else causal_mask(length, x.device) if causal else None
            if blocked is not None:
                scores = scores.masked_fill_(blocked, float("-inf"))
            weights = torch.softmax(scores, -1)
            if allowed is not None:  # a query with no key to see gets zeros, as in SDPA
                weights = weights.masked_fill(blocked, 0.0)
            heads = dropout(weights, self.p, True) @ v
        else:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=self.p if self.training
                                                   else 0.0, is_causal=causal and allowed is None)
        return self.out_proj(heads.transpose(1, 2).reshape(batch, length, d_model))


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer's post-norm ReLU layer, its parameter names and initialisation order:
    x = norm1(x + dropout(attention(x))); x = norm2(x + dropout(linear2(dropout(relu(linear1(x))))))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, p: float):
        super().__init__()
        self.self_attn = SelfAttention(d_model, n_heads, p)
        self.linear1, self.dropout, self.linear2 = nn.Linear(d_model, d_ff), Dropout(p), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2 = Dropout(p), Dropout(p)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, causal: bool) -> torch.Tensor:
        x = self.norm1(x + self.dropout1(self.self_attn(x, allowed, causal)))
        return self.norm2(x + self.dropout2(self.linear2(self.dropout(F.relu(self.linear1(x))))))


class Encoder(nn.Module):
    """N copies of one initialised layer (as nn.TransformerEncoder makes them) under one mask built once."""

    def __init__(self, layer: EncoderLayer, n_layers: int, causal: bool):
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(n_layers))
        self.causal = causal

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        allowed = None
        if padding_mask is not None:
            allowed = ~padding_mask[:, None, None, :]
            if self.causal:
                allowed = allowed & ~causal_mask(x.size(1), x.device)
        for layer in self.layers:
            x = layer(x, allowed, self.causal)
        return x


class TransformerBase(nn.Module):
    """Embedding x sqrt(D) + positions, dropout, N post-norm encoder layers (ReLU, F = d_ff)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        if config.embedding_init == "uniform":
            nn.init.uniform_(self.token_embedding.weight, -EMBEDDING_UNIFORM, EMBEDDING_UNIFORM)
        self.positions = PositionalEncoding(config.d_model)
        self.dropout = Dropout(config.dropout)
        layer = EncoderLayer(config.d_model, config.n_heads, config.d_ff, config.dropout)
        self.layers = Encoder(layer, config.n_layers, config.causal)

    def forward(self, ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) -> hidden states (B, T, D); padding_mask (B, T) is True at padding, which no one attends to."""
        return self.encode(self.embed(ids), padding_mask)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:  # where next-sentence prediction adds its segments
        return self.token_embedding(ids) * math.sqrt(self.config.d_model)

    def encode(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.layers(self.dropout(self.positions(x)), padding_mask)


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

    def losses(self, ids: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the training loop reads: `loss`, which it minimises, and any other measurements."""
        return {"loss": self.loss(ids, targets)}

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
                 eos_id: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
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
                next_id = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            ids = torch.cat([ids, next_id], dim=1)
            if eos_id is not None and int(next_id) == eos_id:
                break
        return ids


class MaskedLanguageModel(LanguageModel):
    """BERT: a bidirectional base predicts masked tokens from both sides; with `next_sentence`, segment embeddings
    and a binary head on position 0 tell whether the second segment followed the first. The segment embeddings
    live here, so the base (and the classifier's parameter count) is the same for every objective."""

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

    def losses(self, ids: torch.Tensor, targets: torch.Tensor, segments: torch.Tensor | None = None,
               is_next: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Cross-entropy at the masked positions only (the head runs on those alone); with `is_next`, plus
        next-sentence prediction's; `loss` is their sum."""
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
    """Segment A folded into the token embedding for one-segment inputs: E x sqrt(D) + s = (E + s/sqrt(D)) x sqrt(D)."""
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
    """Position 0, the begin-of-text token (BERT's [CLS]): sees the text only in a bidirectional base."""
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
