"""The Transformer of the experiment: a base shared by a language-model head (pretraining) and a classification
head (fine-tuning); causal for next-token prediction, bidirectional for BERT's masked tokens. A new model knob: a
`Field`-annotated field of `ModelConfig` and its value in params.yaml's `model` section."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, get_origin, get_type_hints

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


class TransformerBase(nn.Module):
    """Embedding x sqrt(D) + positions, dropout, N post-norm nn.TransformerEncoderLayers (ReLU, F = d_ff)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        if config.embedding_init == "uniform":
            nn.init.uniform_(self.token_embedding.weight, -EMBEDDING_UNIFORM, EMBEDDING_UNIFORM)
        self.positions = PositionalEncoding(config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        layer = nn.TransformerEncoderLayer(config.d_model, config.n_heads, config.d_ff, config.dropout,
                                           activation="relu", batch_first=True, norm_first=False)
        self.layers = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) -> hidden states (B, T, D); padding_mask (B, T) is True at padding, which no one attends to."""
        return self.encode(self.embed(ids), padding_mask)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:  # where next-sentence prediction adds its segments
        return self.token_embedding(ids) * math.sqrt(self.config.d_model)

    def encode(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        causal = self.config.causal
        mask = causal_mask(x.size(1), x.device) if causal else None
        return self.layers(self.dropout(self.positions(x)), mask=mask, src_key_padding_mask=padding_mask,
                           is_causal=causal)


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
