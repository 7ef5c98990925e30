"""The translation task's commands: `lmtransfer translate`, and the report `lmtransfer results --translation` prints."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from lmtransfer.cli.args import (
    NON_NEGATIVE_FLOAT,
    POSITIVE,
    add_model_files,
    add_texts,
    how_to_pass,
    texts_from_arguments_or_stdin,
)
from lmtransfer.core import paths

TRANSLATION = paths.TRANSLATION_ROOT  # the translation pipeline's folder, from the repository root


def cmd_translate(args: argparse.Namespace) -> None:
    """Translate sentences with a fine-tuned translation checkpoint (the translation pipeline's)."""
    from lmtransfer.modeling.checkpoint import load_checkpoint
    from lmtransfer.modeling.runtime import select_device
    from lmtransfer.tokens.tokenizer import check_trained_with, load_tokenizer
    from lmtransfer.translation.translator import DecodingOptions, translate_texts, translation_model

    texts = texts_from_arguments_or_stdin(getattr(args, "texts", []), "translate",
                              how_to_pass("translate", "I am a student.", "sentences.txt"))
    device = select_device("auto")
    payload = load_checkpoint(args.checkpoint, expected_kind="translation")
    tokenizer = load_tokenizer(args.tokenizer)
    check_trained_with(payload, args.checkpoint, tokenizer, args.tokenizer)
    model = translation_model(payload, device)
    chosen = {"beam_size": args.beam_size, "length_penalty": args.length_penalty}
    options = DecodingOptions(**{key: value for key, value in chosen.items() if value is not None})
    for translation in translate_texts(model, texts, tokenizer, options, device):
        print(translation)


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register `translate` (`command` makes a subparser)."""
    translate = command(
        "translate", "translate sentences with the translation pipeline's model (arguments or standard input)",
        "Translate each sentence (one per argument, else one per line of standard input) with a fine-tuned "
        "encoder-decoder of the translation pipeline (`dvc repro translation/dvc.yaml`), by beam search.",
    )
    add_texts(translate, "SENTENCE", "sentences to translate")
    add_model_files(translate, TRANSLATION / paths.finetuned_checkpoint("pretrained", paths.finetune_run(0, 0)),
                    "a translation checkpoint; the default is the pretrained variant of pretraining run 0, seed 0",
                    TRANSLATION / paths.TOKENIZED, "the translation pipeline's tokenized data directory (or a file in it)")
    translate.add_argument("--beam-size", type=POSITIVE, help="beam width (1 = greedy decoding; default: the decoder's, 1)")
    translate.add_argument("--length-penalty", type=NON_NEGATIVE_FLOAT,
                           help="GNMT's alpha: beams ranked by log P / ((5 + length) / 6) ** alpha (default 0.6)")
    translate.set_defaults(func=cmd_translate)
