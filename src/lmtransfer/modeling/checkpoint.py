"""Checkpoints: a plain dict (loadable with `weights_only=True`) of the model config, the head kind, label names and
the state dict. No run id inside (the run is found by the file's sha256), so same weights give the same bytes."""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lmtransfer.core.config import pooling_mismatch
from lmtransfer.core.errors import CheckpointError
from lmtransfer.core.io import atomic_path, how_to_produce, require_file
from lmtransfer.modeling.model import Classifier, LanguageModel, MaskedLanguageModel, ModelConfig, fold_segment_a

BASE_PREFIX = "base."
SEGMENT_EMBEDDING = "segment_embedding.weight"


def save_checkpoint(path: str | Path, model: nn.Module, kind: str, config: ModelConfig, **extra: Any) -> None:
    """Serialised in memory first: torch names the archive after the file, and the temporary file's name is random."""
    state = {key: value.detach().cpu() for key, value in model.state_dict().items()}
    payload = {"kind": kind, "model_config": config.to_dict(), "state_dict": state, **extra}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


def read_torch_file(path: str | Path, key: str = "") -> Any:
    """torch.load with weights_only=True (a checkpoint never runs code); every failure names the file, and `key`, the
    params.yaml key that named it."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file not found" + (f"; check {key}" if key else
                              f" (run the stage that produces it: {how_to_produce(path)})"))
    try:
        with warnings.catch_warnings():  # torch warns of a foreign pickle protocol before failing: ours says it all
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises UnpicklingError, RuntimeError, EOFError, KeyError...
        raise CheckpointError(_describe_load_failure(path, exc, key)) from None


_TORCH_ADVICE = re.compile(r"weights_only|Weights only load failed|documentation of torch.load")


def _describe_load_failure(path: Path, exc: Exception, key: str) -> str:
    text = str(exc)
    check = f"; check {key}" if key else ""
    custom = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if custom:
        return (f"{path}: the file pickles custom objects ({custom.group(1)}), probably a whole model saved with "
                "torch.save(model); it is only read with weights_only=True, which never runs code from a file. Re-save "
                f"just the weights where that class is importable, e.g. torch.save({{'model_state_dict': "
                f"model.state_dict()}}, path){check}")
    blocked = re.search(r"unsupported GLOBAL ([\w.]+) whose module ([\w.]+) is blocked", text)
    if blocked:
        return (f"{path}: the file holds code or objects this tool will not run ({blocked.group(1)}; module "
                f"{blocked.group(2)} is blocked): it was not loaded. A checkpoint holds only tensors and plain values; "
                f"use a checkpoint from a source you trust{check}")
    lines = [line.strip() for line in text.split("WeightsUnpickler error:")[-1].strip().splitlines()
             if line.strip() and not _TORCH_ADVICE.search(line)]  # never pass on "load with weights_only=False"
    detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return f"{path}: not a readable PyTorch checkpoint (corrupted, truncated or not written by torch.save; {detail}){check}"


def load_checkpoint(path: str | Path, expected_kind: str | None = None) -> dict[str, Any]:
    """One of our checkpoints, of the expected kind."""
    path = require_file(path, "checkpoint")
    payload = read_torch_file(path)
    if not isinstance(payload, dict) or "state_dict" not in payload or "model_config" not in payload:
        raise CheckpointError(f"{path}: not an lmtransfer checkpoint (no model_config/state_dict)")
    if expected_kind and payload.get("kind") != expected_kind:
        raise CheckpointError(f"{path}: holds a {payload.get('kind')!r} model, expected {expected_kind!r}")
    return payload


def base_state(state_dict: dict[str, Any]) -> dict[str, Any]:
    """The shared base's tensors, keyed as `TransformerBase` names them."""
    return {k.removeprefix(BASE_PREFIX): v for k, v in state_dict.items() if k.startswith(BASE_PREFIX)}


def model_config_of(payload: dict[str, Any]) -> ModelConfig:
    return ModelConfig(**payload["model_config"])


def objective_of(payload: dict[str, Any]) -> str:
    """`clm` or `mlm` (older checkpoints: `clm`)."""
    return payload.get("objective", "clm")


def build_language_model(payload: dict[str, Any]) -> LanguageModel:
    """The pretrained network as it was trained: a causal LM, or a masked LM (with its NSP parts, if any)."""
    config = model_config_of(payload)
    if objective_of(payload) == "mlm":
        model = MaskedLanguageModel(config, next_sentence=payload.get("next_sentence", False))
    else:
        model = LanguageModel(config)
    model.load_state_dict(payload["state_dict"])
    return model


def build_classifier(payload: dict[str, Any]) -> Classifier:
    model = Classifier(model_config_of(payload), payload["n_classes"], payload["pooling"])
    model.load_state_dict(payload["state_dict"])
    return model


def classifier_from_pretrained(payload: dict[str, Any], n_classes: int, pooling: str, vocab_size: int,
                               pad_id: int | None = None) -> Classifier:
    """Transfer: keep the pretrained base, put a fresh classification head on it."""
    config = model_config_of(payload)
    if config.vocab_size != vocab_size:
        raise CheckpointError(f"the pretrained model has a vocabulary of {config.vocab_size} but the tokenized data has "
                              f"{vocab_size}; rerun pretrain after changing tokenizer.vocab_size")
    if pad_id is not None and config.pad_id != pad_id:
        raise CheckpointError(f"the pretrained model pads with id {config.pad_id} but the tokenized data uses {pad_id}; "
                              "rerun pretrain")
    problem = pooling_mismatch(pooling, config.causal, objective_of(payload))
    if problem:
        raise CheckpointError(f"the pretrained model: {problem}")
    model = Classifier(config, n_classes, pooling)
    state = base_state(payload["state_dict"])
    if SEGMENT_EMBEDDING in payload["state_dict"]:  # pretrained with next-sentence prediction
        state = fold_segment_a(state, payload["state_dict"][SEGMENT_EMBEDDING])
    model.base.load_state_dict(state)
    return model
