"""The validate stage: check every input the pipeline will read, before any stage touches its outputs.

DVC deletes a stage's outputs just before running it, so a stage that then fails
on a bad input would leave the earlier results gone. Checking everything here,
in a cheap stage at the head of the graph, means a broken input stops the
pipeline while every output produced so far is still in place.

The stage also writes a manifest of the external files (path, size, sha256).
It runs on every `dvc repro` (`always_changed`), and `prepare`, `tokenize` and
`pretrain` depend on the manifest: editing a data file, the tokenizer files or
the checkpoint named in params.yaml reruns exactly what reads them, even though
DVC cannot list files chosen in params.yaml as dependencies itself.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .config import Params
from .data.files import iter_lines, label_file_for, resolve_input
from .data.prepare import prepare_labeled
from .data.sources import load_source, sha256_of
from .model import ModelConfig
from .tokenizer import PAD_ID, existing_tokenizer


def scan_text_file(path: Path, encoding: str, key: str) -> str:
    """Decode every line (an error names the line) and return the file's sha256, in one pass."""
    digest = hashlib.sha256()
    non_blank = False
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            digest.update(raw)
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{path}, line {number}: not valid {encoding} text ({exc.reason} at byte {exc.start}); "
                    f"convert the file or set data.encoding (read because of {key})"
                ) from None
            non_blank = non_blank or bool(text.strip())
    if not non_blank:
        raise ValueError(f"{path}: the file has no text, only blank lines (set by {key})")
    return digest.hexdigest()


def _entry(key: str, given: str, path: Path, sha256: str | None = None) -> dict[str, Any]:
    return {"key": key, "path": given, "bytes": path.stat().st_size, "sha256": sha256 or sha256_of(path)}


def check_data(params: Params) -> list[dict[str, Any]]:
    """Read the labeled data and split it (as `prepare` will), scan the corpus; return their manifest entries."""
    data = params.data
    raw = load_source(data)
    prepare_labeled(raw, data)
    if data.source != "files":
        return [{"key": "data.source", "path": data.source, "bytes": 0, "sha256": raw.archive_sha256}]
    entries = []
    for name, origin in raw.origins.items():
        key = f"data.{name}"
        entries.append(_entry(key, getattr(data, name), Path(origin)))
        if data.labeled_pieces:
            labels = label_file_for(Path(origin))
            entries.append(_entry(key, str(labels), labels))
    for path in getattr(raw.corpus, "paths", []):
        entries.append(_entry("data.corpus", str(path), path, scan_text_file(path, data.encoding, "data.corpus")))
    return entries


def check_tokenizer_and_checkpoint(params: Params) -> list[dict[str, Any]]:
    """Load the named tokenizer files and checkpoint, and check that their id spaces and shapes agree."""
    entries = []
    for key in ("model_file", "vocab_file"):
        if getattr(params.tokenizer, key):
            path = resolve_input(getattr(params.tokenizer, key), f"tokenizer.{key}")
            entries.append(_entry(f"tokenizer.{key}", getattr(params.tokenizer, key), path))
    tokenizer = existing_tokenizer(params.tokenizer, resolve=resolve_input)
    if params.pretrain.init_from:
        from .checkpoint_import import check_compatible, read_checkpoint_weights

        path = resolve_input(params.pretrain.init_from, "pretrain.init_from")
        vocab_size = tokenizer.vocab_size if tokenizer else params.tokenizer.vocab_size
        pad_id = tokenizer.pad_id if tokenizer else PAD_ID
        config = ModelConfig(vocab_size=vocab_size, pad_id=pad_id, **params.model.model_dump())
        check_compatible(read_checkpoint_weights(path), config, str(path))
        entries.append(_entry("pretrain.init_from", params.pretrain.init_from, path))
    return entries


def check_inputs(params: Params) -> dict[str, Any]:
    """Every check, then the manifest `prepare`, `tokenize` and `pretrain` depend on."""
    return {"inputs": check_data(params) + check_tokenizer_and_checkpoint(params)}
