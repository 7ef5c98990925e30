"""`lmtransfer generate` and `lmtransfer fill`: talk to the pretrained language model of either task."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from lmtransfer.cli.args import NON_NEGATIVE, NON_NEGATIVE_FLOAT, POSITIVE, add_model_files, utf8_text
from lmtransfer.core import paths


def language_model_and_tokenizer(args: argparse.Namespace, objective: str, refusal: str):
    """The checkpoint `--checkpoint` names, refused in one line (`refusal`) unless pretrained with `objective`, as a
    model in evaluation mode, and the `--tokenizer` it was trained with (checked)."""
    from lmtransfer.modeling.checkpoint import build_language_model, load_checkpoint, objective_of
    from lmtransfer.tokens.tokenizer import check_trained_with, load_tokenizer

    payload = load_checkpoint(args.checkpoint, expected_kind="language_model")
    if (objective_of(payload) == "mlm") != (objective == "mlm"):
        raise SystemExit(f"error: {args.checkpoint} is {refusal}")
    tokenizer = load_tokenizer(args.tokenizer)
    check_trained_with(payload, args.checkpoint, tokenizer, args.tokenizer)
    return build_language_model(payload).eval(), tokenizer


def cmd_generate(args: argparse.Namespace) -> None:
    import torch

    from lmtransfer.pretraining.generation import continue_prompt
    from lmtransfer.tokens.tokenizer import MASK_PIECE

    model, tokenizer = language_model_and_tokenizer(args, "clm", (
        "a masked language model (pretrain.objective: mlm): it predicts blanks from both sides and cannot continue a "
        f"text left to right; try lmtransfer fill \"{args.prompt or 'the movie was'} {MASK_PIECE}\""))
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
    model, tokenizer = language_model_and_tokenizer(args, "mlm", (
        "a causal (next-token) language model: it reads only the left context, so it cannot fill a blank from both "
        "sides; pretrain with pretrain.objective: mlm, or continue a prompt with `lmtransfer generate`"))
    prompt = args.prompt if MASK_PIECE in args.prompt else f"{args.prompt} {MASK_PIECE}"
    for number, blank in enumerate(fill_blanks(model, tokenizer, prompt, mask_id_of(tokenizer), args.top_k), 1):
        print(f"{MASK_PIECE} {number}:" if prompt.count(MASK_PIECE) > 1 else f"{prompt}")
        for word, probability in blank:
            print(f"  {probability:.3f}  {word}")


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register `generate` and `fill` (`command` makes a subparser)."""
    generate = command("generate", "continue a prompt with the pretrained language model")
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
    add_model_files(generate, paths.PretrainOutputs(0).checkpoint,
                    "a language-model checkpoint (seed<p>.pt: pretraining run p)", paths.TOKENIZED)
    generate.set_defaults(func=cmd_generate)

    fill = command("fill", "the likeliest words for each <mask> of a prompt, with a masked language model",
                   "The likeliest words for each <mask> of the prompt (one is appended when it has none), with "
                   "a checkpoint pretrained with pretrain.objective: mlm.")
    fill.add_argument("prompt", nargs="?", default="the movie was <mask> good", type=utf8_text,
                      help="a text with <mask> where a word is missing")
    fill.add_argument("--top-k", type=POSITIVE, default=5, help="predictions shown per blank")
    add_model_files(fill, paths.PretrainOutputs(0).checkpoint, "a masked-LM checkpoint (seed<p>.pt: pretraining run "
                    "p)", paths.TOKENIZED)
    fill.set_defaults(func=cmd_fill)

