"""Checkpoints: weights plus everything needed to rebuild and use the model.

A checkpoint is a plain dict (loadable with `weights_only=True`): the model
config, the head kind, label names and the state dict. The MLflow run that
produced it is found through its sha256 (`tracking.run_that_wrote`), not stored
inside, so a checkpoint is byte-identical whenever its weights are.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .io import atomic_path, require_file
from .model import Classifier, LanguageModel, ModelConfig


def save_checkpoint(path: str | Path, model: nn.Module, kind: str, config: ModelConfig, **extra: Any) -> None:
    """Same weights, same bytes: serialised in memory (torch names the archive after the file, and the
    temporary file's name is random) and free of run ids, so dvc.lock only changes when the model does."""
    state = {key: value.detach().cpu() for key, value in model.state_dict().items()}
    payload = {"kind": kind, "model_config": config.to_dict(), "state_dict": state, **extra}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


def load_checkpoint(path: str | Path, expected_kind: str | None = None) -> dict[str, Any]:
    path = require_file(path, "checkpoint")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for corrupt files
        raise ValueError(f"{path}: not a readable checkpoint ({exc})") from None
    if not isinstance(payload, dict) or "state_dict" not in payload or "model_config" not in payload:
        raise ValueError(f"{path}: not an lmtransfer checkpoint (no model_config/state_dict)")
    if expected_kind and payload.get("kind") != expected_kind:
        raise ValueError(f"{path}: holds a {payload.get('kind')!r} model, expected {expected_kind!r}")
    return payload


def model_config_of(payload: dict[str, Any]) -> ModelConfig:
    return ModelConfig(**payload["model_config"])


def build_language_model(payload: dict[str, Any]) -> LanguageModel:
    model = LanguageModel(model_config_of(payload))
    model.load_state_dict(payload["state_dict"])
    return model


def build_classifier(payload: dict[str, Any]) -> Classifier:
    model = Classifier(model_config_of(payload), payload["n_classes"], payload["pooling"])
    model.load_state_dict(payload["state_dict"])
    return model


def classifier_from_pretrained(
    payload: dict[str, Any], n_classes: int, pooling: str, vocab_size: int, pad_id: int | None = None
) -> Classifier:
    """Transfer: keep the pretrained base, put a fresh classification head on it."""
    config = model_config_of(payload)
    if config.vocab_size != vocab_size:
        raise ValueError(
            f"the pretrained model has a vocabulary of {config.vocab_size} but the tokenized data has "
            f"{vocab_size}; rerun pretrain after changing tokenizer.vocab_size"
        )
    if pad_id is not None and config.pad_id != pad_id:
        raise ValueError(
            f"the pretrained model pads with id {config.pad_id} but the tokenized data uses {pad_id}; rerun pretrain"
        )
    model = Classifier(config, n_classes, pooling)
    base_state = {k.removeprefix("base."): v for k, v in payload["state_dict"].items() if k.startswith("base.")}
    model.base.load_state_dict(base_state)
    return model
