"""The validate stage: check every input the pipeline will read, before any stage touches its outputs.

DVC deletes a stage's outputs just before running it, so a stage that then fails
on a bad input would leave the earlier results gone. Checking everything here,
in a cheap stage at the head of the graph, means a broken input stops the
pipeline while every output produced so far is still in place.

The stage also writes manifests of the external files (path, size, sha256), one
per reader: `data/inputs/data.json` (prepare), `tokenizer.json` (tokenize) and
`checkpoint.json` (pretrain). It runs on every `dvc repro` (`always_changed`), so
editing a data file, the tokenizer files or the checkpoint named in params.yaml
reruns exactly the stage that reads it, even though DVC cannot take files chosen
in params.yaml as dependencies itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .checkpoint_import import check_compatible, read_checkpoint_weights
from .config import Params
from .data.files import label_file_for
from .data.prepare import count_corpus, prepare_labeled
from .data.sources import load_source
from .input_files import manifest_entry, resolve_input
from .model import ModelConfig
from .runtime import select_device
from .tokenizer import PAD_ID, Tokenizer, existing_tokenizer


def check_data(params: Params) -> list[dict[str, Any]]:
    """Read the labeled data and split it (as `prepare` will), scan the corpus; return their manifest entries."""
    data = params.data
    raw = load_source(data)
    labeled = prepare_labeled(raw, data)
    count_corpus(raw, labeled, data)  # streams the corpus once: every line decodes, both parts non-empty
    if data.source != "files":
        return [{"key": "data.source", "path": data.source, "bytes": 0, "sha256": raw.archive_sha256}]
    entries = []
    for name, origin in raw.origins.items():
        key = f"data.{name}"
        entries.append(manifest_entry(key, getattr(data, name), Path(origin)))
        if data.labeled_pieces:
            labels = label_file_for(Path(origin))
            entries.append(manifest_entry(key, str(labels), labels))
    for path in getattr(raw.corpus, "paths", []):
        entries.append(manifest_entry("data.corpus", str(path), path))
    return entries


def check_tokenizer(params: Params) -> tuple[Tokenizer | None, list[dict[str, Any]]]:
    """Load the named tokenizer files (a malformed dictionary line or model stops here)."""
    entries = []
    for key in ("model_file", "vocab_file"):
        if getattr(params.tokenizer, key):
            path = resolve_input(getattr(params.tokenizer, key), f"tokenizer.{key}")
            entries.append(manifest_entry(f"tokenizer.{key}", getattr(params.tokenizer, key), path))
    return existing_tokenizer(params.tokenizer), entries


def check_checkpoint(params: Params, tokenizer: Tokenizer | None) -> list[dict[str, Any]]:
    """The checkpoint to start from must fit the id space (None: one to be trained) and the model."""
    entries = []
    if params.pretrain.init_from:
        path = resolve_input(params.pretrain.init_from, "pretrain.init_from")
        vocab_size = tokenizer.vocab_size if tokenizer else params.tokenizer.vocab_size
        pad_id = tokenizer.pad_id if tokenizer else PAD_ID
        config = ModelConfig.from_params(params.model, vocab_size, pad_id)
        check_compatible(read_checkpoint_weights(path), config, str(path))
        entries.append(manifest_entry("pretrain.init_from", params.pretrain.init_from, path))
    return entries


def check_inputs(params: Params) -> dict[str, list[dict[str, Any]]]:
    """Every check; then one manifest per reading stage: {"data": [...], "tokenizer": [...], "checkpoint": [...]}."""
    select_device(params.train.device)  # train.device=cuda on a machine without CUDA stops here, in one line
    data = check_data(params)
    tokenizer, tokenizer_files = check_tokenizer(params)
    return {"data": data, "tokenizer": tokenizer_files, "checkpoint": check_checkpoint(params, tokenizer)}
