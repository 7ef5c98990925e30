"""What the translation pipeline's first stage (prepare) checks before it writes anything: every input a later stage
would refuse.

DVC removes a stage's outputs just before running it, so a refusal in tokenize, a fine-tune or evaluate came after
their earlier results were gone (a `tokenizer.vocab_size` too small, a `finetune.max_len` no pair fits, a missing
`evaluate.lab_sentences`). prepare runs first on every `dvc repro` and its outputs are `persist`, so a refusal here
leaves every output as it was (the classification pipeline's validate stage does the same).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lmtransfer.core.errors import ConfigError, TokenizerError
from lmtransfer.data.input_files import resolve_input
from lmtransfer.harness.pipeline_outputs import refuse_pipeline_output
from lmtransfer.tokens.tokenizer import (
    SentencePieceTokenizer,
    Tokenizer,
    encode_documents,
    existing_tokenizer,
    train_sentencepiece,
)
from lmtransfer.translation.config import TranslationParams
from lmtransfer.translation.lab_sentences import read_lab_sentences

if TYPE_CHECKING:
    from lmtransfer.translation.data.bible_en_fr import ParallelData

TOKENIZER_TRIAL_CHARS = 2_000_000  # a corpus this small is tokenized once here, as tokenize will (about a second)


def trial_tokenizer(params: TranslationParams, corpus: list[str]) -> Tokenizer | None:
    """The tokenizer tokenize will use: `tokenizer.model_file` loaded, or sentencepiece trained on the same corpus with
    the same seed (a `tokenizer.vocab_size` sentencepiece refuses stops here). A larger corpus is tried on its first
    TOKENIZER_TRIAL_CHARS characters: only a vocabulary too small even for those stops; None, the rest unchecked."""
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


def check_pair_lengths(params: TranslationParams, train: list[tuple[str, str]], tokenizer: Tokenizer) -> None:
    """At least one training pair must fit `finetune.max_len` on both sides, or the fine-tunes train on nothing."""
    max_len = params.finetune.max_len
    _, source_offsets = encode_documents(tokenizer, [s for s, _ in train])
    _, target_offsets = encode_documents(tokenizer, [t for _, t in train])
    longer_side = np.maximum(np.diff(source_offsets), np.diff(target_offsets))
    if not (longer_side <= max_len).any():
        raise ConfigError(
            f"finetune.max_len={max_len}: none of the {len(train):,} training pairs fits (the shortest takes "
            f"{int(longer_side.min())} tokens on its longer side, BOS and EOS included), so the fine-tunes would "
            f"train on nothing; raise finetune.max_len to at least {int(longer_side.min())}"
        )


def check_examples(params: TranslationParams) -> None:
    """An empty example was "translated" after every epoch, while `lmtransfer translate ''` refuses the same text."""
    examples = params.finetune.examples
    for number, text in enumerate(examples, start=1):
        if not text.strip():
            raise ConfigError(f"finetune.examples: example {number} of {len(examples)} is empty: there is nothing "
                              f"to translate in {text!r}; remove it (or write [] for no examples)")


def check_init_from(params: TranslationParams) -> None:
    """`pretrain.init_from` must name a file that exists and that no stage of this pipeline writes."""
    if params.pretrain.init_from:
        refuse_pipeline_output(params.pretrain.init_from, "pretrain.init_from")
        path = resolve_input(params.pretrain.init_from, "pretrain.init_from")
        refuse_pipeline_output(str(path), "pretrain.init_from")


def check_inputs(params: TranslationParams, data: ParallelData) -> None:
    """Every check of a later stage that the read pairs and params allow, before prepare writes anything."""
    check_examples(params)
    check_init_from(params)
    read_lab_sentences(params.evaluate.lab_sentences)  # evaluate reads it after the models are trained
    tokenizer = trial_tokenizer(params, data.corpus)
    if tokenizer is not None:
        train = data.splits["train"]
        check_pair_lengths(params, list(zip(train["source"], train["target"])), tokenizer)
