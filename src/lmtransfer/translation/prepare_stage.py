"""The translation prepare stage: the sentence pairs read, cleaned and split leak-free, with the corpus of both
languages, into data/prepared/; before anything is written, every input a later stage would refuse is checked.

DVC removes a stage's outputs just before running it, so a refusal in tokenize, a fine-tune or evaluate came after
their earlier results were gone. prepare runs first on every `dvc repro` and its outputs are `persist`, so a refusal
here leaves every output as it was (the classification pipeline's validate stage does the same).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from lmtransfer.core.errors import ConfigError, TokenizerError
from lmtransfer.core.paths import PREPARED, PREPARED_CORPUS
from lmtransfer.data.input_files import resolve_input
from lmtransfer.harness.pipeline_outputs import refuse_pipeline_output
from lmtransfer.harness.tracking import log_file, log_run, stage_run
from lmtransfer.tokens.tokenizer import (
    SentencePieceTokenizer,
    Tokenizer,
    encode_documents,
    existing_tokenizer,
    train_sentencepiece,
)
from lmtransfer.translation.config import TranslationParams
from lmtransfer.translation.data.bible_en_fr import ParallelData
from lmtransfer.translation.data.pairs import read_lab_sentences
from lmtransfer.translation.data.parallel import load_parallel, write_parallel

TOKENIZER_TRIAL_CHARS = 2_000_000  # a corpus this small is tokenized once here, as tokenize will (about a second)


def trial_tokenizer(params: TranslationParams, corpus: list[str]) -> Tokenizer | None:
    """The tokenizer tokenize will use (loaded, or trained on the same corpus and seed); a larger corpus is tried on
    its first TOKENIZER_TRIAL_CHARS characters: only a vocabulary too small even for those stops; None."""
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


def check_inputs(params: TranslationParams, data: ParallelData) -> None:
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
    """The pairs read and checked (a bad input stops here, before any output is replaced), then written."""
    data = load_parallel(params.data)
    check_inputs(params, data)
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
