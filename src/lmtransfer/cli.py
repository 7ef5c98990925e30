"""`lmtransfer` command line: look inside the model, talk to the LM, classify new text.

    lmtransfer summary                           # the model params.yaml configures, block by block
    lmtransfer summary --vocab-size 100 --d-model 200 --n-layers 4 --n-heads 2 --d-ff 200 --n-classes 2
    lmtransfer summary --vocab-file dict.txt     # V from a fairseq dictionary (+4 special ids)
    lmtransfer summary --translation             # the encoder-decoder for English->French, block by block
    lmtransfer params                            # every parameter: default and meaning
    lmtransfer params --translation              # the same for translation/params.yaml
    lmtransfer generate "the movie was" --tokens 30 --temperature 0.8
    lmtransfer fill "the movie was <mask> good"  # a masked-LM checkpoint (pretrain.objective: mlm)
    lmtransfer predict "a wonderful, moving film" "dull and far too long"
    lmtransfer results                           # test scores and curves of the last `dvc repro`
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import paths
from .errors import LmtransferError


def parameter_table(
    vocab_size: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, n_classes: int, origin: str = ""
) -> str:
    """Per-block parameter counts, measured on real modules, next to their closed-form totals.
    `origin` (where the sizes came from) goes under the first line."""
    from .model import Classifier, LanguageModel, ModelConfig, count_parameters, expected_base_parameters

    config = ModelConfig(vocab_size, d_model, n_layers, n_heads, d_ff, dropout=0.0)
    classifier, language_model = Classifier(config, n_classes), LanguageModel(config)
    base = classifier.base
    layer = base.layers.layers[0]
    rows = [("token embedding (V x D)", count_parameters(base.token_embedding), f"{vocab_size} x {d_model}")]
    blocks = [
        ("self-attention (4(D^2+D))", layer.self_attn),
        ("feed-forward (2DF+F+D)", (layer.linear1, layer.linear2)),
        ("layer norms (4D)", (layer.norm1, layer.norm2)),
    ]
    for name, modules in blocks:
        modules = modules if isinstance(modules, tuple) else (modules,)
        per_layer = sum(count_parameters(m) for m in modules)
        rows.append((f"{name} x {n_layers}", per_layer * n_layers, f"{per_layer:,} per layer"))
    rows.append(("positional encoding (fixed)", 0, "sinusoidal buffer"))
    rows.append(("= base", count_parameters(base), f"formula {expected_base_parameters(vocab_size, d_model, n_layers, d_ff):,}"))
    rows.append(("classification head (D x C + C)", count_parameters(classifier.head), f"C = {n_classes}"))
    rows.append(("language-model head (D x V + V)", count_parameters(language_model.head), f"V = {vocab_size}"))
    width = max(len(r[0]) for r in rows)
    lines = [f"V={vocab_size} D={d_model} N={n_layers} A={n_heads} F={d_ff} C={n_classes}"]
    lines += [origin, ""] if origin else [""]
    lines += [f"{name:<{width}}  {count:>12,}  {note}" for name, count, note in rows]
    lines += [
        "",
        f"{'classifier total':<{width}}  {count_parameters(classifier):>12,}",
        f"{'language model total':<{width}}  {count_parameters(language_model):>12,}",
    ]
    return "\n".join(lines)


SHAPE = {"d_model": "D", "n_layers": "N", "n_heads": "A", "d_ff": "F"}
DEFAULT_PARAMS = Path("params.yaml")  # compared by identity: an explicit `--params params.yaml` must exist


def _existing(path: Path, named_by: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file ({named_by})")
    return path


def dictionary_size(path: Path, named_by: str) -> int:
    """V of a fairseq dictionary: its entries + the 4 special ids."""
    from .tokenizer import DictionaryTokenizer, read_fairseq_dictionary

    return DictionaryTokenizer(read_fairseq_dictionary(_existing(path, named_by))).vocab_size


def vocab_size_from_tokenizer_params(tokenizer, root: Path) -> tuple[int, str]:
    """V as the tokenize stage will make it, without running it: the dictionary's entries + 4 special ids,
    an existing sentencepiece model's pieces (+ any specials it lacks), or the size to train."""
    from .tokenizer import SentencePieceTokenizer

    if tokenizer.vocab_file:
        path = root / tokenizer.vocab_file
        return dictionary_size(path, "tokenizer.vocab_file"), f"tokenizer.vocab_file ({path})"
    if tokenizer.model_file:
        path = _existing(root / tokenizer.model_file, "tokenizer.model_file")
        model = SentencePieceTokenizer(path.read_bytes(), f"{path} (tokenizer.model_file)")
        return model.vocab_size, f"tokenizer.model_file ({path})"
    return tokenizer.vocab_size, "tokenizer.vocab_size"


def configured_model(args: argparse.Namespace) -> tuple[dict[str, int], str]:
    """V, C, D, N, A, F of the model the project is configured to build, and where each came from (one line,
    plus a note when the tokenized data no longer matches the tokenizer params).

    A flag wins; else D, N, A, F from the params file (the model defaults when the default file is missing),
    V and C from the tokenized data when the tokenize stage has run, else V from the tokenizer params and C = 2.
    """
    from .config import Params
    from .io import read_json
    from .translation_config import load_task_params

    params_file: Path = args.params
    have_params = params_file.is_file() or params_file is not DEFAULT_PARAMS
    params = load_task_params(params_file) if have_params else Params()  # either task's file
    root = params_file.parent  # paths in params.yaml are relative to the repository root, where it lives
    meta_file = root / paths.TOKENIZED / "meta.json"
    meta = read_json(meta_file) if meta_file.is_file() else None
    flags = vars(args)  # the override flags are absent unless given (default=SUPPRESS)
    sizes: dict[str, int] = {}
    origins: dict[str, str] = {}

    if "vocab_size" in flags:
        sizes["V"], origins["V"] = args.vocab_size, "from --vocab-size"
    elif "vocab_file" in flags:
        sizes["V"] = dictionary_size(args.vocab_file, "--vocab-file")
        origins["V"] = f"from --vocab-file ({args.vocab_file}: {sizes['V'] - 4:,} entries + 4 special ids)"
    elif meta is not None:
        sizes["V"], origins["V"] = meta["vocab_size"], f"from {meta_file}"
    else:
        sizes["V"], source = vocab_size_from_tokenizer_params(params.tokenizer, root)
        origins["V"] = f"from {source} in {params_file}" if have_params else f"from {source} (default)"

    if "n_classes" in flags:
        sizes["C"], origins["C"] = args.n_classes, "from --n-classes"
    elif meta is not None and "label_names" in meta:
        sizes["C"], origins["C"] = len(meta["label_names"]), f"from {meta_file}"
    elif meta is not None:  # a translation pipeline's tokenized data: no classes
        sizes["C"], origins["C"] = 2, "unused (sentence pairs, no classes)"
    else:
        sizes["C"], origins["C"] = 2, f"= 2, assumed (no {meta_file} yet; --n-classes sets it)"

    model_origin = f"from {params_file}" if have_params else (
        f"from the model defaults (no {params_file} here; --params names one)"
    )
    for key, letter in SHAPE.items():
        if key in flags:
            sizes[letter], origins[letter] = flags[key], f"from --{key.replace('_', '-')}"
        else:
            sizes[letter], origins[letter] = getattr(params.model, key), model_origin
    if sizes["D"] % sizes["A"]:
        raise SystemExit(
            f"error: D = {sizes['D']} ({origins['D']}) must be divisible by A = {sizes['A']} ({origins['A']})"
        )
    if sizes["D"] % 2:
        raise SystemExit(f"error: D = {sizes['D']} ({origins['D']}) must be even for the sinusoidal positions")

    grouped: dict[str, list[str]] = {}
    for letter in ("V", "C", "D", "N", "A", "F"):
        grouped.setdefault(origins[letter], []).append(letter)
    lines = ["; ".join(f"{', '.join(letters)} {origin}" for origin, letters in grouped.items())]
    lines.append(attention_line(params, sizes["D"]))
    if have_params and origins["V"] == f"from {meta_file}":
        lines += _stale_vocabulary_note(sizes["V"], params.tokenizer, root, params_file)
    return sizes, "\n".join(lines)


def attention_line(params, d_model: int) -> str:
    """How the base attends and why; next-sentence prediction's extra parameters, which only pretraining has."""
    from .model import ModelConfig, MaskedLanguageModel, count_parameters

    objective = params.pretrain.objective
    line = (f"attention {'causal' if params.causal_attention else 'bidirectional'} "
            f"(model.attention {params.model.attention}, pretrain.objective {objective})")
    if params.pretrain.nsp:
        tiny = MaskedLanguageModel(ModelConfig(1, d_model, 1, 1, 1, causal=False), next_sentence=True)
        extra = count_parameters(tiny.segment_embedding) + count_parameters(tiny.next_sentence_head)
        line += (f"; next-sentence prediction adds {extra:,} parameters while pretraining (segment embeddings "
                 "2 x D, head D x 2 + 2), folded away for the classifier")
    return line


def _stale_vocabulary_note(vocab_size: int, tokenizer, root: Path, params_file: Path) -> list[str]:
    """data/tokenized is the last tokenize run's: say so when the tokenizer params now give another V."""
    try:
        configured, source = vocab_size_from_tokenizer_params(tokenizer, root)
    except (OSError, ValueError):  # a broken tokenizer file is the validate stage's to report
        return []
    if configured == vocab_size:
        return []
    return [f"note: {source} in {params_file} now gives V = {configured}; the tokenized data is older "
            "(`dvc repro tokenize` updates it; --vocab-size shows the other size)"]


def cmd_summary(args: argparse.Namespace) -> None:
    sizes, origin = configured_model(args)
    if args.translation:
        from .translation_model import TranslationConfig
        from .translation_summary import translation_parameter_table

        config = TranslationConfig(sizes["V"], sizes["D"], sizes["N"], sizes["N"], sizes["A"], sizes["F"])
        print(translation_parameter_table(config, origin))
        return
    print(parameter_table(sizes["V"], sizes["D"], sizes["N"], sizes["A"], sizes["F"], sizes["C"], origin))


def cmd_params(args: argparse.Namespace) -> None:
    from .params_doc import params_table, update_readme

    if "readme" not in vars(args):
        print(params_table("translation" if args.translation else "classification"), end="")
    elif update_readme(args.readme):
        print(f"{args.readme}: parameter tables regenerated")
    else:
        print(f"{args.readme}: parameter tables already up to date")


def cmd_generate(args: argparse.Namespace) -> None:
    import torch

    from .checkpoint import build_language_model, load_checkpoint, objective_of
    from .generation import continue_prompt
    from .tokenizer import load_tokenizer

    payload = load_checkpoint(args.checkpoint, expected_kind="language_model")
    if objective_of(payload) == "mlm":
        raise SystemExit(
            f"error: {args.checkpoint} is a masked language model (pretrain.objective: mlm): it predicts blanks from "
            f"both sides and cannot continue a text left to right; try lmtransfer fill \"{args.prompt or 'the movie was'} "
            f"<mask>\""
        )
    model = build_language_model(payload).eval()
    tokenizer = load_tokenizer(args.tokenizer)
    generator = torch.Generator().manual_seed(args.seed)
    for _ in range(args.samples):
        continuation = continue_prompt(model, tokenizer, args.prompt, args.tokens, args.temperature, args.top_k,
                                       generator)
        print(f"{args.prompt}{' ' if args.prompt else ''}{continuation}")


def cmd_fill(args: argparse.Namespace) -> None:
    from .checkpoint import build_language_model, load_checkpoint, objective_of
    from .generation import MASK_TEXT, fill_blanks, mask_id_of
    from .tokenizer import load_tokenizer

    if not args.prompt.strip():
        raise SystemExit(f"error: the prompt is empty: write a text with {MASK_TEXT} where a word is missing")
    payload = load_checkpoint(args.checkpoint, expected_kind="language_model")
    if objective_of(payload) != "mlm":
        raise SystemExit(
            f"error: {args.checkpoint} is a causal (next-token) language model: it reads only the left context, so "
            f"it cannot fill a blank from both sides; pretrain with pretrain.objective: mlm, or continue a prompt "
            f"with `lmtransfer generate`"
        )
    model = build_language_model(payload)
    tokenizer = load_tokenizer(args.tokenizer)
    prompt = args.prompt if MASK_TEXT in args.prompt else f"{args.prompt} {MASK_TEXT}"
    for number, blank in enumerate(fill_blanks(model, tokenizer, prompt, mask_id_of(tokenizer), args.top_k), 1):
        print(f"{MASK_TEXT} {number}:" if prompt.count(MASK_TEXT) > 1 else f"{prompt}")
        for word, probability in blank:
            print(f"  {probability:.3f}  {word}")


def how_to_pass(command: str, example: str, file: str) -> str:
    return (f'pass them as arguments (lmtransfer {command} "{example}") or one per line on standard input '
            f"(lmtransfer {command} < {file})")


HOW_TO_PASS_TEXTS = how_to_pass("predict", 'a wonderful film" "dull', "reviews.txt")


def texts_to_classify(arguments: list[str], verb: str = "classify", how: str = HOW_TO_PASS_TEXTS) -> list[str]:
    """The texts from the command line, else from piped standard input (one per line, blank lines skipped).
    Checked before any model loads: an empty text or a terminal waiting for input is a usage error."""
    for number, text in enumerate(arguments, start=1):
        if not text.strip():
            which = f"text {number} of {len(arguments)}" if len(arguments) > 1 else "the text"
            raise SystemExit(f"error: {which} is empty: there is nothing to {verb} in {text!r}")
    if arguments:
        return arguments
    if sys.stdin is None or sys.stdin.isatty():
        raise SystemExit(f"error: no texts to {verb}: {how}")
    texts = [line.rstrip("\r\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise SystemExit(f"error: standard input held no text (only blank lines or nothing): {how}")
    return texts


def cmd_translate(args: argparse.Namespace) -> None:
    """Translate sentences with a fine-tuned translation checkpoint (the translation pipeline's)."""
    from .runtime import select_device
    from .tokenizer import load_tokenizer
    from .translator import DecodingOptions, load_translation_model, translate_texts

    texts = texts_to_classify(getattr(args, "texts", []), "translate",
                              how_to_pass("translate", "I am a student.", "sentences.txt"))
    device = select_device("auto")
    model = load_translation_model(args.checkpoint, device)
    tokenizer = load_tokenizer(args.tokenizer)
    options = DecodingOptions(beam_size=args.beam_size, length_penalty=args.length_penalty)
    for translation in translate_texts(model, texts, tokenizer, options, device):
        print(translation)


def cmd_predict(args: argparse.Namespace) -> None:
    import numpy as np

    from .checkpoint import build_classifier, load_checkpoint
    from .inference import predict
    from .runtime import select_device
    from .tokenized import LabeledSplit
    from .tokenizer import encode_for_classification, load_tokenizer

    texts = texts_to_classify(getattr(args, "texts", []))
    payload = load_checkpoint(args.checkpoint, expected_kind="classifier")
    model = build_classifier(payload)
    tokenizer = load_tokenizer(args.tokenizer)
    ids, offsets = encode_for_classification(tokenizer, texts)  # as the training texts were: BOS + pieces
    split = LabeledSplit(ids, offsets, np.zeros(len(texts), dtype=np.int64))
    probabilities, _ = predict(model, split, 64, payload["max_len"], select_device("auto"))
    names = payload["label_names"]
    for text, row in zip(texts, probabilities):
        best = int(row.argmax())
        print(f"{names[best]}\t{row[best]:.3f}\t{text}")


def results_report(metrics_dir: Path = paths.METRICS) -> str:
    """The experiment's answer in a few lines: test scores over seeds, the gap with its interval, the baseline,
    and mean validation accuracy per epoch."""
    from .io import read_json, require_file

    report = read_json(require_file(metrics_dir / "evaluate.json", "evaluation metrics"))
    pretraining = read_json(require_file(metrics_dir / "pretrain.json", "pretraining metrics"))
    gap, n_seeds = report["gap"], report["n_seeds"]

    def spread(variant: str, key: str) -> str:
        return f"{report[variant][f'{key}_mean']:.4f} ± {report[variant][f'{key}_std']:.4f}"

    lines = [
        f"test ({report['n_test_examples']} examples; mean ± std over {n_seeds} seeds)",
        f"  {'':<34}{'accuracy':>18}{'macro-F1':>18}",
        f"  {'pretrained':<34}{spread('pretrained', 'accuracy'):>18}{spread('pretrained', 'macro_f1'):>18}",
        f"  {'from scratch':<34}{spread('scratch', 'accuracy'):>18}{spread('scratch', 'macro_f1'):>18}",
        f"  {'TF-IDF + logistic regression':<34}{report['baseline']['accuracy']:>18.4f}"
        f"{report['baseline']['macro_f1']:>18.4f}",
        f"  gap (pretrained - scratch): {gap['accuracy_mean']:+.4f} accuracy, 95% CI "
        f"[{gap['ci95_low']:+.4f}, {gap['ci95_high']:+.4f}], paired permutation p = {gap['p_value']:.4g}",
        "",
        f"  {'epoch':<8}{'val acc pretrained':>20}{'val acc scratch':>18}{'gap':>10}",
    ]
    curves = zip(report["pretrained"]["val_accuracy_mean_per_epoch"], report["scratch"]["val_accuracy_mean_per_epoch"])
    for epoch, (pretrained, scratch) in enumerate(curves, start=1):
        lines.append(f"  {epoch:<8}{pretrained:>20.4f}{scratch:>18.4f}{pretrained - scratch:>+10.4f}")
    lines += [
        f"  (TF-IDF baseline on the same validation split: {report['baseline']['valid_accuracy']:.4f})",
        "",
        f"pretraining: {pretraining['steps']} steps, {pretraining['tokens_seen']:,} tokens, "
        f"validation perplexity {pretraining['val_perplexity']:.1f}",
    ]
    timings = paths.timings_file("pretrain")
    if timings.is_file():
        lines[-1] += f", {read_json(timings)['tokens_per_second']:,.0f} tokens/s on this machine"
    return "\n".join(lines)


def cmd_results(args: argparse.Namespace) -> None:
    if args.translation:
        from .io import read_json, require_file
        from .translation_eval import report_lines

        metrics = Path("translation") / paths.METRICS if args.metrics == paths.METRICS else args.metrics
        print("\n".join(report_lines(read_json(require_file(metrics / "evaluate.json", "translation results")))))
        return
    print(results_report(args.metrics))


def _bounded(kind: type, low: float, name: str):
    """An argparse type: `kind` values >= low, rejected with a message saying so."""

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {name}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return value

    return convert


POSITIVE = _bounded(int, 1, "an integer")
NON_NEGATIVE = _bounded(int, 0, "an integer")
NON_NEGATIVE_FLOAT = _bounded(float, 0, "a number")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module docstring's examples kept as written (top level); each option's default in its help."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmtransfer", description=__doc__, formatter_class=HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, description: str = "") -> argparse.ArgumentParser:
        return commands.add_parser(
            name, help=help, description=description or help, formatter_class=argparse.ArgumentDefaultsHelpFormatter
        )

    summary = command(
        "summary", "parameter table per block, with the closed-form totals",
        "Parameter counts per block of the model the project is configured to build, with the closed-form "
        "totals. D, N, A, F come from --params (model.*); V and C from data/tokenized/meta.json once the "
        "tokenize stage has run, else V from the tokenizer params and C = 2 (stated as an assumption). "
        "Each flag below overrides one value.",
    )
    from_data = "default: from data/tokenized/meta.json, else the tokenizer params of --params"
    summary.add_argument("--params", type=Path, default=DEFAULT_PARAMS,
                         help="the params file whose model to describe (without the default file: the model "
                              "defaults)")
    vocabulary = summary.add_mutually_exclusive_group()
    vocabulary.add_argument("--vocab-size", type=POSITIVE, default=argparse.SUPPRESS, metavar="V",
                            help=f"token ids ({from_data})")
    vocabulary.add_argument("--vocab-file", type=Path, default=argparse.SUPPRESS, metavar="DICT",
                            help="V = the entries of this fairseq dictionary + 4 special ids (default: as --vocab-size)")
    summary.add_argument("--d-model", type=POSITIVE, default=argparse.SUPPRESS, metavar="D",
                         help="model width (default: model.d_model of --params)")
    summary.add_argument("--n-layers", type=POSITIVE, default=argparse.SUPPRESS, metavar="N",
                         help="Transformer layers (default: model.n_layers of --params)")
    summary.add_argument("--n-heads", type=POSITIVE, default=argparse.SUPPRESS, metavar="A",
                         help="attention heads (default: model.n_heads of --params)")
    summary.add_argument("--d-ff", type=POSITIVE, default=argparse.SUPPRESS, metavar="F",
                         help="feed-forward units per layer (default: model.d_ff of --params)")
    summary.add_argument("--n-classes", type=POSITIVE, default=argparse.SUPPRESS, metavar="C",
                         help="classes of the classification head (default: the labels in "
                              "data/tokenized/meta.json, else 2)")
    summary.add_argument("--translation", action="store_true",
                         help="the encoder-decoder for translation instead (N layers on each side, warm-startable "
                              "from the language model), with the paper's base model for reference")
    summary.set_defaults(func=cmd_summary)

    params = command(
        "params", "every parameter of params.yaml: its default and meaning (Markdown)",
        "Every key of params.yaml (or, with --translation, translation/params.yaml) with its default and meaning, "
        "grouped by section with the stages that read it, as the Markdown tables in the README.",
    )
    params.add_argument("--translation", action="store_true",
                        help="the translation pipeline's parameters (translation/params.yaml) instead")
    params.add_argument("--readme", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                        help="instead of printing, replace the tables between the params-table markers of FILE "
                             "(e.g. README.md: both tasks' tables); default: print one")
    params.set_defaults(func=cmd_params)

    generate = command("generate", "continue a prompt with the pretrained language model")
    generate.add_argument("prompt", nargs="?", default="",
                          help="the text to continue; '' starts from the begin-of-text id alone (default: %(default)r)")
    generate.add_argument("--tokens", type=POSITIVE, default=30,
                          help="new tokens to generate, at most (stops early at end-of-text)")
    generate.add_argument("--temperature", type=NON_NEGATIVE_FLOAT, default=0.8,
                          help="sampling temperature, >= 0; 0 = greedy (always the likeliest token)")
    generate.add_argument("--top-k", type=NON_NEGATIVE, default=40,
                          help="sample among the k likeliest tokens; 0 = among all")
    generate.add_argument("--samples", type=POSITIVE, default=3, help="continuations to print")
    generate.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    generate.add_argument("--checkpoint", type=Path, default=paths.PRETRAINED, help="a language-model checkpoint")
    generate.add_argument("--tokenizer", type=Path, default=paths.TOKENIZED,
                          help="the tokenized data directory (or a file in it)")
    generate.set_defaults(func=cmd_generate)

    fill = command("fill", "the likeliest words for each <mask> of a prompt, with a masked language model",
                   "The likeliest words for each <mask> of the prompt (one is appended when it has none), with "
                   "a checkpoint pretrained with pretrain.objective: mlm.")
    fill.add_argument("prompt", nargs="?", default="the movie was <mask> good",
                      help="a text with <mask> where a word is missing")
    fill.add_argument("--top-k", type=POSITIVE, default=5, help="predictions shown per blank")
    fill.add_argument("--checkpoint", type=Path, default=paths.PRETRAINED, help="a masked-LM checkpoint")
    fill.add_argument("--tokenizer", type=Path, default=paths.TOKENIZED,
                      help="the tokenized data directory (or a file in it)")
    fill.set_defaults(func=cmd_fill)

    results = command("results", "test scores and validation curves of the last pipeline run")
    results.add_argument("--metrics", type=Path, default=paths.METRICS,
                         help="the metrics directory the pipeline wrote (with --translation: translation/metrics)")
    results.add_argument("--translation", action="store_true",
                         help="the translation pipeline's results: test BLEU and chrF, the gap, the baseline")
    results.set_defaults(func=cmd_results)

    predict_parser = command(
        "predict", "label + probability for new texts (arguments or standard input)",
        "Label and probability for each text, with a fine-tuned classifier. Texts come from the arguments, "
        "else from piped standard input, one per line (blank lines skipped).",
    )
    predict_parser.add_argument("texts", nargs="*", default=argparse.SUPPRESS, metavar="TEXT",
                                help="texts to classify (default: the lines of standard input)")
    predict_parser.add_argument("--checkpoint", type=Path, default=paths.finetuned_checkpoint("pretrained", 0),
                                help="a fine-tuned classifier checkpoint; the default is the pretrained variant, "
                                     "seed 0")
    predict_parser.add_argument("--tokenizer", type=Path, default=paths.TOKENIZED,
                                help="the tokenized data directory (or a file in it)")
    predict_parser.set_defaults(func=cmd_predict)

    translation = Path("translation")
    translate = command(
        "translate", "translate sentences with the translation pipeline's model (arguments or standard input)",
        "Translate each sentence (one per argument, else one per line of standard input) with a fine-tuned "
        "encoder-decoder of the translation pipeline (`dvc repro translation/dvc.yaml`), by beam search.",
    )
    translate.add_argument("texts", nargs="*", default=argparse.SUPPRESS, metavar="SENTENCE",
                           help="sentences to translate (default: the lines of standard input)")
    translate.add_argument("--checkpoint", type=Path, default=translation / paths.finetuned_checkpoint("pretrained", 0),
                           help="a translation checkpoint; the default is the pretrained variant, seed 0")
    translate.add_argument("--tokenizer", type=Path, default=translation / paths.TOKENIZED,
                           help="the translation pipeline's tokenized data directory (or a file in it)")
    translate.add_argument("--beam-size", type=POSITIVE, default=4, help="beam width (1 = greedy decoding)")
    translate.add_argument("--length-penalty", type=NON_NEGATIVE_FLOAT, default=0.6,
                           help="GNMT's alpha: beams ranked by log P / ((5 + length) / 6) ** alpha")
    translate.set_defaults(func=cmd_translate)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (LmtransferError, FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
