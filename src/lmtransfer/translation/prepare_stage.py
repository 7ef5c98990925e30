"""The translation prepare and tokenize stages. prepare: the pairs read, cleaned and split leak-free into
data/prepared/ (train/valid/test.tsv), the text of both languages into data/prepared_corpus/; it runs first on every
`dvc repro` and its outputs are `persist`, so it checks first what a later stage would refuse (after DVC had removed
that stage's outputs). tokenize: one sentencepiece model over both languages, each pair as BOS + pieces + EOS."""

from __future__ import annotations

import csv
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmtransfer.core.errors import ConfigError, TokenizerError
from lmtransfer.core.io import atomic_directory, require_file, write_json
from lmtransfer.core.paths import PREPARED, PREPARED_CORPUS, TOKENIZED, TOKENIZED_CORPUS
from lmtransfer.data.input_files import resolve_input
from lmtransfer.data.prepared import CORPUS_PARTS, META, SPLITS, corpus_dir, corpus_name
from lmtransfer.harness.pipeline_outputs import refuse_pipeline_output
from lmtransfer.harness.tracking import log_file, log_run, stage_run
from lmtransfer.tokens.encode_splits import build_tokenizer, encode_corpus, tokenizer_meta, warn_unknown
from lmtransfer.tokens.id_files import PairSplit, write_pair_split, write_tokenized_meta
from lmtransfer.tokens.tokenizer import (
    SentencePieceTokenizer,
    Tokenizer,
    encode_documents,
    existing_tokenizer,
    save_tokenizer,
    train_sentencepiece,
)
from lmtransfer.translation.config import TranslationParams
from lmtransfer.translation.data import bible_en_fr
from lmtransfer.translation.data.clauses import add_clause_pairs
from lmtransfer.translation.data.pairs import load_pair_files, read_lab_sentences

PAIR_COLUMNS = ["source", "target"]
TOKENIZER_TRIAL_CHARS = 2_000_000  # a corpus this small is tokenized once here, as tokenize will (about a second)


def load_parallel(params) -> bible_en_fr.ParallelData:
    """`data.source`: the built-in Bible pairs or the user's pair files."""
    if params.source == "bible-en-fr":
        data = bible_en_fr.load_bible_pairs(bible_en_fr.fetch_bible_database(), params.valid_fraction,
                                            params.test_fraction, params.seed,
                                            bible_en_fr.EXTRA_MONOLINGUAL if params.extra_monolingual else ())
    else:
        data = load_pair_files(params)
    if params.max_train_pairs and len(data.splits["train"]) > params.max_train_pairs:
        data.splits["train"] = data.splits["train"].iloc[: params.max_train_pairs].reset_index(drop=True)
    if params.clause_pairs:  # after the corpus is read: the pieces' text is already in it, whole
        held_out = [text for name in ("valid", "test") for side in PAIR_COLUMNS for text in data.splits[name][side]]
        data.splits["train"], counts = add_clause_pairs(data.splits["train"], held_out)
        data.clause_pairs = counts.pop("clause_pairs_added")
        data.removed.update(counts)
    return data


def write_parallel(data: bible_en_fr.ParallelData, out_dir: Path, description: dict[str, Any]) -> dict[str, Any]:
    """The corpus, then the pairs, each folder swapped in whole or not at all; returns the pairs' meta."""
    valid = data.splits["valid"]
    parts = {"train": data.corpus, "valid": list(valid["source"]) + list(valid["target"])}
    with atomic_directory(corpus_dir(out_dir)) as tmp:
        for part in CORPUS_PARTS:
            (tmp / corpus_name(part)).write_text("".join(line + "\n" for line in parts[part]), encoding="utf-8")
        write_json(tmp / META, {"source": description["source"], "corpus_format": "text",
                                "corpus_lines": {part: len(parts[part]) for part in CORPUS_PARTS}})
    with atomic_directory(out_dir) as tmp:
        for name in SPLITS:
            data.splits[name][PAIR_COLUMNS].to_csv(tmp / f"{name}.tsv", sep="\t", index=False,
                                                   quoting=csv.QUOTE_NONE, escapechar=None)
        meta = {**description, "pairs": {name: len(data.splits[name]) for name in SPLITS},
                "corpus_lines": {part: len(parts[part]) for part in CORPUS_PARTS},
                "clause_pairs": data.clause_pairs, "removed": dict(data.removed)}
        write_json(tmp / META, meta)
    return meta


def read_pairs(directory: Path, name: str) -> pd.DataFrame:
    """One prepared split's pairs: `source` and `target` (str)."""
    path = require_file(Path(directory) / f"{name}.tsv", f"prepared '{name}' pairs")
    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE)


def trial_tokenizer(params: TranslationParams, corpus: list[str]) -> Tokenizer | None:
    """The tokenizer tokenize will use (loaded, or trained on the same corpus and seed); a larger corpus is tried on
    its first TOKENIZER_TRIAL_CHARS characters, where only a vocabulary too small even for those stops; then None."""
    given = existing_tokenizer(params.tokenizer)
    if given is not None:
        return given
    kept, chars = [], 0
    for line in corpus:
        if chars > TOKENIZER_TRIAL_CHARS:
            break
        kept.append(line)
        chars += len(line) + 1
    whole = len(kept) == len(corpus)
    with tempfile.TemporaryDirectory() as directory:
        text = Path(directory) / "corpus_train.txt"
        text.write_text("".join(line + "\n" for line in kept), encoding="utf-8")  # as prepare writes it
        try:
            model = train_sentencepiece(text, params.tokenizer)
        except TokenizerError as exc:
            if whole or "too small" in str(exc):
                raise
            return None
    return SentencePieceTokenizer(model, "trained sentencepiece model") if whole else None


def check_inputs(params: TranslationParams, data: bible_en_fr.ParallelData) -> None:
    """Every check of a later stage that the read pairs and params allow, before prepare writes anything."""
    examples = params.finetune.examples
    for number, text in enumerate(examples, start=1):  # `lmtransfer translate ''` refuses the same text
        if not text.strip():
            raise ConfigError(f"finetune.examples: example {number} of {len(examples)} is empty: there is nothing "
                              f"to translate in {text!r}; remove it (or write [] for no examples)")
    if params.pretrain.init_from:  # a file that exists and that no stage of this pipeline writes
        refuse_pipeline_output(params.pretrain.init_from, "pretrain.init_from")
        refuse_pipeline_output(str(resolve_input(params.pretrain.init_from, "pretrain.init_from")), "pretrain.init_from")
    read_lab_sentences(params.evaluate.lab_sentences)  # evaluate reads it after the models are trained
    tokenizer = trial_tokenizer(params, data.corpus)
    if tokenizer is None:
        return
    max_len, train = params.finetune.max_len, data.splits["train"]  # else the fine-tunes train on nothing
    longer_side = np.maximum(np.diff(encode_documents(tokenizer, list(train["source"]))[1]),
                             np.diff(encode_documents(tokenizer, list(train["target"]))[1]))
    if not (longer_side <= max_len).any():
        raise ConfigError(
            f"finetune.max_len={max_len}: none of the {len(train):,} training pairs fits (the shortest takes "
            f"{int(longer_side.min())} tokens on its longer side, BOS and EOS included), so the fine-tunes would "
            f"train on nothing; raise finetune.max_len to at least {int(longer_side.min())}"
        )


def run_prepare_stage(params: TranslationParams, logged: dict) -> None:
    data = load_parallel(params.data)
    check_inputs(params, data)  # a bad input stops here, before any output is replaced
    with stage_run("prepare", logged):
        meta = write_parallel(data, PREPARED, {"source": params.data.source})
        log_run(metrics={**{f"pairs_{k}": v for k, v in meta["pairs"].items()},
                         **{f"corpus_lines_{k}": v for k, v in meta["corpus_lines"].items()}})
        log_file(meta, "prepared_meta.json")
    for reason, count in meta["removed"].items():
        print(f"prepare: removed {count:,} train pairs ({reason.replace('_', ' ')})")
    if meta["clause_pairs"]:
        print(f"prepare: {meta['clause_pairs']:,} clause pairs cut from longer training pairs joined train "
              "(data.clause_pairs)")
    print(f"prepare: {meta['pairs']} sentence pairs -> {PREPARED}, {meta['corpus_lines']} corpus lines (both "
          f"languages) -> {PREPARED_CORPUS}")


def run_tokenize_stage(params, logged: dict) -> None:
    """`params`: the tokenizer section. The corpus is encoded as for classification."""
    with stage_run("tokenize", logged):
        started = time.perf_counter()
        tokenizer = build_tokenizer(PREPARED, params, 0)
        train_seconds = round(time.perf_counter() - started, 2)
        corpus_meta, timings = encode_corpus(PREPARED, TOKENIZED, tokenizer)
        meta = {**tokenizer_meta(tokenizer), "task": "translation", "pairs": {}, "tokens": {}, "unknown_rate": {},
                "longest": {}}
        with atomic_directory(TOKENIZED) as tmp:
            save_tokenizer(tokenizer, tmp)
            for name in SPLITS:
                pairs = read_pairs(PREPARED, name)
                split = PairSplit(*encode_documents(tokenizer, list(pairs["source"])),
                                  *encode_documents(tokenizer, list(pairs["target"])))
                write_pair_split(tmp, name, split)
                meta["pairs"][name] = len(split)
                for side, ids in (("source", split.source_ids), ("target", split.target_ids)):
                    meta["tokens"][f"{name}_{side}"] = int(ids.size)
                    meta["unknown_rate"][f"{name}_{side}"] = round(
                        int(np.count_nonzero(ids == tokenizer.unk_id)) / max(ids.size - 2 * len(split), 1), 6)
                meta["longest"][name] = int(max(split.source_lengths().max(initial=0),
                                                split.target_lengths().max(initial=0)))
            write_tokenized_meta(tmp, meta)
        warn_unknown({**corpus_meta["unknown_rate"], **meta["unknown_rate"]}, print)
        tokens = {**corpus_meta["tokens"], **meta["tokens"]}
        log_run(metrics={**{f"tokens_{k}": v for k, v in tokens.items()}, "vocab_size": meta["vocab_size"],
                         **{f"unknown_rate_{k}": v for k, v in meta["unknown_rate"].items()}})
        log_file(TOKENIZED / "vocab.txt", "")
    print(f"tokenize: {meta['vocab_size']:,} pieces shared by both languages; pairs {meta['pairs']}, longest "
          f"{meta['longest']} tokens -> {TOKENIZED}; corpus -> {TOKENIZED_CORPUS} "
          f"(tokenizer trained in {train_seconds:.1f} s)")
