"""What both tokenize stages do: pick or train the tokenizer, encode the corpus (streamed into `.npy` files) and
the labeled splits, and record the share of unknown pieces (a borrowed dictionary that does not fit shows there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from lmtransfer.core.config import TokenizerParams
from lmtransfer.core.io import atomic_directory
from lmtransfer.data.prepared import SPLITS, corpus_path, read_corpus, read_corpus_meta, read_prepared_meta, read_split
from lmtransfer.harness.progress import progress_bar
from lmtransfer.tokens.id_files import (
    LabeledSplit,
    corpus_dir,
    write_corpus_part,
    write_labeled_split,
    write_tokenized_meta,
)
from lmtransfer.tokens.tokenizer import (
    MASK_PIECE,
    SentencePieceTokenizer,
    Tokenizer,
    encode_for_classification,
    encode_stream,
    existing_tokenizer,
    id_dtype,
    save_tokenizer,
    train_sentencepiece,
)

UNKNOWN_WARNING = 0.05  # warn when more than 5% of the pieces map to the unknown id


def build_tokenizer(prepared_dir: Path, params: TokenizerParams, seed: int = 0) -> Tokenizer:
    """tokenizer.vocab_file / model_file when set, else sentencepiece trained on the pretraining corpus."""
    tokenizer = existing_tokenizer(params)
    if tokenizer is not None:
        return tokenizer
    corpus = corpus_path(prepared_dir, "train")
    return SentencePieceTokenizer(train_sentencepiece(corpus, params, seed), "trained sentencepiece model")


def encode_corpus(prepared_dir: Path, out_dir: Path, tokenizer: Tokenizer, pieces: bool = False) -> tuple[dict, dict]:
    """The corpus parts into `corpus_dir(out_dir)`, whole or not at all; returns its meta and timings."""
    meta = {"vocab_size": tokenizer.vocab_size, "tokens": {}, "unknown_rate": {}}
    timings = {"corpus_bytes": 0}
    started = time.perf_counter()
    with atomic_directory(corpus_dir(out_dir)) as tmp:
        for part in ("train", "valid"):
            timings["corpus_bytes"] += corpus_path(prepared_dir, part).stat().st_size
            name, counts = f"corpus_{part}", {"unknown": 0, "framing": 0}
            lines = progress_bar(iterable=read_corpus(prepared_dir, part), desc=name, unit=" lines")

            def counted(chunks, counts=counts):
                for ids, lengths in chunks:
                    counts["unknown"] += int(np.count_nonzero(ids == tokenizer.unk_id))
                    counts["framing"] += 2 * len(lengths)
                    yield ids

            chunks = counted(encode_stream(tokenizer, lines, pieces=pieces))
            total = write_corpus_part(tmp, part, chunks, id_dtype(tokenizer.vocab_size))
            meta["tokens"][name] = total
            meta["unknown_rate"][name] = round(counts["unknown"] / max(total - counts["framing"], 1), 6)
        write_tokenized_meta(tmp, meta)
    timings["encode_seconds"] = round(time.perf_counter() - started, 2)
    timings["corpus_tokens"] = sum(meta["tokens"].values())
    return meta, timings


def tokenizer_meta(tokenizer: Tokenizer) -> dict:
    """The tokenizer's scheme, size and special ids, for the tokenized folder's meta."""
    mask_id = tokenizer.piece_id(MASK_PIECE) if tokenizer.scheme == "sentencepiece" else None
    return {"scheme": tokenizer.scheme, "vocab_size": tokenizer.vocab_size, **tokenizer.special_ids(), "mask_id": mask_id}


def warn_unknown(unknown_rate: dict[str, float], warn: Callable[[str], None]) -> None:
    for name, rate in unknown_rate.items():
        if rate > UNKNOWN_WARNING:
            warn(f"tokenize: warning: {rate:.1%} of the pieces of '{name}' are not in the vocabulary "
                 "(mapped to the unknown id); does the tokenizer fit this data?")


def tokenize_prepared(
    prepared_dir: Path, out_dir: Path, params: TokenizerParams, seed: int = 0, warn: Callable[[str], None] = print
) -> dict:
    """The labeled splits and the tokenizer into `out_dir`, the corpus into `corpus_dir(out_dir)`, each whole or
    not at all; returns both metas merged, for the log. `out_dir` holds nothing of the corpus."""
    prepared = read_prepared_meta(prepared_dir)
    corpus_pieces = read_corpus_meta(prepared_dir).get("corpus_format") == "pieces"
    labeled_pieces = prepared.get("labeled_format") == "pieces"
    started = time.perf_counter()
    tokenizer = build_tokenizer(prepared_dir, params, seed)
    train_seconds = round(time.perf_counter() - started, 2)
    meta = {**tokenizer_meta(tokenizer), "label_names": prepared["label_names"], "tokens": {}, "unknown_rate": {},
            "examples": {}}
    corpus_meta, timings = encode_corpus(prepared_dir, out_dir, tokenizer, corpus_pieces)
    with atomic_directory(out_dir) as tmp:
        save_tokenizer(tokenizer, tmp)
        for name in SPLITS:
            split = read_split(prepared_dir, name)
            ids, offsets = encode_for_classification(tokenizer, split["text"], pieces=labeled_pieces)
            write_labeled_split(tmp, name, LabeledSplit(ids, offsets, split["label"].to_numpy(np.int64)))
            meta["tokens"][name], meta["examples"][name] = int(ids.size), len(split)
            unknown = int(np.count_nonzero(ids == tokenizer.unk_id))
            meta["unknown_rate"][name] = round(unknown / max(ids.size - len(split), 1), 6)
        write_tokenized_meta(tmp, meta)
    merged = {**meta, "tokens": {**corpus_meta["tokens"], **meta["tokens"]},
              "unknown_rate": {**corpus_meta["unknown_rate"], **meta["unknown_rate"]},
              "timings": {"train_seconds": train_seconds, **timings}}
    warn_unknown(merged["unknown_rate"], warn)
    return merged
