"""The validate stage: every input the pipeline will read is checked before any stage runs (DVC deletes a stage's
outputs before running it). It writes a manifest (path, size, sha256) of the external files per reading stage
(`data/inputs/data.json`, `tokenizer.json`, `checkpoint.json`), so editing a file reruns the stage that reads it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from lmtransfer.classification.config import ClassificationParams, shipped_classification_params
from lmtransfer.classification.data.imdb_release import ACL_IMDB_V1
from lmtransfer.classification.data.prepare import CorpusScan, LabeledData, prepare_labeled, scan_corpus
from lmtransfer.classification.data.sources import Corpus, load_source
from lmtransfer.core.errors import ConfigError, TokenizerError
from lmtransfer.data.files import label_file_for
from lmtransfer.data.input_files import manifest_entry, resolve_input
from lmtransfer.harness.pipeline_outputs import refuse_pipeline_output
from lmtransfer.tokens.tokenizer import (
    PAD_ID,
    Tokenizer,
    encode_for_classification,
    existing_tokenizer,
    mask_id_of,
    train_sentencepiece,
)

TOKENIZER_TRIAL_CHARS = 2_000_000  # a corpus this small is tokenized once in validate (about a second)
UNKNOWN_SAMPLE = 2_000  # labeled train texts encoded to measure the unknown share (well under a second)
UNKNOWN_STOP = 0.5  # more of their pieces unknown than this: the tokenizer was made for other text
MAX_TOKENS_PER_CHAR = 3  # a generous bound: a piece covers at least one character, plus word markers


def check_data(params: ClassificationParams) -> tuple[list[dict[str, Any]], LabeledData, CorpusScan]:
    """Read and split the labeled data, scan the corpus (as `prepare` will): manifest entries, splits, scan."""
    data = params.data
    raw = load_source(data)
    labeled = prepare_labeled(raw, data)
    scan = scan_corpus(raw, labeled, data, keep_chars=TOKENIZER_TRIAL_CHARS)
    entries: list[dict[str, Any]] = []
    if data.source != "files":
        entries.append({"key": "data.source", "path": data.source, "bytes": 0, "sha256": raw.archive_sha256})
    else:
        for name, origin in raw.origins.items():
            key = f"data.{name}"
            entries.append(manifest_entry(key, getattr(data, name), Path(origin)))
            if data.labeled_pieces:
                labels = label_file_for(Path(origin))
                entries.append(manifest_entry(key, str(labels), labels))
    if isinstance(raw.corpus, Corpus):  # the files by their bytes, a named corpus by its pinned release
        entries += [manifest_entry("data.corpus", str(path), path) for path in raw.corpus.paths]
        entries += [{"key": "data.corpus", "path": name, "bytes": 0, "sha256": ACL_IMDB_V1.digest}
                    for name in raw.corpus.named]
    return entries, labeled, scan


def check_stream_lengths(params: ClassificationParams, labeled: LabeledData, scan: CorpusScan) -> None:
    """Every token stream pretraining cuts into `pretrain.seq_len` windows holds one, at the most tokens it can give."""
    streams = {f"the corpus's {part} part": (scan.chars[part], scan.lines[part]) for part in ("train", "valid")}
    if params.pretrain.adapt_epochs and not params.pretrain.init_from:
        for name in ("train", "valid"):
            texts = labeled.splits[name]["text"]
            streams[f"the labeled {name} texts (pretrain.adapt_epochs)"] = (int(texts.str.len().sum()), len(texts))
    for what, (chars, lines) in streams.items():
        most = MAX_TOKENS_PER_CHAR * chars + 2 * lines  # + each document's BOS and EOS
        if most < params.pretrain.seq_len + 1:
            raise ConfigError(
                f"{what} has {lines:,} lines of {chars:,} characters in all, at most {most:,} tokens: fewer than "
                f"pretrain.seq_len + 1 = {params.pretrain.seq_len + 1}; lower pretrain.seq_len or add text"
            )


def check_tokenizer(params: ClassificationParams, scan: CorpusScan) -> tuple[Tokenizer | None, list[dict[str, Any]]]:
    """Load the named tokenizer files; with none and a small corpus, train one as a trial (a bad `vocab_size` stops)."""
    entries = []
    for key in ("model_file", "vocab_file"):
        if getattr(params.tokenizer, key):
            path = resolve_input(getattr(params.tokenizer, key), f"tokenizer.{key}")
            entries.append(manifest_entry(f"tokenizer.{key}", getattr(params.tokenizer, key), path))
    tokenizer = existing_tokenizer(params.tokenizer)
    if tokenizer is None and scan.train_text is not None:
        with tempfile.TemporaryDirectory() as directory:
            corpus = Path(directory) / "corpus_train.txt"
            corpus.write_text("\n".join(scan.train_text) + "\n", encoding="utf-8")
            train_sentencepiece(corpus, params.tokenizer)
    return tokenizer, entries


def check_unknown_share(params: ClassificationParams, labeled: LabeledData, tokenizer: Tokenizer | None) -> None:
    """A given tokenizer that maps most labeled texts to the unknown id was made for other files."""
    if tokenizer is None:
        return
    texts = list(labeled.splits["train"]["text"][:UNKNOWN_SAMPLE])
    ids, _ = encode_for_classification(tokenizer, texts, pieces=params.data.labeled_pieces)
    share = int((ids == tokenizer.unk_id).sum()) / max(len(ids) - len(texts), 1)  # each text's BOS aside
    if share > UNKNOWN_STOP:
        key = given_tokenizer_key(params)
        raise TokenizerError(
            f"{share:.0%} of the pieces of the first {len(texts):,} labeled train texts are not in "
            f"{key}={getattr(params.tokenizer, key.removeprefix('tokenizer.'))} (each would become the unknown id): is it the one "
            "these files were cut with? Name the matching one, or set it '' to train a tokenizer on this data"
        )


def given_tokenizer_key(params: ClassificationParams) -> str:
    return "tokenizer.vocab_file" if params.tokenizer.vocab_file else "tokenizer.model_file"


def check_checkpoint(params: ClassificationParams, tokenizer: Tokenizer | None) -> list[dict[str, Any]]:
    """The checkpoint to start from: not an output of this pipeline, and fitting the id space and the model."""
    entries = []
    if params.pretrain.init_from:
        from lmtransfer.modeling.model import ModelConfig  # torch: only a checkpoint to check needs it
        from lmtransfer.pretraining.checkpoint_import import check_compatible, read_checkpoint_weights

        refuse_pipeline_output(params.pretrain.init_from, "pretrain.init_from")  # before "not found": not built yet
        path = resolve_input(params.pretrain.init_from, "pretrain.init_from")
        refuse_pipeline_output(str(path), "pretrain.init_from")  # named from the repository root (DVC_ROOT)
        vocab_size = tokenizer.vocab_size if tokenizer else params.tokenizer.vocab_size
        pad_id = tokenizer.pad_id if tokenizer else PAD_ID
        config = ModelConfig.from_params(params.model, vocab_size, pad_id, params.causal_attention)
        check_compatible(read_checkpoint_weights(path), config, str(path))
        entries.append(manifest_entry("pretrain.init_from", params.pretrain.init_from, path))
    return entries


def check_objective(params: ClassificationParams, tokenizer: Tokenizer | None) -> None:
    """Masked language modelling needs a `<mask>` id, which a given tokenizer may lack."""
    if params.pretrain.objective == "mlm" and tokenizer is not None and not params.pretrain.init_from:
        if mask_id_of(tokenizer) is None:
            raise ConfigError(
                f"pretrain.objective: mlm needs a <mask> token, and the tokenizer {given_tokenizer_key(params)} names "
                "has none; use the tokenizer the pipeline trains (tokenizer.model_file and tokenizer.vocab_file '') "
                "or pretrain.objective: clm"
            )


def check_label_sizes(params: ClassificationParams, labeled: LabeledData) -> None:
    """Each size of the label curve is a true subset of the train split holding every class."""
    n_train, n_classes = len(labeled.splits["train"]), len(labeled.label_names)
    for size in params.finetune.label_sizes:
        if not n_classes <= size < n_train:
            raise ConfigError(f"finetune.label_sizes: {size} labeled examples, but a subset of the train split "
                              f"({n_train:,} examples, {n_classes} classes) has from {n_classes} (one per class) to "
                              f"{n_train - 1:,}; the full split is the pipeline's own fine-tunes")


def check_inputs(params: ClassificationParams) -> dict[str, list[dict[str, Any]]]:
    """Every check; then one manifest per reading stage."""
    if params.train.device not in ("auto", "cpu"):  # train.device=cuda on a machine without CUDA stops here
        from lmtransfer.modeling.runtime import select_device  # torch, a second of every `dvc repro` otherwise

        select_device(params.train.device)
    data, labeled, scan = check_data(params)
    check_label_sizes(params, labeled)
    check_stream_lengths(params, labeled, scan)
    tokenizer, tokenizer_files = check_tokenizer(params, scan)
    check_unknown_share(params, labeled, tokenizer)
    check_objective(params, tokenizer)
    return {"data": data, "tokenizer": tokenizer_files, "checkpoint": check_checkpoint(params, tokenizer)}


def design_cost(params: ClassificationParams, default: ClassificationParams) -> str | None:
    """What a design larger than the default costs, said before its first stage."""
    runs, seeds = len(params.pretrain.seeds), len(params.finetune.seeds)
    default_runs, default_seeds = len(default.pretrain.seeds), len(default.finetune.seeds)
    if runs <= default_runs and runs * seeds <= default_runs * default_seeds:
        return None
    pretrainings = 0 if params.pretrain.init_from else runs
    return (f"pretrain.seeds x finetune.seeds = {runs} x {seeds}: {pretrainings} pretraining runs and "
            f"{2 * runs * seeds} fine-tunes (pretrained and scratch), {runs / default_runs:.1f}x and "
            f"{runs * seeds / (default_runs * default_seeds):.1f}x the default design's ({default_runs} and "
            f"{2 * default_runs * default_seeds}): expect the training stages to take that much longer")


def run_validate_stage(params: ClassificationParams) -> None:
    from lmtransfer.core.io import write_json
    from lmtransfer.core.paths import INPUTS
    from lmtransfer.harness.tracking import check_store

    manifests = check_inputs(params)
    check_store()  # a broken or read-only MLflow store stops here, before DVC removes any later stage's outputs
    shipped = shipped_classification_params(params)
    for note in params.pretrain.ignored_settings(shipped.pretrain) + [design_cost(params, shipped)]:
        if note:
            print(f"validate: note: {note}")
    for name, entries in manifests.items():
        write_json(INPUTS / f"{name}.json", {"inputs": entries})
    described = ", ".join(f"{e['key']}={e['path']}" for entries in manifests.values() for e in entries)
    print(f"validate: inputs ok ({described}) -> {INPUTS}/")
