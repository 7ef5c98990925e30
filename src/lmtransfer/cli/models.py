"""The commands that run a trained model: `generate` and `fill` (the pretrained language model), `predict` and
`register` (the classifier), `translate` (the translation pipeline's encoder-decoder)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmtransfer.cli.args import (
    NON_NEGATIVE,
    NON_NEGATIVE_FLOAT,
    POSITIVE,
    add_model_files,
    add_texts,
    command,
    texts_from_arguments_or_stdin,
    utf8_text,
)
from lmtransfer.core import paths

TRANSLATION = paths.TRANSLATION_ROOT  # the translation pipeline's folder, from the repository root


def load_model_files(args: argparse.Namespace, kind: str, objective: str = "", refusal: str = ""):
    """The checkpoint `--checkpoint` names (of `kind`; refused in one line unless pretrained with `objective`
    when given) and the `--tokenizer` it was trained with (checked)."""
    from lmtransfer.modeling.checkpoint import load_checkpoint, objective_of
    from lmtransfer.tokens.tokenizer import check_trained_with, load_tokenizer

    payload = load_checkpoint(args.checkpoint, expected_kind=kind)
    if objective and (objective_of(payload) == "mlm") != (objective == "mlm"):
        raise SystemExit(f"error: {args.checkpoint} is {refusal}")
    tokenizer = load_tokenizer(args.tokenizer)
    check_trained_with(payload, args.checkpoint, tokenizer, args.tokenizer)
    return payload, tokenizer


def cmd_generate(args: argparse.Namespace) -> None:
    import torch

    from lmtransfer.modeling.checkpoint import build_language_model
    from lmtransfer.pretraining.generation import continue_prompt
    from lmtransfer.tokens.tokenizer import MASK_PIECE

    payload, tokenizer = load_model_files(args, "language_model", "clm", (
        "a masked language model (pretrain.objective: mlm): it predicts blanks from both sides and cannot continue a "
        f"text left to right; try lmtransfer fill \"{args.prompt or 'the movie was'} {MASK_PIECE}\""))
    model = build_language_model(payload).eval()
    generator = torch.Generator().manual_seed(args.seed)
    for _ in range(args.samples):
        continuation = continue_prompt(model, tokenizer, args.prompt, args.tokens, args.temperature, args.top_k,
                                       generator)
        print(f"{args.prompt}{' ' if args.prompt else ''}{continuation}")


def cmd_fill(args: argparse.Namespace) -> None:
    from lmtransfer.pretraining.generation import fill_blanks, mask_id_of
    from lmtransfer.tokens.tokenizer import MASK_PIECE

    if not args.prompt.strip():
        raise SystemExit(f"error: the prompt is empty: write a text with {MASK_PIECE} where a word is missing")
    from lmtransfer.modeling.checkpoint import build_language_model

    payload, tokenizer = load_model_files(args, "language_model", "mlm", (
        "a causal (next-token) language model: it reads only the left context, so it cannot fill a blank from both "
        "sides; pretrain with pretrain.objective: mlm, or continue a prompt with `lmtransfer generate`"))
    model = build_language_model(payload).eval()
    prompt = args.prompt if MASK_PIECE in args.prompt else f"{args.prompt} {MASK_PIECE}"
    for number, blank in enumerate(fill_blanks(model, tokenizer, prompt, mask_id_of(tokenizer), args.top_k), 1):
        print(f"{MASK_PIECE} {number}:" if prompt.count(MASK_PIECE) > 1 else f"{prompt}")
        for word, probability in blank:
            print(f"  {probability:.3f}  {word}")


def cmd_predict(args: argparse.Namespace) -> None:
    from lmtransfer.classification.inference import classify_texts
    from lmtransfer.modeling.runtime import select_device

    texts = texts_from_arguments_or_stdin(args, "classify", "predict", 'a wonderful film" "dull', "reviews.txt")
    payload, tokenizer = load_model_files(args, "classifier")
    probabilities = classify_texts(payload, tokenizer, texts, select_device("auto"))
    for text, row in zip(texts, probabilities):
        best = int(row.argmax())
        print(f"{payload['label_names'][best]}\t{row[best]:.3f}\t{text}")


def cmd_register(args: argparse.Namespace) -> None:
    import mlflow

    from lmtransfer.classification.config import load_classification_params
    from lmtransfer.classification.evaluate import register_best_pretrained
    from lmtransfer.harness.tracking import check_store

    mlflow.set_tracking_uri(check_store())
    register_best_pretrained(load_classification_params(paths.PARAMS))


def cmd_translate(args: argparse.Namespace) -> None:
    from lmtransfer.modeling.runtime import select_device
    from lmtransfer.translation.translator import DecodingOptions, translate_texts, translation_model

    texts = texts_from_arguments_or_stdin(args, "translate", "translate", "I am a student.", "sentences.txt")
    device = select_device("auto")
    payload, tokenizer = load_model_files(args, "translation")
    chosen = {"beam_size": args.beam_size, "length_penalty": args.length_penalty}
    options = DecodingOptions(**{key: value for key, value in chosen.items() if value is not None})
    for translation in translate_texts(translation_model(payload, device), texts, tokenizer, options, device):
        print(translation)


def add_commands(commands: argparse._SubParsersAction) -> None:
    lm_checkpoint: Path = paths.PretrainOutputs(0).checkpoint
    generate = command(commands, "generate", "continue a prompt with the pretrained language model")
    generate.add_argument("prompt", nargs="?", default="", type=utf8_text,
                          help="the text to continue; '' starts from the begin-of-text id alone (default: %(default)r)")
    generate.add_argument("--tokens", type=POSITIVE, default=30,
                          help="new tokens to generate, at most (stops early at end-of-text)")
    generate.add_argument("--temperature", type=NON_NEGATIVE_FLOAT, default=0.8,
                          help="sampling temperature, >= 0; 0 = greedy (always the likeliest token)")
    generate.add_argument("--top-k", type=NON_NEGATIVE, default=40,
                          help="sample among the k likeliest tokens; 0 = among all")
    generate.add_argument("--samples", type=POSITIVE, default=3, help="continuations to print")
    generate.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    add_model_files(generate, lm_checkpoint, "a language-model checkpoint (seed<p>.pt: pretraining run p)",
                    paths.TOKENIZED)
    generate.set_defaults(func=cmd_generate)

    fill = command(commands, "fill", "the likeliest words for each <mask> of a prompt, with a masked language model",
                   "The likeliest words for each <mask> of the prompt (one is appended when it has none), with "
                   "a checkpoint pretrained with pretrain.objective: mlm.")
    fill.add_argument("prompt", nargs="?", default="the movie was <mask> good", type=utf8_text,
                      help="a text with <mask> where a word is missing")
    fill.add_argument("--top-k", type=POSITIVE, default=5, help="predictions shown per blank")
    add_model_files(fill, lm_checkpoint, "a masked-LM checkpoint (seed<p>.pt: pretraining run p)", paths.TOKENIZED)
    fill.set_defaults(func=cmd_fill)

    predict = command(
        commands, "predict", "label + probability for new texts (arguments or standard input)",
        "Label and probability for each text, with a fine-tuned classifier. Texts come from the arguments, "
        "else from piped standard input, one per line (blank lines skipped).",
    )
    add_texts(predict, "TEXT", "texts to classify")
    add_model_files(predict, paths.finetuned_checkpoint("pretrained", paths.finetune_run(0, 0)),
                    "a fine-tuned classifier checkpoint (seed<p>-<f>.pt: pretraining run p, fine-tuning seed f)",
                    paths.TOKENIZED)
    predict.set_defaults(func=cmd_predict)
    command(commands, "register", "the best pretrained fine-tune (on validation) as the registry's @champion",
            "What the evaluate stage does at its end, from the files it wrote: the pretrained fine-tune with the best "
            "validation accuracy as a version of lmtransfer-classification, tagged with the gap, @champion. "
            "`make run` calls it after `dvc repro`, which skips an unchanged evaluate (a fresh clone's new MLflow "
            "store then has no registry); a version with the same checkpoint and numbers is not added twice.",
            ).set_defaults(func=cmd_register)

    translate = command(
        commands, "translate", "translate sentences with the translation pipeline's model (arguments or standard input)",
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
