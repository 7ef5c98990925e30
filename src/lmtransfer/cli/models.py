"""The commands that run a trained model: `generate`, `fill`, `predict`, `register` and `translate`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lmtransfer.cli.args import NON_NEGATIVE, NON_NEGATIVE_FLOAT, POSITIVE, command
from lmtransfer.core import paths

CONVERT_HINT = "convert it to UTF-8 first (e.g. iconv -f latin1 -t utf-8)"


def utf8_text(text: str) -> str:
    """An argparse type: arguments that are not UTF-8 reach Python as lone surrogates; refused, naming the byte."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        byte = text[error.start].encode("utf-8", "surrogateescape")[0]
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise argparse.ArgumentTypeError(f"{shown!r} is not UTF-8 (byte 0x{byte:02x} at character {error.start + 1}): "
                                         f"{CONVERT_HINT}") from None
    return text


def texts_from_arguments_or_stdin(args: argparse.Namespace, verb: str, command: str, example: str,
                                  file: str) -> list[str]:
    """The texts of the command line, else the lines of piped standard input (blank ones skipped), checked before
    any model loads."""
    arguments = getattr(args, "texts", [])
    how = (f'pass them as arguments (lmtransfer {command} "{example}") or one per line on standard input '
           f"(lmtransfer {command} < {file})")
    for number, text in enumerate(arguments, start=1):
        if not text.strip():
            which = f"text {number} of {len(arguments)}" if len(arguments) > 1 else "the text"
            raise SystemExit(f"error: {which} is empty: there is nothing to {verb} in {text!r}")
    if arguments:
        return arguments
    if sys.stdin is None or sys.stdin.isatty():
        raise SystemExit(f"error: no texts to {verb}: {how}")
    texts = [line.rstrip("\r\n") for line in _stdin_lines() if line.strip()]
    if not texts:
        raise SystemExit(f"error: standard input held no text (only blank lines or nothing): {how}")
    return texts


def _stdin_lines():
    """Standard input decoded as UTF-8 here (not by the locale): a line that is not stops with its number."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text-only stream (a test, an embedding program)
        yield from sys.stdin
        return
    for number, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise SystemExit(f"error: line {number} of standard input is not UTF-8 (byte 0x{raw[error.start]:02x} at "
                             f"byte {error.start + 1}): {CONVERT_HINT}") from None


def load_model_files(args: argparse.Namespace, kind: str, objective: str = "", refusal: str = ""):
    """The `--checkpoint` (of `kind`; refused unless pretrained with `objective` when given) and its `--tokenizer`."""
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
    from lmtransfer.modeling.checkpoint import build_language_model
    from lmtransfer.pretraining.generation import fill_blanks, mask_id_of
    from lmtransfer.tokens.tokenizer import MASK_PIECE

    if not args.prompt.strip():
        raise SystemExit(f"error: the prompt is empty: write a text with {MASK_PIECE} where a word is missing")
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


def _model_files(parser: argparse.ArgumentParser, checkpoint: Path, what: str, tokenizer: Path = paths.TOKENIZED,
                 tokenizer_help: str = "the tokenized data directory (or a file in it)") -> None:
    parser.add_argument("--checkpoint", type=Path, default=checkpoint, help=what)
    parser.add_argument("--tokenizer", type=Path, default=tokenizer, help=tokenizer_help)


def _texts(parser: argparse.ArgumentParser, metavar: str, what: str) -> None:
    parser.add_argument("texts", nargs="*", default=argparse.SUPPRESS, metavar=metavar, type=utf8_text,
                        help=f"{what} (default: the lines of standard input)")


def add_commands(commands: argparse._SubParsersAction) -> None:
    lm_checkpoint = paths.PretrainOutputs(0).checkpoint
    finetuned = paths.finetuned_checkpoint("pretrained", paths.finetune_run(0, 0))
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
    _model_files(generate, lm_checkpoint, "a language-model checkpoint (seed<p>.pt: pretraining run p)")
    generate.set_defaults(func=cmd_generate)

    fill = command(commands, "fill", "the likeliest words for each <mask> of a prompt, with a masked language model",
                   "The likeliest words for each <mask> of the prompt (one is appended when it has none), with "
                   "a checkpoint pretrained with pretrain.objective: mlm.")
    fill.add_argument("prompt", nargs="?", default="the movie was <mask> good", type=utf8_text,
                      help="a text with <mask> where a word is missing")
    fill.add_argument("--top-k", type=POSITIVE, default=5, help="predictions shown per blank")
    _model_files(fill, lm_checkpoint, "a masked-LM checkpoint (seed<p>.pt: pretraining run p)")
    fill.set_defaults(func=cmd_fill)

    predict = command(commands, "predict", "label + probability for new texts (arguments or standard input)",
                      "Label and probability for each text, with a fine-tuned classifier. Texts come from the "
                      "arguments, else from piped standard input, one per line (blank lines skipped).")
    _texts(predict, "TEXT", "texts to classify")
    _model_files(predict, finetuned,
                 "a fine-tuned classifier checkpoint (seed<p>-<f>.pt: pretraining run p, fine-tuning seed f)")
    predict.set_defaults(func=cmd_predict)
    command(commands, "register", "the best pretrained fine-tune (on validation) as the registry's @champion",
            "What the evaluate stage does at its end, from the files it wrote (`make run` calls it after `dvc "
            "repro`, which skips an unchanged evaluate); a version with the same checkpoint and numbers is not "
            "added twice.").set_defaults(func=cmd_register)

    translate = command(commands, "translate", "translate sentences with the translation pipeline's model "
                        "(arguments or standard input)", "Translate each sentence (one per argument, else one per "
                        "line of standard input) by beam search, with a fine-tuned encoder-decoder of the "
                        "translation pipeline (`dvc repro translation/dvc.yaml`).")
    _texts(translate, "SENTENCE", "sentences to translate")
    _model_files(translate, paths.TRANSLATION_ROOT / finetuned,
                 "a translation checkpoint; the default is the pretrained variant of pretraining run 0, seed 0",
                 paths.TRANSLATION_ROOT / paths.TOKENIZED, "the translation pipeline's tokenized data directory")
    translate.add_argument("--beam-size", type=POSITIVE, help="beam width (1 = greedy; default: the decoder's, 1)")
    translate.add_argument("--length-penalty", type=NON_NEGATIVE_FLOAT,
                           help="GNMT's alpha: beams ranked by log P / ((5 + length) / 6) ** alpha (default 0.6)")
    translate.set_defaults(func=cmd_translate)
