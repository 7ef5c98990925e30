"""Start pretraining from an existing checkpoint file (`pretrain.init_from`).

Two weight layouts are understood, each wrapped or as a bare state dict:

* ours ("lmtransfer"): what `checkpoint.save_checkpoint` writes, a dict with
  `kind`, `model_config` and `state_dict` (keys `base.token_embedding.weight`,
  `base.layers.layers.K.*`, `head.*`);
* the original course experiment ("original"): a dict with `model_state_dict`
  (keys `base.encoder.weight`, `base.pos_encoder.pe`,
  `base.transformer_encoder.layers.K.*`, `classifier.decoder.*`), saved from a
  sequence-first `nn.TransformerEncoder`. Its layer weights mean the same as
  batch-first ones, so the mapping is a pure renaming.

Nothing is guessed silently: a tensor the model has no place for, a positional
table that differs from ours, or a size that does not match `params.yaml`
stops with one message naming the file, the tensor and the key to change.
Files are read with `weights_only=True` only: a checkpoint never runs code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lmtransfer.core.errors import CheckpointError
from lmtransfer.modeling.checkpoint import BASE_PREFIX, SEGMENT_EMBEDDING, base_state, read_torch_file
from lmtransfer.modeling.model import LanguageModel, ModelConfig, fold_segment_a, sinusoidal_positions

INIT_KEY = "pretrain.init_from"

# Our key prefixes, and the original layout's name for each.
OUR_EMBEDDING = "base.token_embedding.weight"
OUR_LAYERS = "base.layers.layers."
OUR_HEAD = "head."
NEXT_SENTENCE_HEAD = "next_sentence_head."
ORIGINAL_EMBEDDING = "base.encoder.weight"
ORIGINAL_POSITIONS = "base.pos_encoder.pe"
ORIGINAL_LAYERS = "base.transformer_encoder.layers."
ORIGINAL_HEAD = "classifier.decoder."
OUR_POSITIONS = "base.positions.pe"  # non-persistent in our model; tolerated if an old file has it

RENAMES_FROM_ORIGINAL = {
    ORIGINAL_EMBEDDING: OUR_EMBEDDING,
    ORIGINAL_LAYERS: OUR_LAYERS,
    ORIGINAL_HEAD: OUR_HEAD,
}

POSITION_TOLERANCE = 1e-3  # float32 sin/cos of large arguments differ by ~1e-4 between implementations
KEYS_SHOWN = 8


class CheckpointImportError(CheckpointError):
    """A checkpoint that cannot start this model, phrased for the person editing params.yaml."""


@dataclass
class ImportedWeights:
    state_dict: dict[str, torch.Tensor]  # keys of our LanguageModel; may lack head.*
    has_lm_head: bool
    layout: str  # "lmtransfer" | "original"
    vocab_size: int
    d_model: int
    n_layers: int
    d_ff: int
    notes: list[str] = field(default_factory=list)
    origin: str = "checkpoint"  # the file, so later messages can name it
    n_heads: int | None = None  # only known for our own checkpoints (model_config)
    causal: bool = True  # attention direction; the original course's model is causal
    objective: str = "clm"
    tokenizer_sha256: str | None = None  # our own checkpoints: the tokenizer they were trained with

    def check_tokenizer(self, fingerprint: str) -> None:
        """Ids of another tokenizer would index the wrong rows of the embedding, without a word."""
        if self.tokenizer_sha256 is not None and self.tokenizer_sha256 != fingerprint:
            raise CheckpointImportError(
                f"{self.origin}: trained with another tokenizer than this pipeline's (sha256 "
                f"{self.tokenizer_sha256[:12]} against {fingerprint[:12]}): its ids mean other pieces here; set "
                f"{INIT_KEY} to a checkpoint trained with this tokenizer, or the tokenizer.* keys to its own"
            )


# --- reading --------------------------------------------------------------------------


def read_checkpoint_weights(path: str | Path) -> ImportedWeights:
    """Load a checkpoint file safely and translate it to our LanguageModel's keys."""
    origin = str(path)
    payload = _load_payload(Path(path))
    state, meta, ignored = _unwrap(payload, origin)
    layout = _detect_layout(state, payload, origin)
    notes = [f"ignored non-weight entries: {', '.join(ignored)}"] if ignored else []
    if layout == "original":
        state = _from_original(state, origin, notes)
    else:
        state = _from_ours(state, origin, notes)
    return _assemble(state, layout, meta, origin, notes)


def _load_payload(path: Path) -> Any:
    """The file's contents, read safely; a missing or unreadable file names pretrain.init_from."""
    try:
        return read_torch_file(path, INIT_KEY)
    except CheckpointError as exc:
        raise CheckpointImportError(str(exc)) from None


def _unwrap(payload: Any, origin: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Find the state dict inside a wrapper; return it, our metadata, and the ignored extras."""
    if not isinstance(payload, Mapping):
        raise CheckpointImportError(
            f"{origin}: holds a {type(payload).__name__}, not a dict of weights; "
            f"set {INIT_KEY} to a checkpoint or state-dict file"
        )
    for wrapper_key in ("model_state_dict", "state_dict"):
        inner = payload.get(wrapper_key)
        if isinstance(inner, Mapping):
            kept = ("kind", "model_config", "objective", "next_sentence", "tokenizer_sha256")
            meta = {k: payload[k] for k in kept if k in payload}
            ignored = [str(k) for k in payload if k != wrapper_key and k not in meta]
            return dict(inner), meta, ignored
    return dict(payload), {}, []


def _detect_layout(state: dict[str, Any], payload: Mapping, origin: str) -> str:
    """Ours if our embedding key is present, the original if its embedding key is, else stop."""
    if OUR_EMBEDDING in state:
        return "lmtransfer"
    if ORIGINAL_EMBEDDING in state:
        return "original"
    raise CheckpointImportError(
        f"{origin}: unknown checkpoint layout: no {OUR_EMBEDDING} (lmtransfer) and no "
        f"{ORIGINAL_EMBEDDING} (original experiment) tensor; keys found: {_some_keys(state or payload)}; "
        f"set {INIT_KEY} to a checkpoint of this model"
    )


def _some_keys(mapping: Mapping) -> str:
    keys = [str(k) for k in mapping]
    shown = ", ".join(keys[:KEYS_SHOWN]) or "(none)"
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > KEYS_SHOWN else "")


def _from_original(state: dict[str, Any], origin: str, notes: list[str]) -> dict[str, Any]:
    """Rename the original keys to ours; check and drop its positional table (ours is fixed in code)."""
    renamed: dict[str, Any] = {}
    for key, value in state.items():
        if key == ORIGINAL_POSITIONS:
            continue
        new_key = next(
            (our + key[len(theirs):] for theirs, our in RENAMES_FROM_ORIGINAL.items() if key.startswith(theirs)),
            key,
        )
        renamed[new_key] = value
    if ORIGINAL_POSITIONS in state:
        _check_positions(state[ORIGINAL_POSITIONS], state[ORIGINAL_EMBEDDING], ORIGINAL_POSITIONS,
                         ORIGINAL_EMBEDDING, origin)
    else:
        notes.append(f"no {ORIGINAL_POSITIONS} table in the file; this model's sinusoidal encoding is used")
    notes.append(
        "the original layout does not record the number of attention heads: model.n_heads from params.yaml "
        "is used and must equal the original run's"
    )
    head_extras = [k for k in renamed if k.startswith("classifier.")]
    if head_extras:  # the decoder then does not sit directly on the base: not an LM head
        notes.append(f"ignored classifier tensors beside the decoder: {', '.join(head_extras)}")
        if any(k.startswith(OUR_HEAD) for k in renamed):
            notes.append(f"{ORIGINAL_HEAD.rstrip('.')} follows other classifier layers, so it is not used")
            renamed = {k: v for k, v in renamed.items() if not k.startswith(OUR_HEAD)}
    return renamed


def _from_ours(state: dict[str, Any], origin: str, notes: list[str]) -> dict[str, Any]:
    """Our keys already fit; only a stray positional buffer (never saved by now) is checked and dropped, and a
    next-sentence model's segment A is folded into the token embedding (its pair-only parts are dropped)."""
    state = dict(state)
    if OUR_POSITIONS in state:
        _check_positions(state.pop(OUR_POSITIONS), state[OUR_EMBEDDING], OUR_POSITIONS, OUR_EMBEDDING, origin)
    if SEGMENT_EMBEDDING in state and isinstance(state.get(OUR_EMBEDDING), torch.Tensor):
        folded = fold_segment_a({"token_embedding.weight": state[OUR_EMBEDDING]}, state.pop(SEGMENT_EMBEDDING))
        state[OUR_EMBEDDING] = folded["token_embedding.weight"]
        dropped = [key for key in state if key.startswith(NEXT_SENTENCE_HEAD)]
        for key in dropped:
            del state[key]
        notes.append("next-sentence prediction's segment A embedding folded into the token embedding; "
                     f"dropped {', '.join(dropped)}")
    return state


def _check_positions(table: Any, embedding: Any, key: str, embedding_key: str, origin: str) -> None:
    """A different positional encoding would make every imported weight see wrong inputs."""
    if not isinstance(table, torch.Tensor) or not isinstance(embedding, torch.Tensor) or embedding.dim() != 2:
        return  # shape problems of the embedding are reported by _assemble
    if table.dim() == 3 and table.size(1) == 1:  # (max_len, 1, D): sequence-first
        table = table[:, 0]
    elif table.dim() == 3 and table.size(0) == 1:  # (1, max_len, D): batch-first
        table = table[0]
    if table.dim() != 2:
        raise CheckpointImportError(
            f"{origin}: {key} has shape {tuple(table.shape)}, not a (positions, 1, d_model) table; "
            f"set {INIT_KEY} to a checkpoint with the standard sinusoidal encoding"
        )
    width = embedding.size(1)
    if table.size(1) != width:
        raise CheckpointImportError(
            f"{origin}: {key} has width {table.size(1)} but {embedding_key} has width {width}: the positional "
            f"table does not fit the embedding; set {INIT_KEY} to a consistent checkpoint"
        )
    expected = sinusoidal_positions(table.size(0), width)
    difference = (table.float() - expected).abs()
    worst = float(difference.max()) if difference.numel() else 0.0
    if worst > POSITION_TOLERANCE:
        position, dim = divmod(int(difference.argmax()), width)
        raise CheckpointImportError(
            f"{origin}: {key} differs from this model's sinusoidal positional encoding (largest difference "
            f"{worst:.3g} at position {position}, dimension {dim}): the positional encoding differs, so the "
            f"imported weights would give wrong results; set {INIT_KEY} to a checkpoint trained with the "
            f"standard encoding (sin on even, cos on odd dimensions, base 10000)"
        )


# --- validating the translated weights -------------------------------------------------


def _assemble(
    state: dict[str, Any], layout: str, meta: dict[str, Any], origin: str, notes: list[str]
) -> ImportedWeights:
    """Infer the sizes, check every tensor's shape, and decide whether the head is a usable LM head."""
    embedding = _tensor(state, OUR_EMBEDDING, layout, origin, dims=2)
    vocab_size, d_model = embedding.shape
    n_layers = _count_layers(state, layout, origin)
    d_ff = _tensor(state, f"{OUR_LAYERS}0.linear1.weight", layout, origin, dims=2).size(0)

    base: dict[str, torch.Tensor] = {OUR_EMBEDDING: embedding}
    for index in range(n_layers):
        for name, shape in _layer_shapes(d_model, d_ff).items():
            key = f"{OUR_LAYERS}{index}.{name}"
            base[key] = _tensor(state, key, layout, origin, shape=shape)
    _reject_unexpected_base_keys(state, base, layout, origin)

    kept = dict(base)
    has_lm_head = _usable_lm_head(state, layout, meta, vocab_size, d_model, notes)
    if has_lm_head:
        kept[f"{OUR_HEAD}weight"] = state[f"{OUR_HEAD}weight"]
        kept[f"{OUR_HEAD}bias"] = state[f"{OUR_HEAD}bias"]
    others = [_source_key(layout, k) for k in state if not k.startswith(("base.", OUR_HEAD, "classifier."))]
    if others:
        notes.append(f"ignored tensors outside the base and head: {', '.join(others)}")
    return ImportedWeights(
        state_dict=kept,
        has_lm_head=has_lm_head,
        layout=layout,
        vocab_size=int(vocab_size),
        d_model=int(d_model),
        n_layers=n_layers,
        d_ff=int(d_ff),
        notes=notes,
        origin=origin,
        n_heads=_n_heads_of(meta) if layout == "lmtransfer" else None,
        causal=bool(meta.get("model_config", {}).get("causal", True)) if layout == "lmtransfer" else True,
        objective=str(meta.get("objective", "clm")),
        tokenizer_sha256=meta.get("tokenizer_sha256") if layout == "lmtransfer" else None,
    )


def _layer_shapes(d_model: int, d_ff: int) -> dict[str, tuple[int, ...]]:
    """What a post-norm nn.TransformerEncoderLayer(d_model, dim_feedforward=d_ff) holds."""
    D, F = d_model, d_ff
    shapes = {
        "self_attn.in_proj_weight": (3 * D, D),
        "self_attn.in_proj_bias": (3 * D,),
        "self_attn.out_proj.weight": (D, D),
        "self_attn.out_proj.bias": (D,),
        "linear1.weight": (F, D),
        "linear1.bias": (F,),
        "linear2.weight": (D, F),
        "linear2.bias": (D,),
    }
    shapes.update({f"norm{i}.{p}": (D,) for i in (1, 2) for p in ("weight", "bias")})
    return shapes


def _tensor(
    state: dict[str, Any], key: str, layout: str, origin: str,
    dims: int | None = None, shape: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """One required tensor, with a message in the file's own naming if it is missing or misshapen."""
    value = state.get(key)
    name = _source_key(layout, key)
    if not isinstance(value, torch.Tensor):
        found = "is missing" if value is None else f"is a {type(value).__name__}, not a tensor"
        raise CheckpointImportError(
            f"{origin}: {name} {found}; set {INIT_KEY} to a complete checkpoint of this model"
        )
    if (dims is not None and value.dim() != dims) or (shape is not None and tuple(value.shape) != shape):
        wanted = f"shape {shape}" if shape is not None else f"{dims} dimensions"
        raise CheckpointImportError(
            f"{origin}: {name} has shape {tuple(value.shape)}, expected {wanted} for a post-norm encoder of "
            f"these sizes; the file is inconsistent or another architecture; check {INIT_KEY}"
        )
    return value


def _count_layers(state: dict[str, Any], layout: str, origin: str) -> int:
    """Layers are numbered 0..N-1; a gap means weights are missing."""
    pattern = re.compile(re.escape(OUR_LAYERS) + r"(\d+)\.")
    indices = sorted({int(m.group(1)) for k in state if (m := pattern.match(k))})
    if not indices:
        raise CheckpointImportError(
            f"{origin}: no encoder layers ({_source_key(layout, OUR_LAYERS)}*) in the file; "
            f"set {INIT_KEY} to a complete checkpoint of this model"
        )
    if indices != list(range(len(indices))):
        missing = sorted(set(range(indices[-1] + 1)) - set(indices))
        raise CheckpointImportError(
            f"{origin}: encoder layers {missing} are missing ({_source_key(layout, OUR_LAYERS)}K.*, found "
            f"{indices}); set {INIT_KEY} to a complete checkpoint of this model"
        )
    return len(indices)


def _reject_unexpected_base_keys(state: dict[str, Any], base: dict[str, Any], layout: str, origin: str) -> None:
    """Dropping a base tensor (say a final norm) silently would change the model: refuse instead."""
    extra = [_source_key(layout, k) for k in state if k.startswith(BASE_PREFIX) and k not in base]
    if extra:
        raise CheckpointImportError(
            f"{origin}: tensors this model has no place for: {', '.join(extra)}; loading without them would "
            f"change the model (our base is embedding + positions + post-norm encoder layers, no final norm); "
            f"set {INIT_KEY} to a checkpoint of the same architecture"
        )


def _usable_lm_head(
    state: dict[str, Any], layout: str, meta: dict[str, Any], vocab_size: int, d_model: int, notes: list[str]
) -> bool:
    """A head is an LM head only if it maps D to the same V as the embedding (and is one Linear)."""
    weight, bias = state.get(f"{OUR_HEAD}weight"), state.get(f"{OUR_HEAD}bias")
    name = _source_key(layout, OUR_HEAD).rstrip(".")
    if weight is None and bias is None:
        notes.append("no output head in the file: the language-model head starts from scratch")
        return False
    if not isinstance(weight, torch.Tensor) or not isinstance(bias, torch.Tensor) or weight.dim() != 2:
        notes.append(f"{name} lacks a weight or bias tensor: not used, the LM head starts from scratch")
        return False
    outputs = weight.size(0)
    if meta.get("kind") == "classifier":
        notes.append(f"a classifier checkpoint: its {outputs}-class head is not used, the LM head starts from scratch")
        return False
    if outputs != vocab_size:
        notes.append(f"{name} has {outputs} outputs: a classification head, not used; the LM head starts from scratch")
        return False
    if tuple(weight.shape) != (vocab_size, d_model) or tuple(bias.shape) != (vocab_size,):
        notes.append(f"{name} has shape {tuple(weight.shape)}, not ({vocab_size}, {d_model}): not used")
        return False
    return True


def _n_heads_of(meta: dict[str, Any]) -> int | None:
    config = meta.get("model_config")
    value = config.get("n_heads") if isinstance(config, Mapping) else None
    return value if isinstance(value, int) else None


def _source_key(layout: str, our_key: str) -> str:
    """Our key as the file spells it, so messages name the tensor the user can find."""
    if layout == "original":
        for theirs, ours in RENAMES_FROM_ORIGINAL.items():
            if our_key.startswith(ours):
                return theirs + our_key[len(ours):]
    return our_key


# --- comparing with params.yaml and loading --------------------------------------------


def check_compatible(weights: ImportedWeights, config: ModelConfig, origin: str) -> None:
    """Compare with the model params.yaml builds; report every mismatch at once, naming its key."""
    layout = weights.layout
    embedding = _source_key(layout, OUR_EMBEDDING)
    problems = []
    if weights.vocab_size != config.vocab_size:
        problems.append(
            f"{embedding} has {weights.vocab_size} token ids but the tokenizer gives {config.vocab_size}: the id "
            f"space does not match; use the checkpoint's dictionary (tokenizer.vocab_file) or retrain"
        )
    if weights.d_model != config.d_model:
        problems.append(
            f"{embedding} has width {weights.d_model} but model.d_model is {config.d_model}: "
            f"set model.d_model: {weights.d_model}"
        )
    if weights.n_layers != config.n_layers:
        problems.append(
            f"{_source_key(layout, OUR_LAYERS)}* has {weights.n_layers} layers but model.n_layers is "
            f"{config.n_layers}: set model.n_layers: {weights.n_layers}"
        )
    if weights.d_ff != config.d_ff:
        problems.append(
            f"{_source_key(layout, OUR_LAYERS + '0.linear1.weight')} has {weights.d_ff} feed-forward units but "
            f"model.d_ff is {config.d_ff}: set model.d_ff: {weights.d_ff}"
        )
    if weights.n_heads is not None and weights.n_heads != config.n_heads:
        problems.append(
            f"model_config.n_heads is {weights.n_heads} but model.n_heads is {config.n_heads}: "
            f"set model.n_heads: {weights.n_heads}"
        )
    if weights.causal != config.causal:
        attention = "causal" if weights.causal else "bidirectional"
        problems.append(
            f"the checkpoint's attention is {attention} (pretrained with objective {weights.objective}) but "
            f"pretrain.objective / model.attention give {config.attention}: set pretrain.objective: "
            f"{weights.objective}"
        )
    if len(problems) == 1:
        raise CheckpointImportError(f"{origin}: {problems[0]}")
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise CheckpointImportError(
            f"{origin}: the checkpoint does not fit the model params.yaml describes "
            f"({len(problems)} mismatches):\n{lines}"
        )


def load_into_language_model(weights: ImportedWeights, model: LanguageModel) -> None:
    """Copy the imported weights in: the whole base strictly, the head only if it is an LM head."""
    check_compatible(weights, model.base.config, weights.origin)
    try:
        model.base.load_state_dict(base_state(weights.state_dict), strict=True)
        if weights.has_lm_head:
            head_state = {k.removeprefix(OUR_HEAD): v for k, v in weights.state_dict.items() if k.startswith(OUR_HEAD)}
            model.head.load_state_dict(head_state, strict=True)
    except RuntimeError as exc:  # only reachable if the checks above missed a difference
        raise CheckpointImportError(f"{weights.origin}: cannot load the weights ({exc}); check {INIT_KEY}") from None
