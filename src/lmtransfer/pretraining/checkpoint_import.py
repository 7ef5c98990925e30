"""Start pretraining from an existing checkpoint file (`pretrain.init_from`), wrapped or a bare state dict.

Two layouts: ours (`base.token_embedding.weight`, `base.layers.layers.K.*`, `head.*`) and the original course's
(`model_state_dict` with `base.encoder.weight`, `base.pos_encoder.pe`, `base.transformer_encoder.layers.K.*`,
`classifier.decoder.*`): both stack nn.TransformerEncoderLayers, so three prefixes are renamed. Nothing is guessed:
a tensor without a place, a missing one, another positional table or a size params.yaml does not give stops with
one message naming the file, the tensor (as the file names it) and the key to change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lmtransfer.core.errors import CheckpointError
from lmtransfer.modeling.checkpoint import SEGMENT_EMBEDDING, base_state, read_torch_file
from lmtransfer.modeling.model import LanguageModel, ModelConfig, fold_segment_a, sinusoidal_positions

INIT_KEY = "pretrain.init_from"
OUR_EMBEDDING, OUR_LAYERS, OUR_HEAD = "base.token_embedding.weight", "base.layers.layers.", "head."
ORIGINAL_EMBEDDING, ORIGINAL_POSITIONS, OUR_POSITIONS = "base.encoder.weight", "base.pos_encoder.pe", "base.positions.pe"
RENAMES_FROM_ORIGINAL = {ORIGINAL_EMBEDDING: OUR_EMBEDDING, "base.transformer_encoder.layers.": OUR_LAYERS,
                         "classifier.decoder.": OUR_HEAD}
POSITION_TOLERANCE = 1e-3  # float32 sin/cos of large arguments differ by ~1e-4 between implementations
KEYS_SHOWN = 8


class CheckpointImportError(CheckpointError):
    """A checkpoint that cannot start this model, phrased for the person editing params.yaml."""


@dataclass
class ImportedWeights:
    state_dict: dict[str, torch.Tensor]  # keys of our LanguageModel; head.* only when it is an LM head
    has_lm_head: bool
    layout: str  # "lmtransfer" | "original"
    vocab_size: int
    d_model: int
    n_layers: int
    d_ff: int
    notes: list[str] = field(default_factory=list)
    origin: str = "checkpoint"  # the file, so later messages can name it
    n_heads: int | None = None  # only known for our own checkpoints (model_config)
    causal: bool = True  # the original course's model is causal
    objective: str = "clm"
    tokenizer_sha256: str | None = None  # our own checkpoints: the tokenizer they were trained with

    def check_tokenizer(self, fingerprint: str) -> None:
        """Ids of another tokenizer would index the wrong rows of the embedding, without a word."""
        if self.tokenizer_sha256 is not None and self.tokenizer_sha256 != fingerprint:
            raise CheckpointImportError(
                f"{self.origin}: trained with another tokenizer than this pipeline's (sha256 "
                f"{self.tokenizer_sha256[:12]} against {fingerprint[:12]}): its ids mean other pieces here; set "
                f"{INIT_KEY} to a checkpoint trained with this tokenizer, or the tokenizer.* keys to its own")

    def name(self, our_key: str) -> str:
        """Our key as the file spells it, so messages name the tensor the user can find."""
        return _renamed(our_key, {ours: theirs for theirs, ours in RENAMES_FROM_ORIGINAL.items()}) \
            if self.layout == "original" else our_key


def _renamed(key: str, renames: dict[str, str]) -> str:
    return next((new + key[len(old):] for old, new in renames.items() if key.startswith(old)), key)


def _fail(origin: str, problem: str) -> CheckpointImportError:
    return CheckpointImportError(f"{origin}: {problem}")


def read_checkpoint_weights(path: str | Path) -> ImportedWeights:
    """Load a checkpoint file safely, translate it to our LanguageModel's keys and check it is complete."""
    origin = str(path)
    try:
        payload = read_torch_file(path, INIT_KEY)
    except CheckpointError as exc:
        raise CheckpointImportError(str(exc)) from None
    state, meta, notes = _unwrap(payload, origin)
    if OUR_EMBEDDING in state:
        layout = "lmtransfer"
        _check_positions(state.pop(OUR_POSITIONS, None), state[OUR_EMBEDDING], OUR_POSITIONS, OUR_EMBEDDING, origin)
        if SEGMENT_EMBEDDING in state:  # next-sentence prediction: segment A folded in, the pair-only parts dropped
            folded = fold_segment_a({"token_embedding.weight": state[OUR_EMBEDDING]}, state.pop(SEGMENT_EMBEDDING))
            state[OUR_EMBEDDING] = folded["token_embedding.weight"]
            dropped = [key for key in state if key.startswith("next_sentence_head.")]
            state = {k: v for k, v in state.items() if k not in dropped}
            notes.append(f"next-sentence prediction's segment A embedding folded into the token embedding; "
                         f"dropped {', '.join(dropped)}")
    elif ORIGINAL_EMBEDDING in state:
        layout = "original"
        _check_positions(state.pop(ORIGINAL_POSITIONS, None), state[ORIGINAL_EMBEDDING], ORIGINAL_POSITIONS,
                         ORIGINAL_EMBEDDING, origin)
        state = {_renamed(key, RENAMES_FROM_ORIGINAL): value for key, value in state.items()}
        notes.append("the original layout does not record the number of attention heads: model.n_heads from "
                     "params.yaml is used and must equal the original run's")
    else:
        keys = [str(k) for k in (state or payload)]
        more = f", ... ({len(keys)} in all)" if len(keys) > KEYS_SHOWN else ""
        raise _fail(origin, f"unknown checkpoint layout: no {OUR_EMBEDDING} (lmtransfer) and no {ORIGINAL_EMBEDDING} "
                            f"(original experiment) tensor; keys found: {', '.join(keys[:KEYS_SHOWN]) or '(none)'}"
                            f"{more}; set {INIT_KEY} to a checkpoint of this model")
    config = meta.get("model_config") if isinstance(meta.get("model_config"), Mapping) else {}
    weights = ImportedWeights({}, False, layout, 0, 0, 0, 0, notes, origin,
                              n_heads=config.get("n_heads") if isinstance(config.get("n_heads"), int) else None,
                              causal=bool(config.get("causal", True)), objective=str(meta.get("objective", "clm")),
                              tokenizer_sha256=meta.get("tokenizer_sha256") if layout == "lmtransfer" else None)
    _check_complete(weights, state, meta.get("kind"))
    return weights


def _unwrap(payload: Any, origin: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The state dict inside a wrapper, our metadata, and a note on the ignored extras (epoch, optimizer...)."""
    if not isinstance(payload, Mapping):
        raise _fail(origin, f"holds a {type(payload).__name__}, not a dict of weights; set {INIT_KEY} to a "
                            "checkpoint or state-dict file")
    for wrapper in ("model_state_dict", "state_dict"):
        if isinstance(payload.get(wrapper), Mapping):
            kept = ("kind", "model_config", "objective", "next_sentence", "tokenizer_sha256")
            meta = {k: payload[k] for k in kept if k in payload}
            ignored = [str(k) for k in payload if k != wrapper and k not in meta]
            return dict(payload[wrapper]), meta, [f"ignored non-weight entries: {', '.join(ignored)}"] if ignored else []
    return dict(payload), {}, []


def _check_positions(table: Any, embedding: Any, key: str, embedding_key: str, origin: str) -> None:
    """A different positional encoding would make every imported weight see wrong inputs."""
    if not isinstance(table, torch.Tensor) or not isinstance(embedding, torch.Tensor) or embedding.dim() != 2:
        return  # no table (ours is fixed in code), or an embedding problem `_check_complete` reports
    table = table.squeeze(1) if table.dim() == 3 and table.size(1) == 1 else table.squeeze(0)  # (T, 1, D) or (1, T, D)
    if table.dim() != 2:
        raise _fail(origin, f"{key} has shape {tuple(table.shape)}, not a (positions, 1, d_model) table; set "
                            f"{INIT_KEY} to a checkpoint with the standard sinusoidal encoding")
    width = embedding.size(1)
    if table.size(1) != width:
        raise _fail(origin, f"{key} has width {table.size(1)} but {embedding_key} has width {width}: the positional "
                            f"table does not fit the embedding; set {INIT_KEY} to a consistent checkpoint")
    difference = (table.float() - sinusoidal_positions(table.size(0), width)).abs()
    if difference.numel() and float(difference.max()) > POSITION_TOLERANCE:
        position, dim = divmod(int(difference.argmax()), width)
        raise _fail(origin, f"{key} differs from this model's sinusoidal positional encoding (largest difference "
                            f"{float(difference.max()):.3g} at position {position}, dimension {dim}): the positional "
                            f"encoding differs, so the imported weights would give wrong results; set {INIT_KEY} to a "
                            "checkpoint trained with the standard encoding (sin on even, cos on odd dimensions, base "
                            "10000)")


def _check_complete(weights: ImportedWeights, state: dict[str, Any], kind: Any) -> None:
    """Infer V, D, N, F, then hold every base tensor against a LanguageModel of that shape (built without memory):
    a missing, misshapen or unexpected one stops; the head is kept only if it is an LM head."""
    origin, linear1_key = weights.origin, f"{OUR_LAYERS}0.linear1.weight"
    for key in (OUR_EMBEDDING, linear1_key):
        if not isinstance(state.get(key), torch.Tensor) or state[key].dim() != 2:
            raise _fail(origin, f"{weights.name(key)} is missing or not a matrix; set {INIT_KEY} to a complete "
                                "checkpoint of this model")
    layers = re.compile(re.escape(OUR_LAYERS) + r"(\d+)\.")
    weights.vocab_size, weights.d_model = state[OUR_EMBEDDING].shape
    weights.n_layers = max(int(m.group(1)) for key in state if (m := layers.match(key))) + 1
    weights.d_ff = state[linear1_key].size(0)
    with torch.device("meta"):
        reference = LanguageModel(ModelConfig(vocab_size=weights.vocab_size, d_model=weights.d_model,
                                              n_layers=weights.n_layers, n_heads=1, d_ff=weights.d_ff, dropout=0.0))
    for key, expected in reference.base.state_dict(prefix="base.").items():
        value = state.get(key)
        if not isinstance(value, torch.Tensor):
            raise _fail(origin, f"{weights.name(key)} is missing; set {INIT_KEY} to a complete checkpoint of this model")
        if value.shape != expected.shape:
            raise _fail(origin, f"{weights.name(key)} has shape {tuple(value.shape)}, expected {tuple(expected.shape)} "
                                f"for a post-norm encoder of these sizes; the file is inconsistent or another "
                                f"architecture; check {INIT_KEY}")
        weights.state_dict[key] = value
    extra = [weights.name(k) for k in state if k.startswith("base.") and k not in weights.state_dict]
    if extra:
        raise _fail(origin, f"tensors this model has no place for: {', '.join(extra)}; loading without them would "
                            "change the model (our base is embedding + positions + post-norm encoder layers, no final "
                            f"norm); set {INIT_KEY} to a checkpoint of the same architecture")
    weights.has_lm_head = _usable_lm_head(weights, state, kind)
    if weights.has_lm_head:
        weights.state_dict.update({k: state[k] for k in (f"{OUR_HEAD}weight", f"{OUR_HEAD}bias")})
    others = [weights.name(k) for k in state if not k.startswith(("base.", OUR_HEAD))]
    if others:
        weights.notes.append(f"ignored tensors outside the base and head: {', '.join(others)}")


def _usable_lm_head(weights: ImportedWeights, state: dict[str, Any], kind: Any) -> bool:
    """A head is an LM head only if it maps D to the same V as the embedding."""
    weight, bias, name = state.get(f"{OUR_HEAD}weight"), state.get(f"{OUR_HEAD}bias"), weights.name(OUR_HEAD).rstrip(".")
    if weight is None and bias is None:
        problem = "no output head in the file"
    elif not isinstance(weight, torch.Tensor) or not isinstance(bias, torch.Tensor) or weight.dim() != 2:
        problem = f"{name} lacks a weight or bias tensor: not used"
    elif kind == "classifier":
        problem = f"a classifier checkpoint: its {weight.size(0)}-class head is not used"
    elif weight.size(0) != weights.vocab_size:
        problem = f"{name} has {weight.size(0)} outputs: a classification head, not used"
    elif tuple(weight.shape) != (weights.vocab_size, weights.d_model) or tuple(bias.shape) != (weights.vocab_size,):
        problem = f"{name} has shape {tuple(weight.shape)}, not ({weights.vocab_size}, {weights.d_model}): not used"
    else:
        return True
    weights.notes.append(f"{problem}; the language-model head starts from scratch")
    return False


def check_compatible(weights: ImportedWeights, config: ModelConfig, origin: str) -> None:
    """Compare with the model params.yaml builds; report every mismatch at once, naming its key."""
    embedding, layers, w = weights.name(OUR_EMBEDDING), weights.name(OUR_LAYERS), weights
    checks = [
        (w.vocab_size, config.vocab_size, f"{embedding} has {w.vocab_size} token ids but the tokenizer gives "
         f"{config.vocab_size}: the id space does not match; use the checkpoint's dictionary (tokenizer.vocab_file) "
         "or retrain"),
        (w.d_model, config.d_model, f"{embedding} has width {w.d_model} but model.d_model is {config.d_model}: "
         f"set model.d_model: {w.d_model}"),
        (w.n_layers, config.n_layers, f"{layers}* has {w.n_layers} layers but model.n_layers is {config.n_layers}: "
         f"set model.n_layers: {w.n_layers}"),
        (w.d_ff, config.d_ff, f"{layers}0.linear1.weight has {w.d_ff} feed-forward units but model.d_ff is "
         f"{config.d_ff}: set model.d_ff: {w.d_ff}"),
        (config.n_heads if w.n_heads is None else w.n_heads, config.n_heads,  # the original layout lacks it
         f"model_config.n_heads is {w.n_heads} but model.n_heads is {config.n_heads}: set model.n_heads: {w.n_heads}"),
        (w.causal, config.causal, f"the checkpoint's attention is {'causal' if w.causal else 'bidirectional'} "
         f"(pretrained with objective {w.objective}) but pretrain.objective / model.attention give "
         f"{config.attention}: set pretrain.objective: {w.objective}"),
    ]
    problems = [problem for found, wanted, problem in checks if found != wanted]
    if len(problems) == 1:
        raise _fail(origin, problems[0])
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise _fail(origin, f"the checkpoint does not fit the model params.yaml describes ({len(problems)} "
                            f"mismatches):\n{lines}")


def load_into_language_model(weights: ImportedWeights, model: LanguageModel) -> None:
    """Copy the imported weights in: the whole base strictly, the head only if it is an LM head."""
    check_compatible(weights, model.base.config, weights.origin)
    model.base.load_state_dict(base_state(weights.state_dict), strict=True)
    if weights.has_lm_head:
        model.head.load_state_dict({k.removeprefix(OUR_HEAD): v for k, v in weights.state_dict.items()
                                    if k.startswith(OUR_HEAD)}, strict=True)
