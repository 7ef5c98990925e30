"""`lmtransfer` command line: look inside the model, talk to the LM, classify new text.

    lmtransfer summary --vocab-size 100 --d-model 200 --n-layers 4 --n-heads 2 --d-ff 200 --n-classes 2
    lmtransfer summary --vocab-file dict.txt     # V from a fairseq dictionary (+4 special ids)
    lmtransfer summary --params params.yaml      # the model params.yaml builds (V from data/tokenized)
    lmtransfer params                            # every parameter: default and meaning
    lmtransfer generate "the movie was" --tokens 30 --temperature 0.8
    lmtransfer predict "a wonderful, moving film" "dull and far too long"
    lmtransfer results                      # test scores and curves of the last `dvc repro`
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import paths


def parameter_table(vocab_size: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, n_classes: int) -> str:
    """Per-block parameter counts, measured on real modules, next to their closed-form totals."""
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
    lines = [f"V={vocab_size} D={d_model} N={n_layers} A={n_heads} F={d_ff} C={n_classes}", ""]
    lines += [f"{name:<{width}}  {count:>12,}  {note}" for name, count, note in rows]
    lines += [
        "",
        f"{'classifier total':<{width}}  {count_parameters(classifier):>12,}",
        f"{'language model total':<{width}}  {count_parameters(language_model):>12,}",
    ]
    return "\n".join(lines)


def cmd_summary(args: argparse.Namespace) -> None:
    if args.vocab_file:
        from .tokenizer import DictionaryTokenizer, read_fairseq_dictionary

        args.vocab_size = DictionaryTokenizer(read_fairseq_dictionary(args.vocab_file)).vocab_size
    if args.params:
        from .config import load_params
        from .io import read_json, require_file

        model = load_params(args.params).model
        args.d_model, args.n_layers, args.n_heads, args.d_ff = model.d_model, model.n_layers, model.n_heads, model.d_ff
        if not args.vocab_file:
            meta = read_json(require_file(paths.TOKENIZED / "meta.json", "tokenized data"))
            args.vocab_size, args.n_classes = meta["vocab_size"], len(meta["label_names"])
    if args.d_model % args.n_heads:
        raise SystemExit(f"error: --d-model ({args.d_model}) must be divisible by --n-heads ({args.n_heads})")
    print(parameter_table(args.vocab_size, args.d_model, args.n_layers, args.n_heads, args.d_ff, args.n_classes))


def cmd_params(args: argparse.Namespace) -> None:
    from .params_doc import params_table, update_readme

    if "readme" not in vars(args):
        print(params_table(), end="")
    elif update_readme(args.readme):
        print(f"{args.readme}: parameter table regenerated")
    else:
        print(f"{args.readme}: parameter table already up to date")


def cmd_generate(args: argparse.Namespace) -> None:
    import torch

    from .checkpoint import build_language_model, load_checkpoint
    from .tokenizer import load_tokenizer

    model = build_language_model(load_checkpoint(args.checkpoint, expected_kind="language_model")).eval()
    tokenizer = load_tokenizer(args.tokenizer)
    generator = torch.Generator().manual_seed(args.seed)
    prompt = torch.tensor([[tokenizer.bos_id, *tokenizer.encode(args.prompt)]])
    for _ in range(args.samples):
        out = model.generate(
            prompt, args.tokens, args.temperature, args.top_k, eos_id=tokenizer.eos_id, generator=generator
        )
        print(f"{args.prompt}{' ' if args.prompt else ''}{tokenizer.decode(out[0, prompt.size(1):].tolist())}")


def cmd_predict(args: argparse.Namespace) -> None:
    import numpy as np

    from .checkpoint import build_classifier, load_checkpoint
    from .finetune import predict
    from .runtime import select_device
    from .tokenizer import LabeledSplit, encode_for_classification, load_tokenizer

    payload = load_checkpoint(args.checkpoint, expected_kind="classifier")
    model = build_classifier(payload)
    tokenizer = load_tokenizer(args.tokenizer)
    texts = args.texts or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise SystemExit("error: no text given (pass texts as arguments or on standard input)")
    ids, offsets = encode_for_classification(tokenizer, texts)
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
    print(results_report(args.metrics))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmtransfer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    summary = commands.add_parser("summary", help="parameter table per block, with the closed-form totals")
    summary.add_argument("--vocab-size", type=int, default=100)
    summary.add_argument("--d-model", type=int, default=200)
    summary.add_argument("--n-layers", type=int, default=4)
    summary.add_argument("--n-heads", type=int, default=2)
    summary.add_argument("--d-ff", type=int, default=200)
    summary.add_argument("--n-classes", type=int, default=2)
    summary.add_argument("--vocab-file", type=Path, help="a fairseq dictionary: V = its lines + 4 special ids")
    summary.add_argument("--params", type=Path, help="take D, N, A, F from this params file (V, C from data/tokenized)")
    summary.set_defaults(func=cmd_summary)

    params = commands.add_parser(
        "params", help="every parameter of params.yaml: its default and meaning (Markdown)",
        description="Every key of params.yaml with its default and meaning, grouped by section with the stages "
                    "that read it, as the Markdown table in the README.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    params.add_argument("--readme", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                        help="instead of printing, replace the table between the params-table markers of FILE "
                             "(e.g. README.md); default: print it")
    params.set_defaults(func=cmd_params)

    generate = commands.add_parser("generate", help="continue a prompt with the pretrained language model")
    generate.add_argument("prompt", nargs="?", default="")
    generate.add_argument("--tokens", type=int, default=30)
    generate.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    generate.add_argument("--top-k", type=int, default=40)
    generate.add_argument("--samples", type=int, default=3)
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--checkpoint", type=Path, default=paths.PRETRAINED)
    generate.add_argument("--tokenizer", type=Path, default=paths.TOKENIZED, help="the tokenized data directory (or a file in it)")
    generate.set_defaults(func=cmd_generate)

    results = commands.add_parser("results", help="test scores and validation curves of the last pipeline run")
    results.add_argument("--metrics", type=Path, default=paths.METRICS)
    results.set_defaults(func=cmd_results)

    predict_parser = commands.add_parser("predict", help="label + probability for new texts (args or stdin)")
    predict_parser.add_argument("texts", nargs="*")
    predict_parser.add_argument("--checkpoint", type=Path, default=paths.finetuned_checkpoint("pretrained", 0),
                                help="a fine-tuned model (default: the pretrained variant, seed 0)")
    predict_parser.add_argument("--tokenizer", type=Path, default=paths.TOKENIZED, help="the tokenized data directory (or a file in it)")
    predict_parser.set_defaults(func=cmd_predict)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
