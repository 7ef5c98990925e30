"""The encoder–decoder Transformer of "Attention is all you need", post-norm like the paper, one embedding shared by
both languages. Transfer: encoder and decoder warm-started from the pretrained LM's layers, cross-attention fresh
(Rothe et al., 2020): "pretrained vs scratch" is one network, two starts."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from lmtransfer.modeling.model import EMBEDDING_UNIFORM, ModelConfig, PositionalEncoding, causal_mask, fold_segment_a


@dataclass(frozen=True)
class TranslationConfig:
    vocab_size: int
    d_model: int
    n_encoder_layers: int
    n_decoder_layers: int
    n_heads: int
    d_ff: int
    dropout: float
    pad_id: int = 0
    tie_output: bool = False  # output projection = the shared embedding (the paper); False: its own V x D matrix
    output_bias: bool = True  # the pipeline's reference has biases everywhere; the paper's base has none here
    final_norms: bool = False  # a LayerNorm after each stack; post-norm layers already end with one
    embedding_init: str = "normal"  # the shared embedding's first draw: N(0, 1), or uniform in ±0.1 (model.py's)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def paper_base(cls) -> TranslationConfig:  # 63,082,496 parameters with its 37,000-piece vocabulary
        return cls(vocab_size=37_000, d_model=512, n_encoder_layers=6, n_decoder_layers=6, n_heads=8, d_ff=2048,
                   dropout=0.1, tie_output=True, output_bias=False)

    @classmethod
    def from_language_model(cls, lm: ModelConfig, **overrides: object) -> TranslationConfig:
        shape = dict(vocab_size=lm.vocab_size, d_model=lm.d_model, n_encoder_layers=lm.n_layers,
                     n_decoder_layers=lm.n_layers, n_heads=lm.n_heads, d_ff=lm.d_ff, dropout=lm.dropout,
                     pad_id=lm.pad_id, embedding_init=lm.embedding_init)
        return cls(**{**shape, **overrides})


class TranslationModel(nn.Module):
    def __init__(self, config: TranslationConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size, d)  # source and target alike
        if config.embedding_init == "uniform":  # drawn after N(0, 1), so `normal` keeps every later draw as it was
            nn.init.uniform_(self.token_embedding.weight, -EMBEDDING_UNIFORM, EMBEDDING_UNIFORM)
        self.positions = PositionalEncoding(d)
        self.dropout = nn.Dropout(config.dropout)
        common = dict(d_model=d, nhead=config.n_heads, dim_feedforward=config.d_ff, dropout=config.dropout,
                      activation="relu", batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**common), config.n_encoder_layers,
                                             norm=nn.LayerNorm(d) if config.final_norms else None,
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**common), config.n_decoder_layers,
                                             norm=nn.LayerNorm(d) if config.final_norms else None)
        self.output = nn.Linear(d, config.vocab_size, bias=config.output_bias)
        if config.tie_output:
            self.output.weight = self.token_embedding.weight

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.positions(self.token_embedding(ids) * math.sqrt(self.config.d_model)))

    def padding_mask(self, ids: torch.Tensor) -> torch.Tensor:
        return ids.eq(self.config.pad_id)

    def encode(self, source: torch.Tensor, source_padding: torch.Tensor | None = None) -> torch.Tensor:
        """Source ids (B, S) -> memory (B, S, D), bidirectional."""
        if source_padding is None:
            source_padding = self.padding_mask(source)
        return self.encoder(self.embed(source), src_key_padding_mask=source_padding)

    def decode(self, target: torch.Tensor, memory: torch.Tensor, source_padding: torch.Tensor,
               target_padding: torch.Tensor | None = None) -> torch.Tensor:
        """Target prefix ids (B, T) + memory -> logits (B, T, V), causal over the target."""
        mask = causal_mask(target.size(1), target.device)
        hidden = self.decoder(self.embed(target), memory, tgt_mask=mask, tgt_is_causal=True,
                              tgt_key_padding_mask=target_padding, memory_key_padding_mask=source_padding)
        return self.output(hidden)

    def decode_step(self, next_ids: torch.Tensor, cache: DecoderCache | None, memory: torch.Tensor,
                    source_padding: torch.Tensor) -> tuple[torch.Tensor, DecoderCache]:
        """One more target token (B, 1) -> logits (B, V) of the next: `decode`'s arithmetic for the new position
        only, the keys and values of earlier positions and of `memory` cached."""
        if cache is None:
            cache = DecoderCache.start(self.decoder.layers, memory)
        position = cache.length
        if position >= self.positions.pe.size(0):
            raise ValueError(f"decode_step supports {self.positions.pe.size(0)} target positions")
        x = self.token_embedding(next_ids) * math.sqrt(self.config.d_model)
        x = self.dropout(x + self.positions.pe[position: position + 1].to(x.dtype))
        keep = ~source_padding[:, None, None, :]  # (B, 1, 1, S): True where a source position may be attended
        for i, layer in enumerate(self.decoder.layers):
            query, key, value = _heads(layer.self_attn, x).unbind(0)
            cache.keys[i] = torch.cat([cache.keys[i], key], dim=2)
            cache.values[i] = torch.cat([cache.values[i], value], dim=2)
            attended = _merge(layer.self_attn, F.scaled_dot_product_attention(query, cache.keys[i], cache.values[i]))
            x = layer.norm1(x + layer.dropout1(attended))
            query = _heads(layer.multihead_attn, x, parts=slice(0, 1))[0]
            attended = F.scaled_dot_product_attention(query, *cache.cross[i], attn_mask=keep)
            x = layer.norm2(x + layer.dropout2(_merge(layer.multihead_attn, attended)))
            x = layer.norm3(x + layer.dropout3(layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))))
        cache.length += 1
        if self.decoder.norm is not None:
            x = self.decoder.norm(x)
        return self.output(x[:, -1]), cache

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        source_padding = self.padding_mask(source)
        memory = self.encode(source, source_padding)
        return self.decode(target, memory, source_padding, self.padding_mask(target))

    def loss(self, source: torch.Tensor, target_in: torch.Tensor, target_out: torch.Tensor,
             label_smoothing: float = 0.0) -> torch.Tensor:
        logits = self(source, target_in)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), target_out.reshape(-1),
                               ignore_index=self.config.pad_id, label_smoothing=label_smoothing)


def _heads(attention: nn.MultiheadAttention, x: torch.Tensor, parts: slice = slice(0, 3)) -> torch.Tensor:
    """nn.MultiheadAttention's packed projection of `x` (B, T, D) to `parts` of q, k, v: (parts, B, heads, T, D/A)."""
    d, heads = attention.embed_dim, attention.num_heads
    weight = attention.in_proj_weight[parts.start * d: parts.stop * d]
    bias = attention.in_proj_bias[parts.start * d: parts.stop * d] if attention.in_proj_bias is not None else None
    projected = F.linear(x, weight, bias)  # (B, T, parts * D)
    batch, length = x.shape[:2]
    return projected.view(batch, length, -1, heads, d // heads).permute(2, 0, 3, 1, 4)


def _merge(attention: nn.MultiheadAttention, heads_out: torch.Tensor) -> torch.Tensor:
    batch, _, length, _ = heads_out.shape
    return attention.out_proj(heads_out.transpose(1, 2).reshape(batch, length, attention.embed_dim))


@dataclass
class DecoderCache:
    """Per decoder layer: self-attention keys/values so far (B, heads, T, D / heads), cross-attention's of memory."""
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    cross: list[tuple[torch.Tensor, torch.Tensor]]
    length: int = 0

    @classmethod
    def start(cls, layers: nn.ModuleList, memory: torch.Tensor) -> DecoderCache:
        empty = [memory.new_empty(memory.size(0), layer.self_attn.num_heads, 0,
                                  layer.self_attn.embed_dim // layer.self_attn.num_heads) for layer in layers]
        cross = [tuple(_heads(layer.multihead_attn, memory, parts=slice(1, 3)).unbind(0)) for layer in layers]
        return cls(keys=empty, values=list(empty), cross=cross)

    def select(self, rows: torch.Tensor) -> DecoderCache:
        """The beam hypotheses `rows` (reordered within a sentence, so memory's keys stay)."""
        return DecoderCache([k[rows] for k in self.keys], [v[rows] for v in self.values], self.cross, self.length)


def parameter_breakdown(config: TranslationConfig) -> dict[str, int]:
    """The closed form, block by block (`count_parameters` must find the same)."""
    d, v = config.d_model, config.vocab_size
    attention, feed_forward = 4 * (d * d + d), 2 * d * config.d_ff + config.d_ff + d  # Q, K, V, out: D x D + D each
    encoder_layer = attention + feed_forward + 2 * 2 * d
    decoder_layer = 2 * attention + feed_forward + 3 * 2 * d
    return {
        "embedding": v * d,
        "encoder_layer": encoder_layer,
        "encoder": config.n_encoder_layers * encoder_layer + (2 * d if config.final_norms else 0),
        "decoder_layer": decoder_layer,
        "decoder": config.n_decoder_layers * decoder_layer + (2 * d if config.final_norms else 0),
        "output": (0 if config.tie_output else v * d) + (v if config.output_bias else 0),
    }


def expected_translation_parameters(config: TranslationConfig) -> int:
    """V*D + N_enc(4D^2 + 2DF + F + 9D) + N_dec(8D^2 + 2DF + F + 15D) [+ final norms] [+ untied V*D] [+ V]."""
    blocks = parameter_breakdown(config)
    return blocks["embedding"] + blocks["encoder"] + blocks["decoder"] + blocks["output"]


@dataclass
class WarmStart:
    copied: dict[str, str]  # name here -> name in the LM's state dict
    fresh: list[str]


# LM layer -> decoder layer: self-attention, feed-forward and the norms after them (an encoder layer is exactly an
# LM layer). The decoder's norm2 follows cross-attention, which the LM never had: it starts fresh with it.
_LM_LAYER = [module + p for module in ("self_attn.in_proj_", "self_attn.out_proj.", "linear1.", "linear2.", "norm1.")
             for p in ("weight", "bias")]
_DECODER_FROM_LM_LAYER = {**{name: name for name in _LM_LAYER}, "norm3.weight": "norm2.weight", "norm3.bias": "norm2.bias"}


def warm_start_sources(config: TranslationConfig, lm: ModelConfig) -> dict[str, str]:
    """Translation-model tensor name -> LanguageModel state-dict name, for every tensor the LM supplies."""
    for name in ("vocab_size", "d_model", "n_heads", "d_ff", "pad_id"):
        if getattr(config, name) != getattr(lm, name):
            raise ValueError(f"cannot warm-start: {name} is {getattr(config, name)} here but "
                             f"{getattr(lm, name)} in the pretrained language model")
    for side in ("n_encoder_layers", "n_decoder_layers"):
        if getattr(config, side) != lm.n_layers:
            raise ValueError(f"cannot warm-start: {side} is {getattr(config, side)} but the pretrained language "
                             f"model has {lm.n_layers} layers (each side takes all of them)")
    sources = {"token_embedding.weight": "base.token_embedding.weight"}
    if not config.tie_output:
        sources["output.weight"] = "head.weight"
    if config.output_bias:
        sources["output.bias"] = "head.bias"
    for i in range(lm.n_layers):
        lm_layer = f"base.layers.layers.{i}."
        for key in _DECODER_FROM_LM_LAYER.values():
            sources[f"encoder.layers.{i}.{key}"] = lm_layer + key
        for key, lm_key in _DECODER_FROM_LM_LAYER.items():
            sources[f"decoder.layers.{i}.{key}"] = lm_layer + lm_key
    return sources


@torch.no_grad()
def warm_start_from_language_model(model: TranslationModel, lm_state: dict[str, torch.Tensor],
                                   lm_config: ModelConfig) -> WarmStart:
    """Copy the LM's tensors into `model` (a masked LM's segment A folded into the embedding, as for the classifier);
    cross-attention, its norm and any final norms keep their fresh init."""
    if "segment_embedding.weight" in lm_state:
        base = {k.removeprefix("base."): t for k, t in lm_state.items() if k.startswith("base.")}
        folded = fold_segment_a(base, lm_state["segment_embedding.weight"])
        lm_state = {**lm_state, "base.token_embedding.weight": folded["token_embedding.weight"]}
    sources = warm_start_sources(model.config, lm_config)
    own = model.state_dict()
    for name, source in sources.items():
        own[name].copy_(lm_state[source])  # state_dict tensors share storage with the parameters
    tied = {"output.weight"} if model.config.tie_output else set()
    fresh = [name for name, _ in model.named_parameters() if name not in sources and name not in tied]
    return WarmStart(sources, fresh)
